package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// clientToolsVar is the reserved context variable holding the tools the
// client offers the chat (a JSON array of baton.ClientTool), the newest set
// it sent. It lives in the context snapshot only, written in the append
// that records the input that brought it (or with the chat, at its start):
// durable, read back on resume and by any instance, and never sent to a
// client (reserved variables never are).
const clientToolsVar = "__client_tools"

// builtinTools are the engine's own tools: a client's tool may not take
// their names.
var builtinTools = map[string]bool{ToolGetEventInfo: true, ToolStartBackgroundTask: true}

// CheckClientTools checks the tools a client offers a chat of workflow
// workflowName: tool.CheckClientTools, and no name that is the workflow's
// (a tool of tools.json, a transfer tool) or the engine's own, so that a
// client's tool never shadows one. The error names the field, as
// tools[i].name.
func (e *Engine) CheckClientTools(workflowName string, tools []baton.ClientTool) error {
	wf := e.workflows[workflowName]
	if wf == nil {
		return baton.Errorf(baton.ENOTFOUND, "workflow %q: not found", workflowName)
	}
	if err := tool.CheckClientTools(tools); err != nil {
		return err
	}
	for i, t := range tools {
		if wf.ToolNameTaken(t.Name) || builtinTools[t.Name] {
			return baton.Errorf(baton.EINVALID, "tools[%d].name: %q is a tool of workflow %q; a client's tool may not take its name", i, t.Name, wf.Name)
		}
	}
	return nil
}

// clientToolsJSON is the value of clientToolsVar for a set the client
// offers: [] for none.
func clientToolsJSON(tools []baton.ClientTool) json.RawMessage {
	if len(tools) == 0 {
		return json.RawMessage("[]")
	}
	raw, err := json.Marshal(tools)
	if err != nil {
		return json.RawMessage("[]") // a checked set always marshals
	}
	return raw
}

// offerClientTools adds to u the client's newest set of tools, raw (a
// client_tools of an input's payload), when it differs from the chat's.
// Absent (nil), the chat keeps its set.
func (r *run) offerClientTools(raw json.RawMessage, u *baton.ChatUpdate) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var tools []baton.ClientTool
	if err := json.Unmarshal(raw, &tools); err != nil {
		r.logger().Warn("engine: client tools ignored", "err", err)
		return
	}
	if err := r.e.CheckClientTools(r.wf.Name, tools); err != nil {
		// An input published straight on the bus is not checked by a
		// server: the set is refused here, and the chat keeps its own.
		r.logger().Warn("engine: client tools ignored", "err", err)
		return
	}
	val := clientToolsJSON(tools)
	cur, ok := r.st.vars[clientToolsVar]
	if !ok && len(tools) == 0 {
		return
	}
	if ok && jsonEqual(cur, val) {
		return
	}
	if u.Context == nil {
		u.Context = map[string]json.RawMessage{}
	}
	u.Context[clientToolsVar] = val
}

// jsonEqual reports whether two JSON values are the same once decoded: the
// snapshot PostgreSQL returns is normalised.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// clientTools returns the client's tools agent may call: those of the
// chat's set its client_tools allow, none that is the workflow's or the
// engine's (the set was checked when it came; the workflow may have
// changed since).
func (r *run) clientTools(agent string) []baton.ClientTool {
	a := r.wf.Agent(agent)
	if a == nil || len(a.ClientTools) == 0 {
		return nil
	}
	raw := r.st.vars[clientToolsVar]
	if len(raw) == 0 {
		return nil
	}
	var all []baton.ClientTool
	if err := json.Unmarshal(raw, &all); err != nil {
		return nil
	}
	out := all[:0]
	for _, t := range all {
		if a.AllowsClientTool(t.Name) && !r.wf.ToolNameTaken(t.Name) && !builtinTools[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

// clientTool returns the client's tool name if agent may call it, or nil.
func (r *run) clientTool(agent, name string) *baton.ClientTool {
	for _, t := range r.clientTools(agent) {
		if t.Name == name {
			return &t
		}
	}
	return nil
}

// clientToolOf is clientTool for a call the model made: nil as well when
// one of agent's own tools has the name (an MCP server's, named only once
// it is listed), which the call is then for.
func (r *run) clientToolOf(ctx context.Context, agent, name string) *baton.ClientTool {
	ct := r.clientTool(agent, name)
	if ct == nil {
		return nil
	}
	if _, err := r.reg.Tool(ctx, agent, name); baton.ErrorCode(err) != baton.ENOTFOUND {
		return nil
	}
	return ct
}

// clientToolDefs appends the client's tools agent may call to defs, those
// whose name no tool of defs has (an MCP server's tool, named only when it
// is listed, keeps its name).
func (r *run) clientToolDefs(agent string, defs []baton.ToolDef) []baton.ToolDef {
	taken := make(map[string]bool, len(defs))
	for _, d := range defs {
		taken[d.Name] = true
	}
	for _, t := range r.clientTools(agent) {
		if taken[t.Name] {
			continue
		}
		defs = append(defs, baton.ToolDef{Name: t.Name, Description: t.Description, Parameters: tool.ClientToolParameters(t)})
	}
	return defs
}

// clientToolCall makes p the call of a client's tool that pauses the chat
// until the client answers, and returns the request it waits for. With
// arguments that fail the tool's schema it returns nil: the call stays
// open and runTool answers it with the error, without pausing.
func (r *run) clientToolCall(ct *baton.ClientTool, p *baton.ToolCallPayload, key string) *baton.PendingRequest {
	if msg := tool.CheckClientArgs(*ct, p.Arguments); msg != "" {
		return nil
	}
	// Derived from the call's effect key, as a UI tool's: a call asked
	// again after a crash before it was recorded shows the same request.
	p.UIEventID = "ui_" + uuid.NewSHA1(uuid.NameSpaceURL, []byte("baton:client:"+baton.EffectKey(r.st.chat.ID, key, p.ToolCallID))).String()
	p.AwaitingResponse = true
	p.PendingKind = baton.PendingClientTool
	return &baton.PendingRequest{UIEventID: p.UIEventID, Kind: baton.PendingClientTool, ToolCallID: p.ToolCallID, ToolName: p.ToolName, Agent: p.Agent}
}

// clientToolError is the result of a call of a client's tool that was not
// sent to the client: its arguments fail the tool's schema (or are over
// tool.MaxClientArgsBytes). tool.CheckClientArgs keeps the failure
// clientToolCall found, so the arguments are not validated again here.
func (r *run) clientToolError(ct *baton.ClientTool, args json.RawMessage) baton.ToolResult {
	msg := tool.CheckClientArgs(*ct, args)
	if msg == "" {
		msg = "the call was not sent to the client"
	}
	return baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Invalid arguments for %s: %s", ct.Name, msg)}
}

// clientContent is a client tool's result as the client gave it: the
// string of a ui.tool.response's data, or its JSON text when it is not a
// string.
func clientContent(data json.RawMessage) string {
	var s string
	if json.Unmarshal(data, &s) == nil {
		return s
	}
	return string(data)
}

// SubmitWithTools is SubmitOnce for a message that comes with the tools
// the client offers (AG-UI, Chat Completions): the set, checked by
// CheckClientTools, replaces the chat's when the message is recorded (nil
// or empty: the client offers none now).
func (e *Engine) SubmitWithTools(ctx context.Context, scope baton.Scope, chatID, eventID, content, source string, tools []baton.ClientTool) error {
	ev := baton.NewUserQuery(scope, chatID, content, source)
	ev.Payload = withClientTools(ev.Payload, tools)
	return e.submit(ctx, scope, chatID, eventID, ev)
}

// RespondUIWithTools is RespondUIOnce for a response that comes with the
// tools the client offers, as SubmitWithTools.
func (e *Engine) RespondUIWithTools(ctx context.Context, scope baton.Scope, chatID, eventID, uiEventID, status string, data json.RawMessage, tools []baton.ClientTool) error {
	raw := clientToolsJSON(tools)
	return e.respondUIWith(ctx, scope, chatID, eventID, uiEventID, status, data, raw)
}

// withClientTools adds client_tools to an input's payload.
func withClientTools(payload json.RawMessage, tools []baton.ClientTool) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(payload, &p) != nil {
		return payload
	}
	p["client_tools"] = clientToolsJSON(tools)
	out, err := json.Marshal(p)
	if err != nil {
		return payload
	}
	return out
}

// clientResponse records the client's result of a call of its tool: the
// content as the client gave it (clientContent), an error when its status
// is not success. more says whether other requests still wait.
func (r *run) clientResponse(ctx context.Context, ev baton.Event, p baton.UIToolResponsePayload, call *openCall, corr string, u *baton.ChatUpdate, more bool) error {
	status, ok := baton.ToolStatusOK, true
	if p.Status != "success" && p.Status != "ok" {
		status, ok = baton.ToolStatusError, false
	}
	events := []baton.Event{baton.NewChatEvent(baton.TypeChatToolResponse, r.st.chat.ID, call.agent, baton.ToolResponsePayload{
		Kind: "tool_response", Agent: call.agent, ToolName: call.name, ToolCallID: call.id, CallID: call.id, Corr: corr,
		Status: status, Success: ok, Content: clientContent(p.Data), UIEventID: p.UIEventID, InputID: ev.ID,
	})}
	if more {
		still := baton.ChatWaitingUITool
		u.Status = &still
	}
	return r.record(ctx, events, u)
}
