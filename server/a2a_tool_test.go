package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
)

// writeCallerWorkflow writes a workflow "caller" whose agent asks the
// remote agent at ${A2A_REMOTE_URL} through an a2a tool, then ends.
func writeCallerWorkflow(t *testing.T, remoteWorkflow, message string) string {
	t.Helper()
	return writeCallerWorkflowAsk(t, remoteWorkflow, message, "")
}

// writeCallerWorkflowAsk is writeCallerWorkflow with the a2a block's
// on_input_required set to onInput ("" leaves the default).
func writeCallerWorkflowAsk(t *testing.T, remoteWorkflow, message, onInput string) string {
	t.Helper()
	extra := ""
	if onInput != "" {
		extra = `, "on_input_required": "` + onInput + `"`
	}
	root := t.TempDir()
	dir := filepath.Join(root, "caller")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"message": message})
	files := map[string]string{
		"workflow.json": `{"name": "caller", "description": "Asks a remote A2A agent.", "version": "1.0.0", "visual_agents": ["Caller"],
			"orchestration": {"initial_agent": "Caller", "initial_message": "Ask the remote agent.", "startup_mode": "AgentDriven", "max_turns": 5},
			"llm": {"model": "gpt-4o-mini"}}`,
		"agents.json":             `{"agents": {"Caller": {"system_message": "You ask the remote agent.", "max_consecutive_auto_reply": 3}}}`,
		"context_variables.json":  `{"variables": {}, "derived_variables": []}`,
		"handoffs.json":           `{"handoff_rules": [{"source_agent": "Caller", "handoff_type": "after_work", "transition_target": "TerminateTarget"}]}`,
		"structured_outputs.json": `{"structured_outputs": {"models": {}, "registry": {}}}`,
		"tools.json": `{"tools": [{"agent": "Caller", "name": "ask_remote", "description": "Ask the remote agent.", "tool_type": "Agent_Tool", "kind": "a2a",
			"a2a": {"card_url": "${A2A_REMOTE_URL}/a2a/acme/` + remoteWorkflow + `", "token_from": "A2A_REMOTE_TOKEN"` + extra + `}, "allow_private_network": true}]}`,
		"scripted.json": `{"agents": {"Caller": [
			{"tool_calls": [{"name": "ask_remote", "arguments": ` + string(args) + `}]},
			{"text": "The remote agent answered."}]}}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// toolResponses returns the contents of a chat's chat.tool_response events
// of tool name.
func toolResponses(t *testing.T, e *env, scope baton.Scope, chatID, name string) []baton.ToolResponsePayload {
	t.Helper()
	var out []baton.ToolResponsePayload
	for ev, err := range baton.EventsAfter(context.Background(), e.store, scope, chatID, 0, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != baton.TypeChatToolResponse {
			continue
		}
		p, err := baton.DecodePayload[baton.ToolResponsePayload](&ev)
		if err != nil {
			t.Fatal(err)
		}
		if p.ToolName == name {
			out = append(out, p)
		}
	}
	return out
}

// remoteChats returns ada's chats on the remote baton.
func remoteChats(t *testing.T, remote *env) []any {
	t.Helper()
	return remote.do(t, "GET", "/api/chats/acme", remote.keys[scopeAda], nil).json(t)["chats"].([]any)
}

// TestA2AToolAcrossBatons: a second baton's workflow calls the first's
// hello workflow through an a2a tool (streaming, as the card says); the
// remote agent's answer is the tool's result, and the remote side has the
// message once.
func TestA2AToolAcrossBatons(t *testing.T) {
	remote := newEnv(t)
	t.Setenv("A2A_REMOTE_URL", remote.ts.URL)
	t.Setenv("A2A_REMOTE_TOKEN", remote.keys[scopeAda])
	caller := newEnv(t, withWorkflows(writeCallerWorkflow(t, "hello", "What time is it?")))
	id := caller.start(t, "caller", nil)
	if c := caller.waitStatus(t, id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("caller chat %s", c.Status)
	}
	res := toolResponses(t, caller, scopeAda, id, "ask_remote")
	if len(res) != 1 || !res[0].Success || !strings.Contains(res[0].Content, "Hello! I checked the clock in UTC") {
		t.Fatalf("tool responses %+v", res)
	}
	chats := remoteChats(t, remote)
	if len(chats) != 1 {
		t.Fatalf("the remote side has %d chats, want 1", len(chats))
	}
	remoteID := chats[0].(map[string]any)["chat_id"].(string)
	if n := strings.Count(strings.Join(historyContents(t, remote, remoteID), "\n"), "What time is it?"); n != 1 {
		t.Errorf("the remote chat has the message %d times", n)
	}
}

// historyContents returns the content of each event of a chat's history.
func historyContents(t *testing.T, e *env, chatID string) []string {
	t.Helper()
	var out []string
	for _, raw := range e.history(t, chatID) {
		var m struct {
			Data struct {
				Content string `json:"content"`
			} `json:"data"`
		}
		_ = json.Unmarshal(raw, &m)
		out = append(out, m.Data.Content)
	}
	return out
}

// TestA2AToolRerunSendsOnce: a call run again under the same effect key
// (the process died between the claim and the record, so another ledger
// has no result: recovery re-runs it) sends the same message id, which the
// remote baton takes as a retry: one remote chat, one message, the same
// answer.
func TestA2AToolRerunSendsOnce(t *testing.T) {
	remote := newEnv(t)
	t.Setenv("A2A_REMOTE_TOKEN", remote.keys[scopeAda])
	spec := tool.Spec{Agent: "Caller", Name: "ask_remote", Kind: tool.KindA2A, AllowPrivateNetwork: true,
		A2A: tool.A2ASpec{CardURL: remote.ts.URL + "/a2a/acme/hello", TokenFrom: "A2A_REMOTE_TOKEN"}}
	cc := &baton.CallContext{ChatID: "c-1", App: "acme", User: "ada", Workflow: "caller", Agent: "Caller", TurnKey: "turn-1", ToolCallID: "call-1"}
	var results []string
	for i := range 2 {
		ledger, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ledger.Close() })
		scope := baton.Scope{App: "acme", User: "ada"}
		if _, err := ledger.CreateChat(context.Background(), scope, baton.Chat{ID: cc.ChatID, App: "acme", User: "ada", Workflow: "caller", Status: baton.ChatRunning}); err != nil {
			t.Fatal(err)
		}
		reg, err := tool.New("", []tool.Spec{spec}, tool.WithLedger(ledger))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close() })
		tl, err := reg.Tool(context.Background(), "Caller", "ask_remote")
		if err != nil {
			t.Fatal(err)
		}
		c := *cc
		c.Recovery = i > 0
		res, err := tl.Call(context.Background(), &c, json.RawMessage(`{"message":"What time is it?"}`))
		if err != nil || res.Status != baton.ToolStatusOK {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
		results = append(results, res.Content)
	}
	if results[0] != results[1] || !strings.Contains(results[0], "Hello!") {
		t.Errorf("results differ: %q, %q", results[0], results[1])
	}
	chats := remoteChats(t, remote)
	if len(chats) != 1 {
		t.Fatalf("the remote side has %d chats, want 1", len(chats))
	}
	remoteID := chats[0].(map[string]any)["chat_id"].(string)
	if n := strings.Count(strings.Join(historyContents(t, remote, remoteID), "\n"), "What time is it?"); n != 1 {
		t.Errorf("the remote chat has the message %d times", n)
	}
}

// TestA2AToolUnreachableCard: a card nobody serves is the call's error
// result, naming the URL; the workflow loads.
func TestA2AToolUnreachableCard(t *testing.T) {
	t.Setenv("A2A_REMOTE_URL", "http://127.0.0.1:1")
	t.Setenv("A2A_REMOTE_TOKEN", "x")
	caller := newEnv(t, withWorkflows(writeCallerWorkflow(t, "hello", "hi")))
	id := caller.start(t, "caller", nil)
	caller.waitStatus(t, id, baton.ChatCompleted, baton.ChatFailed)
	res := toolResponses(t, caller, scopeAda, id, "ask_remote")
	if len(res) != 1 || res[0].Success || !strings.Contains(res[0].Content, "http://127.0.0.1:1/a2a/acme/hello") {
		t.Fatalf("tool responses %+v", res)
	}
}
