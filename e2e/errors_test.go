//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/server"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestError_ShownWithRetry: a failed model call is shown plainly (its
// message as text), the input is disabled, and Retry resumes the chat
// (POST resume), which here fails again and shows a second error.
func TestError_ShownWithRetry(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	b.do(t, "open the page", chromedp.Navigate(be.url()))
	b.waitFor(t, "the workflow list", `!!document.querySelector('#workflow-select option[value="failing"]')`)
	b.do(t, "start a failing chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), "failing"),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	b.waitFor(t, "the error", `!!document.querySelector("#messages .msg.error")`)
	text := eval[string](t, b, `document.querySelector("#messages .msg.error").textContent`)
	if !strings.Contains(text, "the model <b>refused</b> the request") {
		t.Errorf("error box says %q, want the model's message as text", text)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#messages .msg.error b").length`); n != 0 {
		t.Error("the error message was rendered as HTML")
	}
	if n := eval[int](t, b, `document.querySelectorAll(".msg.thinking").length`); n != 0 {
		t.Errorf("%d thinking bubbles after the error", n)
	}
	if !eval[bool](t, b, `document.querySelector("#composer-input").disabled`) {
		t.Error("the input is enabled after the error")
	}
	if got := eval[string](t, b, `document.querySelector("#chat-status").dataset.status + " / " + document.querySelector("#chat-status").textContent`); got != "failed / Stopped by an error" {
		t.Errorf("status %q after the error", got)
	}
	b.shot(t, "14-error")
	b.do(t, "retry", chromedp.Click(chromedp.CSS("#messages .msg.error button")))
	b.waitFor(t, "the retry's own error", `document.querySelectorAll("#messages .msg.error").length === 2`)
	if !strings.Contains(eval[string](t, b, `document.querySelector("#messages .msg.error").textContent`), "Retrying") {
		t.Error("the first error does not say it was retried")
	}
	if got := eval[string](t, b, `document.querySelector("#chat-status").dataset.status`); got != "failed" {
		t.Errorf("status %q after the retry failed", got)
	}
	b.shot(t, "15-error-retried")
	b.noProblems(t)
}

// TestAuth_KeyOnce: without dev mode the page asks for a key once — only
// the key, saying how to make one —, learns the key's app and user from
// GET /api/me (here acme, not the default app), keeps the key in session
// storage, sends it as Bearer and as the WebSocket's auth message, and does
// not ask again on reload.
func TestAuth_KeyOnce(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0", withKeys)
	key, hash, err := server.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.st.CreateKey(context.Background(), baton.APIKey{Hash: hash, App: "acme", User: "ada", Name: "e2e"}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	b.do(t, "open the page", chromedp.Navigate(be.url()))
	b.waitFor(t, "the key dialog", `document.querySelector("#auth-dialog").open`)
	if got := eval[string](t, b, "document.activeElement.id"); got != "auth-key" {
		t.Errorf("focus on %q, want the key input", got)
	}
	if typ := eval[string](t, b, `document.querySelector("#auth-key").type`); typ != "password" {
		t.Errorf("key input type %q", typ)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#auth-dialog input:not([type=hidden])").length`); n != 1 {
		t.Errorf("the key dialog has %d inputs, want only the key", n)
	}
	if help := eval[string](t, b, `document.querySelector("#auth-dialog").innerText`); !strings.Contains(help, "baton keys create --app default --user me") {
		t.Errorf("the key dialog does not say how to make a key:\n%s", help)
	}
	b.shot(t, "16-key-dialog")
	b.do(t, "enter the key", chromedp.SendKeys(chromedp.CSS("#auth-key"), key+kb.Enter))
	b.waitFor(t, "the workflows", `!!document.querySelector('#workflow-select option[value="xss"]')`)
	if got := eval[string](t, b, `document.querySelector("#app-label").textContent`); got != "app: acme · user: ada" {
		t.Errorf("app label %q, want the key's app and user", got)
	}
	b.do(t, "start a chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), "xss"),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	b.waitFor(t, "the chat over an authenticated WebSocket", `!!document.querySelector(".msg.badge")`)
	if got := eval[string](t, b, `sessionStorage.getItem("baton.key")`); got != key {
		t.Error("the key is not in session storage")
	}
	if eval[string](t, b, `localStorage.getItem("baton.key") || ""`) != "" {
		t.Error("the key is in local storage")
	}
	if strings.Contains(eval[string](t, b, "document.documentElement.outerHTML"), key) {
		t.Error("the key is in the page")
	}
	b.do(t, "reload", chromedp.Reload())
	b.waitFor(t, "the reopened chat", `!!document.querySelector(".msg.badge")`)
	if eval[bool](t, b, `document.querySelector("#auth-dialog").open`) {
		t.Error("the key was asked for again after a reload")
	}
	b.shot(t, "17-authenticated")
	// The page learns that it needs a key from /api/me's 401.
	b.noProblems(t, "401 (Unauthorized) http://"+be.addr+"/api/me")
}

// TestAutoTool_FailureShown: an auto-tool response that failed is shown
// (a successful one is not), and the artifact's buttons go away.
func TestAutoTool_FailureShown(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	chatID := startGenerator(t, b, be.url())
	answerFirstQuestion(t, b)
	b.do(t, "type the secret", chromedp.SendKeys(chromedp.CSS("form.secret-form input"), secretValue+kb.Enter))
	b.waitFor(t, "the action plan", `!!document.querySelector("#artifact-panel button.approve")`)
	uiEventID := eval[string](t, b, `document.querySelector("#artifact-panel .action-plan").dataset.uiEventId`)
	// Another client answers the plan with an error.
	postJSON(t, "http://"+be.addr+"/api/input/submit", map[string]any{
		"app": app, "chat_id": chatID, "ui_event_id": uiEventID, "status": "error", "data": map[string]string{"reason": "renderer crashed"},
	})
	b.waitFor(t, "the failure", `[...document.querySelectorAll("#messages .msg.tool.error")].some(n => n.textContent.includes("action_plan failed"))`)
	if got := eval[string](t, b, `document.querySelector("#artifact-panel .component-done")?.textContent || ""`); got != "Not applied: the response failed." {
		t.Errorf("artifact after the failed response says %q", got)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#artifact-panel button.approve").length`); n != 0 {
		t.Error("the approve button is still there after the response")
	}
	b.shot(t, "18-auto-tool-failure")
	b.noProblems(t)
}

// TestUITool_InlineForm: a UI tool with a component the page has no
// special view for is the inline form; its answer is the tool's result and
// the chat goes on.
func TestUITool_InlineForm(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	b.do(t, "open the page", chromedp.Navigate(be.url()))
	b.waitFor(t, "the workflow list", `!!document.querySelector('#workflow-select option[value="confirm"]')`)
	b.do(t, "start a confirm chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), "confirm"),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	// This workflow's script is slow (delay_ms): the thinking bubble is
	// there while the model works, and gone when its form arrives.
	b.waitFor(t, "Asker's thinking bubble", `!!document.querySelector('.msg.thinking[data-agent="Asker"]')`)
	b.shot(t, "19-thinking")
	b.waitFor(t, "the inline form", `!!document.querySelector("form.inline-form input")`)
	if n := eval[int](t, b, `document.querySelectorAll(".msg.thinking").length`); n != 0 {
		t.Errorf("%d thinking bubbles while the form waits for the person", n)
	}
	if got := eval[string](t, b, `document.querySelector("form.inline-form .component-title").textContent`); got != "Ship it on <b>Friday</b>?" {
		t.Errorf("form title %q, want the question as text", got)
	}
	if got := eval[string](t, b, "document.activeElement.name"); got != "response" {
		t.Errorf("focus on %q, want the form's input", got)
	}
	if got := eval[string](t, b, `document.querySelector('label[for="' + document.querySelector("form.inline-form input").id + '"]').textContent`); got != "Your answer" {
		t.Errorf("input label %q", got)
	}
	b.shot(t, "20-inline-form")
	b.do(t, "answer", chromedp.SendKeys(chromedp.CSS("form.inline-form input"), "yes, Friday"+kb.Enter))
	b.waitFor(t, "the answer streaming", `!!document.querySelector('.msg.streaming[data-agent="Asker"]')`)
	// Read at once with the streaming bubble: on a busy machine the stream
	// may have ended by the time a screenshot is taken.
	if got := eval[string](t, b, `document.querySelector('.msg.streaming[data-agent="Asker"]') ? document.querySelector("#chat-status").dataset.status : "running (the stream ended)"`); !strings.HasPrefix(got, "running") {
		t.Errorf("status %q once the form is answered and the agent writes", got)
	}
	b.shot(t, "21-streaming")
	b.waitFor(t, "the agent's thanks and the badge", `[...document.querySelectorAll('#messages .msg.agent[data-agent="Asker"]')].some(n => n.textContent.includes("Thanks, noted. The release is set for Friday.")) && !!document.querySelector(".msg.badge")`)
	if got := eval[string](t, b, `document.querySelector(".inline-form .component-done")?.textContent || ""`); got != "Answered." {
		t.Errorf("the form after the answer says %q", got)
	}
	// The answer is the tool's recorded result.
	chatID := strings.TrimPrefix(eval[string](t, b, "location.hash"), "#chat=")
	var hist struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+chatID+"/events", &hist)
	var answered bool
	for _, e := range hist.Events {
		if e.Type == "chat.tool_response" && strings.Contains(string(e.Data), `"ask_confirm"`) && strings.Contains(string(e.Data), "yes, Friday") {
			answered = true
		}
	}
	if !answered {
		t.Error("no recorded ask_confirm response with the answer")
	}
	b.noProblems(t)
}

// TestActionPlan_RequestChanges: the artifact's second button sends the
// person's feedback as the tool's response.
func TestActionPlan_RequestChanges(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	chatID := startGenerator(t, b, be.url())
	answerFirstQuestion(t, b)
	b.do(t, "type the secret", chromedp.SendKeys(chromedp.CSS("form.secret-form input"), secretValue+kb.Enter))
	b.waitFor(t, "the action plan", `!!document.querySelector("#artifact-panel button.revise")`)
	b.do(t, "request changes",
		chromedp.SendKeys(chromedp.CSS("#artifact-panel textarea"), "Send it on Fridays, not Mondays"),
		chromedp.Click(chromedp.CSS("#artifact-panel button.revise")),
	)
	b.waitFor(t, "the plan answered", `document.querySelector("#artifact-panel .component-done")?.textContent === "Changes requested."`)
	var hist struct {
		Events []struct {
			Type string `json:"type"`
			Data struct {
				ToolName string `json:"tool_name"`
				Payload  struct {
					Data map[string]string `json:"data"`
				} `json:"payload"`
			} `json:"data"`
		} `json:"events"`
	}
	// The scripted reviewer follows the answer: it asks what to change
	// (the chat waits for the person) instead of handing over to delivery.
	b.waitFor(t, "the chat to ask what to change", `!document.querySelector("#composer-input").disabled`)
	if eval[bool](t, b, `!!document.querySelector('#messages .msg.agent[data-agent="DeliveryAgent"]')`) {
		t.Error("the delivery agent spoke after Request changes")
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+chatID+"/events", &hist)
	var got map[string]string
	for _, e := range hist.Events {
		if e.Type == "chat.tool_response" && e.Data.ToolName == "action_plan" {
			got = e.Data.Payload.Data
		}
	}
	if got["action"] != "revise" || got["feedback"] != "Send it on Fridays, not Mondays" {
		t.Errorf("recorded action_plan response %v", got)
	}
	b.noProblems(t)
}

// TestDeveloperPanel_MetricsTotals: when the server has the metrics
// endpoint, the developer panel shows its totals (every agent's, the
// internal ones included), not only the visible agents' usage summaries.
func TestDeveloperPanel_MetricsTotals(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0", withMetrics)
	b := newBrowser(t)
	chatID := startGenerator(t, b, be.url())
	answerFirstQuestion(t, b)
	b.do(t, "type the secret", chromedp.SendKeys(chromedp.CSS("form.secret-form input"), secretValue+kb.Enter))
	b.waitFor(t, "the action plan", `!!document.querySelector("#artifact-panel button.approve")`)
	b.do(t, "approve", chromedp.Click(chromedp.CSS("#artifact-panel button.approve")))
	b.waitFor(t, "the completion badge", `!!document.querySelector(".msg.badge")`)
	var perf struct {
		TotalTokens int     `json:"total_tokens"`
		TotalCost   float64 `json:"total_cost"`
	}
	url := "http://" + be.addr + "/metrics/perf/chats/" + chatID + "?app=" + app
	// The collector's figures come from the recorded usage rows; wait for
	// the last one like the page does.
	b.do(t, "open the developer panel", chromedp.Click(chromedp.CSS("#dev-toggle")))
	getJSON(t, url, &perf)
	want := strconv.Itoa(perf.TotalTokens)
	b.waitFor(t, "the metrics totals", `document.querySelector("#dev-tokens").textContent === "`+want+`"`)
	if visible := eval[int](t, b, `(() => { let n = 0; for (const li of document.querySelectorAll("#dev-log li code")) { try { const e = JSON.parse(li.textContent); if (e.type === "chat.usage_summary") n += e.data.total_tokens; } catch {} } return n; })()`); perf.TotalTokens <= visible {
		t.Errorf("metrics total %d tokens, visible agents' summaries %d: the internal agents' usage is missing", perf.TotalTokens, visible)
	}
	if !strings.Contains(eval[string](t, b, `document.querySelector("#dev-usage-note").textContent`), "/metrics/perf/chats") {
		t.Error("the panel does not say where its totals come from")
	}
	b.shot(t, "22-metrics-totals")
	b.noProblems(t)
}
