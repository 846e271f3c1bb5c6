package workflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// sameDefinition fails t when a and b do not define the same workflow,
// showing the first file that differs.
func sameDefinition(t *testing.T, what string, a, b *workflow.Workflow) {
	t.Helper()
	da, db := a.Definition(), b.Definition()
	da.FS, db.FS, da.Dir, db.Dir = nil, nil, "", ""
	if a.Name == b.Name && reflect.DeepEqual(da, db) {
		return
	}
	fa, errA := a.Files()
	fb, errB := b.Files()
	if errA != nil || errB != nil {
		t.Fatalf("%s: not equal, and Files failed: %v, %v", what, errA, errB)
	}
	for _, name := range []string{workflow.FileWorkflow, workflow.FileAgents, workflow.FileHandoffs, workflow.FileTools, workflow.FileContextVariables, workflow.FileStructuredOutputs} {
		if string(fa[name]) != string(fb[name]) {
			t.Fatalf("%s: %s differs:\n%s\nvs\n%s", what, name, fa[name], fb[name])
		}
	}
	t.Fatalf("%s: names %q and %q; definitions differ:\n%#v\nvs\n%#v", what, a.Name, b.Name, da, db)
}

// roundTrip writes w out and loads it back.
func roundTrip(t *testing.T, w *workflow.Workflow) *workflow.Workflow {
	t.Helper()
	root := t.TempDir()
	if err := w.WriteDir(filepath.Join(root, w.Name)); err != nil {
		t.Fatal(err)
	}
	back, err := workflow.Load(os.DirFS(root), w.Name)
	if err != nil {
		t.Fatalf("%s written out does not load back: %v", w.Name, err)
	}
	return back
}

// TestWriteDirRoundTripsEveryExample loads every example and test workflow,
// writes it out as six files and loads it back: the definitions are equal.
func TestWriteDirRoundTripsEveryExample(t *testing.T) {
	roots := []string{
		"../workflows", "../engine/testdata/workflows", "../server/testdata/workflows", "testdata/valid",
		"../engine/testdata/inbox", "../engine/testdata/llmcond", "../server/testdata/policy",
		"../e2e/testdata/workflows", "../bus/natsbridge/testdata/workflows",
	}
	n := 0
	for _, root := range roots {
		wfs, err := workflow.LoadAll(os.DirFS(root))
		if err != nil {
			t.Fatalf("%s: %v", root, err)
		}
		if len(wfs) == 0 {
			t.Fatalf("%s: no workflow", root)
		}
		for _, w := range wfs {
			t.Run(root+"/"+w.Name, func(t *testing.T) {
				sameDefinition(t, "load → write → load", w, roundTrip(t, w))
			})
			n++
		}
	}
	if n < 27 {
		t.Fatalf("round-tripped %d workflows, want every example and test workflow (27)", n)
	}
}

// TestDefinitionEqualityIsNotVacuous checks that sameDefinition's
// comparison sees a change deep in a definition.
func TestDefinitionEqualityIsNotVacuous(t *testing.T) {
	w := loadExampleWorkflow(t, "hello")
	d := w.Definition()
	d.Tools[0].Parameters = json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}}}`)
	changed, err := workflow.Build(d)
	if err != nil {
		t.Fatal(err)
	}
	da, db := w.Definition(), changed.Definition()
	da.FS, db.FS = nil, nil
	if reflect.DeepEqual(da, db) {
		t.Fatal("a changed parameter schema compares equal")
	}
}

func ptr[T any](v T) *T { return &v }

// helloDefinition is workflows/hello written in Go.
func helloDefinition() workflow.Definition {
	return workflow.Definition{
		Config: workflow.Config{
			Name:         "hello",
			Description:  "The smallest complete workflow: one agent calls a command tool, answers, and the chat ends. It needs no input, so it is every smoke test's workflow.",
			Version:      "1.0.0",
			VisualAgents: []string{"Greeter"},
			Orchestration: workflow.Orchestration{
				InitialAgent:   "Greeter",
				InitialMessage: "What time is it in UTC?",
				MaxTurns:       5,
			},
			LLM: workflow.LLMConfig{
				Model: "gpt-4o-mini", Temperature: ptr(0.2), MaxTokens: 512, TimeoutSeconds: 60,
				CacheSeed: ptr[int64](42), BaseURLEnv: "OPENAI_BASE_URL", APIKeyEnv: "OPENAI_API_KEY",
			},
			Pricing: map[string]workflow.Price{"gpt-4o-mini": {Input: 0.15, Output: 0.6, CachedInput: 0.075}},
		},
		Agents: []*workflow.Agent{{
			Name:                    "Greeter",
			Description:             "Greets the person and tells the time.",
			SystemMessage:           "You are Greeter, a friendly assistant. When asked for the time, call get_time with the time zone (default ${default_tz}), then answer in one short sentence that includes the time.",
			MaxConsecutiveAutoReply: 3,
		}},
		Handoffs: []*workflow.HandoffRule{{
			SourceAgent: "Greeter", HandoffType: workflow.HandoffAfterWork,
			TransitionTarget: workflow.TerminateTarget, Description: "The greeting is the whole chat.",
		}},
		Tools: []*workflow.Tool{{
			Agent: "Greeter", Name: "get_time", File: "get_time",
			Description: "Return the current date and time in a time zone.",
			ToolType:    workflow.AgentTool, Kind: workflow.KindCommand,
			Parameters: json.RawMessage(`{"type": "object",
				"properties": {"tz": {"type": "string", "description": "An IANA time zone such as UTC or Europe/Paris.", "pattern": "^[A-Za-z0-9_+/-]{1,64}$"}},
				"required": ["tz"], "additionalProperties": false}`),
			TimeoutSeconds: 5,
		}},
		Variables: []*workflow.Variable{{
			Name: "default_tz", Type: workflow.TypeStr, Default: "UTC", ClientSettable: true,
			Description: "The time zone Greeter uses when the person names none.",
		}},
		DerivedVariables: []*workflow.DerivedVariable{{
			Name: "time_told", TriggerType: workflow.ToolCalled, SourceAgent: "Greeter", TriggerValue: "get_time",
			Description: "True once Greeter has looked at the clock.",
		}},
		FS:  workflows.FS,
		Dir: "hello",
	}
}

// TestBuildHelloEqualsLoadedHello builds workflows/hello in Go: it equals
// the loaded folder, and written out and loaded back it is still equal.
func TestBuildHelloEqualsLoadedHello(t *testing.T) {
	built, err := workflow.Build(helloDefinition())
	if err != nil {
		t.Fatal(err)
	}
	loaded := loadExampleWorkflow(t, "hello")
	sameDefinition(t, "Go-built hello vs workflows/hello", built, loaded)
	sameDefinition(t, "Go-built hello → write → load", built, roundTrip(t, built))
	if built.Tool("get_time").Schema == nil || built.InitialAgent() == nil || !built.IsVisual("Greeter") {
		t.Fatal("a built workflow is not compiled and indexed as a loaded one")
	}
}

// TestBuildCopiesTheDefinition: changing a Definition after Build leaves the
// workflow as it was built.
func TestBuildCopiesTheDefinition(t *testing.T) {
	def := helloDefinition()
	built, err := workflow.Build(def)
	if err != nil {
		t.Fatal(err)
	}
	def.Agents[0].SystemMessage = "changed"
	def.Config.VisualAgents[0] = "Other"
	*def.Config.LLM.Temperature = 1
	if a := built.Agent("Greeter"); a == nil || a.SystemMessage == "changed" || !built.IsVisual("Greeter") || *built.Config.LLM.Temperature != 0.2 {
		t.Fatal("the built workflow shares memory with its Definition")
	}
}

// TestBuildInvalidGetsTheMessagesOfItsJSONTwin: a mistake in a Go
// definition is reported with the message the same mistake gets in the
// files.
func TestBuildInvalidGetsTheMessagesOfItsJSONTwin(t *testing.T) {
	cases := map[string]func(d *workflow.Definition){
		"unknown handoff target": func(d *workflow.Definition) {
			d.Handoffs[0].TransitionTarget = workflow.AgentTarget
			d.Handoffs[0].TargetAgent = "Greeterr"
		},
		"bad variable default": func(d *workflow.Definition) { d.Variables[0].Default = 3 },
		"go tool without function": func(d *workflow.Definition) {
			d.Tools[0].Kind, d.Tools[0].File = workflow.KindGo, ""
		},
		"system message unknown variable": func(d *workflow.Definition) {
			d.Agents[0].SystemMessage += " ${nope}"
		},
		"derived variable unknown tool": func(d *workflow.Definition) { d.DerivedVariables[0].TriggerValue = "get_tim" },
		"temperature out of range":      func(d *workflow.Definition) { *d.Config.LLM.Temperature = 3 },
		"several at once": func(d *workflow.Definition) {
			d.Config.Orchestration.StartupMode = "Whenever"
			d.Tools[0].ToolType = "Agent_Tol"
			d.Variables[0].Type = "string"
		},
	}
	for name, mistake := range cases {
		t.Run(name, func(t *testing.T) {
			def := helloDefinition()
			mistake(&def)
			_, goErr := workflow.Build(def)
			if goErr == nil {
				t.Fatal("Build accepted an invalid definition")
			}
			if !errors.Is(goErr, baton.ErrInvalid) {
				t.Fatalf("Build's error %v does not match baton.ErrInvalid", goErr)
			}
			// The JSON twin: the definition's files, written by hand as
			// the valid workflow's files with the same mistake.
			// The same messages, but only the files have lines and
			// columns: a definition made in Go has none to name.
			jsonErr := loadTwin(t, def)
			if goErr.Error() != withoutPositions(jsonErr.Error()) {
				t.Fatalf("Go definition:\n%v\nJSON files:\n%v", goErr, jsonErr)
			}
		})
	}
}

// withoutPositions drops the LINE:COL after each file name of an error
// text.
func withoutPositions(s string) string { return filePosition.ReplaceAllString(s, "$1:") }

var filePosition = regexp.MustCompile(`(\.json):\d+:\d+:`)

// loadTwin writes the files of the valid hello, applies def's mistake by
// re-encoding the changed parts, and loads them.
func loadTwin(t *testing.T, def workflow.Definition) error {
	t.Helper()
	valid, err := workflow.Build(helloDefinition())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "hello")
	if err := valid.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	patch := func(file string, edit func(m map[string]any)) {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		data, err = json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obj := func(v any) map[string]any { return v.(map[string]any) }
	at := func(v any, i int) map[string]any { return v.([]any)[i].(map[string]any) }
	patch(workflow.FileWorkflow, func(m map[string]any) {
		obj(m["orchestration"])["startup_mode"] = def.Config.Orchestration.StartupMode
		obj(m["llm"])["temperature"] = *def.Config.LLM.Temperature
	})
	patch(workflow.FileAgents, func(m map[string]any) {
		obj(obj(m["agents"])["Greeter"])["system_message"] = def.Agents[0].SystemMessage
	})
	patch(workflow.FileHandoffs, func(m map[string]any) {
		r := at(m["handoff_rules"], 0)
		r["transition_target"] = def.Handoffs[0].TransitionTarget
		if def.Handoffs[0].TargetAgent != "" {
			r["target_agent"] = def.Handoffs[0].TargetAgent
		}
	})
	patch(workflow.FileTools, func(m map[string]any) {
		tl := at(m["tools"], 0)
		tl["kind"], tl["tool_type"] = def.Tools[0].Kind, def.Tools[0].ToolType
		if def.Tools[0].File == "" {
			delete(tl, "file")
		}
	})
	patch(workflow.FileContextVariables, func(m map[string]any) {
		v := obj(obj(m["variables"])["default_tz"])
		v["default"], v["type"] = def.Variables[0].Default, def.Variables[0].Type
		at(m["derived_variables"], 0)["trigger_value"] = def.DerivedVariables[0].TriggerValue
	})
	_, err = workflow.Load(os.DirFS(root), "hello")
	if err == nil {
		t.Fatal("the JSON twin of an invalid definition loads")
	}
	return err
}

// TestBuildReportsGoOnlyMistakes: what JSON cannot say (a nil agent, two
// agents of one name, a field missing from FieldOrder) is an error too.
func TestBuildReportsGoOnlyMistakes(t *testing.T) {
	def := helloDefinition()
	def.Agents = append(def.Agents, def.Agents[0], nil)
	def.Models = []*workflow.Model{{Name: "Out", Fields: map[string]*workflow.Field{"a": {Type: "str"}, "b": {Type: "int"}}, FieldOrder: []string{"a"}}}
	_, err := workflow.Build(def)
	for _, want := range []string{
		`hello/agents.json: agents.Greeter: duplicate agent name "Greeter"`,
		`hello/agents.json: agents[2]: must not be nil`,
		`hello/structured_outputs.json: structured_outputs.models.Out.fields.b: not in FieldOrder`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant it to say %s", err, want)
		}
	}
}

// ExampleBuild defines a one-agent workflow in Go, with a Go function tool,
// and writes it out as the six JSON files.
func ExampleBuild() {
	w, err := workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:         "lookup",
			VisualAgents: []string{"Clerk"},
			Orchestration: workflow.Orchestration{
				InitialAgent: "Clerk",
				StartupMode:  workflow.UserDriven,
			},
			LLM: workflow.LLMConfig{Model: "gpt-4o-mini"},
		},
		Agents: []*workflow.Agent{{
			Name:          "Clerk",
			SystemMessage: "Look orders up with find_order and answer in one sentence.",
		}},
		Tools: []*workflow.Tool{{
			Agent:       "Clerk",
			Name:        "find_order",
			Function:    "find_order", // the name the Go function is registered under (tool.WithFuncs)
			Description: "Find an order by its number.",
			ToolType:    workflow.AgentTool,
			Kind:        workflow.KindGo,
			Parameters:  json.RawMessage(`{"type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"]}`),
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	files, err := w.Files()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(files[workflow.FileTools]))
	// w.WriteDir("workflows/lookup") writes all six files.
	// Output:
	// {
	//   "tools": [
	//     {
	//       "agent": "Clerk",
	//       "name": "find_order",
	//       "function": "find_order",
	//       "description": "Find an order by its number.",
	//       "tool_type": "Agent_Tool",
	//       "kind": "go",
	//       "parameters": {
	//         "type": "object",
	//         "properties": {
	//           "number": {
	//             "type": "string"
	//           }
	//         },
	//         "required": [
	//           "number"
	//         ]
	//       }
	//     }
	//   ]
	// }
}
