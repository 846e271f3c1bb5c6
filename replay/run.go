package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/workflow"
)

// Script is what Drive gives a chat: its start and the person's inputs.
type Script struct {
	// Message starts the chat (baton.StartOptions.Message); Context sets
	// its client-settable variables.
	Message string
	Context map[string]json.RawMessage
	Inputs  []chatlog.Input
}

// Outcome is what a driven chat did.
type Outcome struct {
	ChatID string
	// Events are the chat's recorded events, in sequence order.
	Events []baton.Event
	// Chat is the chat as the store holds it at the end.
	Chat baton.Chat
	// Used is how many of the script's inputs were given.
	Used int
	// Stuck, when set, says why an input could not be given: the chat
	// waited for something other than the script's next input.
	Stuck string
}

// Drive runs one chat of workflow wf in rt: it starts it, and each time
// the chat waits for the person gives it the script's next input, until
// the chat ends, the inputs run out, or the chat waits for something the
// next input does not answer (Outcome.Stuck). An error means the chat
// could not be run at all (or ctx ended).
func Drive(ctx context.Context, rt *runtime.Runtime, scope baton.Scope, wf string, s Script) (*Outcome, error) {
	c := rt.Chat(scope, wf)
	out := &Outcome{ChatID: c.ID()}
	seg := c.Start(ctx, baton.StartOptions{Message: s.Message, Context: s.Context})
	for {
		last, err := drain(seg)
		if err != nil {
			return nil, fmt.Errorf("chat %s: %w", c.ID(), err)
		}
		if last.Type == baton.TypeChatRunComplete || last.Type == baton.TypeChatError || out.Used >= len(s.Inputs) {
			break
		}
		chat, err := rt.Store().GetChat(ctx, scope, c.ID())
		if err != nil {
			return nil, err
		}
		in := s.Inputs[out.Used]
		next, stuck := answer(ctx, rt, c, chat, in)
		if stuck != "" {
			out.Stuck = stuck
			break
		}
		out.Used++
		seg = next
	}
	chat, err := rt.Store().GetChat(ctx, scope, c.ID())
	if err != nil {
		return nil, err
	}
	out.Chat = chat
	for ev, err := range baton.EventsAfter(ctx, rt.Store(), scope, c.ID(), 0, 500) {
		if err != nil {
			return nil, err
		}
		out.Events = append(out.Events, ev)
	}
	return out, nil
}

// drain runs a segment to its end and returns its last recorded event.
func drain(seg func(func(baton.Event, error) bool)) (baton.Event, error) {
	var last baton.Event
	for ev, err := range seg {
		if err != nil {
			return last, err
		}
		if baton.IsChatType(ev.Type) {
			last = ev
		}
	}
	return last, nil
}

// answer gives in to the chat if it answers what the chat waits for.
func answer(ctx context.Context, rt *runtime.Runtime, c *runtime.Chat, chat baton.Chat, in chatlog.Input) (func(func(baton.Event, error) bool), string) {
	if chat.Status == baton.ChatWaitingInput {
		if in.Message == nil {
			return nil, fmt.Sprintf("the chat waits for a message; the next input is %s", in.Kind())
		}
		return c.Send(ctx, *in.Message), ""
	}
	if len(chat.Pending) == 0 {
		return nil, fmt.Sprintf("the chat (status %s) waits for nothing; the next input is %s", chat.Status, in.Kind())
	}
	p := chat.Pending[0]
	switch p.Kind {
	case baton.PendingSecret:
		if in.Secrets == nil {
			return nil, fmt.Sprintf("the chat waits for the secret form %s; the next input is %s", p.ToolName, in.Kind())
		}
		form := maps.Clone(in.Secrets)
		// A form the workflow now asks more of is answered with
		// placeholders, so the replay can go on.
		if names := secretNames(rt, chat.Workflow, p.ToolName); names != nil {
			for _, n := range names {
				if form[n] == "" {
					form[n] = chatlog.SecretPlaceholder
				}
			}
			for n := range form {
				if !slices.Contains(names, n) {
					delete(form, n)
				}
			}
		}
		data, _ := json.Marshal(form)
		return c.RespondUI(ctx, p.UIEventID, "success", data), ""
	case baton.PendingUITool:
		if in.UI == nil {
			return nil, fmt.Sprintf("the chat waits for the UI tool %s; the next input is %s", p.ToolName, in.Kind())
		}
		status := in.UI.Status
		if status == "" {
			status = "success"
		}
		return c.RespondUI(ctx, p.UIEventID, status, in.UI.Data), ""
	}
	if in.Message == nil {
		return nil, fmt.Sprintf("the chat waits for %s; the next input is %s", p.Kind, in.Kind())
	}
	return c.Send(ctx, *in.Message), ""
}

func secretNames(rt *runtime.Runtime, wfName, tool string) []string {
	for _, wf := range rt.Workflows() {
		if wf.Name == wfName {
			if t := wf.Tool(tool); t != nil {
				return t.SecretNames
			}
		}
	}
	return nil
}

// startContext returns the variables of vars that wf lets a client set at
// the start: a replay starts with them.
func startContext(wf *workflow.Workflow, vars map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range vars {
		if wf.CheckStartContext(map[string]json.RawMessage{k: v}) == nil {
			out[k] = v
		}
	}
	return out
}
