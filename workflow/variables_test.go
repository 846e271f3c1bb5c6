package workflow_test

import (
	"testing"

	"github.com/batonhq/baton/workflow"
)

// TestCaptured: an agent_text_prefix variable takes the rest of the first
// line that starts with its prefix, and only that.
func TestCaptured(t *testing.T) {
	d := &workflow.DerivedVariable{Name: "concept_overview", TriggerType: workflow.AgentTextPrefix, TriggerValue: "CONCEPT_OVERVIEW:"}
	for _, c := range []struct {
		text, want string
		ok         bool
	}{
		{"CONCEPT_OVERVIEW: a weekly newsletter.\nCONTEXT_AWARE: true", "a weekly newsletter.", true},
		{"Context Variables:\n  CONCEPT_OVERVIEW:   spaced out  \nCONCEPT_OVERVIEW: second", "spaced out", true},
		{"CONCEPT_OVERVIEW:", "", true},
		{"The CONCEPT_OVERVIEW: is not at a line's start", "", false},
		{"concept_overview: case matters", "", false},
	} {
		got, ok := d.Captured(c.text)
		if got != c.want || ok != c.ok || d.Matches(c.text) != c.ok {
			t.Errorf("Captured(%q) = %q, %v; want %q, %v", c.text, got, ok, c.want, c.ok)
		}
	}
	eq := &workflow.DerivedVariable{TriggerType: workflow.AgentTextEquals, TriggerValue: "CONCEPT_OVERVIEW:"}
	if _, ok := eq.Captured("CONCEPT_OVERVIEW: x"); ok {
		t.Error("an agent_text_equals variable captured text")
	}
}

// TestGeneratorConceptOverviewIsAString: the generator's concept_overview
// is an agent_text_prefix variable that starts empty.
func TestGeneratorConceptOverviewIsAString(t *testing.T) {
	w := loadExampleWorkflow(t, "generator")
	vars := w.InitialContext()
	if v, ok := vars["concept_overview"]; !ok || v != "" {
		t.Errorf("concept_overview starts as %#v, want \"\"", v)
	}
}
