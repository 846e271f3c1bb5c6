//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// tripQuestion is book_trip's question, worded as an a2a tool words a
// remote agent's ("<who> asks: …").
const tripQuestion = "Travel desk asks: which day do you want to leave?"

// bookTrip is the ask workflow's Go tool. Like an a2a tool whose remote
// task is input-required, its first call asks the person
// (baton.ToolStatusInputRequired); the call with the person's answer books
// the trip for that day.
type bookTrip struct{}

func (bookTrip) Name() string        { return "book_trip" }
func (bookTrip) Description() string { return "Book a trip; asks the person for the date." }
func (bookTrip) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`)
}

func (bookTrip) Call(_ context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	var in struct {
		To string `json:"to"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return baton.ToolResult{Status: baton.ToolStatusError, Content: "arguments: " + err.Error()}, nil
	}
	if cc.Answer == nil {
		return baton.ToolResult{Status: baton.ToolStatusInputRequired, Content: tripQuestion, Resume: json.RawMessage(`{"task":"t1"}`)}, nil
	}
	return baton.ToolResult{Status: baton.ToolStatusOK, Content: "Booked to " + in.To + " on " + cc.Answer.Text}, nil
}

// postCompletion posts a Chat Completions request to the live server (dev
// mode: no key) and returns the decoded answer and the chat's id.
func postCompletion(t *testing.T, be *backend, chatID string, body map[string]any) (map[string]any, string) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+be.addr+"/v1/chat/completions", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if chatID != "" {
		req.Header.Set("X-Baton-Chat-Id", chatID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/chat/completions: %v", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat/completions: %d %s", resp.StatusCode, got)
	}
	var out map[string]any
	if err := json.Unmarshal(got, &out); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	return out, resp.Header.Get("X-Baton-Chat-Id")
}

// TestClientTool_WaitsForTheClient: a chat started over Chat Completions
// with a tools list stops when Desk calls the client's get_location. The
// page says it waits for the client application to run it and keeps the
// composer closed; when the client answers with a tool message, the page
// shows the result and the chat goes on.
func TestClientTool_WaitsForTheClient(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_location", "description": "Where the person is, from their browser.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"precision": map[string]any{"enum": []string{"city", "street"}}}, "required": []string{"precision"}},
	}}}
	hist := []any{map[string]any{"role": "user", "content": "Where am I?"}}
	first, chatID := postCompletion(t, be, "", map[string]any{"model": "desk", "messages": hist, "tools": tools})
	choice := first["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	calls, _ := msg["tool_calls"].([]any)
	if choice["finish_reason"] != "tool_calls" || len(calls) != 1 || chatID == "" {
		t.Fatalf("first reply (chat %q): %v", chatID, first)
	}
	callID := calls[0].(map[string]any)["id"].(string)

	b := newBrowser(t)
	b.do(t, "open the chat", chromedp.Navigate(be.url()+"#chat="+chatID))
	const waiting = `[...document.querySelectorAll("#messages .msg.tool.client-tool")]`
	b.waitFor(t, "the wait for the client", waiting+`.some(n => n.textContent === "Waiting for the client application to run get_location")`)
	if !eval[bool](t, b, `document.querySelector("#composer-input").disabled && document.querySelector("#send-button").disabled`) {
		t.Error("the composer is open while the chat waits for the client application")
	}
	if got := eval[string](t, b, `document.querySelector("#composer-input").placeholder`); !strings.Contains(got, "client application") {
		t.Errorf("composer placeholder %q, want it to name the client application", got)
	}
	// The page knows the call by the model's id; the client, by the
	// pending request's (callID): Desk makes one call here.
	details := `document.querySelector('#messages details.tool-call[data-agent="Desk"]')`
	if got := eval[string](t, b, details+`?.querySelector("summary").innerText ?? ""`); !strings.Contains(got, "Desk called get_location") {
		t.Errorf("tool call summary %q", got)
	}
	b.shot(t, "60-client-tool-waiting")

	hist = append(hist, msg, map[string]any{"role": "tool", "tool_call_id": callID, "content": "Paris, 4th arrondissement"})
	second, _ := postCompletion(t, be, "", map[string]any{"model": "desk", "messages": hist, "tools": tools})
	if c := second["choices"].([]any)[0].(map[string]any); c["finish_reason"] != "stop" {
		t.Fatalf("second reply: %v", second)
	}
	b.waitFor(t, "the client's answer", waiting+`.some(n => n.textContent === "The client application answered get_location")`)
	b.waitFor(t, "the result in the call", details+`?.querySelector(".tool-state").textContent === "done" && `+details+`.querySelector(".tool-output")?.textContent.includes("Paris, 4th arrondissement")`)
	b.waitFor(t, "Desk going on", `[...document.querySelectorAll('#messages .msg.agent[data-agent="Desk"]')].some(n => n.textContent.includes("Noted where you are."))`)
	if eval[bool](t, b, waiting+`.some(n => n.textContent.startsWith("Waiting"))`) {
		t.Error("the page still says it waits for the client application")
	}
	b.shot(t, "61-client-tool-answered")
	b.noProblems(t)
}

// TestToolQuestion_AnsweredInTheComposer: a tool that asks the person (as
// an a2a tool does when its remote task is input-required) has its
// question shown as a message of the agent that called it; the person's
// answer, typed in the composer, shows as their message, goes to the tool,
// and the chat goes on to its end.
func TestToolQuestion_AnsweredInTheComposer(t *testing.T) {
	be := startBackend(t, filepath.Join(t.TempDir(), "baton.db"), "127.0.0.1:0")
	b := newBrowser(t)
	startFromPage(t, b, be.url(), "ask")
	const question = `document.querySelector('#messages .msg.agent.tool-question[data-agent="Booker"]')`
	b.waitFor(t, "the tool's question", `!!`+question)
	if got := eval[string](t, b, question+`.querySelector(".body").innerText`); !strings.Contains(got, tripQuestion) || !strings.Contains(got, "asked through book_trip") {
		t.Errorf("question %q, want %q asked through book_trip", got, tripQuestion)
	}
	if got := eval[string](t, b, question+`.querySelector(".who").textContent`); got != "Booker" {
		t.Errorf("the question is shown as %q's, want Booker's", got)
	}
	b.waitFor(t, "the open composer", `!document.querySelector("#composer-input").disabled`)
	b.shot(t, "62-tool-question")

	b.do(t, "answer in the composer",
		chromedp.SendKeys(chromedp.CSS("#composer-input"), "Friday the 5th"),
		chromedp.SendKeys(chromedp.CSS("#composer-input"), kb.Enter),
	)
	b.waitFor(t, "the answer sent (the composer emptied)", `document.querySelector("#composer-input").value === ""`)
	// The recorded answer (not the bubble shown at once while it is sent).
	b.waitFor(t, "the answer as the person's message", `[...document.querySelectorAll("#messages .msg.user[data-seq]:not(.queued)")].some(n => n.querySelector(".body").textContent === "Friday the 5th")`)
	const details = `document.querySelector('#messages details.tool-call[data-agent="Booker"]')`
	b.waitFor(t, "the tool's result", details+`?.querySelector(".tool-output")?.textContent.includes("Booked to Lisbon on Friday the 5th")`)
	b.waitFor(t, "Booker going on", `[...document.querySelectorAll('#messages .msg.agent[data-agent="Booker"]')].some(n => n.textContent.includes("Your trip to Lisbon is booked."))`)
	b.waitFor(t, "the chat's end", `!!document.querySelector(".msg.badge")`)
	b.shot(t, "63-tool-question-answered")
	b.noProblems(t)
}
