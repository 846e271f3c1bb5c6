//go:build e2e

package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestRestart_MidChat kills the server while the chat waits for the secret,
// restarts it on the same SQLite file and address, and checks that the page
// reconnects from its last sequence: a banner while it is down, then the
// same messages (none twice, none missing), and the chat goes on to the end.
func TestRestart_MidChat(t *testing.T) {
	db := filepath.Join(t.TempDir(), "baton.db")
	be := startBackend(t, db, "127.0.0.1:0")
	b := newBrowser(t)
	chatID := startGenerator(t, b, be.url())
	answerFirstQuestion(t, b)
	before := messageSeqs(t, b)
	lastSeq := eval[string](t, b, `document.querySelector("#dev-seq").textContent`)

	be.kill()
	b.waitFor(t, "the reconnect banner", `!document.querySelector("#banner").hidden && document.querySelector("#banner").textContent.includes("reconnecting")`)
	b.shot(t, "10-server-down")

	be = startBackend(t, db, be.addr)
	// While the page is still reconnecting, the chat moves on without it:
	// the secret is answered over HTTP, so the replay must fill the gap.
	var chat struct {
		Pending []struct {
			UIEventID string `json:"ui_event_id"`
		} `json:"pending"`
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+chatID, &chat)
	if len(chat.Pending) != 1 {
		t.Fatalf("pending after the restart: %+v", chat.Pending)
	}
	postJSON(t, "http://"+be.addr+"/api/input/submit", map[string]any{
		"app": app, "chat_id": chatID, "ui_event_id": chat.Pending[0].UIEventID,
		"data": map[string]string{"NEWSLETTER_API_KEY": secretValue},
	})
	b.waitFor(t, "the banner gone", `document.querySelector("#banner").hidden`)
	b.waitFor(t, "the reconnection logged", `[...document.querySelectorAll("#dev-log li")].some(n => n.textContent.includes("replay after `+lastSeq+`"))`)
	b.waitFor(t, "the action plan, recorded while the page was away", `!document.querySelector("#artifact-panel").hidden && !!document.querySelector("#artifact-panel button.approve")`)
	if after := messageSeqs(t, b); len(after) < len(before) || !slices.Equal(after[:len(before)], before) {
		t.Errorf("after the restart the page shows sequences %v, before %v", after, before)
	}
	if got := eval[string](t, b, `[...document.querySelectorAll(".component-done")].map(n => n.textContent).join("|")`); got != "Secrets sent." {
		t.Errorf("the secret form after the replay says %q", got)
	}
	b.shot(t, "11-reconnected")

	// The chat goes on over the new connection.
	b.do(t, "approve", chromedp.Click(chromedp.CSS("#artifact-panel button.approve")))
	b.waitFor(t, "the completion badge", `!!document.querySelector(".msg.badge")`)
	// Every envelope reached the page once.
	envSeqs := eval[[]string](t, b, `[...document.querySelectorAll("#dev-log .seq")].map(n => n.textContent.trim())`)
	seen := map[string]bool{}
	for _, s := range envSeqs {
		if seen[s] {
			t.Errorf("envelope %s received twice", s)
		}
		seen[s] = true
	}
	live := messageSeqs(t, b)

	// The page shows exactly what the history endpoint says was recorded
	// for the person to see: no duplicate, no gap.
	var hist struct {
		Events []struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		} `json:"events"`
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+chatID+"/events", &hist)
	var want []float64
	for _, e := range hist.Events {
		if e.Type != "chat.text" || e.Data["ui_hidden"] == true || e.Data["tool_only"] == true {
			continue
		}
		want = append(want, e.Data["sequence"].(float64))
	}
	if !slices.Equal(live, want) {
		t.Errorf("page shows text sequences %v, history has %v", live, want)
	}
	if n := strings.Count(eval[string](t, b, "document.querySelector('#messages').innerText"), "What would you like to automate?"); n != 1 {
		t.Errorf("the first question is shown %d times", n)
	}
	b.shot(t, "12-after-restart-complete")
	// Reconnecting while the server is down is refused; that is expected.
	b.noProblems(t, "/ws/"+app+"/"+chatID+"?last_sequence="+lastSeq+"' failed: Error in connection establishment: net::ERR_CONNECTION_REFUSED")
}

// TestModelOutput_IsText checks that markup in a model's answer is shown as
// the text it is, while streaming and once recorded: no script runs, no
// element is created from it.
func TestModelOutput_IsText(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	b.do(t, "open the page", chromedp.Navigate(be.url()))
	b.waitFor(t, "the workflow list", `!!document.querySelector('#workflow-select option[value="xss"]')`)
	b.do(t, "start an xss chat",
		chromedp.SetValue(chromedp.CSS("#workflow-select"), "xss"),
		chromedp.Click(chromedp.CSS("#start-button")),
	)
	b.waitFor(t, "the completion badge", `!!document.querySelector(".msg.badge")`)
	b.waitFor(t, "Mallory's message", `!!document.querySelector('#messages .msg.agent[data-agent="Mallory"][data-seq]')`)
	b.shot(t, "13-markup-as-text")

	msg := `document.querySelector('#messages .msg.agent[data-agent="Mallory"] .body')`
	text := eval[string](t, b, msg+".textContent")
	for _, want := range []string{"<script>window.__pwned = 'script'</script>", `<img src=x onerror="window.__pwned = 'img'">`} {
		if !strings.Contains(text, want) {
			t.Errorf("message text %q does not show %q", text, want)
		}
	}
	if n := eval[int](t, b, msg+`.querySelectorAll("script, img, iframe, [onerror], a[href^='javascript']").length`); n != 0 {
		t.Errorf("%d elements made from the model's markup: %s", n, eval[string](t, b, msg+".innerHTML"))
	}
	if got := eval[string](t, b, msg+`.querySelector("strong")?.textContent || ""`); got != "Careful:" {
		t.Errorf("markdown not rendered: <strong> is %q", got)
	}
	if eval[bool](t, b, `window.__pwned !== undefined`) {
		t.Errorf("the model's script ran: window.__pwned = %q", eval[string](t, b, "String(window.__pwned)"))
	}
	// The link with a javascript: URL is harmless after a click, too.
	eval[bool](t, b, msg+`.querySelector("a")?.click() ?? true`)
	if eval[bool](t, b, `window.__pwned !== undefined`) {
		t.Error("the model's javascript: link ran")
	}
	b.noProblems(t)
}
