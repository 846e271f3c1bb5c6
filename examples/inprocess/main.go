// Command inprocess runs one chat of a workflow built in Go, in this
// process, on the memory store: its agent calls a Go function tool, and the
// program prints the model's text as it streams.
//
// The model is scripted (it runs offline); give the workflow an llm config
// and set OPENAI_API_KEY, with Config.Providers left nil, to talk to a
// real one.
//
//	go run ./examples/inprocess
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "inprocess:", err)
		os.Exit(1)
	}
}

// orders is the workflow: one agent, Clerk, that looks an order up with the
// go tool lookup_order and says where it is.
func orders() (*workflow.Workflow, error) {
	return workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:          "orders",
			VisualAgents:  []string{"Clerk"},
			Orchestration: workflow.Orchestration{InitialAgent: "Clerk", InitialMessage: "Where is order 42?"},
		},
		Agents: []*workflow.Agent{{Name: "Clerk", SystemMessage: "You find orders with lookup_order and say where they are."}},
		Handoffs: []*workflow.HandoffRule{{
			SourceAgent: "Clerk", HandoffType: workflow.HandoffAfterWork, TransitionTarget: workflow.TerminateTarget,
		}},
		Tools: []*workflow.Tool{{
			Agent: "Clerk", Name: "lookup_order", Function: "find_order", Description: "Find an order by its number.",
			ToolType: workflow.AgentTool, Kind: workflow.KindGo,
			Parameters: json.RawMessage(`{"type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"]}`),
		}},
	})
}

// findOrder is the Go function the workflow's lookup_order tool is bound
// to, by the name find_order.
var findOrder = tool.MustFunc("find_order", "Find an order by its number.",
	func(_ context.Context, _ *baton.CallContext, in struct {
		Number string `json:"number"`
	}) (string, error) {
		return "order " + in.Number + ": shipped on Monday, arrives Thursday", nil
	})

// script is what the scripted model says: a tool call, then the answer.
const script = `{"agents": {"Clerk": [
	{"tool_calls": [{"name": "lookup_order", "arguments": {"number": "42"}}]},
	{"text": "Order 42 shipped on Monday and arrives on Thursday."}
]}}`

func run(ctx context.Context) error {
	wf, err := orders()
	if err != nil {
		return err
	}
	model, err := scripted.Parse("orders", []byte(script))
	if err != nil {
		return err
	}
	rt, err := runtime.Open(ctx, runtime.Config{
		StoreURL:  "mem:", // in memory: lost when the process exits
		Workflows: []*workflow.Workflow{wf},
		Funcs:     []baton.Tool{findOrder},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return model, nil },
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))

	chat := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "orders")
	for ev, err := range chat.Start(ctx, baton.StartOptions{}) {
		if err != nil {
			return err
		}
		switch ev.Type {
		case baton.TypeStreamText: // a delta of the text being streamed
			var d struct {
				Delta string `json:"delta"`
			}
			if err := json.Unmarshal(ev.Payload, &d); err != nil {
				return err
			}
			fmt.Print(d.Delta)
		case baton.TypeChatText: // the recorded text: the streamed one ends here
			p, err := baton.DecodePayload[baton.TextPayload](&ev)
			if err != nil {
				return err
			}
			if p.Agent == "Clerk" && !p.ToolOnly {
				fmt.Println()
			}
		case baton.TypeChatToolResponse:
			p, err := baton.DecodePayload[baton.ToolResponsePayload](&ev)
			if err != nil {
				return err
			}
			fmt.Printf("[%s -> %s]\n", p.ToolName, p.Content)
		case baton.TypeChatRunComplete:
			p, err := baton.DecodePayload[baton.RunCompletePayload](&ev)
			if err != nil {
				return err
			}
			fmt.Println("run complete:", p.Status)
		case baton.TypeChatError:
			p, _ := baton.DecodePayload[baton.ErrorPayload](&ev)
			return fmt.Errorf("chat error: %s", p.Message)
		}
	}
	return nil
}
