package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// DefaultStructuredRetries is how many times an agent gets feedback on a
// structured output that does not match its schema before the run fails.
const DefaultStructuredRetries = 2

// ---- lifecycle tools ----------------------------------------------------------

// lifecycleTools returns the Lifecycle_Tool entries for trigger that apply to
// agent (an entry with no agent applies to every agent), in file order.
func (r *run) lifecycleTools(trigger, agent string) []*workflow.Tool {
	var out []*workflow.Tool
	for _, t := range r.wf.Tools {
		if t.ToolType == workflow.LifecycleTool && t.Trigger == trigger && (t.Agent == "" || agent == "" || t.Agent == agent) {
			out = append(out, t)
		}
	}
	return out
}

func lifecycleKey(trigger, scope, name string) string { return trigger + "/" + scope + "/" + name }

// nextLifecycle returns the first lifecycle tool at trigger not yet recorded
// for scope (a turn key, or "chat"), or nil when all have run.
func (r *run) nextLifecycle(trigger, agent, scope string) *workflow.Tool {
	for _, t := range r.lifecycleTools(trigger, agent) {
		if !r.st.lifecycle[lifecycleKey(trigger, scope, t.Name)] {
			return t
		}
	}
	return nil
}

// runLifecycle runs one lifecycle tool. A UI tool pauses the chat for the
// person (waiting_secret for a masked form); any other tool runs at once and
// both its call and response are recorded.
func (r *run) runLifecycle(ctx context.Context, wt *workflow.Tool, trigger, agent, scope string) error {
	// A lifecycle tool may act on the world or pause the chat: what led up
	// to it is recorded first.
	if err := r.flush(ctx); err != nil {
		return err
	}
	key := lifecycleKey(trigger, scope, wt.Name)
	callID := "lc_" + shortHash(r.st.chat.ID, key)
	args := wt.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	p := baton.ToolCallPayload{Kind: "tool_call", Agent: agent, ToolName: wt.Name, ToolCallID: callID, Corr: scope, Arguments: args,
		TurnKey: scope, InteractionType: interactionLifecycle, LifecycleKey: key, LifecycleTrigger: trigger}
	tools, err := r.reg.Lifecycle(ctx, trigger, wt.Agent)
	if err != nil {
		return err
	}
	var tl baton.Tool
	for _, t := range tools {
		if t.Name() == wt.Name {
			tl = t
		}
	}
	if tl == nil {
		return r.fail(ctx, agent, baton.Errorf(baton.ENOTFOUND, "lifecycle tool %q: not in the registry", wt.Name))
	}
	cc := r.callContext(agent, scope, callID)
	res, err := tl.Call(ctx, cc, args)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Lifecycle tool %s failed: %s", wt.Name, baton.ErrorMessage(err))}
	}
	var ui tool.UIRequest
	if res.Status == baton.ToolStatusPending && json.Unmarshal(res.UI, &ui) == nil {
		p.AwaitingResponse = true
		p.UIEventID, p.ComponentType, p.Mode, p.Payload = ui.UIEventID, ui.Component, ui.Mode, ui.Payload
		kind, status := baton.PendingUITool, baton.ChatWaitingUITool
		if wt.IsSecretForm() { // its response is sealed, never recorded
			kind, status = baton.PendingSecret, baton.ChatWaitingSecret
		}
		p.PendingKind = kind
		return r.record(ctx, []baton.Event{baton.NewChatEvent(baton.TypeChatToolCall, r.st.chat.ID, agent, p)}, &baton.ChatUpdate{
			Status:     &status,
			AddPending: []baton.PendingRequest{{UIEventID: ui.UIEventID, Kind: kind, ToolCallID: callID, ToolName: wt.Name, Agent: agent}},
		})
	}
	updates, note := r.toolUpdates(wt.Name, cc.Vars.Updates())
	res.Content += note
	events := []baton.Event{
		baton.NewChatEvent(baton.TypeChatToolCall, r.st.chat.ID, agent, p),
		baton.NewChatEvent(baton.TypeChatToolResponse, r.st.chat.ID, agent, baton.ToolResponsePayload{
			Kind: "tool_response", Agent: agent, ToolName: wt.Name, ToolCallID: callID, CallID: callID, Corr: scope,
			Status: res.Status, Success: res.OK(), Content: res.Content, InteractionType: interactionLifecycle,
		}),
	}
	patch, ctxEv := r.toolDerived(agent, wt.Name, res.OK(), updates)
	if ctxEv != nil {
		events = append(events, *ctxEv)
	}
	return r.record(ctx, events, &baton.ChatUpdate{Context: patch})
}

// ---- structured outputs ---------------------------------------------------------

// structuredResult checks an agent's final text against its structured-output
// model. It returns the events that follow the text: chat.structured_output_ready
// when valid; feedback for the agent (a hidden system message that reopens
// the turn) while retries remain; a chat.error when they are used up.
func (r *run) structuredResult(agent *workflow.Agent, text string) (events []baton.Event, failed bool, patch map[string]json.RawMessage) {
	m := agent.Model()
	t := r.st.turn
	data, err := m.ValidateJSON([]byte(strings.TrimSpace(text)))
	if err == nil {
		raw, _ := json.Marshal(data)
		events = append(events, baton.NewChatEvent(baton.TypeChatStructuredOutputReady, r.st.chat.ID, agent.Name, baton.StructuredOutputPayload{
			Kind: "structured_output_ready", Agent: agent.Name, AgentName: agent.Name, ModelName: m.Name, Data: raw,
			TurnIdempotencyKey: t.key, AutoToolMode: agent.AutoToolMode,
		}))
		patch = r.structuredDerived(agent.Name, data)
		if len(patch) > 0 {
			events = append(events, baton.NewChatEvent(baton.TypeChatContextUpdated, r.st.chat.ID, agent.Name, baton.ContextUpdatedPayload{
				Kind: "context_updated", Agent: agent.Name, Variables: patch, Trigger: workflow.StructuredOutputField,
			}))
		}
		return events, false, patch
	}
	if t.retries < DefaultStructuredRetries {
		msg := fmt.Sprintf("Your output did not match the required schema %s. Error: %s. Reply again with only the corrected JSON.", m.Name, err)
		// The agent's text precedes this one in the same append, so the
		// speaker changes to system here: announce it (invariant 6).
		return []baton.Event{
			syntheticEvent(r.st.chat.ID, systemAgent, r.st.turns),
			baton.NewChatEvent(baton.TypeChatText, r.st.chat.ID, systemAgent, baton.TextPayload{
				Kind: "text", Agent: systemAgent, Content: msg, Index: r.st.texts + 1, UIHidden: true, Feedback: true, TurnKey: t.key,
			}),
		}, false, nil
	}
	return []baton.Event{baton.NewChatEvent(baton.TypeChatError, r.st.chat.ID, agent.Name, baton.ErrorPayload{
		Kind: "error", Agent: agent.Name, Code: "invalid_structured_output", Retryable: true, TurnKey: t.key,
		Message: fmt.Sprintf("%s's output did not match %s after %d corrections: %s", agent.Name, m.Name, t.retries, err),
	})}, true, nil
}

// structuredDerived sets structured_output_field variables: trigger_value
// is a dotted path into the structured output.
func (r *run) structuredDerived(agent string, data any) map[string]json.RawMessage {
	var patch map[string]json.RawMessage
	for _, d := range r.wf.DerivedFor(agent) {
		if d.TriggerType != workflow.StructuredOutputField {
			continue
		}
		v, ok := d.FieldValue(data)
		if !ok {
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil || string(r.st.vars[d.Name]) == string(raw) {
			continue
		}
		if patch == nil {
			patch = map[string]json.RawMessage{}
		}
		patch[d.Name] = raw
	}
	return patch
}

// ---- auto-tools -------------------------------------------------------------------

// autoToolArgs builds an auto-tool's arguments from the structured output
// (spec/auto-tool-execution.md, the frontend's two stages, done once here):
// when a top-level key names the tool's component or the output model and
// holds an object, its fields are promoted to the top level; the other keys
// stay as they are. So {"ActionPlan": {"workflow": …}, "agent_message": …}
// becomes {"workflow": …, "agent_message": …}.
func autoToolArgs(data json.RawMessage, component, model string) json.RawMessage {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data
	}
	for _, key := range []string{component, model} {
		nested, ok := top[key]
		if !ok || key == "" {
			continue
		}
		var inner map[string]json.RawMessage
		if json.Unmarshal(nested, &inner) != nil {
			continue
		}
		delete(top, key)
		for k, v := range inner {
			if _, clash := top[k]; !clash {
				top[k] = v
			}
		}
		break
	}
	out, _ := json.Marshal(top)
	return out
}

// fireAutoTool invokes the UI tool of an auto_tool_mode agent for the turn's
// structured output, exactly once per {chat_id}:{turn_idempotency_key}. Two
// things stand guard: the chat's state, which knows every recorded auto-tool
// call (so the step is never taken twice for a turn — this replaces the
// seed's in-memory FIFO of 512 keys, and unlike it survives restarts and is
// not bounded), and the claim in the store's effect ledger, which holds
// across instances. The call is recorded with interaction_type auto_tool; a
// UI tool pauses the chat for the person.
func (r *run) fireAutoTool(ctx context.Context) error {
	st, t := r.st, r.st.turn
	agent := r.wf.Agent(t.agent)
	wt := agent.AutoTool()
	key := st.chat.ID + ":" + t.key
	eff, err := r.e.store.ClaimEffect(ctx, r.scope, st.chat.ID, "auto_tool/"+key, r.e.holder)
	if err != nil {
		return err
	}
	if eff.State == baton.EffectDone {
		// The ledger says it fired, yet no call is recorded: this cannot
		// happen (the result is recorded after the call), so say so loudly.
		r.logger().Error("engine: auto-tool recorded as done without its call; firing again", "key", key)
	}
	comp := ""
	if wt.UI != nil {
		comp = wt.UI.Component
	}
	args := autoToolArgs(t.structured, comp, t.model)
	payload, _ := json.Marshal(map[string]any{
		"tool_args": t.structured, "agent_name": agent.Name, "interaction_type": interactionAutoTool, "workflow_name": r.wf.Name,
	})
	p := baton.ToolCallPayload{Kind: "tool_call", Agent: agent.Name, ToolName: wt.Name, ToolCallID: t.key, Corr: t.key, Arguments: args,
		TurnKey: t.key, AwaitingResponse: false, InteractionType: interactionAutoTool, Payload: payload}
	tl, err := r.reg.Tool(ctx, agent.Name, wt.Name)
	if err != nil {
		return err
	}
	cc := r.callContext(agent.Name, t.key, t.key)
	res, err := tl.Call(ctx, cc, args)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s failed: %s", wt.Name, baton.ErrorMessage(err))}
	}
	var events []baton.Event
	u := &baton.ChatUpdate{}
	var ui tool.UIRequest
	if res.Status == baton.ToolStatusPending && json.Unmarshal(res.UI, &ui) == nil {
		p.UIEventID, p.ComponentType, p.Mode, p.PendingKind = ui.UIEventID, ui.Component, ui.Mode, baton.PendingUITool
		events = append(events, baton.NewChatEvent(baton.TypeChatToolCall, st.chat.ID, agent.Name, p))
		waiting := baton.ChatWaitingUITool
		u.Status = &waiting
		u.AddPending = []baton.PendingRequest{{UIEventID: ui.UIEventID, Kind: baton.PendingUITool, ToolCallID: t.key, ToolName: wt.Name, Agent: agent.Name}}
	} else {
		// Not a UI tool, or its arguments were invalid: the result is final,
		// and an error is shown to the person.
		events = append(events, baton.NewChatEvent(baton.TypeChatToolCall, st.chat.ID, agent.Name, p),
			r.autoResponse(agent.Name, wt.Name, t.key, res, nil, ""))
	}
	if err := r.record(ctx, events, u); err != nil {
		return err
	}
	if err := r.e.store.RecordEffect(ctx, r.scope, st.chat.ID, "auto_tool/"+key, json.RawMessage(`{"fired":true}`)); err != nil {
		r.logger().Warn("engine: record auto-tool effect", "key", key, "err", err)
	}
	return nil
}

// autoResponse is the chat.tool_response of an auto-tool, with the seed's
// success rule: the handler said ok and the result does not carry a status
// of error or failed.
func (r *run) autoResponse(agent, name, key string, res baton.ToolResult, payload json.RawMessage, uiEventID string) baton.Event {
	success := res.OK()
	var inner struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(payload, &inner) == nil && (inner.Status == "error" || inner.Status == "failed") {
		success = false
	}
	status := "ok"
	content := fmt.Sprintf("Tool %s completed successfully.", name)
	if !success {
		status = "error"
		content = fmt.Sprintf("Tool %s reported status error.", name)
		if res.Status == baton.ToolStatusError && payload == nil {
			content += " " + res.Content
		}
	}
	if payload == nil {
		payload, _ = json.Marshal(map[string]string{"status": status, "message": res.Content})
	}
	return baton.NewChatEvent(baton.TypeChatToolResponse, r.st.chat.ID, agent, baton.ToolResponsePayload{
		Kind: "tool_response", Agent: agent, ToolName: name, ToolCallID: key, CallID: key, Corr: key,
		Status: status, Success: success, Content: content, Payload: payload, InteractionType: interactionAutoTool, UIEventID: uiEventID,
	})
}

func shortHash(parts ...string) string {
	return fmt.Sprintf("%07x", fnv32(strings.Join(parts, "\x00"))&0xfffffff)
}
