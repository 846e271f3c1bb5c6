package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// viewOf parses the part of a payload the filter looks at; a payload of
// another shape has no agent. (A function of its own, so that only recorded
// events pay for the view json.Unmarshal moves to the heap.)
func viewOf(payload []byte) eventView {
	var v eventView
	_ = json.Unmarshal(payload, &v)
	return v
}

// visible reports whether a client of a chat of wf may see ev, and the agent
// the event is about. A nil wf (the server does not know the chat's
// workflow: it runs no engine, or the workflow was removed) fails closed:
// the person's, the system's and agent-less events, and the types the UI
// needs whoever the agent (select_speaker among them), are shown; no agent's text, tool calls or
// context updates are, since any agent might be internal.
func visible(wf *workflow.Workflow, ev *baton.Event, v *eventView) bool {
	isVisual := func(agent string) bool {
		switch agent {
		case "", agentUser, agentSystem:
			return true
		}
		return wf != nil && (len(wf.Config.VisualAgents) == 0 || wf.IsVisual(agent))
	}
	switch ev.Type {
	case baton.TypeChatInputRequest, baton.TypeChatRunComplete, baton.TypeChatError, baton.TypeChatWorkflowResumed:
		return true // the UI needs these whoever the agent is
	case baton.TypeChatSelectSpeaker, baton.TypeChatNotice:
		// The person sees who is working, even an internal agent (a
		// thinking bubble while it runs), and what is being recovered (a
		// notice names no more than the agent and the tool); only that
		// agent's text, tool calls and updates stay hidden.
		return true
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

// Visible reports whether a client of a chat of wf sees ev at all: the
// envelope filter's decision without the envelope, for clients that run in
// the process (`baton chat`), so that they hide what the streams hide. It
// leaves ui_hidden and tool_only texts to the client, as the web UI does.
func Visible(wf *workflow.Workflow, ev *baton.Event) bool {
	var v eventView
	switch {
	case baton.IsStreamType(ev.Type):
		v.Agent = ev.Metadata.TriggerAgentName
	case baton.IsChatType(ev.Type):
		v = viewOf(ev.Payload)
	default:
		return false
	}
	return visible(wf, ev, &v)
}

// frame is one event as a client of a chat receives it: its sequence (0 for
// transient stream.* events) and its encoded envelope, nil when the filter
// hides it. Frames are shared by every client of the chat and never changed
// while they are.
//
// The hub takes its frames from framePool and each stream it queues one to
// releases it once sent (or skipped); the last release puts it back. A
// delta's envelope is built 50,000 times a second under load: allocated
// afresh, envelopes were two fifths of the bytes the server process
// allocated (BenchmarkWS/sustained), and the garbage collector's cycles are
// when stream latency peaks. A frame a stream never gets to (it was cut off
// or ended) is left to the collector.
type frame struct {
	seq  int64
	data []byte
	typ  string
	refs atomic.Int32 // streams yet to release a pooled frame; 0 for the others
	buf  []byte       // a pooled frame's storage, kept when data is nil
	// merge, on a frame built for one lagging stream, holds the deltas
	// merged into it; its data is encoded by prepare (see queue).
	merge *merged
}

// framePool holds the hub's spare frames, with their envelope buffers.
var framePool sync.Pool

// maxPooledEnvelope is the largest envelope buffer kept for reuse: a rare
// big one (a long tool result) is left to the collector rather than held.
const maxPooledEnvelope = 16 << 10

// encodeFrame applies the filter to ev and encodes its envelope in a new frame.
func encodeFrame(wf *workflow.Workflow, ev *baton.Event) *frame {
	f := &frame{seq: ev.Sequence, typ: ev.Type}
	if b, ok := appendEnvelope(nil, wf, ev); ok {
		f.data = b
	}
	return f
}

// pooledFrame is encodeFrame with a frame, and its buffer, from framePool.
// The caller sets refs to the number of streams it queues the frame to, or
// calls recycle.
func pooledFrame(wf *workflow.Workflow, ev *baton.Event) *frame {
	f, _ := framePool.Get().(*frame)
	if f == nil {
		f = new(frame)
	}
	f.seq, f.typ = ev.Sequence, ev.Type
	b, ok := appendEnvelope(f.buf[:0], wf, ev)
	f.buf, f.data = b, nil
	if ok {
		f.data = b
	}
	return f
}

// release is called once by each stream a pooled frame was queued to, when
// it is done with it; the last one recycles it. It does nothing to other
// frames (their refs go negative).
func (f *frame) release() {
	if f.refs.Add(-1) == 0 {
		f.recycle()
	}
}

// recycle puts a frame nobody holds back in framePool.
func (f *frame) recycle() {
	if cap(f.buf) > maxPooledEnvelope {
		f.buf = nil
	}
	f.data, f.typ = nil, ""
	framePool.Put(f)
}

// appendEnvelope applies the filter to ev and appends its envelope to dst
// (growing it, if need be, to the envelope's size at once); false when the
// filter hides it.
func appendEnvelope(dst []byte, wf *workflow.Workflow, ev *baton.Event) ([]byte, bool) {
	if !baton.IsChatType(ev.Type) && !baton.IsStreamType(ev.Type) {
		return dst, false
	}
	var v eventView
	stream := baton.IsStreamType(ev.Type)
	if stream {
		// Stream deltas are the bulk of the traffic: their agent is in the
		// metadata (llm.StreamEvent), so the payload is not parsed.
		v.Agent = ev.Metadata.TriggerAgentName
	} else {
		v = viewOf(ev.Payload)
	}
	if !visible(wf, ev, &v) {
		return dst, false
	}
	payload := bytes.TrimSpace(ev.Payload)
	if ev.Type == baton.TypeChatContextUpdated {
		payload = withoutReserved(payload)
	}
	b := dst
	if need := len(b) + len(payload) + len(ev.Type) + len(ev.ChatID()) + envelopeOverhead; cap(b) < need {
		b = append(make([]byte, 0, need), b...) // one allocation of the right size
	}
	b = append(b, `{"type":`...)
	b = appendJSONString(b, ev.Type)
	b = append(b, `,"data":`...)
	if len(payload) < 2 || payload[0] != '{' {
		b = append(b, '{')
	} else {
		b = append(b, payload[:len(payload)-1]...)
		if len(bytes.TrimSpace(payload[1:len(payload)-1])) > 0 {
			b = append(b, ',')
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
		b = append(b, `"is_visual":`...)
		b = strconv.AppendBool(b, wf != nil && wf.IsVisual(agent))
		b = append(b, `,"is_structured_capable":`...)
		b = strconv.AppendBool(b, a != nil && a.IsStructuredCapable())
		b = append(b, `,"is_tool_agent":`...)
		b = strconv.AppendBool(b, a != nil && a.IsToolAgent())
		b = append(b, `,"sequence":`...)
		b = strconv.AppendInt(b, ev.Sequence, 10)
	} else {
		b = append(b, `"chat_id":`...)
		b = appendJSONString(b, ev.ChatID())
	}
	b = append(b, `},"timestamp":"`...)
	b = time.UnixMilli(ev.Timestamp).UTC().AppendFormat(b, timestampLayout)
	b = append(b, `"}`...)
	// A payload that is not a JSON object is never sent half-formed. Stream
	// payloads are built by llm.StreamEvent and always are objects.
	if !stream && !json.Valid(b[len(dst):]) {
		return dst, false
	}
	return b, true
}

// appendJSONString appends s as a JSON string. Event types and chat ids are
// plain ASCII (baton.ValidateType, the stores' ids), which is copied as it
// is; anything else goes through encoding/json's escaping.
func appendJSONString(b []byte, s string) []byte {
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

// envelopeOverhead is what appendEnvelope adds to a payload, its type and its
// chat id (plain ASCII): the fixed keys, three booleans, a sequence and a
// timestamp.
const envelopeOverhead = len(`{"type":"","data":{,"is_visual":false,"is_structured_capable":false,"is_tool_agent":false,"sequence":-9223372036854775808},"timestamp":"+275760-09-13T00:00:00.000Z"}`) + 8

// timestampLayout is the envelope's timestamp: RFC 3339 in UTC, milliseconds.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

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
