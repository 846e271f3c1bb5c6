package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// start records how a fresh chat begins (orchestration.startup_mode).
func (r *run) start(ctx context.Context) error {
	o := r.wf.Config.Orchestration
	if o.StartupMode == workflow.UserDriven && r.startMessage == "" {
		ev := baton.NewChatEvent(baton.TypeChatInputRequest, r.st.chat.ID, "", baton.InputRequestPayload{
			Kind: "input_request", Prompt: o.InitialMessage, RequestID: "input_" + r.st.chat.ID + "_0",
		})
		waiting := baton.ChatWaitingInput
		r.stage([]baton.Event{ev}, &baton.ChatUpdate{Status: &waiting})
		return nil
	}
	msg, source, hidden := r.startMessage, "api", false
	if msg == "" {
		// The workflow's own initial_message starts the conversation for the
		// model; the person did not type it, so it is not shown as theirs.
		msg, source, hidden = o.InitialMessage, "initial_message", true
	}
	var events []baton.Event
	user := workflow.UserAgent
	if msg != "" {
		events = append(events, r.synthetic(user, msg)...) // after a before_chat form, the system spoke last
		events = append(events, baton.NewChatEvent(baton.TypeChatText, r.st.chat.ID, user, baton.TextPayload{
			Kind: "text", Agent: user, Content: msg, Index: r.st.texts, Source: source, UIHidden: hidden,
		}))
	}
	events = append(events, baton.NewChatEvent(baton.TypeChatHandoff, r.st.chat.ID, user, baton.HandoffPayload{
		Kind: "handoff", From: user, To: o.InitialAgent, HandoffType: "start", TransitionTarget: workflow.AgentTarget,
	}))
	u := &baton.ChatUpdate{TurnAgent: &user}
	if r.startInput != "" {
		u.ConsumeInputs = []string{r.startInput}
	}
	r.stage(events, u)
	r.st.startInput, r.st.startMessage = "", "" // taken in this append
	return nil
}

// userInput records the person's message (the echo every client shows) and
// who answers it.
func (r *run) userInput(ctx context.Context, ev baton.Event) error {
	var q baton.UserQueryPayload
	if err := json.Unmarshal(ev.Payload, &q); err != nil {
		return fmt.Errorf("%w: payload: %v", errIgnored, err)
	}
	content := strings.TrimSpace(q.Content)
	st := r.st
	switch {
	case content == "":
		return fmt.Errorf("%w: empty message", errIgnored)
	case st.toolAsking() != nil:
		// A tool call asked the person: this message is the answer
		// (toolinput.go).
		return r.toolAnswer(ev, st.toolAsking(), content, q)
	case st.turn != nil && !st.isFailed():
		return fmt.Errorf("%w: the chat waits for a UI tool response, not a message", errIgnored)
	}
	if !st.started && st.turns == 0 && st.next == "" {
		// A message before the chat started (a UserDriven chat's first input
		// arriving with run.start): it is the start message.
		r.startMessage, r.startInput = content, ev.ID
		return r.start(ctx)
	}
	user := workflow.UserAgent
	events := r.synthetic(user, content)
	events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, user, baton.TextPayload{
		Kind: "text", Agent: user, Content: content, Index: st.texts, Source: q.Source, InputID: ev.ID,
	}))
	// Taken from the inbox in the append that records it: once, whatever
	// comes between (a crash, a redelivery, another instance).
	u := &baton.ChatUpdate{TurnAgent: &user, ConsumeInputs: []string{ev.ID}}
	r.offerClientTools(q.ClientTools, u)
	if st.turn == nil {
		// After the end of the chat too: the message starts the next run
		// (the fold reopens a chat on a handoff from the person).
		events = append(events, baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, user, r.afterUser()))
	}
	r.stage(events, u) // recorded before the model answers it (drive flushes)
	return nil
}

// queueInput makes sure a user_query is in its chat's inbox, where the run
// takes it at its next input point (takeInput). One published through
// Submit is there already; one published straight on the bus (an app's own
// user_query) is kept now, unless the chat has ended: only a message the
// chat accepted while it ran starts a next run.
func (r *run) queueInput(ctx context.Context, ev baton.Event) error {
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
		return nil
	}
	var q baton.UserQueryPayload
	if err := json.Unmarshal(ev.Payload, &q); err != nil {
		return fmt.Errorf("%w: payload: %v", errIgnored, err)
	}
	switch {
	case strings.TrimSpace(q.Content) == "":
		return fmt.Errorf("%w: empty message", errIgnored)
	case r.st.done:
		return fmt.Errorf("%w: the chat has ended", errIgnored)
	}
	_, _, err := r.e.store.AddInput(ctx, r.scope, ev)
	r.e.inputKept(r.st.chat.ID, err)
	if err != nil {
		return fmt.Errorf("keep the message in the inbox: %w", err)
	}
	return nil
}

// takeInput takes the oldest message waiting in the chat's inbox, if any,
// at an input point of the run (the chat waits for the person, failed, or
// ended): it stages the message's chat.text, which marks it taken in the
// same append. A message that cannot be taken (empty) is marked taken with
// nothing recorded.
//
// Without leases the read is skipped when nothing can be waiting: the
// state's last read found the inbox clear and no input was kept since
// (inboxCount).
func (r *run) takeInput(ctx context.Context) (bool, error) {
	id := r.st.chat.ID
	kept := r.e.inbox.count(id)
	if r.e.instance == "" && r.st.inboxClear && kept == 0 || r.creation != nil {
		return false, nil // a chat not stored yet has no inbox but the start's message (takeStart)
	}
	r.st.inboxClear = false
	ins, err := r.e.store.Inputs(ctx, r.scope, id)
	if err != nil {
		return false, fmt.Errorf("read the inbox: %w", err)
	}
	r.e.inbox.read(id, kept)
	if st := r.st; !st.started && st.turns == 0 && st.next == "" {
		// The chat has not started: the start's own message, kept with its
		// run.start, comes before any message sent since. It waits here
		// when the start was never recorded (its append failed after a
		// before_chat step, and the chat failed); it starts the chat now,
		// and the rest wait for the next input point.
		for _, in := range ins {
			if in.Event.Type != baton.TypeRunStart || r.staged.consumes(in.Event.ID) {
				continue
			}
			var p baton.RunStartPayload
			if json.Unmarshal(in.Event.Payload, &p) != nil || p.Message == "" {
				continue // kept only with a message
			}
			r.startMessage, r.startInput = p.Message, in.Event.ID
			return true, r.start(ctx)
		}
	}
	left := false // an input stays waiting after this read
	var asked *baton.PendingRequest
	if oc := r.st.toolAsking(); oc != nil && len(ins) > 0 {
		q, err := r.askedRequest(ctx, oc)
		if err != nil {
			return false, err
		}
		asked = &q
	}
	for i, in := range ins {
		ev := in.Event
		if r.staged.consumes(ev.ID) {
			continue
		}
		if ev.Type != baton.TypeUserQuery {
			left = true
			continue // a UI response is taken by the request it answers
		}
		if r.st.inputs[ev.ID] {
			// Recorded and not marked taken: recorded before the inbox
			// existed. Marked now.
			r.stage(nil, &baton.ChatUpdate{Status: &r.st.chat.Status, ConsumeInputs: []string{ev.ID}})
			continue
		}
		if asked != nil && !baton.AnswersToolInput(*asked, in) {
			// Accepted before the tool's question was recorded: not an answer to it.
			// It stays queued, in order, for the model once the call ends.
			left = true
			continue
		}
		if err := r.userInput(ctx, ev); err != nil {
			if !errors.Is(err, errIgnored) {
				return false, err
			}
			r.logger().Warn("engine: input dropped", "event_id", ev.ID, "reason", err.Error())
			r.stage(nil, &baton.ChatUpdate{Status: &r.st.chat.Status, ConsumeInputs: []string{ev.ID}})
			continue
		}
		r.st.inboxClear = !left && i == len(ins)-1 // else the rest wait for the next input point
		return true, nil
	}
	r.st.inboxClear = !left
	return false, nil
}

// takeUIResponse records a ui.tool.response waiting in the inbox that
// answers one of the chat's pending requests, consuming it in the same
// append (uiResponse), and reports whether it took one. A kept response that
// fits no pending request is left to its own event, which drops it.
//
// The read counts as a read of the inbox (inboxCount), so that a chat
// paused here keeps no count; a message it leaves waiting is taken at the
// next input point, which reads again (inboxClear).
func (r *run) takeUIResponse(ctx context.Context) (bool, error) {
	id := r.st.chat.ID
	kept := r.e.inbox.count(id)
	r.st.inboxClear = false
	ins, err := r.e.store.Inputs(ctx, r.scope, id)
	if err != nil {
		return false, fmt.Errorf("read the inbox: %w", err)
	}
	r.e.inbox.read(id, kept)
	waiting := r.st.waitingUI()
	for _, in := range ins {
		ev := in.Event
		if ev.Type != baton.TypeUIToolResponse || r.staged.consumes(ev.ID) || r.st.inputs[ev.ID] {
			continue
		}
		var p baton.UIToolResponsePayload
		if json.Unmarshal(ev.Payload, &p) != nil {
			continue
		}
		if !slices.ContainsFunc(waiting, func(c openCall) bool { return c.uiEventID == p.UIEventID }) {
			continue
		}
		if err := r.uiResponse(ctx, ev); err != nil {
			if !errors.Is(err, errIgnored) {
				return false, err
			}
			if err := r.dropInput(ctx, ev, err); !errors.Is(err, errIgnored) {
				return false, err
			}
			r.logger().Warn("engine: input dropped", "event_id", ev.ID, "reason", err.Error())
			continue
		}
		r.logger().Info("engine: UI response taken from the inbox", "event_id", ev.ID, "ui_event_id", p.UIEventID)
		return true, nil
	}
	return false, nil
}

// takeStart finds the person's first message of a chat not started yet in
// its inbox (the run.start kept by Start), for start to record and take.
//
// Without leases, a state whose inbox is known (takeInput) with no input
// kept since reads nothing: a chat Start made in this process holds its
// first message, if any, in the state too.
func (r *run) takeStart(ctx context.Context) error {
	if r.e.instance == "" && r.st.inboxClear && r.e.inbox.count(r.st.chat.ID) == 0 || r.creation != nil {
		if r.st.startInput != "" {
			r.startMessage, r.startInput = r.st.startMessage, r.st.startInput
		}
		return nil
	}
	ins, err := r.e.store.Inputs(ctx, r.scope, r.st.chat.ID)
	if err != nil {
		return fmt.Errorf("read the inbox: %w", err)
	}
	for _, in := range ins {
		if in.Event.Type != baton.TypeRunStart {
			continue
		}
		var p baton.RunStartPayload
		_ = json.Unmarshal(in.Event.Payload, &p)
		r.startMessage, r.startInput = p.Message, in.Event.ID
		return nil
	}
	return nil
}

// dropInput marks a UI response the chat cannot take (cause: not pending
// any more) taken, recording nothing, so that recovery does not publish it
// again; it returns cause, or the error of the write.
func (r *run) dropInput(ctx context.Context, ev baton.Event, cause error) error {
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; !kept {
		return cause
	}
	status := r.st.chat.Status
	if err := r.record(ctx, nil, &baton.ChatUpdate{Status: &status, ConsumeInputs: []string{ev.ID}}); err != nil && (!errors.Is(err, baton.ErrConflict) || errors.Is(err, baton.ErrStale)) {
		return fmt.Errorf("drop input %s: %w", ev.ID, err)
	}
	return cause
}

// uiResponse records the person's answer to a pending UI tool call: a
// tool the model called, an auto-tool, or a lifecycle tool (whose secrets
// are sealed, never recorded). After a lifecycle pause the chat resumes with
// the internal resume signal (spec/synthetic-events.md).
func (r *run) uiResponse(ctx context.Context, ev baton.Event) error {
	var p baton.UIToolResponsePayload
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return fmt.Errorf("%w: payload: %v", errIgnored, err)
	}
	st := r.st
	waiting := st.waitingUI()
	var call *openCall
	for i := range waiting {
		if waiting[i].uiEventID == p.UIEventID {
			call = &waiting[i]
		}
	}
	if call == nil {
		return fmt.Errorf("%w: ui_event_id %q is not pending in this chat", errIgnored, p.UIEventID)
	}
	if p.Status == "" {
		p.Status = "success"
	}
	corr := call.id
	if st.turn != nil {
		corr = st.turn.key
	}
	u := &baton.ChatUpdate{ResolvePending: []string{p.UIEventID}}
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
		u.ConsumeInputs = []string{ev.ID} // taken from the inbox in the append that records it
	}
	data := p.Data
	var secretNames []string
	if call.pendingKind == baton.PendingSecret {
		if len(p.Data) > 0 {
			return fmt.Errorf("%w: a secret form's values must arrive sealed (use Engine.RespondUI)", errIgnored)
		}
		box, redacted, names := mergeSealed(st.vars[secretsVar], p.Sealed)
		u.Context = map[string]json.RawMessage{secretsVar: box} // the snapshot only: no event carries it
		data, secretNames = redacted, names
	}
	r.offerClientTools(p.ClientTools, u)
	if call.pendingKind == baton.PendingClientTool {
		return r.clientResponse(ctx, ev, p, call, corr, u, len(waiting) > 1)
	}
	res := tool.UIResult{Status: p.Status, UIEventID: p.UIEventID, Data: data}
	result := res.ToolResult()
	if p.Status == uiStatusTimeout {
		result.Content = fmt.Sprintf("Timed out: the person did not respond to %s in time. Go on without it.", call.name)
	}
	payload, _ := json.Marshal(res)
	var events []baton.Event
	switch call.interaction {
	case interactionAutoTool:
		ar := r.autoResponse(call.agent, call.name, call.id, result, payload, p.UIEventID)
		ar.Payload = withInputID(ar.Payload, ev.ID)
		events = append(events, ar)
	default:
		content := result.Content
		if secretNames != nil {
			content = "Secrets received: " + strings.Join(secretNames, ", ") + "."
		}
		events = append(events, baton.NewChatEvent(baton.TypeChatToolResponse, st.chat.ID, call.agent, baton.ToolResponsePayload{
			Kind: "tool_response", Agent: call.agent, ToolName: call.name, ToolCallID: call.id, CallID: call.id, Corr: corr,
			Status: result.Status, Success: result.OK(), Content: content, Payload: payload, UIEventID: p.UIEventID,
			InteractionType: call.interaction, InputID: ev.ID,
		}))
	}
	if patch, ctxEv := r.toolDerived(call.agent, call.name, result.OK(), nil); ctxEv != nil {
		events = append(events, *ctxEv)
		if u.Context == nil {
			u.Context = map[string]json.RawMessage{}
		}
		for k, v := range patch {
			u.Context[k] = v
		}
	}
	if len(waiting) > 1 {
		still := baton.ChatWaitingUITool
		u.Status = &still
	} else if call.interaction == interactionLifecycle {
		// The pause had no text of the person's: resume with the signal,
		// shown as the system's (its text is hidden; its bubble is not).
		events = append(events, baton.NewChatEvent(baton.TypeChatWorkflowResumed, st.chat.ID, systemAgent, baton.WorkflowResumedPayload{
			Kind: "workflow_resumed", Reason: "lifecycle_tool", Agent: call.agent,
		}))
		events = append(events, r.synthetic(systemAgent, ResumeSignal)...)
		events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, systemAgent, baton.TextPayload{
			Kind: "text", Agent: systemAgent, Content: ResumeSignal, Index: st.texts, UIHidden: true,
		}))
		sys := systemAgent
		u.TurnAgent = &sys
	}
	return r.record(ctx, events, u)
}

// withInputID adds input_id to a tool_response payload.
func withInputID(payload json.RawMessage, id string) json.RawMessage {
	var p baton.ToolResponsePayload
	if json.Unmarshal(payload, &p) != nil {
		return payload
	}
	p.InputID = id
	out, _ := json.Marshal(p)
	return out
}
