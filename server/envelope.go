package server

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// The envelope filter decides which events a client of a chat sees; the
// envelope it sees (baton.Envelope) is encoded by baton.Event.AppendEnvelope.
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

// visible reports whether a client of a chat of wf may see ev, and the agent
// the event is about. A nil wf (the server does not know the chat's
// workflow: it runs no engine, or the workflow was removed) fails closed:
// the person's, the system's and agent-less events, and the types the UI
// needs whoever the agent (select_speaker among them), are shown; no agent's text, tool calls or
// context updates are, since any agent might be internal.
func visible(wf *workflow.Workflow, ev *baton.Event, v *baton.EventView) bool {
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
	if !baton.IsStreamType(ev.Type) && !baton.IsChatType(ev.Type) {
		return false
	}
	v := ev.View()
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

// AppendEnvelope appends ev's envelope as the stream hub builds it for the
// clients of a chat of workflow wf — the filter applied (Visible), the
// agent's flags taken from wf — and reports false, leaving dst as it was,
// for an event no client is shown. For programs that embed baton and
// stream chats their own way, and for benchmarks of the hub's work.
func AppendEnvelope(dst []byte, wf *workflow.Workflow, ev *baton.Event) ([]byte, bool) {
	return appendEnvelope(dst, wf, ev)
}

// appendEnvelope applies the filter to ev and appends its envelope
// (baton.Event.AppendEnvelope) to dst; false when the filter hides it.
func appendEnvelope(dst []byte, wf *workflow.Workflow, ev *baton.Event) ([]byte, bool) {
	if !baton.IsChatType(ev.Type) && !baton.IsStreamType(ev.Type) {
		return dst, false
	}
	v := ev.View()
	if !visible(wf, ev, &v) {
		return dst, false
	}
	var flags baton.AgentFlags
	if baton.IsChatType(ev.Type) {
		agent := v.Agent
		if agent == "" {
			agent = ev.Metadata.TriggerAgentName
		}
		var a *workflow.Agent
		if wf != nil {
			a = wf.Agent(agent)
		}
		flags = baton.AgentFlags{
			Visual:            wf != nil && wf.IsVisual(agent),
			StructuredCapable: a != nil && a.IsStructuredCapable(),
			ToolAgent:         a != nil && a.IsToolAgent(),
		}
	}
	return ev.AppendEnvelope(dst, flags)
}

// clientContext returns the context snapshot a client may see: every
// variable but the reserved ones ("__" prefix).
func clientContext(raw json.RawMessage) map[string]json.RawMessage {
	var vars map[string]json.RawMessage
	_ = json.Unmarshal(raw, &vars)
	out := make(map[string]json.RawMessage, len(vars))
	for k, v := range vars {
		if !baton.IsReservedVariable(k) {
			out[k] = v
		}
	}
	return out
}
