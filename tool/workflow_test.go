package tool_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// specs converts a loaded workflow's tools.json entries to Specs, as the
// engine does.
func specs(w *workflow.Workflow) []tool.Spec {
	var out []tool.Spec
	for _, t := range w.Tools {
		s := tool.Spec{
			Agent: t.Agent, Name: t.Name, File: t.File, Function: t.Function, Description: t.Description,
			ToolType: t.ToolType, Kind: t.Kind, Parameters: t.Parameters, TimeoutSeconds: t.TimeoutSeconds,
			SideEffects: t.SideEffects, MaxConcurrency: t.MaxConcurrency, Trigger: t.Trigger, Arguments: t.Arguments,
			URL: t.URL, HeadersFromEnv: t.HeadersFromEnv, Server: t.Server, Tools: t.Tools, Prefix: t.Prefix,
		}
		if t.UI != nil {
			s.UI = tool.UISpec{Component: t.UI.Component, Mode: t.UI.Mode}
		}
		out = append(out, s)
	}
	return out
}

// TestHelloWorkflowTools builds the registry of the example workflow hello
// and calls its command tool.
func TestHelloWorkflowTools(t *testing.T) {
	root := filepath.Join("..", "workflows")
	w, err := workflow.Load(os.DirFS(root), "hello")
	if err != nil {
		t.Fatalf("load hello: %v", err)
	}
	r, err := tool.New(filepath.Join(root, "hello"), specs(w), tool.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts, err := r.Tools(context.Background(), "Greeter")
	if err != nil || len(ts) == 0 {
		t.Fatalf("Greeter's tools: %v, %v", ts, err)
	}
	res := mustCall(t, lookup(t, r, "Greeter", "get_time"), callCtx("t"), `{"tz": "UTC"}`)
	if res.Status != "ok" || !strings.Contains(res.Content, `"tz":"UTC"`) {
		t.Fatalf("get_time = %+v", res)
	}
	if res := mustCall(t, lookup(t, r, "Greeter", "get_time"), callCtx("t"), `{"tz": "../../etc"}`); res.Status != "error" {
		t.Fatalf("get_time with a bad tz = %+v", res)
	}
}
