package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// The envelope filter decides which events a client of a chat sees and
// builds the envelope it sees (spec/runtime-lifecycle.md Phase 3):
//
//	{"type": "chat.text", "data": {…payload, "is_visual", "is_structured_capable", "is_tool_agent", "sequence"}, "timestamp": "…"}
//
// The same function builds live envelopes and replayed ones (WebSocket, SSE
// and the history endpoint), so a client sees the same subsequence of the
// chat's events whichever way they reach it (invariant 3). docs/api.md
// states the rules; visible is their code.

// The agents the runtime itself speaks as.
const (
	agentUser   = "user"
	agentSystem = "system"
)

// eventView is the part of a payload the filter looks at.
type eventView struct {
	Agent            string `json:"agent"`
	From             string `json:"from"`
	To               string `json:"to"`
	UIEventID        string `json:"ui_event_id"`
	AwaitingResponse bool   `json:"awaiting_response"`
}

// visible reports whether a client of a chat of wf may see ev, and the agent
// the event is about.
func visible(wf *workflow.Workflow, ev *baton.Event, v *eventView) bool {
	isVisual := func(agent string) bool {
		switch agent {
		case "", agentUser, agentSystem:
			return true
		}
		return wf == nil || len(wf.Config.VisualAgents) == 0 || wf.IsVisual(agent)
	}
	switch ev.Type {
	case baton.TypeChatInputRequest, baton.TypeChatRunComplete, baton.TypeChatError, baton.TypeChatWorkflowResumed:
		return true // the UI needs these whoever the agent is
	case baton.TypeChatToolCall, baton.TypeChatToolResponse:
		if v.UIEventID != "" || v.AwaitingResponse {
			return true // a UI tool or a form the person answers, and its result
		}
	case baton.TypeChatHandoff:
		return isVisual(v.From) && isVisual(v.To)
	}
	agent := v.Agent
	if agent == "" {
		agent = ev.Metadata.TriggerAgentName
	}
	return isVisual(agent)
}

// frame is one event as a client of a chat receives it: its sequence (0 for
// transient stream.* events) and its encoded envelope, nil when the filter
// hides it. Frames are shared by every client of the chat and never changed.
type frame struct {
	seq  int64
	data []byte
	typ  string
}

// encodeFrame applies the filter to ev and encodes its envelope.
func encodeFrame(wf *workflow.Workflow, ev *baton.Event) *frame {
	f := &frame{seq: ev.Sequence, typ: ev.Type}
	if !baton.IsChatType(ev.Type) && !baton.IsStreamType(ev.Type) {
		return f
	}
	var v eventView
	stream := baton.IsStreamType(ev.Type)
	if stream {
		// Stream deltas are the bulk of the traffic: their agent is in the
		// metadata (llm.StreamEvent), so the payload is not parsed.
		v.Agent = ev.Metadata.TriggerAgentName
	} else {
		_ = json.Unmarshal(ev.Payload, &v) // a payload of another shape has no agent
	}
	if !visible(wf, ev, &v) {
		return f
	}
	payload := bytes.TrimSpace(ev.Payload)
	if ev.Type == baton.TypeChatContextUpdated {
		payload = withoutReserved(payload)
	}
	var b bytes.Buffer
	b.Grow(len(payload) + 160)
	b.WriteString(`{"type":`)
	b.WriteString(strconv.Quote(ev.Type)) // event types are plain ASCII (baton.ValidateType)
	b.WriteString(`,"data":`)
	if len(payload) < 2 || payload[0] != '{' {
		b.WriteByte('{')
	} else {
		b.Write(payload[:len(payload)-1])
		if len(bytes.TrimSpace(payload[1:len(payload)-1])) > 0 {
			b.WriteByte(',')
		}
	}
	if baton.IsChatType(ev.Type) {
		agent := v.Agent
		if agent == "" {
			agent = ev.Metadata.TriggerAgentName
		}
		var a *workflow.Agent
		if wf != nil {
			a = wf.Agent(agent)
		}
		b.WriteString(`"is_visual":`)
		b.WriteString(strconv.FormatBool(wf != nil && wf.IsVisual(agent)))
		b.WriteString(`,"is_structured_capable":`)
		b.WriteString(strconv.FormatBool(a != nil && a.IsStructuredCapable()))
		b.WriteString(`,"is_tool_agent":`)
		b.WriteString(strconv.FormatBool(a != nil && a.IsToolAgent()))
		b.WriteString(`,"sequence":`)
		b.WriteString(strconv.FormatInt(ev.Sequence, 10))
	} else {
		b.WriteString(`"chat_id":`)
		b.WriteString(strconv.Quote(ev.ChatID()))
	}
	b.WriteString(`},"timestamp":"`)
	b.WriteString(time.UnixMilli(ev.Timestamp).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	b.WriteString(`"}`)
	// A payload that is not a JSON object is never sent half-formed. Stream
	// payloads are built by llm.StreamEvent and always are objects.
	if !stream && !json.Valid(b.Bytes()) {
		return f
	}
	f.data = b.Bytes()
	return f
}

// withoutReserved removes context variables whose names start with "__"
// (the sealed __secrets and any other runtime-reserved variable) from a
// chat.context_updated payload.
func withoutReserved(payload []byte) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(payload, &p) != nil {
		return payload
	}
	var vars map[string]json.RawMessage
	if json.Unmarshal(p["variables"], &vars) != nil || vars == nil {
		return payload
	}
	changed := false
	for k := range vars {
		if strings.HasPrefix(k, "__") {
			delete(vars, k)
			changed = true
		}
	}
	if !changed {
		return payload
	}
	p["variables"], _ = json.Marshal(vars)
	out, err := json.Marshal(p)
	if err != nil {
		return payload
	}
	return out
}

// clientContext returns the context snapshot a client may see: every
// variable but the reserved ones ("__" prefix).
func clientContext(raw json.RawMessage) map[string]json.RawMessage {
	var vars map[string]json.RawMessage
	_ = json.Unmarshal(raw, &vars)
	out := make(map[string]json.RawMessage, len(vars))
	for k, v := range vars {
		if !strings.HasPrefix(k, "__") {
			out[k] = v
		}
	}
	return out
}
