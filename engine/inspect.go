package engine

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// Inspection is what the engine knows of a chat, rebuilt from the store
// alone: the conversation as the models see it, the context variables
// (secrets excluded), who speaks next, and what the chat waits for.
type Inspection struct {
	Chat        baton.Chat
	Messages    []baton.Message
	Variables   map[string]json.RawMessage
	NextSpeaker string // an agent; "user" when the chat waits for the person; "" when it ended or has not started
	TurnAgent   string // the sender of the last text
	Turns       int
	Waiting     []string // ui_event_ids the chat waits for
	Done        bool
	Failed      bool
}

// Inspect rebuilds a chat's state from the store. It reads only: it is safe
// while the chat runs, and shows its last recorded point.
func (e *Engine) Inspect(ctx context.Context, scope baton.Scope, chatID string) (Inspection, error) {
	r, err := e.load(ctx, scope, chatID, false)
	if err != nil {
		return Inspection{}, err
	}
	st := r.st
	vars := maps.Clone(st.vars)
	maps.DeleteFunc(vars, func(k string, _ json.RawMessage) bool { return baton.IsReservedVariable(k) })
	in := Inspection{
		Chat: st.chat, Messages: st.messages, Variables: vars, TurnAgent: st.turnAgent,
		Turns: st.turns, Done: st.done, Failed: st.isFailed(),
	}
	switch {
	case st.done || st.terminating:
	case st.turn != nil:
		in.NextSpeaker = st.turn.agent
	case st.next == "" && !st.started && st.turns == 0:
		in.NextSpeaker = r.wf.Config.Orchestration.InitialAgent
		if r.wf.Config.Orchestration.StartupMode == workflow.UserDriven {
			in.NextSpeaker = workflow.UserAgent
		}
	default:
		in.NextSpeaker = st.next
	}
	for _, oc := range st.waitingUI() {
		in.Waiting = append(in.Waiting, oc.uiEventID)
	}
	return in, nil
}
