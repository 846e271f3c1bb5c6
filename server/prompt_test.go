package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// The rows of seed 004 §7.4 (Session Route Tests), against the real bus:
// POST /sessions/{id}/prompt only produces a user_query event.

// promptEnv is a chat waiting for input and a bus subscription to user_query.
func promptEnv(t *testing.T) (*env, string, *bus.Subscription) {
	t.Helper()
	e := newEnv(t)
	id := e.start(t, "generator", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	sub, err := e.bus.Subscribe([]string{baton.TypeUserQuery})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return e, id, sub
}

func waitUserQuery(t *testing.T, sub *bus.Subscription) baton.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := sub.Wait(ctx, func(baton.Event) bool { return true })
	if err != nil {
		t.Fatalf("no user_query published: %v", err)
	}
	return ev
}

func TestPromptRoute_CreatesEvent(t *testing.T) {
	e, id, sub := promptEnv(t)
	e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]string{"content": "Hello there"})
	ev := waitUserQuery(t, sub)
	if ev.Type != baton.TypeUserQuery || ev.ID == "" || ev.Timestamp == 0 {
		t.Fatalf("event = %+v, want a user_query with id and timestamp", ev)
	}
	// The bus routed it to the engine, which recorded the message.
	e.waitStatus(t, id, baton.ChatWaitingSecret)
}

func TestPromptRoute_IncludesPayload(t *testing.T) {
	e, id, sub := promptEnv(t)
	e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]string{"content": "Hello there"})
	var p struct {
		SessionID string `json:"sessionId"`
		Content   string `json:"content"`
	}
	if err := json.Unmarshal(waitUserQuery(t, sub).Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.SessionID != id || p.Content != "Hello there" {
		t.Fatalf("payload = %+v, want sessionId %s and the content", p, id)
	}
}

func TestPromptRoute_IncludesMetadata(t *testing.T) {
	e, id, sub := promptEnv(t)
	e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]string{"content": "Hello there"})
	md := waitUserQuery(t, sub).Metadata
	if md.TriggerSessionID != id || md.Source != baton.SourceUser {
		t.Fatalf("metadata = %+v, want trigger_session_id %s and source user", md, id)
	}
}

func TestPromptRoute_ReturnsSuccess(t *testing.T) {
	e, id, _ := promptEnv(t)
	r := e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]string{"content": "Hello there"})
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	m := r.json(t)
	if m["success"] != true || m["sessionId"] != id || m["message"] != "Processing started" {
		t.Fatalf("body = %s", r.body)
	}
}

func TestPromptRoute_MissingContent(t *testing.T) {
	e, id, sub := promptEnv(t)
	for _, body := range []any{nil, map[string]string{}, map[string]string{"content": ""}} {
		r := e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], body)
		if r.status != http.StatusBadRequest || r.errorMessage() != "content: required" {
			t.Fatalf("body %v: %d %s, want 400 content: required", body, r.status, r.body)
		}
	}
	select {
	case ev := <-sub.C():
		t.Fatalf("an event was published: %+v", ev)
	default:
	}
}

func TestPromptRoute_NoSessionSupport(t *testing.T) {
	e := newEnv(t, withoutEngine())
	r := e.do(t, "POST", "/sessions/any/prompt", e.keys[scopeAda], map[string]string{"content": "Hello"})
	if r.status != http.StatusServiceUnavailable || r.json(t)["error"] == nil {
		t.Fatalf("status %d %s, want 503 with an error", r.status, r.body)
	}
}
