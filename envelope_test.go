package baton

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/fastjson"
)

// TestAppendJSONString: the envelope's type and chat id are JSON strings
// whatever they hold.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "chat.text", "0193c2a1-7f3e-7b4a-9c1d-2e8f5a6b7c8d", `a"b\c`, "tab\there", "\x00\x1f\x7f", "<script>&", "héllo ✓", "\xff\xfe"} {
		want, _ := json.Marshal(s)
		if got := AppendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("%q: got %s, want x%s", s, got, want)
		}
	}
}

// TestAppendEnvelope: what a client receives for a recorded event, a
// stream delta and events that have no envelope, decoded as Envelope.
func TestAppendEnvelope(t *testing.T) {
	md := Metadata{TriggerSessionID: "c-1", TriggerAgentName: "A"}
	text := Event{Type: TypeChatText, Timestamp: 1700000000123, Sequence: 7, Metadata: md,
		Payload: json.RawMessage(` {"kind":"text","agent":"A","content":"hi"} `)}
	delta := Event{Type: TypeStreamText, Timestamp: 1700000000123, Metadata: md, Payload: json.RawMessage(`{"message_id":"m","delta":"h"}`)}
	ctxUpd := Event{Type: TypeChatContextUpdated, Timestamp: 1700000000123, Sequence: 8, Metadata: md,
		Payload: json.RawMessage(`{"kind":"context_updated","variables":{"__secrets":"sealed","plan":"x"}}`)}
	empty := Event{Type: TypeChatRunComplete, Timestamp: 1700000000123, Sequence: 9, Metadata: md, Payload: json.RawMessage(`{}`)}
	for _, tc := range []struct {
		name  string
		ev    Event
		flags AgentFlags
		want  string
	}{
		{"recorded", text, AgentFlags{Visual: true, ToolAgent: true},
			`{"type":"chat.text","data":{"kind":"text","agent":"A","content":"hi","is_visual":true,"is_structured_capable":false,"is_tool_agent":true,"sequence":7},"timestamp":"2023-11-14T22:13:20.123Z"}`},
		{"stream", delta, AgentFlags{Visual: true},
			`{"type":"stream.text","data":{"message_id":"m","delta":"h","chat_id":"c-1"},"timestamp":"2023-11-14T22:13:20.123Z"}`},
		{"reserved variables", ctxUpd, AgentFlags{},
			`{"type":"chat.context_updated","data":{"kind":"context_updated","variables":{"plan":"x"},"is_visual":false,"is_structured_capable":false,"is_tool_agent":false,"sequence":8},"timestamp":"2023-11-14T22:13:20.123Z"}`},
		{"empty object", empty, AgentFlags{},
			`{"type":"chat.run_complete","data":{"is_visual":false,"is_structured_capable":false,"is_tool_agent":false,"sequence":9},"timestamp":"2023-11-14T22:13:20.123Z"}`},
	} {
		b, ok := tc.ev.AppendEnvelope([]byte("prefix"), tc.flags)
		if !ok || string(b) != "prefix"+tc.want {
			t.Errorf("%s: %v %s\nwant prefix%s", tc.name, ok, b, tc.want)
			continue
		}
		var env Envelope
		if err := json.Unmarshal(b[len("prefix"):], &env); err != nil || env.Type != tc.ev.Type || env.Timestamp != "2023-11-14T22:13:20.123Z" || !json.Valid(env.Data) {
			t.Errorf("%s: decoded %+v, %v", tc.name, env, err)
		}
	}
	for _, ev := range []Event{
		{Type: TypeChatText, Metadata: md, Payload: json.RawMessage(`{"a":`)},
		{Type: TypeUserQuery, Metadata: md, Payload: json.RawMessage(`{}`)},
	} {
		if b, ok := ev.AppendEnvelope([]byte("x"), AgentFlags{}); ok || string(b) != "x" {
			t.Errorf("%s %s: got an envelope %q", ev.Type, ev.Payload, b)
		}
	}
	notObject := Event{Type: TypeChatText, Metadata: md, Sequence: 3, Payload: json.RawMessage(`[1]`)}
	if b, ok := notObject.AppendEnvelope(nil, AgentFlags{}); !ok || string(b) != `{"type":"chat.text","data":{"is_visual":false,"is_structured_capable":false,"is_tool_agent":false,"sequence":3},"timestamp":"1970-01-01T00:00:00.000Z"}` {
		t.Errorf("payload that is no object: %v %s", ok, b)
	}
	if v := text.View(); v.Agent != "A" {
		t.Errorf("view of a text = %+v", v)
	}
	if v := delta.View(); v.Agent != "A" {
		t.Errorf("view of a delta = %+v, want the metadata's agent", v)
	}
}

// FuzzEnvelopeValid holds the envelope's validity check (internal/fastjson,
// for speed) to encoding/json's: an envelope either would refuse, both
// refuse, and the view a filter reads is the same.
func FuzzEnvelopeValid(f *testing.F) {
	for _, s := range []string{`{"agent":"a","content":"x"}`, `{"agent":"\u00e9","to":"b"}`, `{"a":1,}`, `["x"]`, `{"agent":"a\xff"}`, `{"agent":1,"to":"b"}`, `{"Agent":"a","agent":"b"}`, ``, `nul`,
		`{"agent":"a","x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := fastjson.Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", data, got, want)
		}
		if !json.Valid(data) {
			return
		}
		var want EventView
		if json.Unmarshal(data, &want) != nil {
			return
		}
		if got := viewOf(data); got != want {
			t.Fatalf("view of %q = %+v, encoding/json reads %+v", data, got, want)
		}
	})
}
