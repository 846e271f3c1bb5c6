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

// TestMetadata_ScopeFields: the scope is written as the named fields App
// and User, under the JSON keys the engine used when it kept the scope in
// Extra, so an event stored or streamed before (a JetStream stream, an
// inbox row) decodes into the named fields and encodes back to the same
// bytes.
func TestMetadata_ScopeFields(t *testing.T) {
	old := []byte(`{"id":"e-1","type":"user_query","timestamp":1700000000000,"chat_id":"c-1",` +
		`"metadata":{"trigger_session_id":"c-1","source":"user","app":"acme","inbox":true,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","user":"ann"},"payload":{"content":"hi","source":"ws"}}`)
	ev, err := DecodeEvent(old)
	if err != nil {
		t.Fatal(err)
	}
	if got := ev.Metadata.Scope(); got != (Scope{App: "acme", User: "ann"}) {
		t.Fatalf("scope of an old event = %+v", got)
	}
	if ev.Metadata.TraceParent != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("traceparent of an old event = %q", ev.Metadata.TraceParent)
	}
	if _, ok := ev.Metadata.Extra["app"]; ok || len(ev.Metadata.Extra) != 1 || string(ev.Metadata.Extra[InboxKey]) != "true" {
		t.Fatalf("extra = %v, want only the inbox mark", ev.Metadata.Extra)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(old, &a)
	_ = json.Unmarshal(out, &b)
	if !jsonEqual(a, b) {
		t.Fatalf("re-encoded:\n%s\nwant the same JSON as\n%s", out, old)
	}
	if _, err := DecodeEvent([]byte(`{"type":"x","metadata":{"app":5}}`)); err == nil || !strings.Contains(err.Error(), "metadata.app: must be a string") {
		t.Fatalf("non-string app: %v", err)
	}

	// A store's extra column: rows written before the named fields hold the
	// scope as extra keys, rows written now the same; both read back into
	// App and User.
	var md Metadata
	if err := md.SetExtraJSON([]byte(`{"app":"acme","user":"ann","ui_hidden":true}`)); err != nil {
		t.Fatal(err)
	}
	if md.App != "acme" || md.User != "ann" || len(md.Extra) != 1 || string(md.Extra["ui_hidden"]) != "true" {
		t.Fatalf("SetExtraJSON: %+v", md)
	}
	x, err := md.ExtraJSON()
	if err != nil || string(x) != `{"app":"acme","ui_hidden":true,"user":"ann"}` {
		t.Fatalf("ExtraJSON = %s, %v", x, err)
	}
	if x, err := (&Metadata{Source: SourceUser}).ExtraJSON(); x != nil || err != nil {
		t.Fatalf("ExtraJSON of no extra = %s, %v; want nil", x, err)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestMetadata_ScopeInExtra: a Go caller that still puts the scope in
// Extra, as the engine did, loses nothing: Scope reads it, and the JSON
// and a store's extra column carry it into the named fields.
func TestMetadata_ScopeInExtra(t *testing.T) {
	md := Metadata{TriggerSessionID: "c-1", Extra: map[string]json.RawMessage{"app": json.RawMessage(`"acme"`), "user": json.RawMessage(`"ann"`)}}
	want := Scope{App: "acme", User: "ann"}
	if got := md.Scope(); got != want {
		t.Fatalf("Scope = %+v", got)
	}
	raw, err := md.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Metadata
	if err := back.UnmarshalJSON(raw); err != nil || back.App != "acme" || back.User != "ann" {
		t.Fatalf("JSON %s decodes to %+v, %v", raw, back, err)
	}
	x, err := md.ExtraJSON()
	if err != nil {
		t.Fatal(err)
	}
	var col Metadata
	if err := col.SetExtraJSON(x); err != nil || col.Scope() != want || col.Extra != nil {
		t.Fatalf("extra column %s reads back as %+v, %v", x, col, err)
	}
	// The named field wins over an Extra copy.
	md.App = "named"
	if raw, _ := md.MarshalJSON(); strings.Count(string(raw), `"app"`) != 1 || !strings.Contains(string(raw), `"app":"named"`) {
		t.Fatalf("named and extra app: %s", raw)
	}
}
