package engine

import (
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// TestTextGate: text that may still be a ui_hidden equals trigger is held;
// it is dropped when the message is hidden, and sent merged (the deltas'
// concatenation still the text) as soon as it can no longer be the trigger
// or when the message turns out shown; an auto-tool agent sends no text.
func TestTextGate(t *testing.T) {
	wf := &workflow.Workflow{DerivedVariables: []*workflow.DerivedVariable{
		{Name: "done", TriggerType: workflow.AgentTextEquals, SourceAgent: "A", TriggerValue: "NEXT", UIHidden: true},
	}}
	for _, tc := range []struct {
		name     string
		agent    workflow.Agent
		deltas   []string
		hidden   bool
		want     []string // text deltas sent, in order
		finish   bool     // the finish delta comes after them
		retracts bool
	}{
		{"trigger text is never sent", workflow.Agent{Name: "A"}, []string{"NE", "XT", "\n"}, true, nil, true, false},
		{"diverging text is released merged", workflow.Agent{Name: "A"}, []string{"NE", "XT ", "step", "s"}, false, []string{"NEXT step", "s"}, true, false},
		{"other text passes at once", workflow.Agent{Name: "A"}, []string{"Hello", " there"}, false, []string{"Hello", " there"}, true, false},
		{"a prefix that ends shown is sent at the end", workflow.Agent{Name: "A"}, []string{"NE"}, false, []string{"NE"}, true, false},
		{"auto-tool text is withheld", workflow.Agent{Name: "B", AutoToolMode: true}, []string{`{"a":`, `1}`}, true, nil, true, false},
		{"agent without triggers streams; hidden at the end retracts", workflow.Agent{Name: "B"}, []string{"x"}, true, []string{"x"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTextGate(wf, &tc.agent)
			var sent []string
			finished := false
			emit := func(d baton.Delta) {
				switch d.Kind {
				case baton.DeltaText:
					if finished {
						t.Errorf("text %q after the finish", d.Text)
					}
					sent = append(sent, d.Text)
				case baton.DeltaFinish:
					finished = true
				}
			}
			for _, d := range tc.deltas {
				g.pass(baton.Delta{Kind: baton.DeltaText, Text: d}, emit)
			}
			g.pass(baton.Delta{Kind: baton.DeltaFinish, FinishReason: "stop"}, emit)
			g.end(tc.hidden, emit)
			if strings.Join(sent, "|") != strings.Join(tc.want, "|") || finished != tc.finish {
				t.Fatalf("sent %q (finish %v), want %q (finish %v)", sent, finished, tc.want, tc.finish)
			}
			if got := g.retraction(tc.hidden, "m1") != ""; got != tc.retracts {
				t.Fatalf("retraction: %v, want %v", got, tc.retracts)
			}
		})
	}
}
