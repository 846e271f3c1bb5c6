package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// ordersWorkflow is a Go-built workflow whose agent has a go tool bound to
// the function find_order.
func ordersWorkflow(t *testing.T) *workflow.Workflow {
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

func findOrderFunc(name string) baton.Tool {
	return tool.MustFunc(name, "Find an order.", func(context.Context, *baton.CallContext, struct {
		Number string `json:"number"`
	}) (string, error) {
		return "order 42 shipped", nil
	})
}

// newEngineWith makes an engine of wf with the given Go functions, on its
// own store and bus, closed when the test ends.
func newEngineWith(t *testing.T, wf *workflow.Workflow, funcs ...baton.Tool) (*engine.Engine, error) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "baton.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b := bus.New(bus.WithLogger(discardLogger()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b,
		Workflows: []*workflow.Workflow{wf}, Logger: discardLogger(),
		Providers: func(*workflow.Workflow) (baton.Provider, error) {
			return nil, errors.New("no model in this test")
		},
		ToolOptions: []tool.Option{tool.WithFuncs(funcs...)},
	})
	if eng != nil {
		t.Cleanup(func() { _ = eng.Close() })
	}
	return eng, err
}

// TestNewRefusesAMisnamedGoTool: a go tool whose function is registered
// under another name stops the engine at construction, not at the
// workflow's first chat, with the tool and the workflow named.
func TestNewRefusesAMisnamedGoTool(t *testing.T) {
	wf := ordersWorkflow(t)
	_, err := newEngineWith(t, wf, findOrderFunc("findOrder"))
	if err == nil {
		t.Fatal("engine.New accepted a workflow whose go function is not registered")
	}
	for _, want := range []string{"workflow orders", "tools[0] (lookup_order)", `go function "find_order" is not registered`, `did you mean "findOrder"?`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if baton.ErrorCode(err) != baton.EINVALID {
		t.Errorf("error code %s, want %s", baton.ErrorCode(err), baton.EINVALID)
	}
	if _, err := newEngineWith(t, wf, findOrderFunc("find_order")); err != nil {
		t.Fatalf("with the function registered under its name: %v", err)
	}
}

// TestGoBuiltWorkflowRunsItsGoTool: a workflow defined in Go, written out
// with WriteDir, runs in the engine and calls the Go function its go tool
// is bound to.
func TestGoBuiltWorkflowRunsItsGoTool(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "orders")
	if err := ordersWorkflow(t).WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	script := `{"agents": {"Clerk": [
		{"tool_calls": [{"name": "lookup_order", "arguments": {"number": "42"}}]},
		{"text": "Order 42 has shipped."}
	]}}`
	if err := os.WriteFile(filepath.Join(dir, "scripted.json"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, withWorkflows(root), withTools(tool.WithFuncs(findOrderFunc("find_order"))))
	id := start(t, h, "orders")
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("chat %s, want completed:\n%v", c.Status, summarize(h.events(id)))
	}
	var result string
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolResponse {
			result = string(ev.Payload)
		}
	}
	if !strings.Contains(result, "order 42 shipped") {
		t.Fatalf("tool response %s, want the Go function's result", result)
	}
}
