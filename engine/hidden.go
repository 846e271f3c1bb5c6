package engine

import (
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// A message people must not see never streams to them (invariant 8). The
// engine decides it at the source, before a delta is broadcast, so every
// client (WebSocket, SSE, AG-UI, a future one) is covered by the one
// decision:
//
//   - an auto_tool_mode agent's text is its structured output, shown by the
//     UI component the auto-tool event brings: none of its text deltas is
//     sent;
//   - an agent with a ui_hidden agent_text_equals trigger (the generator's
//     NEXT) has its deltas held while the text so far could still be the
//     trigger; they go out merged into one delta as soon as it cannot, or at
//     the end if the text is not hidden after all;
//   - what is known to be hidden only at the end (an agent_text_contains
//     or agent_text_prefix trigger) has streamed by then: its chat.text names the streamed
//     message in retract_message_id, and clients drop that bubble.

// textGate decides which of a model call's text deltas are broadcast.
type textGate struct {
	withhold bool     // no text delta is sent (auto-tool agent)
	triggers []string // ui_hidden agent_text_equals values the text may turn out to be
	released bool     // the text can no longer be a trigger: deltas pass
	held     strings.Builder
	finish   *baton.Delta // the finish delta, held behind held text
	streamed bool         // a text delta was sent
}

// newTextGate returns the gate of a model call of agent.
func newTextGate(wf *workflow.Workflow, agent *workflow.Agent) *textGate {
	g := &textGate{withhold: agent.AutoToolMode}
	for _, d := range wf.DerivedFor(agent.Name) {
		if d.UIHidden && d.TriggerType == workflow.AgentTextEquals {
			g.triggers = append(g.triggers, d.TriggerValue)
		}
	}
	g.released = len(g.triggers) == 0
	return g
}

// pass sends d through emit, holds it, or drops it.
func (g *textGate) pass(d baton.Delta, emit func(baton.Delta)) {
	switch d.Kind {
	case baton.DeltaText:
		switch {
		case g.withhold || d.Text == "":
			return
		case g.released:
			g.streamed = true
			emit(d)
			return
		}
		g.held.WriteString(d.Text)
		if g.mayBeTrigger(g.held.String()) {
			return
		}
		g.released = true
		g.streamed = true
		emit(baton.Delta{Kind: baton.DeltaText, Text: g.held.String()})
		g.held.Reset()
	case baton.DeltaFinish:
		if g.held.Len() > 0 {
			g.finish = &d
			return
		}
		emit(d)
	default:
		emit(d)
	}
}

// end is called once the call's result is known: held text goes out unless
// the message is hidden, then the held finish.
func (g *textGate) end(hidden bool, emit func(baton.Delta)) {
	if g.held.Len() > 0 && !hidden && !g.withhold {
		g.streamed = true
		emit(baton.Delta{Kind: baton.DeltaText, Text: g.held.String()})
	}
	g.held.Reset()
	if g.finish != nil {
		emit(*g.finish)
		g.finish = nil
	}
}

// retraction returns the message id a hidden message's chat.text retracts:
// msgID when some of its text streamed, "" otherwise.
func (g *textGate) retraction(hidden bool, msgID string) string {
	if hidden && g.streamed {
		return msgID
	}
	return ""
}

// holding reports whether the gate still holds text that might have become
// a hidden trigger: none of it was sent.
func (g *textGate) holding() bool { return !g.released && g.held.Len() > 0 }

// mayBeTrigger reports whether text could still become (trimmed) one of the
// triggers as more of it streams.
func (g *textGate) mayBeTrigger(text string) bool {
	t := strings.TrimLeft(text, " \t\r\n")
	for _, v := range g.triggers {
		if strings.HasPrefix(v, t) {
			return true
		}
		if rest, ok := strings.CutPrefix(t, v); ok && strings.TrimSpace(rest) == "" {
			return true
		}
	}
	return false
}
