package workflow_test

import (
	"errors"
	"flag"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

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
		{workflow.FieldError{File: "g/agents.json", Path: "agents.A.sytem_message", Line: 3, Col: 5, Message: "unknown field"}, "g/agents.json: agents.A.sytem_message: unknown field"},
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
	if err == nil || !strings.HasPrefix(err.Error(), "agents.json: ") {
		t.Errorf("err = %v", err)
	}
}
