package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/coder/websocket"
)

// TestPublicError: what a client sees of an error. An unavailable error
// from below the engine (natsbridge quotes NATS) shows a generic message;
// one the server wrote shows its own; internal errors show nothing.
func TestPublicError(t *testing.T) {
	nats := fmt.Errorf("publish user_query x: %w", baton.Errorf(baton.EUNAVAILABLE, "route input %s: %v", "x", errors.New("nats: timeout")))
	for _, tc := range []struct {
		err        error
		code, want string
	}{
		{nats, baton.EUNAVAILABLE, msgUnavailable},
		{baton.ErrClosed, baton.EUNAVAILABLE, msgUnavailable},
		{unavailable(msgInputUnroutable, nats), baton.EUNAVAILABLE, msgInputUnroutable},
		{fmt.Errorf("wrapped: %w", unavailable("metrics are off", nil)), baton.EUNAVAILABLE, "metrics are off"},
		{errors.New("sql: database is locked"), baton.EINTERNAL, "internal error"},
		{baton.Errorf(baton.EINVALID, "content: must not be empty"), baton.EINVALID, "content: must not be empty"},
		// A Start whose chat was created though its run was not started
		// names the chat (a retry without a key would start another); one
		// that created nothing is the generic retry.
		{startError(baton.Chat{ID: "c1"}, fmt.Errorf("start wf: %w", nats)), baton.EUNAVAILABLE, "chat c1 was created, but its run could not be started; it starts when the service recovers it: do not start it again"},
		{startError(baton.Chat{}, nats), baton.EUNAVAILABLE, msgUnavailable},
		{startError(baton.Chat{ID: "c1"}, baton.Errorf(baton.EINVALID, "message: too long")), baton.EINVALID, "message: too long"},
	} {
		code, msg := publicError(tc.err)
		if code != tc.code || msg != tc.want {
			t.Errorf("%v: %s %q, want %s %q", tc.err, code, msg, tc.code, tc.want)
		}
		if strings.Contains(msg, "nats") {
			t.Errorf("%v: the cause reaches the client: %q", tc.err, msg)
		}
	}
	if !errors.Is(unavailable("x", context.DeadlineExceeded), context.DeadlineExceeded) || !errors.Is(unavailable("x", nil), baton.ErrUnavailable) {
		t.Error("unavailable hides its cause or its code from errors.Is")
	}
	// Handlers of other packages (metrics) show the same message.
	if msg := baton.ErrorMessage(unavailable(msgUnavailable, nats)); msg != msgUnavailable {
		t.Errorf("baton.ErrorMessage of an unavailable error: %q", msg)
	}
}

// failingRouter fails every input the way natsbridge does when JetStream
// does not answer in time.
type failingRouter struct{}

func (failingRouter) Route(_ context.Context, ev baton.Event) (bool, error) {
	if ev.Type != baton.TypeUserQuery && ev.Type != baton.TypeUIToolResponse {
		return false, nil
	}
	return false, baton.Errorf(baton.EUNAVAILABLE, "route input %s: %v", ev.ID, errors.New("nats: timeout"))
}

// TestInput_UnavailableHidesCause: an input the bus cannot route is 503
// (HTTP) or an unavailable error (WebSocket) asking for a retry with the
// same id; the NATS error text is in the log only.
func TestInput_UnavailableHidesCause(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := e.start(t, "notify", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	e.bus.SetRouter(failingRouter{})
	defer e.bus.SetRouter(nil)
	r := e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], map[string]any{"chat_id": id, "content": "hi"}, "Idempotency-Key", "k-1")
	if r.status != http.StatusServiceUnavailable || r.errorMessage() != msgInputUnroutable || bytes.Contains(r.body, []byte("nats")) {
		t.Fatalf("submit while the input cannot be routed: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]any{"content": "hi"})
	if r.status != http.StatusServiceUnavailable || bytes.Contains(r.body, []byte("nats")) {
		t.Fatalf("prompt while the input cannot be routed: %d %s", r.status, r.body)
	}
	c := e.dial(ctx, t, id, e.waitStatus(t, id, baton.ChatWaitingInput).LastSequence, e.keys[scopeAda])
	defer c.CloseNow()
	writeMsg(ctx, t, c, map[string]any{"type": "user.input.submit", "content": "hi", "id": "m-1"})
	_, raw, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := decodeEnvelope(t, raw); v.Type != "error" || v.str("code") != baton.EUNAVAILABLE || v.str("message") != msgInputUnroutable {
		t.Fatalf("WebSocket submit while the input cannot be routed: %s", raw)
	}
}

// TestWriteError_ClientGone: a request whose client disconnected (its
// context cancelled under a store call) is not logged or answered as a 500.
func TestWriteError_ClientGone(t *testing.T) {
	var logs testenv.LogBuffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, "GET", "/api/chats/acme", nil)
	rec := httptest.NewRecorder()
	s.writeError(rec, req, fmt.Errorf("list chats: %w", context.Canceled))
	if rec.Code == http.StatusInternalServerError || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a client that went away: %d, log %q", rec.Code, logs.String())
	}
	// The same error while the client is still there is a bug: logged.
	rec = httptest.NewRecorder()
	s.writeError(rec, httptest.NewRequest("GET", "/api/chats/acme", nil), fmt.Errorf("list chats: %w", context.Canceled))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a cancellation of the server's own: %d, log %q", rec.Code, logs.String())
	}
}

// recordingRouter notes the ids of the inputs published and leaves them to
// the local bus.
type recordingRouter struct {
	mu  sync.Mutex
	ids []string
}

func (r *recordingRouter) Route(_ context.Context, ev baton.Event) (bool, error) {
	if ev.Type == baton.TypeUserQuery {
		r.mu.Lock()
		r.ids = append(r.ids, ev.ID)
		r.mu.Unlock()
	}
	return false, nil
}

// TestInput_IdempotencyKey: a message sent again with the same key (HTTP
// Idempotency-Key, WebSocket id) is published with the same event id and
// recorded once; different keys, chats or users give different ids; a bad
// key is refused, naming the field.
func TestInput_IdempotencyKey(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &recordingRouter{}
	e.bus.SetRouter(rec)
	defer e.bus.SetRouter(nil)
	id := e.start(t, "notify", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	submit := func(content, key string) response {
		t.Helper()
		return e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], map[string]any{"chat_id": id, "content": content}, "Idempotency-Key", key)
	}
	for range 2 {
		if r := submit("once over HTTP", "req-7f3a"); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		e.waitStatus(t, id, baton.ChatWaitingInput)
	}
	c := e.dial(ctx, t, id, e.waitStatus(t, id, baton.ChatWaitingInput).LastSequence, e.keys[scopeAda])
	defer c.CloseNow()
	acks := 0
	for range 2 {
		writeMsg(ctx, t, c, map[string]any{"type": "user.input.submit", "content": "once over ws", "id": "0b7c9e1e-6a52-4c55-9d6e-4f1f4c0d2f11"})
		for {
			_, raw, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v := decodeEnvelope(t, raw); v.Type == "ack" {
				acks++
				break
			} else if v.Type == "error" {
				t.Fatalf("WebSocket submit: %s", raw)
			}
		}
		e.waitStatus(t, id, baton.ChatWaitingInput)
	}
	users := map[string]int{}
	for _, raw := range e.history(t, id) {
		if v := decodeEnvelope(t, raw); v.Type == baton.TypeChatText && v.str("agent") == "user" {
			users[v.str("content")]++
		}
	}
	if users["once over HTTP"] != 1 || users["once over ws"] != 1 {
		t.Fatalf("messages sent twice with one key were recorded %v times", users)
	}
	rec.mu.Lock()
	ids := append([]string(nil), rec.ids...)
	rec.mu.Unlock()
	if len(ids) != 4 || ids[0] != ids[1] || ids[2] != ids[3] || ids[0] == ids[2] {
		t.Fatalf("event ids of the retries: %v", ids)
	}
	if inputEventID(scopeAda, id, "k") == inputEventID(scopeBob, id, "k") || inputEventID(scopeAda, id, "k") == inputEventID(scopeAda, "other", "k") ||
		inputEventID(baton.Scope{App: "a", User: "bc"}, id, "k") == inputEventID(baton.Scope{App: "ab", User: "c"}, id, "k") {
		t.Error("the same key of another user or chat gives the same event id")
	}
	if inputEventID(scopeAda, id, "k") == inputEventID(scopeAda, id, "k", "ui-1") || inputEventID(scopeAda, id, "k", "ui-1") == inputEventID(scopeAda, id, "k", "ui-2") ||
		inputEventID(scopeAda, id, "k:", "x") == inputEventID(scopeAda, id, "k", ":x") {
		t.Error("a UI response's key must give one id per request it answers, apart from a message's with the same key")
	}
	for _, bad := range []string{"", "has space", strings.Repeat("k", 129), "é"} {
		r := submit("x", bad)
		if r.status != http.StatusBadRequest || !strings.HasPrefix(r.errorMessage(), "Idempotency-Key:") {
			t.Errorf("Idempotency-Key %q: %d %s", bad, r.status, r.body)
		}
	}
	writeMsg(ctx, t, c, map[string]any{"type": "user.input.submit", "content": "x", "id": "has space"})
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v := decodeEnvelope(t, raw); v.Type == "error" {
			if !strings.HasPrefix(v.str("message"), "id:") {
				t.Fatalf("bad WebSocket id: %s", raw)
			}
			break
		}
	}
}

// wsReplyTo reads c until the reply (ack, error or pong) to the message
// whose id is msgID, skipping envelopes and other replies.
func wsReplyTo(ctx context.Context, t testing.TB, c *websocket.Conn, msgID string) envelope {
	t.Helper()
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the reply to %s: %v", msgID, err)
		}
		if v := decodeEnvelope(t, raw); (v.Type == "ack" || v.Type == "error" || v.Type == "pong") && v.str("id") == msgID {
			return v
		}
	}
}

// uiResponses returns the recorded chat.tool_response payloads that answer
// the UI request uiEventID.
func (e *env) uiResponses(t testing.TB, chatID, uiEventID string) []map[string]any {
	t.Helper()
	evs, err := e.store.Events(context.Background(), scopeAda, chatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, ev := range evs {
		var p map[string]any
		if ev.Type == baton.TypeChatToolResponse && json.Unmarshal(ev.Payload, &p) == nil && p["ui_event_id"] == uiEventID {
			out = append(out, p)
		}
	}
	return out
}

// TestUIResponse_IdempotencyKey: a ui.tool.response's id (WebSocket) or
// Idempotency-Key (HTTP) is an idempotency key, as a user.input.submit's:
// the response is recorded once, with an event id derived from the key;
// sent again with the same key after it was applied, it gets the same
// success (ack, 202) instead of "already answered"; another response to
// the answered request, with another key or none, is still refused; a bad
// key is refused, naming the field.
func TestUIResponse_IdempotencyKey(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "generator", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	e.submitHTTP(t, &clientMessage{ChatID: id, Content: ptr("A weekly newsletter.")})
	chat := e.waitStatus(t, id, baton.ChatWaitingSecret)
	secret := chat.Pending[0].UIEventID

	// Over the WebSocket: the secret form.
	c := e.dial(ctx, t, id, chat.LastSequence, e.keys[scopeAda])
	defer c.CloseNow()
	msg := map[string]any{"type": "ui.tool.response", "ui_event_id": secret, "status": "success",
		"data": map[string]string{"NEWSLETTER_API_KEY": testSecret}, "id": "secret-1"}
	writeMsg(ctx, t, c, msg)
	if v := wsReplyTo(ctx, t, c, "secret-1"); v.Type != "ack" {
		t.Fatalf("first ui.tool.response: %s", v.raw)
	}
	chat = e.waitStatus(t, id, baton.ChatWaitingUITool)
	for i := range 2 { // the retry of an applied response, twice
		writeMsg(ctx, t, c, msg)
		if v := wsReplyTo(ctx, t, c, "secret-1"); v.Type != "ack" || v.str("for") != "ui.tool.response" {
			t.Fatalf("retry %d of an applied ui.tool.response with its id: %s, want the same ack", i+1, v.raw)
		}
	}
	other := map[string]any{"type": "ui.tool.response", "ui_event_id": secret, "status": "success",
		"data": map[string]string{"NEWSLETTER_API_KEY": "another"}, "id": "secret-2"}
	writeMsg(ctx, t, c, other)
	if v := wsReplyTo(ctx, t, c, "secret-2"); v.Type != "error" || v.str("code") != baton.ENOTFOUND || !strings.Contains(v.str("message"), "already answered") {
		t.Fatalf("another response (another id) to the answered form: %s, want not_found", v.raw)
	}
	writeMsg(ctx, t, c, map[string]any{"type": "ui.tool.response", "ui_event_id": secret, "data": map[string]string{"NEWSLETTER_API_KEY": "x"}, "id": "has space"})
	if v := wsReplyTo(ctx, t, c, ""); v.Type != "error" || !strings.HasPrefix(v.str("message"), "id:") { // an id refused is not echoed
		t.Fatalf("a ui.tool.response with a bad id: %s, want an error naming id", v.raw)
	}
	if got := e.uiResponses(t, id, secret); len(got) != 1 || got[0]["input_id"] != inputEventID(scopeAda, id, "secret-1", secret) {
		t.Fatalf("responses recorded for the secret form: %v, want one with input_id %s", got, inputEventID(scopeAda, id, "secret-1", secret))
	}

	// Over HTTP: the plan (a UI tool).
	plan := chat.Pending[0].UIEventID
	respond := func(key string, data string) response {
		t.Helper()
		hdr := []string{}
		if key != "" {
			hdr = []string{"Idempotency-Key", key}
		}
		return e.do(t, "POST", "/api/input/submit", e.keys[scopeAda],
			map[string]any{"chat_id": id, "ui_event_id": plan, "status": "success", "data": json.RawMessage(data)}, hdr...)
	}
	if r := respond("plan-1", `{"action":"approve"}`); r.status != http.StatusAccepted {
		t.Fatalf("first response to the plan: %d %s", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatCompleted, baton.ChatWaitingInput)
	if r := respond("plan-1", `{"action":"approve"}`); r.status != http.StatusAccepted {
		t.Fatalf("retry of an applied response with its Idempotency-Key: %d %s, want 202", r.status, r.body)
	}
	for _, key := range []string{"plan-2", ""} {
		if r := respond(key, `{"action":"revise"}`); r.status != http.StatusNotFound || !strings.Contains(r.errorMessage(), "already answered") {
			t.Fatalf("another response (key %q) to the answered plan: %d %s, want 404", key, r.status, r.body)
		}
	}
	if r := respond("has space", `{"action":"approve"}`); r.status != http.StatusBadRequest || !strings.HasPrefix(r.errorMessage(), "Idempotency-Key:") {
		t.Fatalf("a bad Idempotency-Key: %d %s", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatCompleted, baton.ChatWaitingInput)
	if got := e.uiResponses(t, id, plan); len(got) != 1 || got[0]["input_id"] != inputEventID(scopeAda, id, "plan-1", plan) {
		t.Fatalf("responses recorded for the plan: %v, want one with input_id %s", got, inputEventID(scopeAda, id, "plan-1", plan))
	}
}
