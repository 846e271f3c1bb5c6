package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// toolCallEvent builds the chat.tool_call for one of the model's tool
// calls. A UI tool's call is made at once (it only describes the component)
// so that the event carries what the person is shown, and the chat pauses
// for the response.
func (r *run) toolCallEvent(ctx context.Context, agent, msgID, key string, i int, c baton.ToolCall) (baton.Event, *baton.PendingRequest, error) {
	id := c.ID
	if id == "" {
		id = fmt.Sprintf("%s_call%d", msgID, i)
	}
	args := json.RawMessage(c.Arguments)
	if !json.Valid(args) {
		args, _ = json.Marshal(c.Arguments) // keep the model's text; the tool call gets a validation error
	}
	p := baton.ToolCallPayload{Kind: "tool_call", Agent: agent, ToolName: c.Name, ToolCallID: id, Corr: key, Arguments: args, AgentMessageID: msgID, TurnKey: key}
	var pending *baton.PendingRequest
	if r.offeredTransfer(agent, c.Name) != nil {
		p.Transfer = true
	} else if wt := r.wf.Tool(c.Name); wt != nil && wt.ToolType == workflow.UITool && wt.Agent == agent {
		tl, err := r.reg.Tool(ctx, agent, c.Name)
		if err != nil {
			return baton.Event{}, nil, err
		}
		res, err := tl.Call(ctx, r.callContext(agent, key, id), args)
		if err != nil {
			return baton.Event{}, nil, err
		}
		var ui tool.UIRequest
		if res.Status == baton.ToolStatusPending && json.Unmarshal(res.UI, &ui) == nil {
			p.AwaitingResponse = true
			p.UIEventID, p.ComponentType, p.Mode, p.Payload = ui.UIEventID, ui.Component, ui.Mode, ui.Payload
			p.PendingKind = baton.PendingUITool // what the client adapters look for, as on an auto-tool's call
			pending = &baton.PendingRequest{UIEventID: ui.UIEventID, Kind: baton.PendingUITool, ToolCallID: id, ToolName: c.Name, Agent: agent}
		}
		// Otherwise the arguments were invalid: the call stays open and the
		// tool step records the error for the model.
	} else if ct := r.clientToolOf(ctx, agent, c.Name); ct != nil {
		pending = r.clientToolCall(ct, &p, key)
	}
	return baton.NewChatEvent(baton.TypeChatToolCall, r.st.chat.ID, agent, p), pending, nil
}

// runTool runs one open tool call and records its response.
func (r *run) runTool(ctx context.Context, oc openCall) error {
	if r.inheritedAsk(oc) {
		// Answered in the original before the fork: that answer goes to
		// the original's remote task, not from here (toolinput.go).
		return r.endInheritedAsk(ctx, oc)
	}
	t := r.st.turn
	var res baton.ToolResult
	var updates map[string]json.RawMessage
	switch rule := r.transferRule(oc.agent, oc.name); {
	case oc.transfer && rule != nil:
		res = baton.ToolResult{Status: baton.ToolStatusOK, Content: "Transferring to " + transferTarget(rule) + "."}
	case r.clientToolOf(ctx, oc.agent, oc.name) != nil:
		// Not sent to the client: its arguments failed the tool's schema.
		res = r.clientToolError(r.clientToolOf(ctx, oc.agent, oc.name), oc.args)
	default:
		tl, err := r.reg.Tool(ctx, oc.agent, oc.name)
		if err != nil {
			if baton.ErrorCode(err) != baton.ENOTFOUND {
				return err
			}
			res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("There is no tool %q. Use one of the tools offered.", oc.name)}
			break
		}
		cc := r.callContext(oc.agent, t.key, oc.id)
		withAnswer(cc, oc) // a call going on with the person's answer (toolinput.go)
		res, err = tl.Call(ctx, cc, oc.args)
		if err != nil && errors.Is(err, tool.ErrInterrupted) {
			// The process that ran the call is gone (killed, restarted, or
			// its instance lost the chat): the person is told, then the call
			// runs again at once under the same effect key.
			if err := r.recovering(ctx, oc); err != nil {
				return err
			}
			cc.Recovery = true
			res, err = tl.Call(ctx, cc, oc.args)
		}
		if err != nil && errors.Is(err, baton.ErrConflict) {
			// The effect was claimed by a process that may still be running
			// it (or died very recently): wait and try again, recording
			// nothing, until the claim is old enough to be re-run. Logged
			// once per call, not once per try.
			if r.waitingFor != cc.EffectKey {
				r.waitingFor = cc.EffectKey
				r.logger().Info("engine: tool effect in flight elsewhere; waiting", "tool", oc.name, "err", err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(effectRetryWait):
			}
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s failed: %s", oc.name, baton.ErrorMessage(err))}
			r.logger().Warn("engine: tool call failed", "tool", oc.name, "err", err)
		}
		if res.Status == baton.ToolStatusInputRequired {
			if over, ok := tooManyRounds(oc); ok {
				r.logger().Warn("engine: a tool call asked the person too many times; ended", "tool", oc.name, "tool_call_id", oc.id, "rounds", oc.ask.round)
				if a, ok := tl.(tool.Abandoner); ok {
					// Told before the response is recorded: after a crash
					// here the call runs again and is abandoned again,
					// which a remote cancel takes as well.
					a.Abandon(ctx, cc, res.Resume)
				}
				res = over
			} else {
				// The tool asks the person: the call stays open (toolinput.go).
				r.askPerson(oc, res)
				return nil
			}
		}
		if res.Status == baton.ToolStatusPending {
			res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s could not be shown.", oc.name)}
		}
		updates = cc.Vars.Updates()
		for k, v := range res.Updates {
			if updates == nil {
				updates = map[string]json.RawMessage{}
			}
			updates[k] = v
		}
		var note string
		if updates, note = r.toolUpdates(oc.name, updates); note != "" {
			res.Content += note
		}
		for k, v := range updates {
			// A value the store cannot keep (a NUL character, say) would
			// fail the append, and the call with it, on every retry: the
			// tool's result says so instead, and nothing is updated.
			if err := baton.ValidateJSONB("context_updates."+k, v); err != nil {
				res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s returned a context update that cannot be kept: %s", oc.name, baton.ErrorMessage(err))}
				r.logger().Warn("engine: tool context update refused", "tool", oc.name, "variable", k, "err", err)
				updates = nil
				break
			}
		}
	}
	events := []baton.Event{baton.NewChatEvent(baton.TypeChatToolResponse, r.st.chat.ID, oc.agent, baton.ToolResponsePayload{
		Kind: "tool_response", Agent: oc.agent, ToolName: oc.name, ToolCallID: oc.id, CallID: oc.id, Corr: t.key,
		Status: res.Status, Success: res.OK(), Content: res.Content, Payload: res.UI,
	})}
	patch, ctxEv := r.toolDerived(oc.agent, oc.name, res.OK(), updates)
	if ctxEv != nil {
		events = append(events, *ctxEv)
	}
	r.stage(events, &baton.ChatUpdate{Context: patch})
	return nil
}

// recovering records the chat.notice that an interrupted tool call is run
// again, before it runs: what the run staged goes with it, so the notice is
// durable (and sent) before the tool starts.
func (r *run) recovering(ctx context.Context, oc openCall) error {
	r.logger().Warn("engine: tool call interrupted by a process that is gone; running it again with the same effect key", "tool", oc.name, "tool_call_id", oc.id)
	r.stage([]baton.Event{baton.NewChatEvent(baton.TypeChatNotice, r.st.chat.ID, oc.agent, baton.NoticePayload{
		Kind: "notice", Code: baton.NoticeToolRecovery, Agent: oc.agent, Tool: oc.name, ToolCallID: oc.id,
		Message: fmt.Sprintf("Recovering the interrupted call of %s.", oc.name),
	})}, nil)
	return r.flush(ctx)
}

// deferrable reports whether an open tool call may run before what the run
// staged is recorded: a transfer tool, or a Go function of the workflow that
// declares no side effects and is not one of the engine's built-ins (they
// start tasks or read the chat's recorded events). If the process dies
// before the flush, the model is asked again and such a tool may run again,
// which is harmless. Anything else — a command, HTTP or MCP tool, a tool
// with side effects (through the effect ledger, whose key must name a
// recorded call) — runs only after its call is recorded.
func (r *run) deferrable(oc openCall) bool {
	if oc.uiEventID != "" || oc.interaction != "" {
		return false
	}
	if oc.transfer {
		return true
	}
	switch oc.name {
	case ToolGetEventInfo, ToolStartBackgroundTask:
		return false
	}
	wt := r.wf.Tool(oc.name)
	return wt != nil && wt.Kind == workflow.KindGo && !wt.SideEffects
}

func (r *run) callContext(agent, key, callID string) *baton.CallContext {
	st := r.st
	return &baton.CallContext{
		ChatID: st.chat.ID, App: r.scope.App, User: r.scope.User, Workflow: r.wf.Name, Agent: agent,
		TurnKey: key, ToolCallID: callID, EffectKey: baton.EffectKey(st.chat.ID, key, callID),
		Vars:    baton.NewContextVars(st.vars),
		Secrets: r.e.sealer.openAll(st.chat.ID, st.vars[secretsVar], r.wf.DeclaresSecret),
	}
}

// toolDefs returns the tools offered to agent's model: its tools and the
// transfer tools of its llm handoffs.
func (r *run) toolDefs(ctx context.Context, agent string) ([]baton.ToolDef, error) {
	tools, err := r.reg.Tools(ctx, agent)
	if err != nil {
		return nil, err
	}
	defs := make([]baton.ToolDef, 0, len(tools))
	for _, tl := range tools {
		defs = append(defs, baton.ToolDef{Name: tl.Name(), Description: tl.Description(), Parameters: tl.Parameters()})
	}
	for _, rule := range r.wf.HandoffRules(agent) {
		if rule.HandoffType != workflow.HandoffLLM || !r.ruleApplies(rule) {
			continue
		}
		desc := rule.Description
		if desc == "" {
			desc = "Hand the conversation to " + transferTarget(rule) + "."
		}
		defs = append(defs, baton.ToolDef{Name: rule.TransferToolName(), Description: desc, Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)})
	}
	return r.clientToolDefs(agent, defs), nil
}

// toolUpdates keeps the context updates a tool may make: declared,
// non-derived variables not named "__…", each of its declared type
// (workflow.CheckToolUpdate). A tool's output can be steered by whoever
// talks to the model, so it must not pass a derived gate or touch
// __secrets. The others are dropped, logged once per call, and note says so
// for the tool's result (what the model reads); note is "" when none was.
func (r *run) toolUpdates(name string, updates map[string]json.RawMessage) (map[string]json.RawMessage, string) {
	var refused []string
	kept := make(map[string]json.RawMessage, len(updates))
	for k, v := range updates {
		if err := r.wf.CheckToolUpdate(k, v); err != nil {
			refused = append(refused, baton.ErrorMessage(err))
			continue
		}
		kept[k] = v
	}
	if len(refused) == 0 {
		return updates, ""
	}
	slices.Sort(refused)
	r.logger().Warn("engine: tool context updates ignored", "tool", name, "refused", refused)
	return kept, "\n[context updates ignored: " + strings.Join(refused, "; ") + "]"
}
