package baton

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/fastjson"
)

// Envelope is one event as a client of a chat receives it
// (spec/runtime-lifecycle.md Phase 3), decoded:
//
//	{"type": "chat.text", "data": {…payload, "is_visual", "is_structured_capable", "is_tool_agent", "sequence"}, "timestamp": "…"}
//
// A recorded (chat.*) event's data is its payload plus the AgentFlags of its
// agent and its sequence; a transient (stream.*) event's data is its
// payload plus "chat_id". Event.AppendEnvelope encodes one; which events a
// client may see at all is the server's filter, not the envelope's.
type Envelope struct {
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	Timestamp string          `json:"timestamp"` // RFC 3339 in UTC, milliseconds
}

// AgentFlags are what an envelope of a recorded event says about the
// event's agent, from its workflow.
type AgentFlags struct {
	Visual            bool // the agent is one of the workflow's visual agents
	StructuredCapable bool // the agent has structured_outputs_required
	ToolAgent         bool // the agent owns a UI tool
}

// EventView is the part of a recorded event's payload a client filter
// looks at: the agent it is about, a handoff's ends, and whether it is a UI
// tool's call or result.
type EventView struct {
	Agent            string `json:"agent"`
	From             string `json:"from"`
	To               string `json:"to"`
	UIEventID        string `json:"ui_event_id"`
	AwaitingResponse bool   `json:"awaiting_response"`
}

// View returns the part of the event a client filter looks at. A stream
// event's agent is in its metadata (llm.StreamEvent), so the bulk of the
// traffic, the deltas, is not parsed; a payload of another shape has no
// agent. View does not fall back to the metadata's agent name for a
// recorded event: a caller that needs an agent does.
func (e *Event) View() EventView {
	if IsStreamType(e.Type) {
		return EventView{Agent: e.Metadata.TriggerAgentName}
	}
	return viewOf(e.Payload)
}

// viewOf parses the view of a payload. (A function of its own, so that only
// recorded events pay for the view json.Unmarshal moves to the heap.)
func viewOf(payload []byte) EventView {
	var v EventView
	_ = fastjson.Unmarshal(payload, &v)
	return v
}

// AppendEnvelope appends the event's encoded Envelope to dst (growing it,
// if need be, to the envelope's size at once), with flags for a recorded
// event's agent. It reports false, leaving dst as it was, for an event
// that is neither chat.* nor stream.*, or whose recorded payload is
// malformed: an envelope is never sent half-formed. (A payload that is
// valid JSON but no object adds nothing to data.) Context variables
// reserved to the runtime (a "__" prefix: the sealed __secrets) never
// leave in an envelope of chat.context_updated, and the prompt of a
// chat.select_speaker (an event rule's system prompt, the workflow author's
// instructions to the agent) never leaves in any.
//
// The encoder is written out by hand, not with encoding/json: the server
// builds an envelope for every stream delta, 50,000 a second under load,
// and copies the payload as it is instead of decoding it.
func (e *Event) AppendEnvelope(dst []byte, flags AgentFlags) ([]byte, bool) {
	chat, stream := IsChatType(e.Type), IsStreamType(e.Type)
	if !chat && !stream {
		return dst, false
	}
	payload := bytes.TrimSpace(e.Payload)
	switch e.Type {
	case TypeChatContextUpdated:
		payload = withoutReserved(payload)
	case TypeChatSelectSpeaker:
		payload = withoutPrompt(payload)
	}
	b := dst
	if need := len(b) + len(payload) + len(e.Type) + len(e.ChatID()) + envelopeOverhead; cap(b) < need {
		b = append(make([]byte, 0, need), b...) // one allocation of the right size
	}
	b = append(b, `{"type":`...)
	b = AppendJSONString(b, e.Type)
	b = append(b, `,"data":`...)
	if len(payload) < 2 || payload[0] != '{' {
		b = append(b, '{')
	} else {
		b = append(b, payload[:len(payload)-1]...)
		if len(bytes.TrimSpace(payload[1:len(payload)-1])) > 0 {
			b = append(b, ',')
		}
	}
	if chat {
		b = append(b, `"is_visual":`...)
		b = strconv.AppendBool(b, flags.Visual)
		b = append(b, `,"is_structured_capable":`...)
		b = strconv.AppendBool(b, flags.StructuredCapable)
		b = append(b, `,"is_tool_agent":`...)
		b = strconv.AppendBool(b, flags.ToolAgent)
		b = append(b, `,"sequence":`...)
		b = strconv.AppendInt(b, e.Sequence, 10)
	} else {
		b = append(b, `"chat_id":`...)
		b = AppendJSONString(b, e.ChatID())
	}
	b = append(b, `},"timestamp":"`...)
	b = time.UnixMilli(e.Timestamp).UTC().AppendFormat(b, envelopeTimestamp)
	b = append(b, `"}`...)
	// Stream payloads are built by llm.StreamEvent and always are objects;
	// a recorded payload is checked, so a bad one is never half sent.
	if !stream && !fastjson.Valid(b[len(dst):]) {
		return dst, false
	}
	return b, true
}

// AppendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it. Event types and chat ids are plain ASCII (ValidateType, the
// stores' ids), which is copied as it is; anything else goes through
// encoding/json.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// envelopeOverhead is what AppendEnvelope adds to a payload, its type and
// its chat id (plain ASCII): the fixed keys, three booleans, a sequence and
// a timestamp.
const envelopeOverhead = len(`{"type":"","data":{,"is_visual":false,"is_structured_capable":false,"is_tool_agent":false,"sequence":-9223372036854775808},"timestamp":"+275760-09-13T00:00:00.000Z"}`) + 8

// envelopeTimestamp is the envelope's timestamp: RFC 3339 in UTC, milliseconds.
const envelopeTimestamp = "2006-01-02T15:04:05.000Z07:00"

// IsReservedVariable reports whether a context variable is the runtime's
// own (a "__" prefix, like the sealed __secrets): no client ever sees it.
func IsReservedVariable(name string) bool { return strings.HasPrefix(name, "__") }

// withoutPrompt removes the prompt of a chat.select_speaker payload: it
// carries an event rule's prompt, added to the agent's system message for
// the turn, which is for the model, not for the people watching. The web UI
// reads only the agent. A payload without one (nearly all) is not decoded.
func withoutPrompt(payload []byte) []byte {
	if !bytes.Contains(payload, []byte(`"prompt"`)) {
		return payload
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(payload, &p) != nil {
		return payload
	}
	if _, ok := p["prompt"]; !ok {
		return payload
	}
	delete(p, "prompt")
	out, err := json.Marshal(p)
	if err != nil {
		return payload
	}
	return out
}

// withoutReserved removes the reserved context variables from a
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
		if IsReservedVariable(k) {
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
