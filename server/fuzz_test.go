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
