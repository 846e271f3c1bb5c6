package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateEmbeddedExamples(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"validate"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	want := "ok generator (5 agents, 2 tools)\nok hello (1 agent, 1 tool)\n"
	if stdout.String() != want {
		t.Errorf("output %q, want %q", stdout.String(), want)
	}
}

func TestValidateDirs(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// One workflow folder, then a folder of workflow folders.
	code := run(context.Background(), []string{"validate", "../../workflows/hello", "../../workflows"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	if got := strings.Count(stdout.String(), "ok hello (1 agent, 1 tool)"); got != 2 {
		t.Errorf("output %q", stdout.String())
	}
}

func TestValidateReportsEveryMistake(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "broken")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"workflow.json": `{"orchestration": {"initial_agent": "Alpha", "startup_mode": "Sometimes"}}`,
		"agents.json":   `{"agents": {"Alpha": {"sytem_message": "hi"}}}`,
		"handoffs.json": `{"handoff_rules": [{"source_agent": "Alpha", "handoff_type": "after_work", "transition_target": "TerminateTarget"},]}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"validate", dir, "../../workflows/hello"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	want := `broken/workflow.json:1:46: orchestration.startup_mode: "Sometimes" is not one of AgentDriven, UserDriven
broken/agents.json:1:23: agents.Alpha.sytem_message: unknown field (did you mean system_message?)
broken/handoffs.json:1:116: malformed JSON: invalid character ']' looking for beginning of value
ok hello (1 agent, 1 tool)
`
	if stdout.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", stdout.String(), want)
	}
}

func TestValidateMissingDir(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"validate", filepath.Join(t.TempDir(), "nope")}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "nope") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestValidateRefusesEscapes: baton validate resolves the symbolic links
// under tools/ on disk: hello with its command tool linked to /bin/sh, or
// with an MCP server run from PATH, does not validate.
func TestValidateRefusesEscapes(t *testing.T) {
	copyHello := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "hello")
		if err := os.CopyFS(dir, os.DirFS("../../workflows/hello")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	linked := copyHello(t)
	tool := filepath.Join(linked, "tools", "get_time")
	if err := os.Remove(tool); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/sh", tool); err != nil {
		t.Fatal(err)
	}
	mcp := copyHello(t)
	wf := filepath.Join(mcp, "workflow.json")
	raw, err := os.ReadFile(wf)
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.Replace(raw, []byte(`{`), []byte(`{"mcp_servers": {"sh": {"command": "sh", "args": ["-c", "id"]}},`), 1)
	if err := os.WriteFile(wf, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		linked: "tools/get_time: a symbolic link to /bin/sh, outside the workflow folder",
		mcp:    `mcp_servers.sh.command: "sh" must be a path inside the workflow folder`,
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"validate", dir}, &stdout, &stderr); code != 1 || !strings.Contains(stdout.String()+stderr.String(), want) {
			t.Errorf("validate %s: exit %d: %s%s, want 1 naming %q", dir, code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestValidateConditionMistakes: a condition that does not compile is told
// in the workflow's terms, at its line and column in handoffs.json, with
// the condition shown and a caret under the column.
func TestValidateConditionMistakes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cond")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"workflow.json":          `{"orchestration": {"initial_agent": "Alpha"}}`,
		"agents.json":            `{"agents": {"Alpha": {"system_message": "a"}, "Beta": {"system_message": "b"}}}`,
		"context_variables.json": `{"variables": {"done": {"type": "bool", "default": false}}}`,
		"handoffs.json": `{"handoff_rules": [
  {"source_agent": "Alpha", "target_agent": "Beta", "handoff_type": "condition", "condition": "${done} = True"},
  {"source_agent": "Alpha", "handoff_type": "after_work", "transition_target": "TerminateTarget"},
  {"source_agent": "Beta", "handoff_type": "after_work", "transition_target": "TerminateTarget"}
]}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"validate", dir}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1: %s%s", code, stdout.String(), stderr.String())
	}
	want := `cond/handoffs.json:2:104: handoff_rules[0].condition: at column 9: "=" is not a comparison: write "==" to compare (conditions assign nothing)
    ${done} = True
            ^
`
	if stdout.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", stdout.String(), want)
	}
	if strings.Contains(stdout.String(), "token") || strings.Contains(stdout.String(), "Operator") {
		t.Errorf("expr-lang's internals leak: %s", stdout.String())
	}
}
