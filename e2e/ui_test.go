//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/server"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// viewport is a screen the page is tried on.
type viewport struct {
	name string
	w, h int64
}

// viewports are a desktop window and a 390 px wide phone.
var viewports = []viewport{{"desktop", 1280, 860}, {"phone", 390, 844}}

// size makes the page's viewport v (a phone as a mobile device).
func (b *browser) size(t *testing.T, v viewport) {
	t.Helper()
	if v.w < 760 {
		b.do(t, "emulate "+v.name, chromedp.EmulateViewport(v.w, v.h, chromedp.EmulateScale(3), chromedp.EmulateMobile, chromedp.EmulatePortrait))
		return
	}
	b.do(t, "emulate "+v.name, chromedp.EmulateViewport(v.w, v.h))
}

// noSideScroll fails the test if the page is wider than its viewport.
func noSideScroll(t *testing.T, b *browser) {
	t.Helper()
	if w := eval[string](t, b, `document.documentElement.scrollWidth + " > " + innerWidth`); eval[bool](t, b, `document.documentElement.scrollWidth > innerWidth`) {
		t.Errorf("the page scrolls sideways: %s", w)
	}
}

// startFromPage opens the page and starts a chat of workflow from it,
// returning the chat id.
func startFromPage(t *testing.T, b *browser, url, workflow string) string {
	t.Helper()
	b.do(t, "open the page", chromedp.Navigate(url))
	b.waitFor(t, "the workflow list", `!!document.querySelector('#workflow-select option[value="`+workflow+`"]')`)
	b.do(t, "start a "+workflow+" chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), workflow),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	b.waitFor(t, "the chat in the location", `location.hash.startsWith("#chat=")`)
	return strings.TrimPrefix(eval[string](t, b, "location.hash"), "#chat=")
}

// TestToolCall_Details: a tool call is shown collapsed, as details whose
// summary names the agent and the tool; opened, it shows the arguments and
// the result — the hello demo's time — and a long result only in part,
// with a button that shows all of it. Desktop and phone.
func TestToolCall_Details(t *testing.T) {
	for _, v := range viewports {
		t.Run(v.name, func(t *testing.T) {
			be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
			b := newBrowser(t)
			b.size(t, v)
			startFromPage(t, b, be.url(), "hello")
			const call = `document.querySelector('#messages details.tool-call[data-agent="Greeter"]')`
			b.waitFor(t, "the result of get_time", call+`?.querySelector(".tool-state").textContent === "done"`)
			b.waitFor(t, "the chat's end", `!!document.querySelector(".msg.badge")`)
			if eval[bool](t, b, call+".open") {
				t.Error("the tool call is open by default")
			}
			if got := eval[string](t, b, call+`.querySelector("summary").innerText`); !strings.Contains(got, "Greeter called get_time") {
				t.Errorf("summary %q", got)
			}
			if eval[bool](t, b, call+`.querySelector(".tool-output").checkVisibility()`) {
				t.Error("the result is visible while the call is collapsed")
			}
			b.do(t, "open the call", chromedp.Click(chromedp.CSS(`#messages details.tool-call[data-agent="Greeter"] summary`)))
			b.waitFor(t, "the open call", call+".open")
			var args map[string]any
			if err := json.Unmarshal([]byte(eval[string](t, b, call+`.querySelector(".tool-args").textContent`)), &args); err != nil || args["tz"] != "UTC" {
				t.Errorf("arguments %v (%v), want tz UTC", args, err)
			}
			var result map[string]string
			if err := json.Unmarshal([]byte(eval[string](t, b, call+`.querySelector(".tool-output").textContent`)), &result); err != nil || result["tz"] != "UTC" || len(result["time"]) < len("2006-01-02T15:04:05") {
				t.Errorf("result %v (%v), want the time in UTC", result, err)
			}
			if !eval[bool](t, b, call+`.querySelector(".tool-output").checkVisibility()`) {
				t.Error("the result is not visible in the open call")
			}
			noSideScroll(t, b)
			b.shot(t, "30-tool-call-"+v.name)

			// A long result: its start, then all of it on demand.
			startFromPage(t, b, be.url(), "slow")
			const long = `document.querySelector('#messages details.tool-call[data-agent="Reporter"]')`
			b.waitFor(t, "the long result", long+`?.querySelector(".tool-state").textContent === "done"`)
			b.do(t, "open the long call", chromedp.Click(chromedp.CSS(`#messages details.tool-call[data-agent="Reporter"] summary`)))
			shown := eval[string](t, b, long+`.querySelector(".tool-output").textContent`)
			if !strings.Contains(shown, "Line 01 of the report on stars") || strings.Contains(shown, "Line 40") || len([]rune(shown)) > 401 {
				t.Errorf("the long result shows %d characters:\n%s", len([]rune(shown)), shown)
			}
			b.do(t, "show all", chromedp.Click(chromedp.CSS(`#messages details.tool-call[data-agent="Reporter"] button.show-all`)))
			b.waitFor(t, "the whole result", long+`.querySelector(".tool-output").textContent.includes("Line 40 of the report on stars")`)
			if n := eval[int](t, b, long+`.querySelectorAll("button.show-all").length`); n != 0 {
				t.Error("Show all is still there after showing all")
			}
			b.shot(t, "31-tool-call-long-"+v.name)
			b.noProblems(t)
		})
	}
}

// TestStop_MidStreamThenRetry: while an answer streams, Stop stops the run:
// the chat is recorded cancelled (chat.run_complete status cancelled), the
// streamed text goes away, the pill says Stopped; Retry goes on with the
// same turn, which completes with the whole answer shown once. Desktop and
// phone.
func TestStop_MidStreamThenRetry(t *testing.T) {
	for _, v := range viewports {
		t.Run(v.name, func(t *testing.T) {
			be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
			b := newBrowser(t)
			b.size(t, v)
			id := startFromPage(t, b, be.url(), "slow")
			b.waitFor(t, "the answer streaming", `!!document.querySelector('.msg.streaming[data-agent="Reporter"]')`)
			if !eval[bool](t, b, `!document.querySelector("#stop-button").hidden`) {
				t.Fatal("no Stop button while the answer streams")
			}
			if got := eval[string](t, b, `document.querySelector("#composer-input").placeholder`); got != "The agents are working: write to add a message, or press Stop" {
				t.Errorf("placeholder %q while the answer streams", got)
			}
			b.shot(t, "32-streaming-"+v.name)
			b.do(t, "press Stop", chromedp.Click(chromedp.CSS("#stop-button")))
			b.waitFor(t, "the stopped run", `!!document.querySelector("#messages .msg.badge.stopped")`)
			if got := eval[string](t, b, `document.querySelector("#chat-status").dataset.status + " / " + document.querySelector("#chat-status").textContent`); got != "cancelled / Stopped" {
				t.Errorf("status %q after Stop", got)
			}
			if n := eval[int](t, b, `document.querySelectorAll(".msg.streaming, .msg.thinking").length`); n != 0 {
				t.Errorf("%d streaming or thinking bubbles after Stop", n)
			}
			if !eval[bool](t, b, `document.querySelector("#stop-button").hidden`) {
				t.Error("the Stop button is still shown after the run stopped")
			}
			ctx := context.Background()
			scope := baton.Scope{App: app, User: server.DevUser}
			c, err := be.st.GetChat(ctx, scope, id)
			if err != nil || c.Status != baton.ChatCancelled {
				t.Fatalf("chat %s: status %q (%v), want cancelled", id, c.Status, err)
			}
			evs, err := be.st.Events(ctx, scope, id, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			end := evs[len(evs)-1]
			if end.Type != baton.TypeChatRunComplete || !strings.Contains(string(end.Payload), `"status":"cancelled"`) {
				t.Errorf("last event %s %s, want chat.run_complete with status cancelled", end.Type, end.Payload)
			}
			b.shot(t, "33-stopped-"+v.name)

			b.do(t, "retry", chromedp.Click(chromedp.CSS("#messages .msg.badge.stopped button.retry")))
			b.waitFor(t, "the completed chat", `[...document.querySelectorAll("#messages .msg.badge")].some(n => n.textContent.includes("Chat complete"))`)
			texts := eval[[]string](t, b, `[...document.querySelectorAll('#messages .msg.agent[data-agent="Reporter"] .body')].map(n => n.textContent)`)
			if len(texts) != 1 || !strings.HasSuffix(strings.TrimSpace(texts[0]), "Done.") {
				t.Errorf("Reporter's messages after the retry: %q, want the whole answer once", texts)
			}
			if got := eval[string](t, b, `document.querySelector("#chat-status").dataset.status`); got != "completed" {
				t.Errorf("status %q after the retry", got)
			}
			if !eval[bool](t, b, `document.querySelector("#stop-button").hidden`) {
				t.Error("the Stop button is shown on a completed chat")
			}
			noSideScroll(t, b)
			b.shot(t, "34-retried-"+v.name)
			b.noProblems(t)
		})
	}
}

// TestStatusWords_AndPhoneLayout: the generator's pauses say in words what
// the chat waits for, in the pill and in the composer's placeholder (not
// "has not asked for input yet" while a form is open); on a phone the
// composer stays at the bottom of the screen and the action plan's Approve
// is reachable on screen.
func TestStatusWords_AndPhoneLayout(t *testing.T) {
	for _, v := range viewports {
		t.Run(v.name, func(t *testing.T) {
			be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
			b := newBrowser(t)
			b.size(t, v)
			startGenerator(t, b, be.url())
			pill := func() string {
				return eval[string](t, b, `document.querySelector("#chat-status").textContent`)
			}
			placeholder := func() string {
				return eval[string](t, b, `document.querySelector("#composer-input").placeholder`)
			}
			if got := pill(); got != "Waiting for your answer" {
				t.Errorf("pill %q at the first question", got)
			}
			composerAtBottom(t, b, v)
			answerFirstQuestion(t, b)
			if got := pill(); got != "Waiting for your secrets" {
				t.Errorf("pill %q at the secret form", got)
			}
			if got := placeholder(); got != "Fill in the secret form above to go on" {
				t.Errorf("placeholder %q while the secret form is open", got)
			}
			if !eval[bool](t, b, `document.querySelector("#composer-input").disabled`) {
				t.Error("the composer is enabled while the secret form is open")
			}
			b.shot(t, "35-secret-words-"+v.name)
			b.do(t, "type the secret", chromedp.SendKeys(chromedp.CSS("form.secret-form input"), secretValue+kb.Enter))
			b.waitFor(t, "the action plan", `!!document.querySelector("#artifact-panel button.approve")`)
			if got := pill(); got != "Waiting for your response" {
				t.Errorf("pill %q at the action plan", got)
			}
			if got := placeholder(); got != "Review the plan in the artifact panel to go on" {
				t.Errorf("placeholder %q while the plan waits", got)
			}
			for _, raw := range []string{"waiting_ui_tool", "waiting_secret", "waiting_input"} {
				if strings.Contains(eval[string](t, b, "document.body.innerText"), raw) {
					t.Errorf("the page shows the raw status %s", raw)
				}
			}
			composerAtBottom(t, b, v)
			b.do(t, "review the plan", chromedp.Click(chromedp.CSS("#messages .artifact-card button")))
			b.do(t, "scroll to Approve", chromedp.Evaluate[chromedp.Void](`document.querySelector("#artifact-panel button.approve").scrollIntoView({block: "nearest"})`))
			onScreen := `(() => { const r = document.querySelector("#artifact-panel button.approve").getBoundingClientRect();
				return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight && r.left >= 0 && r.right <= innerWidth; })()`
			if !eval[bool](t, b, onScreen) {
				t.Errorf("Approve is not on screen: %s", b.text(t, `JSON.stringify(document.querySelector("#artifact-panel button.approve").getBoundingClientRect())`))
			}
			composerAtBottom(t, b, v)
			noSideScroll(t, b)
			b.shot(t, "36-plan-"+v.name)
			b.do(t, "approve", chromedp.Click(chromedp.CSS("#artifact-panel button.approve")))
			b.waitFor(t, "the end", `!!document.querySelector(".msg.badge")`)
			if got := pill(); got != "Complete" {
				t.Errorf("pill %q at the end", got)
			}
			b.noProblems(t)
		})
	}
}

// composerAtBottom fails the test if the composer is not at the bottom of
// the viewport (within a pixel), on screen.
func composerAtBottom(t *testing.T, b *browser, v viewport) {
	t.Helper()
	got := eval[[]float64](t, b, `(() => { const r = document.querySelector("#composer").getBoundingClientRect(); return [r.top, r.bottom, innerHeight]; })()`)
	if len(got) != 3 || got[1] < got[2]-1 || got[1] > got[2]+1 || got[0] < 0 {
		t.Errorf("%s: composer at %v (top, bottom, viewport height), want it at the bottom of the screen", v.name, got)
	}
}

// TestAuth_KeyDialogOnPhone: outside dev mode, the key dialog fits a phone
// screen, asks only for the key and says how to make one; a key of an app
// other than default works (the page learns its app from /api/me).
func TestAuth_KeyDialogOnPhone(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0", withKeys)
	key, hash, err := server.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.st.CreateKey(context.Background(), baton.APIKey{Hash: hash, App: "demo", User: "me", Name: "e2e"}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	b.size(t, viewports[1])
	b.do(t, "open the page", chromedp.Navigate(be.url()))
	b.waitFor(t, "the key dialog", `document.querySelector("#auth-dialog").open`)
	fits := `(() => { const r = document.querySelector("#auth-dialog").getBoundingClientRect(); return r.left >= 0 && r.right <= innerWidth && r.top >= 0 && r.bottom <= innerHeight; })()`
	if !eval[bool](t, b, fits) {
		t.Errorf("the key dialog does not fit the phone: %s", b.text(t, `JSON.stringify(document.querySelector("#auth-dialog").getBoundingClientRect())`))
	}
	if !strings.Contains(eval[string](t, b, `document.querySelector("#auth-dialog").innerText`), "baton keys create --app default --user me") {
		t.Error("the key dialog does not say how to make a key")
	}
	b.shot(t, "37-key-dialog-phone")
	b.do(t, "enter the key", chromedp.SendKeys(chromedp.CSS("#auth-key"), key+kb.Enter))
	b.waitFor(t, "the workflows", `!!document.querySelector('#workflow-select option[value="xss"]')`)
	b.do(t, "start a chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), "xss"),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	b.waitFor(t, "the chat of app demo", `!!document.querySelector(".msg.badge")`)
	if got := eval[string](t, b, `document.querySelector("#app-label").textContent`); got != "app: demo · user: me" {
		t.Errorf("app label %q", got)
	}
	noSideScroll(t, b)
	b.noProblems(t, "401 (Unauthorized) http://"+be.addr+"/api/me")
}

// TestQueuedMessage_SentWhileTheAgentsWork: while an answer streams the
// person may write (the workflow's double_texting is the default,
// enqueue): the message shows at once as sent and queued, the server keeps
// it, and when the run ends the message starts the next run: its recorded
// echo replaces the queued bubble, once.
func TestQueuedMessage_SentWhileTheAgentsWork(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	startFromPage(t, b, be.url(), "slow")
	b.waitFor(t, "the answer streaming", `!!document.querySelector('.msg.streaming[data-agent="Reporter"]')`)
	b.waitFor(t, "the composer open while the agents work", `!document.querySelector("#composer-input").disabled`)
	const msg = "One more thing: add the sources."
	b.do(t, "write while the agents work", chromedp.SendKeys(chromedp.CSS("#composer-input"), msg+kb.Enter))
	if n := eval[int](t, b, `[...document.querySelectorAll("#messages .msg.user.queued")].filter(n => n.textContent.includes("add the sources")).length`); n != 1 {
		t.Fatalf("%d queued bubbles right after sending, want 1", n)
	}
	b.shot(t, "33-queued-message")
	b.waitFor(t, "the recorded echo of the queued message",
		`[...document.querySelectorAll("#messages .msg.user:not(.queued)")].some(n => n.textContent.includes("add the sources") && n.dataset.seq)`)
	if n := eval[int](t, b, `[...document.querySelectorAll("#messages .msg.user")].filter(n => n.textContent.includes("add the sources")).length`); n != 1 {
		t.Errorf("the message is shown %d times after its echo, want once", n)
	}
	b.noProblems(t)
}
