package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/workflow"
)

// TestOpenRuntime_RefusesAnUnregisteredGoTool: stock baton registers no Go
// functions, so a workflow with a go tool stops `baton serve` at start,
// naming the tool and the workflow, instead of failing at its first chat.
func TestOpenRuntime_RefusesAnUnregisteredGoTool(t *testing.T) {
	wf, err := workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:          "orders",
			Orchestration: workflow.Orchestration{InitialAgent: "Clerk", StartupMode: workflow.UserDriven},
		},
		Agents: []*workflow.Agent{{Name: "Clerk", SystemMessage: "Find orders."}},
		Tools: []*workflow.Tool{{
			Agent: "Clerk", Name: "lookup_order", Function: "find_order", Description: "Find an order.",
			ToolType: workflow.AgentTool, Kind: workflow.KindGo,
			Parameters: json.RawMessage(`{"type": "object"}`),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := wf.WriteDir(filepath.Join(dir, "workflows", "orders")); err != nil {
		t.Fatal(err)
	}
	rt, err := openRuntime(context.Background(), runtimeConfig{
		workflowsDir: filepath.Join(dir, "workflows"), dataDir: dir, maxChats: 10,
		log: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		_ = rt.Close(context.Background())
		t.Fatal("the runtime opened with a go tool whose function is not registered")
	}
	for _, want := range []string{"workflow orders", "tools[0] (lookup_order)", `go function "find_order" is not registered`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}
