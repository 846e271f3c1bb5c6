package workflow_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// FuzzCondition compiles arbitrary conditions and evaluates the ones that
// compile: nothing panics, and an error is either a compile error or a
// clear evaluation error.
func FuzzCondition(f *testing.F) {
	for _, s := range []string{
		"${interview_complete} == True", "${done} and not ${count} > 3", "${name} is not None",
		"len(${items}) == 2 or ${ratio} < 0.5", "${meta}.k == 'v'", "count == 1e3", `"${x}" == 'y'`,
		"${", "(((", "True", "None == None", "${plan} in ['a', 'b']",
	} {
		f.Add(s)
	}
	vars := map[string]any{"done": true, "count": 3.0, "ratio": 0.25, "name": "n", "items": []any{1.0}, "meta": map[string]any{"k": "v"}, "plan": nil, "interview_complete": false}
	f.Fuzz(func(t *testing.T, src string) {
		c, err := workflow.CompileCondition(src, condTypes)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if _, err := c.Eval(vars); err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
		if _, err := c.Eval(nil); err != nil && !strings.HasPrefix(err.Error(), "condition ") {
			t.Fatalf("unclear error %v", err)
		}
	})
}

// fuzzFile replaces one file of the generator example (which uses every
// file) with arbitrary bytes: Load never panics, and either succeeds or
// returns ValidationErrors in which every mistake names its file.
func fuzzFile(f *testing.F, name string) {
	base := fstest.MapFS{}
	err := fs.WalkDir(workflows.FS, "generator", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(workflows.FS, p)
		base[p] = &fstest.MapFile{Data: data, Mode: 0o644}
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	target := path.Join("generator", name)
	f.Add(base[target].Data)
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"agents": {"X": null}}`))
	f.Add([]byte(`{"tools": [null, 1, {"parameters": {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}}]}`))
	f.Add([]byte(`{"structured_outputs": {"models": {"A": {"fields": {"a": {"type": "list[optional[Literal['x', 1, True]]]"}}}}}}`))
	f.Add([]byte(`{"handoff_rules": [{"source_agent": "user", "condition": "${x"}]}`))
	f.Add([]byte("{\"a\":\xff}"))
	f.Add([]byte(`{"tools": [{"agent": "InterviewAgent", "name": "k", "tool_type": "Lifecycle_Tool", "kind": "ui", "trigger": "before_chat", "ui": {"component": "SecretsInput"}, "arguments": {"masked": true, "keys": ["API_KEY"]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{}
		for k, v := range base {
			fsys[k] = v
		}
		fsys[target] = &fstest.MapFile{Data: data, Mode: 0o644}
		w, err := workflow.Load(fsys, "generator")
		if err == nil {
			if w.Name != "generator" || len(w.Agents) == 0 {
				t.Fatalf("loaded an incomplete workflow: %+v", w)
			}
			// A form that says it is masked is a secret form: its answer is
			// sealed, never stored in the clear.
			for _, tl := range w.Tools {
				var args struct {
					Masked any `json:"masked"`
				}
				if json.Unmarshal(tl.Arguments, &args) == nil && args.Masked == true && !tl.IsSecretForm() {
					t.Fatalf("tool %q says masked and loaded as no secret form", tl.Name)
				}
			}
			return
		}
		var ve workflow.ValidationErrors
		if !errors.As(err, &ve) || len(ve) == 0 || !errors.Is(err, baton.ErrInvalid) {
			t.Fatalf("error %T: %v", err, err)
		}
		for _, e := range ve {
			if !strings.HasPrefix(e.File, "generator/") || e.Message == "" {
				t.Fatalf("unclear error %+v", e)
			}
		}
	})
}

func FuzzWorkflowFile(f *testing.F)          { fuzzFile(f, workflow.FileWorkflow) }
func FuzzAgentsFile(f *testing.F)            { fuzzFile(f, workflow.FileAgents) }
func FuzzHandoffsFile(f *testing.F)          { fuzzFile(f, workflow.FileHandoffs) }
func FuzzToolsFile(f *testing.F)             { fuzzFile(f, workflow.FileTools) }
func FuzzContextVariablesFile(f *testing.F)  { fuzzFile(f, workflow.FileContextVariables) }
func FuzzStructuredOutputsFile(f *testing.F) { fuzzFile(f, workflow.FileStructuredOutputs) }
