package tool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// cancellableAgent is an A2A agent whose task "task-7" asks "Your name?"
// and which records each JSON-RPC method called and the task id of each
// tasks/cancel.
type cancellableAgent struct {
	srv     *httptest.Server
	mu      sync.Mutex
	methods []string
}

func (a *cancellableAgent) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.methods...)
}

func newCancellableAgent(t *testing.T) *cancellableAgent {
	t.Helper()
	a := &cancellableAgent{}
	task := func(state string) map[string]any {
		said := map[string]any{"kind": "message", "messageId": "m2", "role": "agent", "parts": []any{map[string]any{"kind": "text", "text": "Your name?"}}}
		return map[string]any{"kind": "task", "id": "task-7", "contextId": "ctx-7", "status": map[string]any{"state": state, "message": said}}
	}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/.well-known/agent-card.json") {
			_ = json.NewEncoder(w).Encode(map[string]any{
				"name": "Registrar", "description": "asks", "version": "1", "protocolVersion": "0.3.0",
				"url": a.srv.URL + "/rpc", "preferredTransport": "JSONRPC", "capabilities": map[string]any{},
				"defaultInputModes": []string{"text"}, "defaultOutputModes": []string{"text"}, "skills": []any{},
			})
			return
		}
		var req struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
			Params struct {
				ID string `json:"id"`
			} `json:"params"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		state := "input-required"
		call := req.Method
		if req.Method == "tasks/cancel" {
			call += " " + req.Params.ID
			state = "canceled"
		}
		a.mu.Lock()
		a.methods = append(a.methods, call)
		a.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": task(state)})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// TestA2ATool_AbandonCancelsTheRemoteTask: when the engine gives up on a
// call whose remote task asks for input, the a2a tool (a tool.Abandoner
// through the registry) sends tasks/cancel for the task its last question
// named; with no task recorded it sends nothing.
func TestA2ATool_AbandonCancelsTheRemoteTask(t *testing.T) {
	agent := newCancellableAgent(t)
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Name: "ask", Kind: tool.KindA2A, A2A: tool.A2ASpec{CardURL: agent.srv.URL}, AllowPrivateNetwork: true},
	}, tool.WithLedger(&memLedger{}))
	tl := lookup(t, r, "A", "ask")
	res, err := tl.Call(context.Background(), callCtx("c1"), json.RawMessage(`{"message":"hi"}`))
	if err != nil || res.Status != baton.ToolStatusInputRequired {
		t.Fatalf("Call = %+v, %v; want input-required", res, err)
	}
	ab, ok := tl.(tool.Abandoner)
	if !ok {
		t.Fatalf("%T is not a tool.Abandoner", tl)
	}
	before := len(agent.calls())
	ab.Abandon(context.Background(), callCtx("c1"), json.RawMessage(`{}`))
	if got := agent.calls()[before:]; len(got) != 0 {
		t.Fatalf("Abandon with no task sent %q", got)
	}
	ab.Abandon(context.Background(), callCtx("c1"), res.Resume)
	if got := agent.calls()[before:]; len(got) != 1 || got[0] != "tasks/cancel task-7" {
		t.Fatalf("Abandon(%s) sent %q, want [tasks/cancel task-7]", res.Resume, got)
	}
}
