package baton_test

import (
	"encoding/json"
	"testing"

	"github.com/batonhq/baton"
)

func TestMessageOf(t *testing.T) {
	tests := []struct {
		name string
		ev   baton.Event
		want baton.MessageRecord
	}{
		{"user text", baton.Event{Type: baton.TypeChatText, Sequence: 42, Payload: json.RawMessage(`{"kind":"text","agent":"user","content":"Create a workflow"}`)},
			baton.MessageRecord{Role: "user", Name: "user", Content: "Create a workflow", Sequence: 42, EventType: baton.TypeChatText}},
		{"agent text with usage", baton.Event{Type: baton.TypeChatText, Sequence: 43, Payload: json.RawMessage(`{"agent":"ContextAgent","content":"…","agent_message_id":"msg_xyz","tokens":450,"cost":0.00675}`)},
			baton.MessageRecord{Role: "assistant", Name: "ContextAgent", Content: "…", Sequence: 43, EventType: baton.TypeChatText, AgentMessageID: "msg_xyz", Tokens: 450, Cost: 0.00675}},
		{"tool response, object content", baton.Event{Type: baton.TypeChatToolResponse, Payload: json.RawMessage(`{"agent":"A","content":{"ok":true}}`)},
			baton.MessageRecord{Role: "tool", Name: "A", Content: `{"ok":true}`, EventType: baton.TypeChatToolResponse}},
		{"agent from metadata", baton.Event{Type: baton.TypeChatText, Metadata: baton.Metadata{TriggerAgentName: "system"}, Payload: json.RawMessage(`{"content":"resume"}`)},
			baton.MessageRecord{Role: "system", Name: "system", Content: "resume", EventType: baton.TypeChatText}},
		{"non-object payload", baton.Event{Type: baton.TypeChatRunComplete, Payload: json.RawMessage(`[1]`)},
			baton.MessageRecord{Role: "assistant", EventType: baton.TypeChatRunComplete}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := baton.MessageOf(tt.ev)
			tt.want.Timestamp = got.Timestamp
			if got != tt.want {
				t.Errorf("MessageOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPatchContext(t *testing.T) {
	got, err := baton.PatchContext(json.RawMessage(`{"a":1,"b":2}`), map[string]json.RawMessage{"a": json.RawMessage(`null`), "c": json.RawMessage(`"x"`)})
	if err != nil || string(got) != `{"b":2,"c":"x"}` {
		t.Fatalf("PatchContext = %s, %v", got, err)
	}
	if _, err := baton.PatchContext(json.RawMessage(`[1]`), nil); baton.ErrorCode(err) != baton.EINVALID {
		t.Fatalf("PatchContext(array) = %v, want invalid", err)
	}
	if got, _ := baton.PatchContext(nil, nil); string(got) != `{}` {
		t.Fatalf("PatchContext(nil) = %s", got)
	}
}
