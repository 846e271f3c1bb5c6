package baton

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// jsonKeys returns the JSON member names of a payload struct with every
// field set (so that omitempty drops none), sorted.
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	rv := reflect.New(reflect.TypeOf(v)).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Float64:
			f.SetFloat(1)
		case reflect.Slice: // json.RawMessage
			f.SetBytes([]byte(`{}`))
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			f.SetMapIndex(reflect.ValueOf("k"), reflect.New(f.Type().Elem()).Elem())
			if f.Type().Elem().Kind() == reflect.Slice {
				f.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf(json.RawMessage(`1`)))
			}
		default:
			t.Fatalf("%T: field %s of kind %s not covered", v, rv.Type().Field(i).Name, f.Kind())
		}
	}
	raw, err := json.Marshal(rv.Interface())
	if err != nil {
		t.Fatalf("%T: %v", v, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%T: %v", v, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestPayloads_WireNames pins the JSON member names of every chat.* and
// input payload: they are the wire format that clients, stored chats and
// JetStream streams depend on, so a renamed field must fail here.
func TestPayloads_WireNames(t *testing.T) {
	for _, c := range []struct {
		payload any
		want    string
	}{
		{TextPayload{}, "agent agent_message_id answers_tool_call_id content cost event_id feedback has_tool_calls index input_id interrupted kind retract_message_id source tokens tool_only turn_key ui_hidden"},
		{SelectSpeakerPayload{}, "_synthetic agent kind prompt source turn_index turn_key"},
		{ToolCallPayload{}, "agent agent_message_id arguments awaiting_response component_type corr event_id interaction_type kind lifecycle_key lifecycle_trigger mode payload pending_kind tool_call_id tool_name transfer turn_key ui_event_id ui_hidden"},
		{ToolResponsePayload{}, "agent call_id content corr event_id input_id interaction_type kind payload status success tool_call_id tool_name ui_event_id ui_hidden"},
		{StructuredOutputPayload{}, "agent agent_name auto_tool_mode data kind model_name turn_idempotency_key"},
		{UsageSummaryPayload{}, "agent agent_message_id cached_tokens completion_tokens cost kind model prompt_tokens reasoning_tokens request_digest total_tokens"},
		{ContextUpdatedPayload{}, "agent kind trigger variables"},
		{HandoffPayload{}, "condition from handoff_type kind prompt to transition_target"},
		{InputRequestPayload{}, "agent kind prompt request_id resume round tool_call_id tool_name"},
		{RunCompletePayload{}, "kind reason status total_turns"},
		{ErrorPayload{}, "agent code kind message retryable turn_key"},
		{WorkflowResumedPayload{}, "agent kind reason"},
		{NoticePayload{}, "agent attempt code kind max_attempts message tool tool_call_id"},
		{RunStartPayload{}, "message"},
		{RunWakePayload{}, "prompt system"},
		{UserQueryPayload{}, "client_tools content sessionId source"},
		{UIToolResponsePayload{}, "client_tools data sealed status ui_event_id"},
	} {
		if got := strings.Join(jsonKeys(t, c.payload), " "); got != c.want {
			t.Errorf("%T members:\n got %s\nwant %s", c.payload, got, c.want)
		}
	}
}

// TestNewUserQuery: the one user_query shape, whichever way in the message
// came, carries the chat id as the seed's sessionId and the caller's scope.
func TestNewUserQuery(t *testing.T) {
	scope := Scope{App: "acme", User: "ann"}
	ev := NewUserQuery(scope, "chat-1", "hello", "ws")
	if ev.Type != TypeUserQuery || ev.ChatID() != "chat-1" || ev.Metadata.Source != SourceUser || ev.ID == "" {
		t.Fatalf("event = %+v", ev)
	}
	if got := ev.Metadata.Scope(); got != scope {
		t.Fatalf("scope = %+v, want %+v", got, scope)
	}
	if string(ev.Payload) != `{"sessionId":"chat-1","content":"hello","source":"ws"}` {
		t.Fatalf("payload = %s", ev.Payload)
	}
	p, err := DecodePayload[UserQueryPayload](&ev)
	if err != nil || p.Content != "hello" || p.Source != "ws" || p.SessionID != "chat-1" {
		t.Fatalf("decoded %+v, %v", p, err)
	}
	if start := NewInput(scope, TypeRunStart, "chat-1", nil); start.Metadata.Source != SourceSystem {
		t.Fatalf("run.start source = %q, want system", start.Metadata.Source)
	}
}
