package server

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/batonhq/baton"
)

// TestA2AHiddenTextsNeverSent: a hidden trigger text, tool-only fallback
// text, structured-output feedback and the system's own text are neither
// live status messages nor task history; a plain agent text is both.
func TestA2AHiddenTextsNeverSent(t *testing.T) {
	texts := []string{
		`{"agent":"Planner","content":"TERMINATE","ui_hidden":true}`,
		`{"agent":"Planner","content":"called lookup","tool_only":true}`,
		`{"agent":"Planner","content":"your output was invalid","feedback":true}`,
		`{"agent":"system","content":"resume"}`,
		`{"agent":"user","content":"the hidden trigger","ui_hidden":true}`,
		`{"agent":"Planner","content":"Hello there"}`,
	}
	c := newA2AConv(a2aTaskID{chat: "c1", run: 1})
	task := &a2a.Task{ID: c.id, ContextID: c.ctxID}
	var live []string
	for i, data := range texts {
		f := &Followed{Sequence: int64(i + 1), Envelope: baton.Envelope{Type: baton.TypeChatText, Data: []byte(data)}}
		evs, _ := c.events(f)
		for _, ev := range evs {
			if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && su.Status.Message != nil {
				live = append(live, su.Status.Message.Parts[0].(a2a.TextPart).Text)
			}
		}
		c.fold(task, f)
	}
	if len(live) != 1 || live[0] != "Hello there" {
		t.Errorf("live status messages %q, want only the visible text", live)
	}
	if got := historyText(task); got != "agent: Hello there\n" {
		t.Errorf("task history:\n%s", got)
	}
}

// TestA2AEndpointBehindTLSProxy: the card's url is https when the request
// came through a TLS proxy (X-Forwarded-Proto), as the web UI links are.
func TestA2AEndpointBehindTLSProxy(t *testing.T) {
	r := httptest.NewRequest("GET", "http://agents.example.com/a2a/acme/hello/.well-known/agent-card.json", nil)
	r.SetPathValue("app", "acme")
	r.SetPathValue("workflow", "hello")
	if got := a2aEndpoint(r); got != "http://agents.example.com/a2a/acme/hello" {
		t.Errorf("plain: %s", got)
	}
	r.Header.Set("X-Forwarded-Proto", "https")
	if got := a2aEndpoint(r); got != "https://agents.example.com/a2a/acme/hello" {
		t.Errorf("behind a TLS proxy: %s", got)
	}
}

// TestA2ABlockingSendHoldsAStreamSlot: a blocking message/send follows the
// run, so it takes one of the key's stream slots; with all of them held it
// is refused, as a stream would be.
func TestA2ABlockingSendHoldsAStreamSlot(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.MaxStreamsPerKey = 1 }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "hello", nil)
	resp, _ := e.openSSE(ctx, t, id, "")
	defer resp.Body.Close()
	c, _ := e.a2aClient(t, "acme", "hello", e.keys[scopeAda])
	_, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMessage("slot-1", a2a.TextPart{Text: "hi"})})
	if err == nil {
		t.Fatal("a blocking message/send beyond the key's stream limit was served")
	}
}
