package baton

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEvent_RoundTrip(t *testing.T) {
	in := []byte(`{"id":"e-1","type":"background_task.completed","timestamp":1700000000000,"chat_id":"chat-1","sequence":7,` +
		`"metadata":{"trigger_session_id":"chat-1","trigger_agent_id":"a-1","trigger_agent_name":"worker","env_name":"os","source":"tool",` +
		`"custom":{"nested":[1,2,3]},"another":"kept"},"payload":{"taskId":"t-1","result":{"ok":true}}}`)
	ev, err := DecodeEvent(in)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if ev.ChatID() != "chat-1" || ev.Sequence != 7 || ev.Metadata.Source != SourceTool || ev.Metadata.EnvName != "os" {
		t.Fatalf("decoded %+v", ev)
	}
	if string(ev.Metadata.Extra["custom"]) != `{"nested":[1,2,3]}` || string(ev.Metadata.Extra["another"]) != `"kept"` {
		t.Fatalf("extra metadata not kept: %v", ev.Metadata.Extra)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	again, err := DecodeEvent(out)
	if err != nil {
		t.Fatalf("decode of our own output: %v\n%s", err, out)
	}
	out2, _ := json.Marshal(again)
	if string(out) != string(out2) {
		t.Fatalf("round trip changed the event:\n%s\n%s", out, out2)
	}
	// The output must be equivalent JSON to the input (key order aside).
	var a, b any
	_ = json.Unmarshal(in, &a)
	_ = json.Unmarshal(out, &b)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("round trip lost data:\n in: %s\nout: %s", ja, jb)
	}
}

func TestNewEvent(t *testing.T) {
	ev := NewEvent(TypeUserQuery, Metadata{TriggerSessionID: "c", Source: SourceUser}, json.RawMessage(`{"content":"hi"}`))
	if err := ev.Validate(); err != nil {
		t.Fatalf("NewEvent made an invalid event: %v", err)
	}
	if len(ev.ID) != 36 || ev.Timestamp <= 0 {
		t.Fatalf("id %q timestamp %d: want a UUID and the current time", ev.ID, ev.Timestamp)
	}
	if other := NewEvent(TypeUserQuery, Metadata{}, nil); other.ID == ev.ID {
		t.Fatal("two events got the same id")
	}
	out, _ := json.Marshal(NewEvent("x", Metadata{}, nil))
	if !strings.Contains(string(out), `"payload":null`) || !strings.Contains(string(out), `"metadata":{}`) {
		t.Fatalf("empty event JSON: %s", out)
	}
}

func TestDecodeEvent_Errors(t *testing.T) {
	cases := []struct{ in, want string }{
		{``, "event: malformed JSON"},
		{`{"id": "x",`, "event: malformed JSON at line 1"},
		{"{\n  \"id\": \"x\"\n  \"type\": \"y\"\n}", "line 3, column 3"},
		{`[]`, "event: must be a JSON object"},
		{`null`, "event: must be a JSON object"},
		{`{"id": 5, "type": "x"}`, "id: must be a string"},
		{`{"id": "a", "type": 5}`, "type: must be a string"},
		{`{"id": "a", "type": "has space"}`, "type: character ' ' not allowed"},
		{`{"id": "a", "type": ""}`, ""},
		{`{"id": "a", "type": "x", "timestamp": "now"}`, "timestamp: must be an integer"},
		{`{"id": "a", "type": "x", "timestamp": -1}`, "timestamp: must not be negative"},
		{`{"id": "a", "type": "x", "timestamp": 1.5}`, "timestamp: must be an integer"},
		{`{"id": "a", "type": "x", "sequence": -3}`, "sequence: must not be negative"},
		{`{"id": "a", "type": "x", "metadata": []}`, "metadata: must be a JSON object"},
		{`{"id": "a", "type": "x", "metadata": {"source": "alien"}}`, `metadata.source: "alien" is not one of user, tool, env, llm, system`},
		{`{"id": "a", "type": "x", "metadata": {"trigger_session_id": 9}}`, "metadata.trigger_session_id: must be a string"},
		{`{"id": "a", "type": "x", "metadata": {"trigger_session_id": "b"}, "chat_id": "c"}`, `chat_id: "c" does not match metadata.trigger_session_id "b"`},
		{`{"id": "a", "type": "x", "typo": 1}`, "typo: unknown field"},
		{`{"id": "` + strings.Repeat("x", 200) + `", "type": "x"}`, "id: longer than 128 characters"},
		{`{"id": "a\u0001", "type": "x"}`, "id: control characters not allowed"},
	}
	for _, tc := range cases {
		_, err := DecodeEvent([]byte(tc.in))
		if tc.want == "" {
			if err != nil {
				t.Errorf("DecodeEvent(%q) = %v, want no error", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeEvent(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) || ErrorCode(err) != EINVALID {
			t.Errorf("DecodeEvent(%q): error %v is not EINVALID", tc.in, err)
		}
	}
}

func TestEvent_Validate(t *testing.T) {
	good := NewEvent("x", Metadata{}, nil)
	bad := []struct {
		mut  func(*Event)
		want string
	}{
		{func(e *Event) { e.ID = "" }, "id: required"},
		{func(e *Event) { e.Type = "" }, "type: required"},
		{func(e *Event) { e.Timestamp = -5 }, "timestamp"},
		{func(e *Event) { e.Metadata.Source = "x" }, "metadata.source"},
		{func(e *Event) { e.Payload = json.RawMessage(`{`) }, "payload: not valid JSON"},
	}
	for _, tc := range bad {
		ev := good
		tc.mut(&ev)
		if err := ev.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want %q", err, tc.want)
		}
	}
}

func TestErrors(t *testing.T) {
	err := Errorf(ENOTFOUND, "chat %q: not found", "c1")
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, ErrNotFound) || errors.Is(wrapped, ErrInvalid) {
		t.Fatal("code sentinels do not match by code")
	}
	if ErrorCode(wrapped) != ENOTFOUND || HTTPStatus(ErrorCode(wrapped)) != 404 {
		t.Fatalf("code %q", ErrorCode(wrapped))
	}
	if ErrorMessage(err) != `chat "c1": not found` {
		t.Fatalf("message %q", ErrorMessage(err))
	}
	internal := errors.New("pq: password authentication failed for user secret")
	if ErrorCode(internal) != EINTERNAL || ErrorMessage(internal) != "internal error" || HTTPStatus(EINTERNAL) != 500 {
		t.Fatal("internal errors must not leak their text")
	}
	if errors.Is(ErrClosed, ErrUnavailable) != true || errors.Is(Errorf(EUNAVAILABLE, "db down"), ErrClosed) {
		t.Fatal("ErrClosed is an unavailable error, but not every unavailable error is ErrClosed")
	}
	cause := errors.New("disk full")
	if e := Errorf(EUNAVAILABLE, "append: %w", cause); !errors.Is(e, cause) {
		t.Fatal("Errorf must wrap %w causes")
	}
	for code, status := range map[string]int{EINVALID: 400, EUNAUTHORIZED: 401, EFORBIDDEN: 403, ECONFLICT: 409, ETOOLARGE: 413, ERATELIMITED: 429, EUNAVAILABLE: 503} {
		if HTTPStatus(code) != status {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, HTTPStatus(code), status)
		}
	}
}

// FuzzDecodeEvent feeds arbitrary bytes to the decoder: it must never panic,
// every error must be an EINVALID naming a field or the JSON position, and
// whatever it accepts must survive a marshal/decode round trip unchanged.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"id":"e-1","type":"user_query","timestamp":1,"metadata":{"trigger_session_id":"c","source":"user","x":[1]},"payload":{"a":1}}`))
	f.Add([]byte(`{"id":"a","type":"x","chat_id":"c","sequence":3,"payload":null}`))
	f.Add([]byte(`{"metadata":null}`))
	f.Add([]byte(`{"id":"\u0000"}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := DecodeEvent(data)
		if err != nil {
			if ErrorCode(err) != EINVALID {
				t.Fatalf("error %v has code %q, want invalid", err, ErrorCode(err))
			}
			msg := err.Error()
			if !strings.Contains(msg, ":") || !utf8.ValidString(msg) && utf8.Valid(data) {
				t.Fatalf("error %q does not name what is wrong", msg)
			}
			return
		}
		out, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("marshal of a decoded event: %v", err)
		}
		again, err := DecodeEvent(out)
		if err != nil {
			t.Fatalf("our own output does not decode: %v\n%s", err, out)
		}
		out2, err := json.Marshal(again)
		if err != nil || string(out) != string(out2) {
			t.Fatalf("round trip not stable:\n%s\n%s", out, out2)
		}
	})
}

// FuzzValidateJSONB: for any valid JSON, ValidateJSONB never panics, and a
// value it accepts decodes to strings without a NUL character (which
// PostgreSQL's jsonb cannot hold).
func FuzzValidateJSONB(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u0000"`, `{"k":"\\u0000"}`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`, `["\\", "\u00e9\u0000"]`, `"\u12"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		if err := ValidateJSONB("v", b); err != nil {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // 1e700 is JSON, not a float64
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if hasNUL(v) {
			t.Fatalf("accepted %q, which holds a NUL character", b)
		}
	})
}

// hasNUL reports whether a decoded JSON value holds a NUL character in a
// string or a key.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}
