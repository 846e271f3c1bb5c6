package workflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// scriptEntry is one entry of a scripted.json (the scripted provider's format).
type scriptEntry struct {
	Match string `json:"match"`
	// When makes the entry answer only after a given input or UI
	// response; the walker follows the path without them.
	When      json.RawMessage `json:"when"`
	Text      string          `json:"text"`
	Reasoning string          `json:"reasoning"`
	ToolCalls []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"tool_calls"`
	JSON  json.RawMessage `json:"json"`
	Error *struct {
		Status  int    `json:"status"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		CachedTokens     int `json:"cached_tokens"`
		ReasoningTokens  int `json:"reasoning_tokens"`
	} `json:"usage"`
}

type script struct {
	DelayMS int                      `json:"delay_ms"`
	Agents  map[string][]scriptEntry `json:"agents"`
	Inputs  json.RawMessage          `json:"inputs"` // what an exported chat's person said; not played here
}

func loadExample(t *testing.T, name string) (*workflow.Workflow, *script) {
	t.Helper()
	w, err := workflow.Load(workflows.FS, name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := fs.ReadFile(workflows.FS, path.Join(name, "scripted.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s script
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("%s/scripted.json: %v", name, err)
	}
	for agent := range s.Agents {
		if w.Agent(agent) == nil {
			t.Errorf("%s/scripted.json: unknown agent %s", name, agent)
		}
	}
	return w, &s
}

// walker plays a scripted chat through a workflow with the semantics
// docs/workflow-format.md gives the engine: derived variables after each
// turn, then an llm transfer the model called, then condition rules in
// file order, then the after_work rule; no rule means the person speaks.
type walker struct {
	t      *testing.T
	w      *workflow.Workflow
	s      *script
	vars   map[string]any
	used   map[string]int
	hidden []string
}

func newWalker(t *testing.T, w *workflow.Workflow, s *script) *walker {
	return &walker{t: t, w: w, s: s, vars: w.InitialContext(), used: map[string]int{}}
}

// turn returns the agent's next scripted entry and applies its text triggers.
func (k *walker) turn(agent string) scriptEntry {
	k.t.Helper()
	var entries []scriptEntry
	for _, e := range k.s.Agents[agent] {
		if e.When == nil {
			entries = append(entries, e)
		}
	}
	n := k.used[agent]
	if n >= len(entries) {
		k.t.Fatalf("%s ran past its script (%d entries)", agent, len(entries))
	}
	k.used[agent]++
	e := entries[n]
	if e.Text != "" {
		for _, d := range k.w.DerivedFor(agent) {
			if d.Matches(e.Text) {
				k.vars[d.Name] = true
				if d.UIHidden {
					k.hidden = append(k.hidden, e.Text)
				}
			}
		}
	}
	return e
}

// toolCalled applies tool_called triggers.
func (k *walker) toolCalled(agent, tool string) {
	for _, d := range k.w.DerivedFor(agent) {
		if d.TriggerType == workflow.ToolCalled && d.TriggerValue == tool {
			k.vars[d.Name] = true
		}
	}
}

// next picks the rule that fires after source's turn; nil means the person speaks.
func (k *walker) next(source, transfer string) *workflow.HandoffRule {
	k.t.Helper()
	rules := k.w.HandoffRules(source)
	for _, r := range rules {
		if r.HandoffType == workflow.HandoffLLM && transfer != "" && r.TransferToolName() == transfer {
			return r
		}
	}
	for _, typ := range []string{workflow.HandoffCondition, workflow.HandoffAfterWork} {
		for _, r := range rules {
			if r.HandoffType != typ {
				continue
			}
			ok, err := r.Applies(k.vars)
			if err != nil {
				k.t.Fatal(err)
			}
			if ok {
				return r
			}
		}
	}
	return nil
}

func TestHelloRunsToCompletionWithoutInput(t *testing.T) {
	w, s := loadExample(t, "hello")
	k := newWalker(t, w, s)
	o := w.Config.Orchestration
	if o.StartupMode != workflow.AgentDriven || o.InitialMessage == "" {
		t.Fatalf("hello must be AgentDriven with an initial_message: %+v", o)
	}
	agent := w.InitialAgent()
	if agent.Name != "Greeter" || !agent.IsVisual() {
		t.Fatalf("initial agent %+v", agent)
	}
	if got := agent.RenderSystemMessage(k.vars); !strings.Contains(got, "(default UTC)") {
		t.Errorf("system message not rendered: %q", got)
	}

	// Turn 1: a tool call, run for real as the command tool it is.
	e := k.turn("Greeter")
	if len(e.ToolCalls) != 1 || e.ToolCalls[0].Name != "get_time" {
		t.Fatalf("first entry = %+v", e)
	}
	tools := w.ToolsOf("Greeter")
	if len(tools) != 1 || tools[0].Name != "get_time" || tools[0].Kind != workflow.KindCommand {
		t.Fatalf("tools of Greeter = %+v", tools)
	}
	tool := tools[0]
	var args any
	_ = json.Unmarshal(e.ToolCalls[0].Arguments, &args)
	if err := tool.Schema.Validate(args); err != nil {
		t.Fatalf("scripted arguments do not match the schema: %v", err)
	}
	result := runCommandTool(t, path.Join("../workflows/hello/tools", tool.File), e.ToolCalls[0].Arguments)
	if result["tz"] != "UTC" {
		t.Errorf("tool result %v", result)
	}
	if _, err := time.Parse("2006-01-02T15:04:05-0700", result["time"].(string)); err != nil {
		t.Errorf("tool time: %v", err)
	}
	k.toolCalled("Greeter", tool.Name)
	if k.vars["time_told"] != true {
		t.Errorf("time_told not set")
	}

	// Turn 2: the answer, then after_work to TerminateTarget.
	if e := k.turn("Greeter"); e.Text == "" {
		t.Fatalf("second entry has no text: %+v", e)
	}
	r := k.next("Greeter", "")
	if r == nil || r.TransitionTarget != workflow.TerminateTarget {
		t.Fatalf("after Greeter: %+v", r)
	}
}

// runCommandTool runs a command tool as the tool registry does: arguments
// on stdin, a JSON result on stdout.
func runCommandTool(t *testing.T, file string, args json.RawMessage) map[string]any {
	t.Helper()
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&0o111 == 0 {
		t.Fatalf("%s is not executable (mode %v)", file, st.Mode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, file)
	cmd.Stdin = bytes.NewReader(args)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s wrote %q: %v", file, out, err)
	}
	return res
}

func TestGeneratorFlow(t *testing.T) {
	w, s := loadExample(t, "generator")
	k := newWalker(t, w, s)

	// InterviewAgent asks; no rule moves on, so the chat waits for the person.
	if w.InitialAgent().Name != "InterviewAgent" {
		t.Fatalf("initial agent %s", w.InitialAgent().Name)
	}
	if e := k.turn("InterviewAgent"); e.Text != "What would you like to automate?" {
		t.Fatalf("interview question %q", e.Text)
	}
	if r := k.next("InterviewAgent", ""); r == nil || r.TransitionTarget != workflow.RevertToUserTarget {
		t.Fatalf("after the question: %+v", r)
	}
	// The person answers; no user rule applies yet, so InterviewAgent goes on.
	if r := k.next(workflow.UserAgent, ""); r != nil {
		t.Fatalf("user rule fired before the interview ended: %+v", r)
	}
	// NEXT flips interview_complete, is hidden, and the condition hands off.
	if e := k.turn("InterviewAgent"); e.Text != "NEXT" {
		t.Fatalf("second interview entry %q", e.Text)
	}
	if k.vars["interview_complete"] != true || len(k.hidden) != 1 {
		t.Fatalf("interview_complete=%v hidden=%v", k.vars["interview_complete"], k.hidden)
	}
	r := k.next("InterviewAgent", "")
	if r == nil || r.HandoffType != workflow.HandoffCondition || r.TargetAgent != "ContextVariablesAgent" {
		t.Fatalf("after NEXT: %+v", r)
	}
	cva := w.Agent("ContextVariablesAgent")
	if cva.IsVisual() {
		t.Error("ContextVariablesAgent must not be visual")
	}

	// Before it speaks, the lifecycle tool pauses for secrets.
	lc := w.LifecycleTools(workflow.BeforeAgent, "ContextVariablesAgent")
	if len(lc) != 1 || lc[0].Name != "collect_api_keys" || lc[0].Kind != workflow.KindUI || lc[0].UI.Component == "" {
		t.Fatalf("lifecycle tools %+v", lc)
	}
	var largs map[string]any
	if err := json.Unmarshal(lc[0].Arguments, &largs); err != nil || largs["masked"] != true {
		t.Fatalf("collect_api_keys arguments %s", lc[0].Arguments)
	}
	k.toolCalled("ContextVariablesAgent", "collect_api_keys")
	if got := cva.RenderSystemMessage(k.vars); !strings.Contains(got, "API keys provided: true") {
		t.Errorf("ContextVariablesAgent system message: %q", got)
	}
	k.turn("ContextVariablesAgent")
	if r := k.next("ContextVariablesAgent", ""); r == nil || r.TargetAgent != "ActionPlanAgent" {
		t.Fatalf("after ContextVariablesAgent: %+v", r)
	}

	// The structured output validates and fires the auto-tool.
	apa := w.Agent("ActionPlanAgent")
	if !apa.AutoToolMode || !apa.IsStructuredCapable() || !apa.IsToolAgent() {
		t.Fatalf("ActionPlanAgent flags %+v", apa)
	}
	e := k.turn("ActionPlanAgent")
	out, err := apa.Model().ValidateJSON(e.JSON)
	if err != nil {
		t.Fatalf("scripted action plan does not validate: %v", err)
	}
	for _, d := range w.DerivedFor("ActionPlanAgent") {
		if v, ok := d.FieldValue(out); ok {
			k.vars[d.Name] = v
		}
	}
	if k.vars["plan_name"] != "Weekly Newsletter" {
		t.Errorf("plan_name = %v", k.vars["plan_name"])
	}
	at := apa.AutoTool()
	if at == nil || at.Name != "action_plan" || at.UI.Mode != workflow.UIArtifact || at.UI.Component != "ActionPlan" {
		t.Fatalf("auto tool %+v", at)
	}
	if r := k.next("ActionPlanAgent", ""); r == nil || r.TargetAgent != "ReviewAgent" {
		t.Fatalf("after ActionPlanAgent: %+v", r)
	}

	// The reviewer calls the transfer tool of the llm rule.
	if got := w.Agent("ReviewAgent").RenderSystemMessage(k.vars); !strings.Contains(got, "Weekly Newsletter") {
		t.Errorf("ReviewAgent system message: %q", got)
	}
	if tr := w.TransferRules("ReviewAgent"); len(tr) != 1 || tr[0].TransferToolName() != "transfer_to_DeliveryAgent" {
		t.Fatalf("transfer rules of ReviewAgent: %+v", tr)
	}
	e = k.turn("ReviewAgent")
	if len(e.ToolCalls) != 1 {
		t.Fatalf("ReviewAgent entry %+v", e)
	}
	r = k.next("ReviewAgent", e.ToolCalls[0].Name)
	if r == nil || r.HandoffType != workflow.HandoffLLM || r.TargetAgent != "DeliveryAgent" || r.Description == "" {
		t.Fatalf("llm handoff: %+v", r)
	}

	// Delivery, then TerminateTarget.
	k.turn("DeliveryAgent")
	if r := k.next("DeliveryAgent", ""); r == nil || r.TransitionTarget != workflow.TerminateTarget {
		t.Fatalf("after DeliveryAgent: %+v", r)
	}
}
