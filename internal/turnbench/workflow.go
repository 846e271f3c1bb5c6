// Package turnbench measures a production turn of baton against the same
// turn written by hand: the harness behind BenchmarkProductionTurn and
// `baton bench`.
//
// A turn is what a person's message costs in a new chat: the message → the
// model streams a call of the Go tool echo → the tool's result → the model
// streams a 20-word reply → the chat pauses for the person's next message.
// Every variant (a Turner) talks to the same fake OpenAI-compatible model
// (Model) on a real loopback listener, or to a real endpoint:
//
//   - the floor (Floor): the turn written by hand with openai-go, no
//     persistence, no framework;
//   - embedded (Embedded): runtime.Open with a store (SQLite at
//     synchronous=FULL by default, or the memory store), the real
//     llm/openai provider, a new chat per turn, and a consumer of every
//     event built as the server's hub is (one bus subscription, a
//     bus.Fanout by chat, the filtered envelope built per event);
//   - served (Served): the HTTP API and a WebSocket, against a server
//     running in another process (SpawnServer), whose CPU is read there.
//
// Run runs turns with a number in flight and measures CPU (getrusage),
// turns/s, allocations and latency; IdleHeap measures the heap a paused
// chat holds. Results are meant to be read as ratios to the floor measured
// in the same run on the same machine.
package turnbench

import (
	"context"
	"encoding/json"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// WorkflowName is the benchmark workflow's name.
const WorkflowName = "turnbench"

// AgentName is the workflow's one agent.
const AgentName = "Assistant"

// The conversation: the same words in every variant.
const (
	SystemMessage   = "You answer the person. First call the echo tool once with their message, then reply in about twenty words."
	UserMessage     = "What is a baton?"
	EchoDescription = "Echo the text back."
)

// EchoInput is the echo tool's argument object.
type EchoInput struct {
	Text string `json:"text"`
}

// Echo is the Go function tool the workflow's agent calls: it answers the
// text it is given.
var Echo = tool.MustFunc("echo", EchoDescription, func(_ context.Context, _ *baton.CallContext, in EchoInput) (string, error) {
	return in.Text, nil
})

// Workflow returns the benchmark workflow, built in Go: one visual agent
// that may call echo and hands the chat back to the person after its
// reply, so that every turn ends at a pause. model is the model it asks
// for (ModelName for the fake one).
func Workflow(model string) (*workflow.Workflow, error) {
	return workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:         WorkflowName,
			Description:  "The production turn of baton's benchmark: a message, a Go tool call, a streamed 20-word reply, a pause.",
			Version:      "1.0.0",
			VisualAgents: []string{AgentName},
			Orchestration: workflow.Orchestration{
				InitialAgent: AgentName, StartupMode: workflow.UserDriven,
			},
			LLM: workflow.LLMConfig{Model: model},
		},
		Agents: []*workflow.Agent{{Name: AgentName, SystemMessage: SystemMessage}},
		Handoffs: []*workflow.HandoffRule{{
			SourceAgent: AgentName, HandoffType: workflow.HandoffAfterWork, TransitionTarget: workflow.RevertToUserTarget,
		}},
		Tools: []*workflow.Tool{{
			Agent: AgentName, Name: "echo", Function: "echo", Description: EchoDescription,
			ToolType: workflow.AgentTool, Kind: workflow.KindGo,
			Parameters: json.RawMessage(`{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}`),
		}},
	})
}
