package server

import (
	"encoding/json"
	"testing"

	"github.com/batonhq/baton"
)

// FuzzClientMessage: the WebSocket decoder never panics, every error is
// EINVALID with a message, and an accepted message has a known type and the
// fields that type needs.
func FuzzClientMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"user.input.submit","chat_id":"c","content":"hi"}`,
		`{"type":"ui.tool.response","ui_event_id":"u","status":"success","data":{"a":1}}`,
		`{"type":"resume","last_sequence":42}`,
		`{"type":"ping","id":"1"}`,
		`{"type":"auth","token":"bk_x"}`,
		`{"type":"resume","last_sequence":-1}`,
		`{"type":"x"}`, `[]`, `null`, `{"type":`, `{"type":"ping"} {}`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeClientMessage(data)
		if err != nil {
			if baton.ErrorCode(err) != baton.EINVALID || baton.ErrorMessage(err) == "" {
				t.Fatalf("error %v: code %q", err, baton.ErrorCode(err))
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		switch m.Type {
		case msgSubmit:
			if m.Content == nil {
				t.Fatal("submit without content")
			}
		case msgUIResponse:
			if m.UIEventID == "" {
				t.Fatal("ui.tool.response without ui_event_id")
			}
		case msgResume:
			if m.LastSequence == nil || *m.LastSequence < 0 {
				t.Fatal("resume without a valid last_sequence")
			}
		case msgAuth:
			if m.Token == "" {
				t.Fatal("auth without token")
			}
		case msgPing:
		default:
			t.Fatalf("accepted type %q", m.Type)
		}
	})
}

// TestDecodeClientMessage_IDs: only an input's id (user.input.submit,
// ui.tool.response) is an idempotency key, held to its characters; other
// messages' ids are echoed whatever they hold (a client may number them in
// base64).
func TestDecodeClientMessage_IDs(t *testing.T) {
	for _, tc := range []struct {
		msg string
		ok  bool
	}{
		{`{"type":"ping","id":"a+b/c="}`, true},
		{`{"type":"resume","last_sequence":3,"id":"a+b/c="}`, true},
		{`{"type":"user.input.submit","content":"hi","id":"5f0c2d3e-8a41-4b6e-9d2c-3f1e7a9b0c11"}`, true},
		{`{"type":"user.input.submit","content":"hi","id":"a+b/c="}`, false},
		{`{"type":"ui.tool.response","ui_event_id":"ui_1","data":{},"id":"5f0c2d3e-8a41-4b6e-9d2c-3f1e7a9b0c11"}`, true},
		{`{"type":"ui.tool.response","ui_event_id":"ui_1","data":{},"id":"a+b/c="}`, false},
	} {
		if _, err := decodeClientMessage([]byte(tc.msg)); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.msg, err, tc.ok)
		}
	}
}
