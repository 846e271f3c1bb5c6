package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/store/mem"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// goToolWorkflow is a Go-built workflow that runs to its end by itself, its
// agent calling the go tool lookup_order, bound to the function find_order.
func goToolWorkflow(t *testing.T) *workflow.Workflow {
	t.Helper()
	wf, err := workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:          "orders",
			VisualAgents:  []string{"Clerk"},
			Orchestration: workflow.Orchestration{InitialAgent: "Clerk", InitialMessage: "Where is order 42?"},
		},
		Agents: []*workflow.Agent{{Name: "Clerk", SystemMessage: "Find orders."}},
		Handoffs: []*workflow.HandoffRule{{
			SourceAgent: "Clerk", HandoffType: workflow.HandoffAfterWork, TransitionTarget: workflow.TerminateTarget,
		}},
		Tools: []*workflow.Tool{{
			Agent: "Clerk", Name: "lookup_order", Function: "find_order", Description: "Find an order.",
			ToolType: workflow.AgentTool, Kind: workflow.KindGo,
			Parameters: json.RawMessage(`{"type": "object", "properties": {"number": {"type": "string"}}}`),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return wf
}

// memStore is a memory store the test closes.
func memStore(t *testing.T) baton.Store {
	st := mem.New()
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestGoWorkflowWithGoTool: a workflow built in Go, its go tool bound to a
// Go function through Config.Funcs and its model scripted through
// Config.Providers, runs on the memory store and calls the function.
func TestGoWorkflowWithGoTool(t *testing.T) {
	script, err := scripted.Parse("orders", []byte(`{"agents": {"Clerk": [
		{"tool_calls": [{"name": "lookup_order", "arguments": {"number": "42"}}]},
		{"text": "Order 42 has shipped."}
	]}}`))
	if err != nil {
		t.Fatal(err)
	}
	findOrder := tool.MustFunc("find_order", "Find an order.", func(_ context.Context, _ *baton.CallContext, in struct {
		Number string `json:"number"`
	}) (string, error) {
		return "order " + in.Number + " shipped", nil
	})
	rt, err := Open(context.Background(), Config{
		StoreURL: "mem:", Workflows: []*workflow.Workflow{goToolWorkflow(t)}, Funcs: []baton.Tool{findOrder},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return script, nil },
		Logger:    quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	chatID := baton.NewID()
	sub, err := rt.Bus().Subscribe([]string{baton.TypeChatToolResponse, baton.TypeChatRunComplete}, bus.ForChat(chatID), bus.Buffer(64))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := rt.Engine().Start(ctx, baton.Scope{App: "acme", User: "ada"}, "orders", baton.StartOptions{ChatID: chatID}); err != nil {
		t.Fatal(err)
	}
	ev, err := sub.Wait(ctx, func(ev baton.Event) bool { return ev.Type == baton.TypeChatToolResponse })
	if err != nil {
		t.Fatalf("waiting for the tool's response: %v", err)
	}
	if !strings.Contains(string(ev.Payload), "order 42 shipped") {
		t.Errorf("tool response %s, want the Go function's result", ev.Payload)
	}
	if _, err := sub.Wait(ctx, func(ev baton.Event) bool { return ev.Type == baton.TypeChatRunComplete }); err != nil {
		t.Fatalf("waiting for chat.run_complete: %v", err)
	}
}
