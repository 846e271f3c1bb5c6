package workflow_test

import (
	"strings"
	"testing"

	"github.com/batonhq/baton/workflow"
)

var condTypes = map[string]string{
	"done": workflow.TypeBool, "count": workflow.TypeInt, "ratio": workflow.TypeFloat,
	"name": workflow.TypeStr, "items": workflow.TypeList, "meta": workflow.TypeDict, "plan": workflow.TypeAny,
}

func TestConditionEval(t *testing.T) {
	vars := map[string]any{"done": true, "count": float64(3), "ratio": 0.5, "name": "ada", "items": []any{"a", "b"}, "meta": map[string]any{"k": "v"}}
	for _, c := range []struct {
		src  string
		want bool
	}{
		{"${done} == True", true},
		{"${done} == False", false},
		{"${done}", true},
		{"not ${done}", false},
		{"${done} and ${count} > 2", true},
		{"${done} and ${count} >= 4", false},
		{"${count} == 3 or ${name} == 'bob'", true},
		{`${name} == "ada"`, true},
		{"${name} == 'True'", true == false}, // the word inside a string is not translated
		{"${ratio} < 1", true},
		{"${ratio} * 2 == 1", true},
		{"${plan} == None", true},
		{"${plan} is None", true},
		{"${name} is not None", true},
		{"len(${items}) == 2", true},
		{"${meta}.k == 'v'", true},
		{"done && count == 3", true}, // bare names work too
		{"(${count} > 5) or (${done} and not (${name} == ''))", true},
	} {
		cond, err := workflow.CompileCondition(c.src, condTypes)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		got, err := cond.Eval(vars)
		if err != nil || got != c.want {
			t.Errorf("%s = %v, %v; want %v (expr %q)", c.src, got, err, c.want, cond.Expr)
		}
	}
}

func TestConditionMissingVariableIsNone(t *testing.T) {
	cond, err := workflow.CompileCondition("${done} == True", condTypes)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cond.Eval(nil); err != nil || got {
		t.Errorf("Eval(nil) = %v, %v", got, err)
	}
	// An int variable holding a JSON number (float64) or a Go int compares the same.
	cond, _ = workflow.CompileCondition("${count} > 2", condTypes)
	for _, v := range []any{3, float64(3), int64(3)} {
		if got, err := cond.Eval(map[string]any{"count": v}); err != nil || !got {
			t.Errorf("count=%T: %v, %v", v, got, err)
		}
	}
	// A value of the wrong type at run time is an error, not a panic.
	cond, _ = workflow.CompileCondition("${done}", condTypes)
	if _, err := cond.Eval(map[string]any{"done": "yes"}); err == nil {
		t.Error("a string where a bool is expected was accepted")
	}
}

func TestConditionErrors(t *testing.T) {
	// Each says what is wrong in the workflow's terms (${name}, str, no
	// expr-lang token names) and, when it is at one place, its column.
	for _, c := range []struct{ src, want string }{
		{"", "empty condition"},
		{"${missing} == True", "at column 1: unknown variable ${missing}"},
		{"${done} and missing == True", "at column 13: unknown variable missing"},
		{"${count}", "must be a bool expression, but it is int"},
		{"${name}", "must be a bool expression, but it is str"},
		{"${count} + 1", "must be a bool expression, but it is int"},
		{"${name} + 1 == 2", `at column 9: "+" cannot be used between str and int`},
		{"${done} = True", `at column 9: "=" is not a comparison: write "==" to compare (conditions assign nothing)`},
		{"${done} == True)", `at column 16: unexpected ")"`},
		{"${name} == 'é' = True", `at column 17: "=" is not a comparison: write "==" to compare (conditions assign nothing)`}, // a byte column, whatever expr-lang counts
		{"${done} ${count}", "at column 9: unexpected ${count}: an operator (==, and, or …) is missing before it"},
		{"${done} and and True", `at column 13: unexpected "and"`},
		{"${done} == (True", "at column 17: the condition ends too early: a value, an operand or a closing bracket is missing"},
		{"${done == True", "at column 1: ${ without its closing }"},
		{"${done ok} == True", "at column 1: ${done ok} is not a variable name"},
		{"${na-me}", "at column 1: ${na-me} is not a variable name"},
		{"${done} == 'open", "at column 12: string not terminated"},
		{"${x", "at column 1: ${ without its closing }"},
	} {
		_, err := workflow.CompileCondition(c.src, condTypes)
		if err == nil {
			t.Errorf("%q compiled", c.src)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("%q: error %q, want %q", c.src, err, c.want)
		}
	}
}

func TestRenderSystemMessage(t *testing.T) {
	w := loadFixture(t, "types")
	a := w.Agent("Writer")
	for _, c := range []struct {
		vars map[string]any
		want string
	}{
		{map[string]any{"topic": "a poem"}, "Write a poem."},
		{map[string]any{"topic": 3.5}, "Write 3.5."},
		{map[string]any{"topic": []any{"x"}}, `Write ["x"].`},
		{nil, "Write ."},
	} {
		if got := a.RenderSystemMessage(c.vars); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestInitialContext(t *testing.T) {
	w := loadFixture(t, "types")
	if vars := w.InitialContext(); vars["topic"] != "a report" {
		t.Fatalf("vars = %v", vars)
	}
	gen := loadExampleWorkflow(t, "hello")
	if vars := gen.InitialContext(); vars["default_tz"] != "UTC" || vars["time_told"] != false {
		t.Fatalf("vars = %v", vars)
	}
}

func TestTemplateErrors(t *testing.T) {
	// Escapes and unknown variables are checked at load; see testdata/invalid too.
	w := loadFixture(t, "base")
	if got := w.Agent("Alpha").RenderSystemMessage(nil); !strings.Contains(got, "Alpha") {
		t.Errorf("render %q", got)
	}
}
