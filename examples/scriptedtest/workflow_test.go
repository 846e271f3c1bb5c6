package scriptedtest

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// refunds is the workflow under test: Clerk asks the person for the order
// number (the chat pauses for the person), looks the order up with the go
// tool refund_order and ends the chat.
func refunds(t *testing.T) *workflow.Workflow {
	t.Helper()
	wf, err := workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:          "refunds",
			VisualAgents:  []string{"Clerk"},
			Orchestration: workflow.Orchestration{InitialAgent: "Clerk", InitialMessage: "I want a refund."},
		},
		Agents: []*workflow.Agent{{Name: "Clerk", SystemMessage: "Ask for the order number, then refund it with refund_order."}},
		Handoffs: []*workflow.HandoffRule{
			{SourceAgent: "Clerk", HandoffType: workflow.HandoffCondition, Condition: "${refund_done} == True", TransitionTarget: workflow.TerminateTarget},
			{SourceAgent: "Clerk", HandoffType: workflow.HandoffAfterWork, TransitionTarget: workflow.RevertToUserTarget},
		},
		DerivedVariables: []*workflow.DerivedVariable{{
			Name: "refund_done", TriggerType: "tool_called", SourceAgent: "Clerk", TriggerValue: "refund_order",
		}},
		Tools: []*workflow.Tool{{
			Agent: "Clerk", Name: "refund_order", Function: "refund", Description: "Refund an order.",
			ToolType: workflow.AgentTool, Kind: workflow.KindGo,
			Parameters: json.RawMessage(`{"type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"]}`),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return wf
}

// The model's part, one entry per call: ask, then call the tool, then
// confirm.
const script = `{"agents": {"Clerk": [
	{"text": "Which order?"},
	{"tool_calls": [{"name": "refund_order", "arguments": {"number": "42"}}]},
	{"text": "Order 42 is refunded."}
]}}`

func TestRefundAsksThenRefundsOnce(t *testing.T) {
	model, err := scripted.Parse("refunds", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var refunded []string // the orders the Go tool was called for
	refund := tool.MustFunc("refund", "Refund an order.", func(_ context.Context, _ *baton.CallContext, in struct {
		Number string `json:"number"`
	}) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		refunded = append(refunded, in.Number)
		return "refunded " + in.Number, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	rt, err := runtime.Open(ctx, runtime.Config{
		StoreURL: "mem:", Workflows: []*workflow.Workflow{refunds(t)}, Funcs: []baton.Tool{refund},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return model, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	chat := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "refunds")
	// First segment: Clerk asks, and the chat waits for the person.
	texts, end := run(t, chat.Start(ctx, baton.StartOptions{}))
	if end != baton.TypeChatInputRequest || !slices.Equal(texts, []string{"user: I want a refund.", "Clerk: Which order?"}) {
		t.Fatalf("first segment: texts %q, ended with %s", texts, end)
	}
	// Second: the person answers; the tool runs, Clerk confirms, the chat ends.
	texts, end = run(t, chat.Send(ctx, "Order 42."))
	if end != baton.TypeChatRunComplete || texts[0] != "user: Order 42." || texts[len(texts)-1] != "Clerk: Order 42 is refunded." {
		t.Fatalf("second segment: texts %q, ended with %s", texts, end)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(refunded, []string{"42"}) {
		t.Fatalf("refund called for %q, want once for 42", refunded)
	}
}

// run ranges over a run segment and returns its recorded texts ("agent:
// content") and the type of the event that ended it.
func run(t *testing.T, seq func(func(baton.Event, error) bool)) (texts []string, end string) {
	t.Helper()
	for ev, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		end = ev.Type
		if ev.Type == baton.TypeChatText {
			p, err := baton.DecodePayload[baton.TextPayload](&ev)
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, p.Agent+": "+p.Content)
		}
	}
	return texts, end
}
