//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
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
	if got := eval[string](t, b, `document.querySelector("#chat-status").textContent`); got != "failed" {
		t.Errorf("status %q after the error", got)
	}
	b.shot(t, "14-error")
	b.do(t, "retry", chromedp.Click(chromedp.CSS("#messages .msg.error button")))
	b.waitFor(t, "the retry's own error", `document.querySelectorAll("#messages .msg.error").length === 2`)
	if !strings.Contains(eval[string](t, b, `document.querySelector("#messages .msg.error").textContent`), "Retrying") {
		t.Error("the first error does not say it was retried")
	}
	if got := eval[string](t, b, `document.querySelector("#chat-status").textContent`); got != "failed" {
		t.Errorf("status %q after the retry failed", got)
	}
	b.shot(t, "15-error-retried")
	b.noProblems(t)
}

// TestAuth_KeyOnce: without dev mode the page asks for a key once, keeps
// it in session storage, sends it as Bearer and as the WebSocket's auth
// message, and does not ask again on reload.
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
	b.shot(t, "16-key-dialog")
	eval[string](t, b, `document.querySelector("#auth-app").value = ""`)
	b.do(t, "enter the key",
		chromedp.SendKeys(chromedp.CSS("#auth-key"), key),
		chromedp.SendKeys(chromedp.CSS("#auth-app"), "acme"+kb.Enter),
	)
	b.waitFor(t, "the workflows", `!!document.querySelector('#workflow-select option[value="xss"]')`)
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
	// The page learns that it needs a key from the first request's 401.
	b.noProblems(t, "401 (Unauthorized) http://"+be.addr+"/api/workflows")
}
