package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// ChatAt is a chat as it stood after a given event: the fold of its events
// up to there (Fold).
type ChatAt struct {
	Status    baton.ChatStatus
	TurnAgent string
	// Variables are the context variables, secrets and reserved ones left
	// out.
	Variables map[string]json.RawMessage
	// Pending are the UI tool and secret requests it waited for, oldest
	// first (ToolCallID, ToolName, Agent, Kind and UIEventID set).
	Pending []baton.PendingRequest
	// NextSpeaker is as Inspection.NextSpeaker.
	NextSpeaker string
}

// Fold returns the state of chat (its workflow, its row for the start
// context) after event at, given events, its events 1 … (at or more) in
// order: the same fold a resume makes from the store, stopped at at.
// Variables set at start that an event changes only after at are taken at
// their default (the start context is not recorded as an event).
func (e *Engine) Fold(chat baton.Chat, events []baton.Event, at int64) (ChatAt, error) {
	wf := e.workflows[chat.Workflow]
	if wf == nil {
		return ChatAt{}, baton.Errorf(baton.ENOTFOUND, "workflow %q of chat %s: not loaded", chat.Workflow, chat.ID)
	}
	if at < 0 || at > int64(len(events)) {
		return ChatAt{}, baton.Errorf(baton.EINVALID, "at_sequence: %d is not within the %d events given", at, len(events))
	}
	st, _ := foldAt(chat, wf, events, at)
	out := ChatAt{Status: st.statusNow(), TurnAgent: st.turnAgent, Variables: map[string]json.RawMessage{}, NextSpeaker: st.nextSpeaker(wf)}
	for k, v := range st.vars {
		if !baton.IsReservedVariable(k) {
			out.Variables[k] = v
		}
	}
	out.Pending = st.pendingNow()
	return out, nil
}

// foldAt folds events[:at] (a chat's first events) over the chat's initial
// variables: the workflow's defaults, with the start context taken from
// the chat's snapshot for client-settable variables no event in events
// changes (their value is still the one the chat started with). It
// returns the state and the names of the secrets answered by then.
func foldAt(chat baton.Chat, wf *workflow.Workflow, events []baton.Event, at int64) (*state, []string) {
	changed := map[string]bool{}
	for i := range events {
		if events[i].Type == baton.TypeChatContextUpdated {
			var p baton.ContextUpdatedPayload
			if json.Unmarshal(events[i].Payload, &p) == nil {
				for k := range p.Variables {
					changed[k] = true
				}
			}
		}
	}
	events = events[:at]
	c := chat
	c.Status, c.Pending, c.TurnAgent, c.LastSequence = baton.ChatRunning, nil, "", 0
	st := newState(c, wf)
	var snap map[string]json.RawMessage
	_ = json.Unmarshal(chat.Context, &snap)
	for _, v := range wf.Variables {
		if val, ok := snap[v.Name]; ok && v.ClientSettable && !changed[v.Name] {
			st.vars[v.Name] = val
		}
	}
	secretCalls := map[string]bool{}
	var secrets []string
	for i := range events {
		ev := &events[i]
		st.apply(ev)
		switch ev.Type {
		case baton.TypeChatToolCall:
			var p baton.ToolCallPayload
			if json.Unmarshal(ev.Payload, &p) == nil && p.PendingKind == baton.PendingSecret && p.UIEventID != "" {
				secretCalls[p.UIEventID] = true
			}
		case baton.TypeChatToolResponse:
			var p struct {
				UIEventID string          `json:"ui_event_id"`
				Payload   json.RawMessage `json:"payload"`
			}
			if json.Unmarshal(ev.Payload, &p) != nil || !secretCalls[p.UIEventID] {
				continue
			}
			var res struct {
				Data map[string]string `json:"data"`
			}
			_ = json.Unmarshal(p.Payload, &res)
			for name := range res.Data {
				secrets = append(secrets, name)
			}
		}
	}
	st.varsChanged()
	return st, secrets
}

// statusNow is the status a chat in this state has: what its last append
// recorded when the state ends a pause, running when the run goes on.
func (st *state) statusNow() baton.ChatStatus {
	switch {
	case st.cancelled:
		return baton.ChatCancelled
	case st.failed:
		return baton.ChatFailed
	case st.done:
		return baton.ChatCompleted
	}
	if w := st.waitingUI(); len(w) > 0 {
		for _, oc := range w {
			if oc.pendingKind == baton.PendingSecret {
				return baton.ChatWaitingSecret
			}
		}
		return baton.ChatWaitingUITool
	}
	if st.toolAsking() != nil {
		return baton.ChatWaitingInput // a tool's question (toolinput.go)
	}
	if st.turn == nil && st.next == workflow.UserAgent {
		return baton.ChatWaitingInput
	}
	return baton.ChatRunning
}

// pendingNow returns the requests a chat in this state waits for.
func (st *state) pendingNow() []baton.PendingRequest {
	var out []baton.PendingRequest
	for _, oc := range st.waitingUI() {
		kind := oc.pendingKind
		if kind == "" {
			kind = baton.PendingUITool
		}
		out = append(out, baton.PendingRequest{UIEventID: oc.uiEventID, Kind: kind, ToolCallID: oc.id, ToolName: oc.name, Agent: oc.agent})
	}
	if oc := st.toolAsking(); oc != nil {
		out = append(out, baton.PendingRequest{UIEventID: oc.ask.asking, Kind: baton.PendingToolInput, ToolCallID: oc.id, ToolName: oc.name, Agent: oc.agent})
	}
	return out
}

// nextSpeaker is Inspection.NextSpeaker.
func (st *state) nextSpeaker(wf *workflow.Workflow) string {
	switch {
	case st.done || st.terminating:
		return ""
	case st.turn != nil:
		return st.turn.agent
	case st.next == "" && !st.started && st.turns == 0:
		if wf.Config.Orchestration.StartupMode == workflow.UserDriven {
			return workflow.UserAgent
		}
		return wf.Config.Orchestration.InitialAgent
	}
	return st.next
}

// StepEnd returns at, or, when event at is inside a model reply, the
// sequence of the reply's last event. A reply — its text, its tool calls,
// its usage summary, the variables its text sets, its structured output —
// is recorded in one append: no chat ever stood between them, and a run
// resumed there would call the model again for a reply it already has
// (or miss the variables the text set). events are the chat's, from 1.
func StepEnd(events []baton.Event, at int64) int64 {
	msgID := ""
	for i := int64(0); i < at && i < int64(len(events)); i++ {
		if events[i].Type == baton.TypeChatText {
			var p baton.TextPayload
			_ = json.Unmarshal(events[i].Payload, &p)
			msgID = p.AgentMessageID // "" for the person's and the system's texts
		}
	}
	for at < int64(len(events)) {
		next := &events[at]
		switch next.Type {
		case baton.TypeChatUsageSummary, baton.TypeChatContextUpdated, baton.TypeChatStructuredOutputReady:
		case baton.TypeChatToolCall:
			var p baton.ToolCallPayload
			if json.Unmarshal(next.Payload, &p) != nil || msgID == "" || p.AgentMessageID != msgID {
				return at
			}
		default:
			return at
		}
		at++
	}
	return at
}

// Fork creates a chat of scope whose history is chat chatID's events 1 …
// at (moved to the end of a model reply it falls inside: StepEnd), copied (store.ForkChat: same sequences and ids), with the context
// variables, pending requests, speaker and status the chat had after event
// at, and a baton.ForkedFromVar naming where it came from. The copy goes on as a
// chat restored at that point would: a chat that waits for the person
// keeps waiting, a running one is resumed. The original is not changed.
// Its sealed secrets answered by then are copied sealed, still bound to
// the chat that sealed them, never opened. A chat of another scope is
// ENOTFOUND; at outside 1 … its last sequence is EINVALID naming
// at_sequence.
func (e *Engine) Fork(ctx context.Context, scope baton.Scope, chatID string, at int64) (baton.Chat, error) {
	src, err := e.store.GetChat(ctx, scope, chatID) // the tenant check, in the store's query
	if err != nil {
		return baton.Chat{}, err
	}
	wf := e.workflows[src.Workflow]
	if wf == nil {
		return baton.Chat{}, baton.Errorf(baton.ENOTFOUND, "workflow %q of chat %s: not loaded", src.Workflow, chatID)
	}
	if at < 1 {
		return baton.Chat{}, baton.Errorf(baton.EINVALID, "at_sequence: must be a sequence of the chat (1 or more), got %d", at)
	}
	if at > src.LastSequence {
		return baton.Chat{}, baton.ForkBeyond(at, src.LastSequence)
	}
	events, err := e.store.Events(ctx, scope, chatID, 0, 0)
	if err != nil {
		return baton.Chat{}, fmt.Errorf("fork chat %s: %w", chatID, err)
	}
	if int64(len(events)) < at {
		return baton.Chat{}, baton.ForkBeyond(at, int64(len(events)))
	}
	at = StepEnd(events, at)
	st, secrets := foldAt(src, wf, events, at)
	id := baton.NewID()

	// A request pending at `at` is pending in the copy under a new
	// ui_event_id: the id is unique across chats (the original may still
	// wait for it, or have had it answered).
	rename := map[string]string{}
	pending := st.pendingNow()
	for i := range pending {
		nid := "ui_" + baton.NewID()
		rename[pending[i].UIEventID] = nid
		pending[i].UIEventID = nid
	}

	status := st.statusNow()
	if oc := st.toolAsking(); oc != nil {
		// A tool's question asked before the fork belongs to the original
		// chat's remote task: the copy does not wait for it — its run ends
		// the call with an error for its model (endInheritedAsk) at once.
		asking := rename[oc.ask.asking]
		pending = slices.DeleteFunc(pending, func(p baton.PendingRequest) bool { return p.UIEventID == asking })
		status = baton.ChatRunning
	}

	vars := maps.Clone(st.vars)
	delete(vars, secretsVar)
	var snap map[string]json.RawMessage
	_ = json.Unmarshal(src.Context, &snap)
	if box := boundSecrets(src.ID, snap[secretsVar], secrets); box != nil {
		vars[secretsVar] = box
	}
	vars[baton.ForkedFromVar], _ = json.Marshal(baton.ForkedFrom{ChatID: src.ID, Sequence: at})
	ctxJSON, err := json.Marshal(vars)
	if err != nil {
		return baton.Chat{}, fmt.Errorf("fork chat %s: %w", chatID, err)
	}
	chat, err := e.store.ForkChat(ctx, scope, baton.Fork{From: src.ID, At: at, Rename: rename, Chat: baton.Chat{
		ID: id, Workflow: src.Workflow, Status: status, Context: ctxJSON, TurnAgent: st.turnAgent,
		CacheSeed: src.CacheSeed, Pending: pending,
	}})
	if err != nil {
		return baton.Chat{}, fmt.Errorf("fork chat %s: %w", chatID, err)
	}
	e.publishSession(ctx, scope, baton.TypeSessionCreated, chat, "")
	if status == baton.ChatRunning {
		// As after a restart (Recover): the run goes on from the copy.
		if err := e.Resume(ctx, scope, chat.ID); err != nil {
			return chat, fmt.Errorf("fork chat %s: resume the copy: %w", chatID, err)
		}
	}
	return chat, nil
}
