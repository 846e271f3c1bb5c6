//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// secretValue is what the test types into the masked form; it must never
// appear in the page.
const secretValue = "sk-e2e-SECRET-7f3a9c"

// startGenerator opens the page and starts a generator chat from it,
// returning the chat id.
func startGenerator(t *testing.T, b *browser, url string) string {
	t.Helper()
	b.do(t, "open the page", chromedp.Navigate(url))
	b.waitFor(t, "the workflow list", `!!document.querySelector('#workflow-select option[value="generator"]')`)
	b.shot(t, "01-home")
	b.do(t, "start a generator chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), "generator"),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	b.waitFor(t, "the first question", `[...document.querySelectorAll('#messages .msg.agent[data-agent="InterviewAgent"]')].some(n => n.textContent.includes("What would you like to automate?"))`)
	// The composer is open while the agents work too (a message is queued
	// then): the question is asked once the chat waits for the person.
	b.waitFor(t, "the input box enabled for the answer", `document.querySelector("#chat-status").dataset.status === "waiting_input" && !document.querySelector("#composer-input").disabled`)
	id := strings.TrimPrefix(eval[string](t, b, "location.hash"), "#chat=")
	if id == "" {
		t.Fatal("no chat id in the location")
	}
	return id
}

// answerFirstQuestion types the person's message with the keyboard and
// waits for the secret form.
func answerFirstQuestion(t *testing.T, b *browser) {
	t.Helper()
	b.do(t, "type the answer", chromedp.SendKeys(chromedp.CSS("#composer-input"), "A weekly newsletter from our team notes"+kb.Enter))
	b.waitFor(t, "the person's message", `[...document.querySelectorAll('#messages .msg.user')].some(n => n.textContent.includes("A weekly newsletter from our team notes"))`)
	b.waitFor(t, "the secret form", `!!document.querySelector("form.secret-form input")`)
}

func TestGenerator_StartToRunComplete(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	chatID := startGenerator(t, b, be.url())

	// The first question: the hidden initial message is not shown, the
	// input box has the focus, no thinking bubble is left.
	if got := eval[string](t, b, "document.activeElement.id"); got != "composer-input" {
		t.Errorf("focus on %q after the input request, want composer-input", got)
	}
	body := eval[string](t, b, "document.querySelector('#messages').innerText")
	if strings.Contains(body, "I want to build an automation workflow.") {
		t.Error("the ui_hidden initial message is shown")
	}
	if n := eval[int](t, b, `document.querySelectorAll(".msg.thinking").length`); n != 0 {
		t.Errorf("%d thinking bubbles while waiting for input", n)
	}
	b.shot(t, "02-first-question")

	answerFirstQuestion(t, b)
	if strings.Contains(eval[string](t, b, "document.querySelector('#messages').innerText"), "NEXT") {
		t.Error("the ui_hidden NEXT is shown")
	}
	typ := eval[string](t, b, `document.querySelector("form.secret-form input").type`)
	if typ != "password" {
		t.Errorf("secret input type %q, want password", typ)
	}
	if got := eval[string](t, b, `document.querySelector("form.secret-form label").textContent`); got != "Newsletter service API key" {
		t.Errorf("secret label %q", got)
	}
	if got := eval[string](t, b, "document.activeElement.name"); got != "NEWSLETTER_API_KEY" {
		t.Errorf("focus on %q when the secret form appears, want its input", got)
	}
	if !eval[bool](t, b, `document.querySelector("#composer-input").disabled`) {
		t.Error("the input box is enabled while a secret is asked for")
	}
	b.shot(t, "03-secret-form")

	// The secret: typed, submitted with Enter, never in the page.
	b.do(t, "type the secret", chromedp.SendKeys(chromedp.CSS("form.secret-form input"), secretValue+kb.Enter))
	b.waitFor(t, "the secret form answered", `[...document.querySelectorAll(".component-done")].some(n => n.textContent === "Secrets sent.")`)
	b.waitFor(t, "the action plan", `!document.querySelector("#artifact-panel").hidden && document.querySelector("#artifact-panel h3")?.textContent === "Weekly Newsletter"`)
	b.waitFor(t, "the thinking bubbles of the resumed run", `window.__obs.added.includes("system") && window.__obs.added.includes("ActionPlanAgent")`)
	if got := eval[int](t, b, `document.querySelectorAll("#artifact-panel .phases li").length`); got != 3 {
		t.Errorf("action plan shows %d phases, want 3", got)
	}
	if got := eval[string](t, b, `document.querySelector(".artifact-card p").textContent`); got != "Blueprint ready - review and approve." {
		t.Errorf("artifact card says %q (the flattened payload's agent_message)", got)
	}
	if strings.Contains(eval[string](t, b, "document.querySelector('#messages').innerText"), `"ActionPlan"`) {
		t.Error("the ActionPlanAgent's raw JSON is shown")
	}
	if got := eval[string](t, b, "document.activeElement.textContent"); got != "Approve" {
		t.Errorf("focus on %q when the plan appears, want its Approve button", got)
	}
	b.shot(t, "04-action-plan")

	// The developer panel: envelopes with sequences, tokens and cost.
	b.do(t, "open the developer panel", chromedp.Click(chromedp.CSS("#dev-toggle")))
	if got := eval[string](t, b, `document.querySelector("#dev-toggle").getAttribute("aria-expanded")`); got != "true" {
		t.Errorf("dev toggle aria-expanded %q", got)
	}
	b.waitFor(t, "envelopes in the developer panel", `document.querySelectorAll("#dev-log .seq").length > 5`)
	b.shot(t, "05-developer-panel")

	// Approve with the keyboard.
	b.do(t, "approve the plan", chromedp.Focus(chromedp.CSS("#artifact-panel button.approve")), chromedp.KeyEvent(kb.Enter))
	b.waitFor(t, "the completion badge", `!!document.querySelector(".msg.badge") && document.querySelector(".msg.badge").textContent.includes("Chat complete")`)
	b.waitFor(t, "the delivery message", `[...document.querySelectorAll('#messages .msg.agent[data-agent="DeliveryAgent"]')].some(n => n.textContent.includes("Thanks, and goodbye!") && n.dataset.seq)`)
	b.shot(t, "06-complete")

	// Completion: input disabled, the badge's button, no bubble left.
	if !eval[bool](t, b, `document.querySelector("#composer-input").disabled && document.querySelector("#send-button").disabled`) {
		t.Error("the input is enabled after run_complete")
	}
	if got := eval[string](t, b, `document.querySelector(".msg.badge button").textContent`); got != "Start new chat" {
		t.Errorf("badge button %q", got)
	}
	if n := eval[int](t, b, `document.querySelectorAll(".msg.thinking").length`); n != 0 {
		t.Errorf("%d thinking bubbles left after run_complete", n)
	}
	if got := eval[string](t, b, `document.querySelector("#artifact-panel .component-done")?.textContent || ""`); got != "Approved." {
		t.Errorf("artifact after approval says %q", got)
	}
	// The successful auto-tool response and the hand-over are not shown.
	text := eval[string](t, b, "document.querySelector('#messages').innerText")
	for _, hidden := range []string{"Tool action_plan completed successfully.", "transfer_to_DeliveryAgent", "[SYSTEM_RESUME_SIGNAL]", "Action completed"} {
		if strings.Contains(text, hidden) {
			t.Errorf("the page shows %q", hidden)
		}
	}

	// Thinking bubbles: one per select_speaker, native or synthetic, never
	// two at once, each removed.
	var obs struct {
		Added       []string            `json:"added"`
		Removed     []string            `json:"removed"`
		MaxThinking int                 `json:"maxThinking"`
		Streams     map[string][]string `json:"streams"`
	}
	raw := eval[string](t, b, "JSON.stringify(window.__obs)")
	if err := json.Unmarshal([]byte(raw), &obs); err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{"InterviewAgent", "user", "system", "ActionPlanAgent", "ReviewAgent", "DeliveryAgent"} {
		if !slices.Contains(obs.Added, agent) {
			t.Errorf("no thinking bubble for %s; added %v", agent, obs.Added)
		}
	}
	if obs.MaxThinking != 1 {
		t.Errorf("at most %d thinking bubbles at once, want exactly 1", obs.MaxThinking)
	}
	if len(obs.Added) != len(obs.Removed) {
		t.Errorf("thinking bubbles added %v, removed %v", obs.Added, obs.Removed)
	}
	// Streaming: the delivery message grew token by token before it was
	// settled by the recorded text.
	var grew bool
	for _, states := range obs.Streams {
		if len(states) >= 5 && strings.HasPrefix("Your Weekly Newsletter workflow is approved and ready to run. Thanks, and goodbye!", states[len(states)-2]) {
			grew = true
		}
	}
	if !grew {
		t.Errorf("no message streamed token by token: %v", obs.Streams)
	}
	for id, states := range obs.Streams {
		if slices.ContainsFunc(states, func(s string) bool { return strings.TrimSpace(s) == "NEXT" }) {
			t.Errorf("the hidden control text NEXT was shown while streaming (%s)", id)
		}
	}

	// The secret is nowhere in the page, the developer panel included.
	for _, expr := range []string{"document.documentElement.outerHTML", "document.body.innerText", "document.querySelector('#dev-panel').textContent"} {
		if strings.Contains(eval[string](t, b, expr), secretValue) {
			t.Errorf("the secret is in %s", expr)
		}
	}
	if !strings.Contains(eval[string](t, b, "document.querySelector('#dev-log').textContent"), "[redacted]") {
		t.Error("the developer panel does not show the redacted secret response")
	}

	// Tokens and cost: the sum of the chat's usage summaries.
	var hist struct {
		Events []struct {
			Type string `json:"type"`
			Data struct {
				TotalTokens int     `json:"total_tokens"`
				Cost        float64 `json:"cost"`
			} `json:"data"`
		} `json:"events"`
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+chatID+"/events", &hist)
	var tokens int
	for _, e := range hist.Events {
		if e.Type == "chat.usage_summary" {
			tokens += e.Data.TotalTokens
		}
	}
	if got := eval[string](t, b, `document.querySelector("#dev-tokens").textContent`); tokens == 0 || got != itoa(tokens) {
		t.Errorf("developer panel shows %s tokens, the chat's usage summaries sum to %d", got, tokens)
	}
	// The scripted model reports its calls under its own model, at no
	// cost: no made-up gpt-4o-mini price.
	if got := eval[string](t, b, `document.querySelector("#dev-cost").textContent`); got != "0.000000" {
		t.Errorf("developer panel shows cost %s for a scripted chat, want 0.000000", got)
	}
	seqs := messageSeqs(t, b)

	// Reopen the chat from the list: the same messages, the badge.
	b.do(t, "reload the page", chromedp.Navigate(be.url()))
	b.waitFor(t, "the chat in the list", `!!document.querySelector('.chat-item[data-chat-id="`+chatID+`"]')`)
	if got := eval[string](t, b, `document.querySelector('.chat-item[data-chat-id="`+chatID+`"] .status-pill').dataset.status`); got != "completed" {
		t.Errorf("chat list shows status %q", got)
	}
	b.do(t, "reopen the chat", chromedp.Click(chromedp.CSS(`.chat-item[data-chat-id="`+chatID+`"]`)))
	b.waitFor(t, "the replayed badge", `!!document.querySelector(".msg.badge")`)
	if again := messageSeqs(t, b); !slices.Equal(again, seqs) {
		t.Errorf("reopened chat shows sequences %v, live showed %v", again, seqs)
	}
	if n := eval[int](t, b, `document.querySelectorAll(".msg.thinking").length`); n != 0 {
		t.Errorf("%d thinking bubbles in the replayed chat", n)
	}
	b.shot(t, "07-reopened")

	// A narrow screen: nothing wider than the viewport, the input reachable.
	b.do(t, "narrow viewport", chromedp.EmulateViewport(390, 844))
	b.waitFor(t, "the narrow layout", `window.innerWidth === 390`)
	if !eval[bool](t, b, `document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Errorf("the page is wider (%v) than a 390px screen", eval[float64](t, b, "document.documentElement.scrollWidth"))
	}
	if !eval[bool](t, b, `(() => { const r = document.querySelector("#composer-input").getBoundingClientRect(); return r.width > 150 && r.height > 0; })()`) {
		t.Error("the input box is not usable on a narrow screen")
	}
	b.shot(t, "08-narrow")

	// Start new chat from the badge.
	b.do(t, "start a new chat", chromedp.Click(chromedp.CSS(".msg.badge button")))
	b.waitFor(t, "the new chat", `location.hash !== "#chat=`+chatID+`" && [...document.querySelectorAll('#messages .msg.agent')].some(n => n.textContent.includes("What would you like to automate?"))`)
	if n := eval[int](t, b, `document.querySelectorAll(".msg.badge").length`); n != 0 {
		t.Errorf("the new chat shows %d badges", n)
	}
	b.shot(t, "09-new-chat-narrow")
	b.noProblems(t)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func postJSON(t *testing.T, url string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s", url, res.Status)
	}
}
