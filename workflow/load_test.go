package workflow_test

import (
	"errors"
	"flag"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

var update = flag.Bool("update", false, "rewrite the expected files under testdata")

// TestInvalid loads each broken folder under testdata/invalid and compares
// the whole error text with the folder's expected.txt.
func TestInvalid(t *testing.T) {
	fsys := os.DirFS("testdata/invalid")
	entries, err := os.ReadDir("testdata/invalid")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 20 {
		t.Fatalf("only %d invalid fixtures", len(entries))
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			w, err := workflow.Load(fsys, e.Name())
			if err == nil {
				t.Fatalf("loaded %s without error", w.Name)
			}
			var ve workflow.ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("error %T is not ValidationErrors: %v", err, err)
			}
			if !errors.Is(err, baton.ErrInvalid) {
				t.Errorf("errors.Is(err, baton.ErrInvalid) = false")
			}
			if code := baton.ErrorCode(err); code != baton.EINVALID {
				t.Errorf("baton.ErrorCode = %q, want %q", code, baton.EINVALID)
			}
			for _, fe := range ve {
				if !strings.HasPrefix(fe.File, e.Name()+"/") || fe.Message == "" {
					t.Errorf("incomplete FieldError %+v", fe)
				}
			}
			got := err.Error() + "\n"
			wantFile := filepath.Join("testdata/invalid", e.Name(), "expected.txt")
			if *update {
				if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("errors differ\n got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestValidFixtures(t *testing.T) {
	ws, err := workflow.LoadAll(os.DirFS("testdata/valid"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	if got := strings.Join(names, ","); got != "base,seeds,types" {
		t.Fatalf("loaded %s", got)
	}
}

// TestStallTimeouts: the workflow's first-token and idle timeouts apply to
// every agent, and an agent's llm block overrides what it sets.
func TestStallTimeouts(t *testing.T) {
	w, err := workflow.Load(os.DirFS("testdata/valid/base"), ".")
	if err != nil {
		t.Fatal(err)
	}
	if a := w.LLMFor("Alpha"); a.FirstTokenTimeout() != 20*time.Second || a.IdleTimeout() != 5*time.Second {
		t.Errorf("Alpha: first token %v, idle %v", a.FirstTokenTimeout(), a.IdleTimeout())
	}
	if b := w.LLMFor("Beta"); b.FirstTokenTimeout() != 20*time.Second || b.IdleTimeout() != 2500*time.Millisecond {
		t.Errorf("Beta: first token %v, idle %v", b.FirstTokenTimeout(), b.IdleTimeout())
	}
}

func TestSeeds(t *testing.T) {
	w, err := workflow.Load(os.DirFS("testdata/valid"), "seeds")
	if err != nil {
		t.Fatal(err)
	}
	ctx := w.Agent("ContextAgent")
	if !ctx.AutoToolMode || !ctx.IsStructuredCapable() || !ctx.IsToolAgent() || !ctx.IsVisual() {
		t.Errorf("ContextAgent flags wrong: %+v", ctx)
	}
	// A UI_Tool without kind is of kind ui; its name defaults to function.
	at := ctx.AutoTool()
	if at == nil || at.Name != "action_plan" || at.Kind != workflow.KindUI || at.UI.Component != "ActionPlan" || at.UI.Mode != workflow.UIArtifact {
		t.Fatalf("auto tool = %+v", at)
	}
	if m := w.OutputModel("ContextAgent"); m == nil || m.Name != "ActionPlanCall" || m.Strict() {
		t.Errorf("ActionPlanCall has a dict field and must not be strict: %+v", m)
	}
	if m := w.OutputModel("WorkflowStrategyAgent"); m == nil || !m.Strict() {
		t.Errorf("WorkflowStrategyOutput should be strict")
	}
	// The seed's after_work rule with a condition.
	rules := w.HandoffRules("InterviewAgent")
	if len(rules) != 1 || rules[0].Compiled == nil {
		t.Fatalf("rules = %+v", rules)
	}
	for _, c := range []struct {
		done bool
		want bool
	}{{false, false}, {true, true}} {
		got, err := rules[0].Applies(map[string]any{"interview_complete": c.done})
		if err != nil || got != c.want {
			t.Errorf("Applies(%v) = %v, %v", c.done, got, err)
		}
	}
	if w.Config.Orchestration.StartupMode != workflow.UserDriven {
		t.Errorf("startup mode %q", w.Config.Orchestration.StartupMode)
	}
}

func TestLoadAllEmbedded(t *testing.T) {
	ws, err := workflow.LoadAll(workflows.FS)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].Name != "generator" || ws[1].Name != "hello" {
		t.Fatalf("examples = %v", ws)
	}
}

func TestLoadAllCollectsErrorsOfEveryFolder(t *testing.T) {
	ws, err := workflow.LoadAll(os.DirFS("testdata/invalid"))
	if len(ws) != 0 {
		t.Errorf("loaded %d invalid workflows", len(ws))
	}
	var ve workflow.ValidationErrors
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v", err)
	}
	folders := map[string]bool{}
	for _, fe := range ve {
		folders[path.Dir(fe.File)] = true
	}
	entries, _ := os.ReadDir("testdata/invalid")
	if len(folders) != len(entries) {
		t.Errorf("errors from %d folders, want %d", len(folders), len(entries))
	}
}

func TestFieldErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    workflow.FieldError
		want string
	}{
		{workflow.FieldError{File: "g/agents.json", Path: "agents.A.sytem_message", Line: 3, Col: 5, Message: "unknown field"}, "g/agents.json:3:5: agents.A.sytem_message: unknown field"},
		{workflow.FieldError{File: "g/agents.json", Path: "agents.A.sytem_message", Message: "unknown field"}, "g/agents.json: agents.A.sytem_message: unknown field"},
		{workflow.FieldError{File: "g/agents.json", Line: 3, Col: 5, Message: "malformed JSON: x"}, "g/agents.json:3:5: malformed JSON: x"},
		{workflow.FieldError{File: "g/agents.json", Message: "missing file"}, "g/agents.json: missing file"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestPositions(t *testing.T) {
	_, err := workflow.Load(os.DirFS("testdata/invalid"), "unknown_field")
	var ve workflow.ValidationErrors
	if !errors.As(err, &ve) || len(ve) != 1 {
		t.Fatalf("err = %v", err)
	}
	// agents.json is written by json.dumps with indent 2: the key is on line 5.
	if ve[0].Line != 5 || ve[0].Col != 7 {
		t.Errorf("position = %d:%d, want 5:7", ve[0].Line, ve[0].Col)
	}
}

// TestDirectoryAsWorkflowRoot loads a workflow whose folder is the root of
// the file system (Load(fsys, ".")): its name comes from workflow.json and
// error paths have no folder.
func TestDirectoryAsWorkflowRoot(t *testing.T) {
	w, err := workflow.Load(os.DirFS("testdata/valid/base"), ".")
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "base" {
		t.Errorf("name = %q", w.Name)
	}
	_, err = workflow.Load(os.DirFS("testdata/invalid/wrong_type"), ".")
	if err == nil || !strings.HasPrefix(err.Error(), "agents.json:5:7: ") {
		t.Errorf("err = %v", err)
	}
}

func TestToolKinds(t *testing.T) {
	fsys := fstest.MapFS{
		"k/workflow.json": {Data: []byte(`{"orchestration": {"initial_agent": "A"}, "mcp_servers": {"ev": {"command": "tools/everything", "args": ["stdio"]}, "remote": {"url": "https://mcp.example.com/mcp", "headers_from_env": {"Authorization": "MCP_TOKEN"}}}}`)},
		"k/agents.json":   {Data: []byte(`{"agents": {"A": {"system_message": "hi", "tools": ["shared"]}, "B": {"system_message": "b"}}}`)},
		"k/handoffs.json": {Data: []byte(`{"handoff_rules": [{"source_agent": "A", "target_agent": "B", "handoff_type": "llm", "description": "to B"}]}`)},
		"k/tools.json": {Data: []byte(`{"tools": [
			{"agent": "A", "name": "hook", "kind": "http", "tool_type": "Agent_Tool", "url": "https://${HOOK_HOST}/x", "headers": {"X-Team": "${TEAM}"}, "headers_from_env": {"Authorization": "HOOK_TOKEN"}, "side_effects": true},
			{"agent": "A", "kind": "mcp", "tool_type": "Agent_Tool", "server": "ev", "tools": ["echo", "get-sum"], "prefix": "ev_"},
			{"agent": "A", "kind": "mcp", "tool_type": "Agent_Tool", "server": "remote"},
			{"agent": "B", "name": "shared", "function": "shared", "kind": "go", "tool_type": "Agent_Tool", "max_concurrency": 2},
			{"agent": "B", "name": "run", "file": "run.py", "kind": "command", "tool_type": "Agent_Tool", "env": ["PYTHONPATH"]},
			{"name": "audit", "function": "audit", "kind": "go", "tool_type": "Lifecycle_Tool", "trigger": "after_agent"},
			{"name": "hello", "function": "hello", "kind": "go", "tool_type": "Lifecycle_Tool", "trigger": "before_chat"}
		]}`)},
		"k/tools/run.py":     {Data: []byte("print('{}')\n"), Mode: 0o755},
		"k/tools/everything": {Data: []byte("#!/bin/sh\nexec npx -y @modelcontextprotocol/server-everything \"$@\"\n"), Mode: 0o755},
	}
	w, err := workflow.Load(fsys, "k")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range w.ToolsOf("A") {
		names = append(names, tl.Name+":"+tl.Kind)
	}
	if got := strings.Join(names, ","); got != "hook:http,:mcp,:mcp,shared:go" {
		t.Errorf("tools of A = %s", got)
	}
	if got := w.LifecycleTools(workflow.AfterAgent, "B"); len(got) != 1 || got[0].Name != "audit" {
		t.Errorf("after_agent tools of B = %+v", got)
	}
	if got := w.LifecycleTools(workflow.BeforeChat, ""); len(got) != 1 || got[0].Name != "hello" {
		t.Errorf("before_chat tools = %+v", got)
	}
	if r := w.TransferRules("A"); len(r) != 1 || r[0].TransitionTarget != workflow.AgentTarget {
		t.Errorf("transfer rules = %+v", r)
	}
	if w.Agent("A").IsToolAgent() || w.Agent("A").IsVisual() {
		t.Errorf("A has no UI tool and is not visual")
	}
	if got := w.LLMFor("A"); got.Model != "" || w.MaxTurns() != workflow.DefaultMaxTurns {
		t.Errorf("defaults: %+v %d", got, w.MaxTurns())
	}
}

// TestConditionErrorPosition: a condition's mistake is reported at its
// line and column in handoffs.json, escapes in the JSON string counted as
// the characters they stand for, with the ConditionError kept.
func TestConditionErrorPosition(t *testing.T) {
	const line2 = `  {"source_agent": "A", "target_agent": "B", "handoff_type": "condition", "condition": "${name} == \"a\u00e9\" = True"},`
	fsys := fstest.MapFS{
		"c/workflow.json":          {Data: []byte(`{"orchestration": {"initial_agent": "A"}}`)},
		"c/agents.json":            {Data: []byte(`{"agents": {"A": {"system_message": "a"}, "B": {"system_message": "b"}}}`)},
		"c/context_variables.json": {Data: []byte(`{"variables": {"name": {"type": "str", "default": ""}}}`)},
		"c/handoffs.json": {Data: []byte("{\"handoff_rules\": [\n" + line2 + "\n" +
			`  {"source_agent": "A", "handoff_type": "after_work", "transition_target": "TerminateTarget"},` + "\n" +
			`  {"source_agent": "B", "handoff_type": "after_work", "transition_target": "TerminateTarget"}` + "\n]}")},
	}
	_, err := workflow.Load(fsys, "c")
	var ve workflow.ValidationErrors
	if !errors.As(err, &ve) || len(ve) != 1 {
		t.Fatalf("err = %v", err)
	}
	fe := ve[0]
	wantCol := strings.Index(line2, `" = True`) + 3 // the "=" after the escaped string
	if fe.Line != 2 || fe.Col != wantCol {
		t.Errorf("at %d:%d, want 2:%d (%v)", fe.Line, fe.Col, wantCol, fe)
	}
	var ce *workflow.ConditionError
	if !errors.As(fe, &ce) || ce.Column != 18 || !strings.Contains(ce.Message, `"=" is not a comparison`) {
		t.Errorf("ConditionError %+v", ce)
	}
}
