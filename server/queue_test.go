package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
)

// TestQueue_MergesDeltasOfOneMessageWhileLagging: once frames wait, deltas
// merge into the previous frame only when it is a delta of the same type
// and message (and, for tool calls, the same call, id and name); starts,
// ends and recorded events are kept as they are, in order; the stream is
// cut off only when QueueLen recorded events wait.
func TestQueue_MergesDeltasOfOneMessageWhileLagging(t *testing.T) {
	h := newHub(nil, quietLogger(), 1, 8) // lag 1: merging starts with the second frame
	s, err := h.subscribe("c", nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(ev baton.Event) {
		// No workflow (nil): only agent-less stream events are shown.
		ev.Metadata.TriggerSessionID, ev.Metadata.TriggerAgentName = "c", ""
		h.dispatch(&ev)
	}
	text := func(msg, d string) baton.Event {
		ev, _ := llm.StreamEvent("c", "a", msg, baton.Delta{Kind: baton.DeltaText, Text: d})
		return ev
	}
	call := func(idx int, id, name, args string) baton.Event {
		ev, _ := llm.StreamEvent("c", "a", "m2", baton.Delta{Kind: baton.DeltaToolCall,
			ToolCall: baton.ToolCallDelta{Index: idx, ID: id, Name: name, Arguments: args}})
		return ev
	}
	send(llm.StreamStartEvent("c", "a", "m1"))
	for _, d := range []string{"Hel", "lo, ", "wor", "ld"} {
		send(text("m1", d))
	}
	reasoning, _ := llm.StreamEvent("c", "a", "m1", baton.Delta{Kind: baton.DeltaReasoning, Text: "hmm"})
	send(reasoning)
	send(text("m1", "!"))
	send(text("other", "x"))
	send(call(0, "call_1", "lookup", `{"wo`))
	send(call(0, "", "", `rd":`))
	send(call(0, "", "", `"baton"}`))
	send(call(1, "", "", `{}`))
	rec := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c", TriggerAgentName: "user"}, json.RawMessage(`{"kind":"text","agent":"user","content":"hi"}`))
	rec.Sequence = 1
	h.dispatch(&rec)

	var got []string
	for _, f := range s.q.take(nil) {
		var v struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(f.prepare().data, &v); err != nil {
			t.Fatalf("frame is not JSON: %v: %s", err, f.data)
		}
		if f.typ != v.Type {
			t.Fatalf("frame of type %q holds a %s envelope (SSE names the event by the frame's type)", f.typ, v.Type)
		}
		d, _ := v.Data["delta"].(string)
		got = append(got, v.Type+":"+d)
	}
	want := []string{
		"stream.start:", "stream.text:Hello, world", "stream.reasoning:hmm", "stream.text:!", "stream.text:x",
		`stream.tool_call:{"wo`, `stream.tool_call:rd":"baton"}`, "stream.tool_call:{}", "chat.text:",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Deltas never fill the queue; recorded events do.
	for range 1000 {
		send(text("m3", "y"))
	}
	for i := range int64(8) {
		rec.Sequence = 2 + i
		h.dispatch(&rec)
	}
	select {
	case <-s.kicked:
		t.Fatal("cut off with 8 recorded events waiting: the limit is 8")
	default:
	}
	rec.Sequence = 10
	h.dispatch(&rec)
	select {
	case <-s.kicked:
	default:
		t.Fatal("not cut off with 9 recorded events waiting")
	}
}
