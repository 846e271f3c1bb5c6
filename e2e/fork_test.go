//go:build e2e

package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestEditAndResend: "Edit" on the person's message forks the chat before
// it, sends the edited text in the new chat and opens it; the new chat goes
// on from there (the secret form comes again), names the chat it came from,
// and the original keeps its message.
func TestEditAndResend(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	chatID := startGenerator(t, b, be.url())
	answerFirstQuestion(t, b)
	if eval[bool](t, b, `document.querySelector("#export-button").hidden`) {
		t.Error("no export button in the chat view")
	}
	b.waitFor(t, "the edit button", `!!document.querySelector("#messages .msg.user .edit-resend")`)
	b.do(t, "edit the message", chromedp.Click(chromedp.CSS("#messages .msg.user .edit-resend")))
	b.waitFor(t, "the edit box", `!!document.querySelector("#messages .msg.user .edit-form textarea")`)
	b.do(t, "change the text and resend",
		chromedp.SetValue(chromedp.CSS("#messages .msg.user .edit-form textarea"), "A monthly report from our sales data"),
		chromedp.Click(chromedp.CSS("#messages .msg.user .edit-form button.resend")),
	)
	b.waitFor(t, "the new chat opened", `location.hash.startsWith("#chat=") && location.hash !== "#chat=`+chatID+`"`)
	forkID := strings.TrimPrefix(eval[string](t, b, "location.hash"), "#chat=")
	b.waitFor(t, "the edited message in the new chat", `[...document.querySelectorAll('#messages .msg.user')].some(n => n.textContent.includes("A monthly report from our sales data"))`)
	b.waitFor(t, "the new chat goes on to the secret form", `!!document.querySelector("form.secret-form input")`)
	if eval[bool](t, b, `[...document.querySelectorAll('#messages .msg.user')].some(n => n.textContent.includes("A weekly newsletter"))`) {
		t.Error("the new chat shows the message that was edited")
	}
	if n := eval[int](t, b, `[...document.querySelectorAll('#messages .msg.agent')].filter(n => n.textContent.includes("What would you like to automate?")).length`); n != 1 {
		t.Errorf("the first question shows %d times in the new chat, want once (copied, not asked again)", n)
	}
	var fork struct {
		ForkedFrom struct {
			ChatID   string `json:"chat_id"`
			Sequence int64  `json:"sequence"`
		} `json:"forked_from"`
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+forkID, &fork)
	if fork.ForkedFrom.ChatID != chatID || fork.ForkedFrom.Sequence < 1 {
		t.Errorf("the new chat's forked_from = %+v, want chat %s", fork.ForkedFrom, chatID)
	}
	var hist struct {
		Events []struct {
			Type string `json:"type"`
			Data struct {
				Agent   string `json:"agent"`
				Content string `json:"content"`
			} `json:"data"`
		} `json:"events"`
	}
	getJSON(t, "http://"+be.addr+"/api/chats/"+app+"/"+chatID+"/events", &hist)
	kept := false
	for _, e := range hist.Events {
		if e.Type == "chat.text" && e.Data.Agent == "user" && strings.Contains(e.Data.Content, "A weekly newsletter") {
			kept = true
		}
		if strings.Contains(e.Data.Content, "monthly report") {
			t.Errorf("the original chat got the edited text: %+v", e)
		}
	}
	if !kept {
		t.Error("the original chat lost the person's message")
	}
	b.shot(t, "edit-and-resend")
	b.noProblems(t)
}
