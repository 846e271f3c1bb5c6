package server

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"path"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/workflow"
	"github.com/coder/websocket"
)

// stuckModel is the scripted provider, except that a call made while stuck
// is set streams a word and waits for its context (a model slow to answer);
// entered receives once per such call.
type stuckModel struct {
	stuck   atomic.Bool
	entered chan struct{}
}

func newStuckModel() *stuckModel { return &stuckModel{entered: make(chan struct{}, 4)} }

func (m *stuckModel) providers(wf *workflow.Workflow) (baton.Provider, error) {
	sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
	if err != nil {
		return nil, err
	}
	return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
		if !m.stuck.CompareAndSwap(true, false) {
			return sp.Stream(ctx, req)
		}
		return func(yield func(baton.Delta, error) bool) {
			if !yield(baton.Delta{Kind: baton.DeltaText, Text: "Let me "}, nil) {
				return
			}
			m.entered <- struct{}{}
			<-ctx.Done()
			yield(baton.Delta{}, ctx.Err())
		}
	}), nil
}

type providerFunc func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error]

func (f providerFunc) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return f(ctx, req)
}

func (m *stuckModel) wait(t *testing.T) {
	t.Helper()
	select {
	case <-m.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the model call did not start")
	}
}

// TestCancel_HTTP: POST …/cancel stops a running chat (202 cancelling, then
// the chat is cancelled with chat.run_complete status cancelled in its
// history); a second cancel is 200 cancelled; another tenant's is 404; a
// resume goes on and completes the chat; a cancel of a completed chat is
// 409 and changes nothing.
func TestCancel_HTTP(t *testing.T) {
	m := newStuckModel()
	e := newEnv(t, withProvider(m.providers))
	ada := e.keys[scopeAda]
	m.stuck.Store(true)
	id := e.start(t, "hello", nil)
	m.wait(t)
	if r := e.do(t, "POST", "/api/chats/umbrella/"+id+"/cancel", e.keys[scopeMallory], nil); r.status != http.StatusNotFound {
		t.Fatalf("another tenant's cancel: %d %s", r.status, r.body)
	}
	r := e.do(t, "POST", "/api/chats/acme/"+id+"/cancel", ada, nil)
	if r.status != http.StatusAccepted || r.json(t)["status"] != "cancelling" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatCancelled)
	h := e.history(t, id)
	var last envelope
	if err := json.Unmarshal(h[len(h)-1], &last); err != nil {
		t.Fatal(err)
	}
	if last.Type != baton.TypeChatRunComplete || last.str("status") != "cancelled" {
		t.Fatalf("last envelope %s, want chat.run_complete with status cancelled", h[len(h)-1])
	}
	if r := e.do(t, "POST", "/api/chats/acme/"+id+"/cancel", ada, nil); r.status != http.StatusOK || r.json(t)["status"] != "cancelled" {
		t.Fatalf("second cancel: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/api/chats/acme?status=cancelled", ada, nil); r.status != http.StatusOK || len(r.json(t)["chats"].([]any)) != 1 {
		t.Fatalf("list of cancelled chats: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/api/chats/acme/"+id+"/resume", ada, nil); r.status != http.StatusAccepted {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	done := e.waitStatus(t, id, baton.ChatCompleted)
	r = e.do(t, "POST", "/api/chats/acme/"+id+"/cancel", ada, nil)
	if r.status != http.StatusConflict {
		t.Fatalf("cancel of a completed chat: %d %s", r.status, r.body)
	}
	if msg := r.errorMessage(); msg != "chat "+id+" is completed: there is no run to stop" {
		t.Errorf("409 says %q", msg)
	}
	if c := e.waitStatus(t, id, baton.ChatCompleted); c.LastSequence != done.LastSequence {
		t.Errorf("the refused cancel recorded events: %d → %d", done.LastSequence, c.LastSequence)
	}
}

// TestCancel_WebSocket: {"type":"run.cancel"} on the chat's WebSocket is
// acknowledged and stops the run; the socket then receives the
// chat.run_complete with status cancelled.
func TestCancel_WebSocket(t *testing.T) {
	m := newStuckModel()
	e := newEnv(t, withProvider(m.providers))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.stuck.Store(true)
	id := e.start(t, "hello", nil)
	m.wait(t)
	c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
	defer c.CloseNow()
	writeMsg(ctx, t, c, map[string]any{"type": "run.cancel", "chat_id": id, "id": "stop-1"})
	// The ack and the events are not ordered: read until both came.
	acked, ended := false, false
	for !acked || !ended {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (acked %v, ended %v)", err, acked, ended)
		}
		var v envelope
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		switch {
		case v.Type == "ack" && v.str("for") == "run.cancel":
			acked = true
		case v.Type == "error":
			t.Fatalf("run.cancel refused: %s", raw)
		case v.Type == baton.TypeChatRunComplete:
			if v.str("status") != "cancelled" {
				t.Fatalf("run_complete %s, want status cancelled", raw)
			}
			ended = true
		}
	}
	e.waitStatus(t, id, baton.ChatCancelled)
	c.Close(websocket.StatusNormalClosure, "")
}

// TestMe: GET /api/me names the key's app and user; without a key outside
// dev mode it is 401; in dev mode without a key it is the dev user of
// ?app= (default "default").
func TestMe(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", "/api/me", e.keys[scopeBob], nil)
	if r.status != http.StatusOK {
		t.Fatalf("me: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["app"] != "acme" || m["user"] != "bob" || m["dev"] != false {
		t.Errorf("me = %v", m)
	}
	if r := e.do(t, "GET", "/api/me", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("me without a key: %d %s", r.status, r.body)
	}
	dev := newEnv(t, withConfig(func(c *Config) { c.Dev = true }))
	if m := dev.do(t, "GET", "/api/me", "", nil).json(t); m["app"] != DefaultApp || m["user"] != DevUser || m["dev"] != true {
		t.Errorf("dev me = %v", m)
	}
	if m := dev.do(t, "GET", "/api/me?app=demo", "", nil).json(t); m["app"] != "demo" {
		t.Errorf("dev me of ?app=demo = %v", m)
	}
}
