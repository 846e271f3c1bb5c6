package tool

import (
	"context"
	"encoding/json"

	"github.com/batonhq/baton"
	"github.com/google/uuid"
)

// UIRequest is the UI payload of a UI tool's call (ToolResult.UI): the
// component to show the person, how, and the arguments as its payload. The
// engine sends it to the chat UI in chat.tool_call and pauses the chat until
// a ui.tool.response with the same ui_event_id arrives.
type UIRequest struct {
	ToolName  string          `json:"tool_name"`
	Component string          `json:"component"`
	Mode      string          `json:"mode"`
	UIEventID string          `json:"ui_event_id"`
	Payload   json.RawMessage `json:"payload"`
}

// UIResult is a UI tool's result once the person has answered: the
// ui.tool.response's status (for example "success", "cancelled" or "error"),
// the ui_event_id of the request and the component's data.
type UIResult struct {
	Status    string          `json:"status"`
	UIEventID string          `json:"ui_event_id"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// ToolResult turns the person's response into the tool's final result: the
// UIResult as JSON content, with status error unless the response's status
// is "success", "ok" or "submitted".
func (r UIResult) ToolResult() baton.ToolResult {
	raw, _ := json.Marshal(r) // strings and raw JSON always marshal
	st := baton.ToolStatusError
	switch r.Status {
	case "success", "ok", "submitted":
		st = baton.ToolStatusOK
	}
	return baton.ToolResult{Status: st, Content: string(raw)}
}

// uiTool is a UI_Tool. Calling it does not wait: it returns a result with
// Status baton.ToolStatusPending and a UIRequest in UI; pausing and resuming
// the chat belong to the engine. The ui_event_id is derived from the call's
// effect key, so a replayed call shows the same request.
type uiTool struct {
	name, desc string
	ui         UISpec
	params     json.RawMessage
}

func newUITool(s *Spec) (*uiTool, error) {
	if s.UI.Component == "" {
		return nil, baton.Errorf(baton.EINVALID, "ui tool needs ui.component")
	}
	return &uiTool{name: s.toolName(), desc: s.Description, ui: s.UI, params: paramsOrAny(s.Parameters)}, nil
}

func (t *uiTool) Name() string                { return t.name }
func (t *uiTool) Description() string         { return t.desc }
func (t *uiTool) Parameters() json.RawMessage { return t.params }

func (t *uiTool) Call(_ context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	id := "ui_" + uuid.NewSHA1(uuid.NameSpaceURL, []byte("baton:ui:"+cc.EffectKey)).String()
	if cc.ToolCallID == "" {
		id = "ui_" + baton.NewID()
	}
	req := UIRequest{ToolName: t.name, Component: t.ui.Component, Mode: t.ui.Mode, UIEventID: id, Payload: args}
	raw, err := json.Marshal(req)
	if err != nil {
		return baton.ToolResult{}, err
	}
	return baton.ToolResult{
		Status:  baton.ToolStatusPending,
		Content: "Waiting for the person to respond in " + t.ui.Component + ".",
		UI:      raw,
	}, nil
}
