package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// TestFork_HTTP: POST …/fork copies a chat's history up to at_sequence into
// a new chat of the caller's, which goes on to completion; the original is
// untouched; another tenant gets the not-found of an unknown chat; a bad
// at_sequence is a 400 naming the field.
func TestFork_HTTP(t *testing.T) {
	e := newEnv(t)
	ada := e.keys[scopeAda]
	id := e.start(t, "hello", nil)
	orig := e.waitStatus(t, id, baton.ChatCompleted)
	before := e.history(t, id)

	r := e.do(t, "POST", "/api/chats/acme/"+id+"/fork", ada, map[string]any{"at_sequence": 2})
	if r.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	var got struct {
		ChatID     string           `json:"chat_id"`
		Status     baton.ChatStatus `json:"status"`
		ForkedFrom baton.ForkedFrom `json:"forked_from"`
		Last       int64            `json:"last_sequence"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ChatID == "" || got.ChatID == id || got.ForkedFrom.ChatID != id || got.ForkedFrom.Sequence != 2 || got.Last != 2 {
		t.Fatalf("fork answer %s", r.body)
	}
	e.waitStatus(t, got.ChatID, baton.ChatCompleted)
	g := e.do(t, "GET", "/api/chats/acme/"+got.ChatID, ada, nil)
	if g.status != http.StatusOK || !strings.Contains(string(g.body), `"forked_from":{"chat_id":"`+id+`","sequence":2}`) {
		t.Fatalf("GET the fork: %d %s", g.status, g.body)
	}
	if strings.Contains(string(g.body), "__forked_from") {
		t.Fatalf("the reserved variable is shown: %s", g.body)
	}
	forked := e.history(t, got.ChatID)
	for i := range 2 {
		var a, b envelope
		_ = json.Unmarshal(before[i], &a)
		_ = json.Unmarshal(forked[i], &b)
		if a.str("id") != b.str("id") || a.str("content") != b.str("content") || a.Type != b.Type || a.seq() != b.seq() {
			t.Fatalf("forked event %d = %s, original %s", i+1, forked[i], before[i])
		}
	}
	if after := e.history(t, id); len(after) != len(before) {
		t.Fatalf("the original has %d events after the fork, had %d", len(after), len(before))
	}

	// Another tenant: the answer of an unknown chat, and no chat made.
	m := e.do(t, "POST", "/api/chats/acme/"+id+"/fork", e.keys[scopeMallory], map[string]any{"at_sequence": 1})
	unknown := e.do(t, "POST", "/api/chats/acme/no-such-chat/fork", e.keys[scopeMallory], map[string]any{"at_sequence": 1})
	if m.status != http.StatusNotFound || unknown.status != http.StatusNotFound || strings.Contains(string(m.body), "hello") {
		t.Fatalf("another tenant's fork: %d %s (unknown chat: %d)", m.status, m.body, unknown.status)
	}
	if r := e.do(t, "POST", "/api/chats/acme/"+id+"/fork", "", map[string]any{"at_sequence": 1}); r.status != http.StatusUnauthorized {
		t.Fatalf("fork without a key: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{}`, `{"at_sequence":0}`, `{"at_sequence":-2}`, `{"at_sequence":"3"}`, `{"at_sequence":1.5}`,
		`{"at_sequence":null}`, `{"at_sequence":` + itoa(orig.LastSequence+1) + `}`} {
		r := e.do(t, "POST", "/api/chats/acme/"+id+"/fork", ada, json.RawMessage(body))
		if r.status != http.StatusBadRequest || !strings.Contains(r.errorMessage(), "at_sequence") {
			t.Errorf("fork with %s: %d %s, want 400 naming at_sequence", body, r.status, r.body)
		}
	}
	if r := e.do(t, "POST", "/api/chats/acme/"+id+"/fork", ada, json.RawMessage(`{"at_sequence":1,"sequence":2}`)); r.status != http.StatusBadRequest {
		t.Errorf("fork with an unknown field: %d %s", r.status, r.body)
	}
	list := e.do(t, "GET", "/api/chats/acme", ada, nil)
	if n := strings.Count(string(list.body), `"forked_from"`); n != 1 {
		t.Fatalf("list shows %d forks, want 1: %s", n, list.body)
	}
}
