package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/coder/websocket"
)

// endpoint is one route called on a chat of ada's, for the isolation and
// bad-input tables.
type endpoint struct {
	method, path string
	body         any
}

func chatEndpoints(chatID string) []endpoint {
	return []endpoint{
		{"GET", "/api/chats/acme/" + chatID, nil},
		{"GET", "/api/chats/acme/" + chatID + "/events", nil},
		{"GET", "/api/chats/acme/" + chatID + "/stream", nil},
		{"POST", "/api/chats/acme/" + chatID + "/resume", nil},
		{"GET", "/api/chats/acme/" + chatID + "/export", nil},
		{"DELETE", "/api/chats/acme/" + chatID, nil},
		{"POST", "/api/input/submit", map[string]any{"chat_id": chatID, "content": "hello"}},
		{"POST", "/api/events", map[string]any{"type": "webhook.received", "chat_id": chatID, "payload": map[string]any{"x": 1}}},
		{"POST", "/sessions/" + chatID + "/prompt", map[string]any{"content": "hello"}},
	}
}

// TestIsolation calls every endpoint on ada's chat with another app's key
// and another user's key (404, and nothing of the chat in the answer),
// with no key (401) and from a foreign Origin (403). The chat is untouched.
func TestIsolation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := e.start(t, "generator", map[string]any{"message": "secret plans of ada"})
	before := e.waitStatus(t, id, baton.ChatWaitingInput)
	for _, ep := range chatEndpoints(id) {
		for _, who := range []baton.Scope{scopeBob, scopeMallory} {
			r := e.do(t, ep.method, ep.path, e.keys[who], ep.body)
			if r.status != http.StatusNotFound {
				t.Errorf("%s %s as %v: %d %s, want 404", ep.method, ep.path, who, r.status, r.body)
			}
			for _, leak := range []string{"generator", "InterviewAgent", "secret plans", `"events"`, `"context"`} {
				if bytes.Contains(r.body, []byte(leak)) {
					t.Errorf("%s %s as %v leaks %q: %s", ep.method, ep.path, who, leak, r.body)
				}
			}
		}
		// Mallory naming her own app in the URL still finds nothing.
		if strings.Contains(ep.path, "/acme/") {
			r := e.do(t, ep.method, strings.Replace(ep.path, "/acme/", "/umbrella/", 1), e.keys[scopeMallory], ep.body)
			if r.status != http.StatusNotFound {
				t.Errorf("%s %s as mallory in her app: %d %s, want 404", ep.method, ep.path, r.status, r.body)
			}
		}
		if r := e.do(t, ep.method, ep.path, "", ep.body); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s without key: %d %s, want 401 with WWW-Authenticate", ep.method, ep.path, r.status, r.body)
		}
		if r := e.do(t, ep.method, ep.path, "bk_not-a-key", ep.body); r.status != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong key: %d %s, want 401", ep.method, ep.path, r.status, r.body)
		}
		if r := e.do(t, ep.method, ep.path, e.keys[scopeAda], ep.body, "Origin", "https://evil.example"); r.status != http.StatusForbidden {
			t.Errorf("%s %s from a foreign origin: %d %s, want 403", ep.method, ep.path, r.status, r.body)
		}
	}
	// The list of another user or app does not hold the chat.
	for _, who := range []baton.Scope{scopeBob, scopeMallory} {
		r := e.do(t, "GET", "/api/chats/"+who.App, e.keys[who], nil)
		if r.status != 200 || bytes.Contains(r.body, []byte(id)) {
			t.Errorf("list as %v: %d %s", who, r.status, r.body)
		}
	}
	if r := e.do(t, "GET", "/api/chats/acme", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("list without key: %d", r.status)
	}
	if r := e.do(t, "GET", "/api/workflows", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("workflows without key: %d", r.status)
	}
	if r := e.do(t, "POST", "/api/chats/umbrella/generator/start", e.keys[scopeAda], nil); r.status != http.StatusNotFound {
		t.Errorf("start in another app: %d %s", r.status, r.body)
	}
	// WebSocket: another user's key and no key fail the handshake; a
	// foreign Origin is refused.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		key, origin string
		status      int
	}{{e.keys[scopeBob], "", 404}, {e.keys[scopeMallory], "", 404}, {"bk_wrong", "", 401}, {e.keys[scopeAda], "https://evil.example", 403}} {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+tc.key)
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		c, resp, err := websocket.Dial(wctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws/acme/"+id, &websocket.DialOptions{HTTPHeader: h})
		if err == nil {
			c.CloseNow()
			t.Errorf("websocket %+v: connected", tc)
			continue
		}
		if resp == nil || resp.StatusCode != tc.status {
			t.Errorf("websocket %+v: %v, want %d", tc, err, tc.status)
		}
	}
	// Browser auth as the first message: a wrong token closes 4401, another
	// user's 4404, ada's works.
	for _, tc := range []struct {
		token string
		code  websocket.StatusCode
	}{{"bk_wrong", CloseUnauthorized}, {e.keys[scopeBob], CloseNotFound}} {
		c, _, err := websocket.Dial(wctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws/acme/"+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		writeMsg(wctx, t, c, map[string]any{"type": "auth", "token": tc.token})
		_, _, err = c.Read(wctx)
		if websocket.CloseStatus(err) != tc.code {
			t.Errorf("auth message %q: %v, want close %d", tc.token[:5], err, tc.code)
		}
		c.CloseNow()
	}
	c, _, err := websocket.Dial(wctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws/acme/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeMsg(wctx, t, c, map[string]any{"type": "auth", "token": e.keys[scopeAda]})
	if _, raw, err := c.Read(wctx); err != nil || decodeEnvelope(t, raw).seq() == 0 {
		t.Fatalf("after auth message: %v %s", err, raw)
	}
	c.CloseNow()

	after := e.waitStatus(t, id, baton.ChatWaitingInput)
	if after.LastSequence != before.LastSequence {
		t.Fatalf("the chat changed: sequence %d -> %d", before.LastSequence, after.LastSequence)
	}
}

// TestBadInput sends malformed, unknown, missing, mistyped and oversized
// input to every endpoint: each gets a 4xx whose message names the field,
// and the chat is unharmed.
func TestBadInput(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.MaxBody = 4096 }))
	id := e.start(t, "generator", nil)
	before := e.waitStatus(t, id, baton.ChatWaitingInput)
	key := e.keys[scopeAda]
	big := `{"chat_id":"` + id + `","content":"` + strings.Repeat("a", 5000) + `"}`
	cases := []struct {
		name, method, path string
		body               any
		status             int
		mention            string
	}{
		{"start malformed", "POST", "/api/chats/acme/generator/start", `{"message":`, 400, "incomplete JSON"},
		{"start unknown field", "POST", "/api/chats/acme/generator/start", `{"mesage":"x"}`, 400, "mesage"},
		{"start mistyped", "POST", "/api/chats/acme/generator/start", `{"message":42}`, 400, "message"},
		{"start unknown context", "POST", "/api/chats/acme/generator/start", `{"context":{"nope":1}}`, 400, "context.nope"},
		{"start unknown workflow", "POST", "/api/chats/acme/nope/start", nil, 404, "nope"},
		{"start oversized", "POST", "/api/chats/acme/generator/start", big, 413, "body"},
		{"start trailing", "POST", "/api/chats/acme/generator/start", `{} {}`, 400, "after the JSON"},
		{"submit not an object", "POST", "/api/input/submit", `[1]`, 400, "object"},
		{"submit no chat", "POST", "/api/input/submit", `{"content":"x"}`, 400, "chat_id"},
		{"submit empty body", "POST", "/api/input/submit", nil, 400, "body"},
		{"submit empty content", "POST", "/api/input/submit", `{"chat_id":"` + id + `","content":"   "}`, 400, "content"},
		{"submit mistyped content", "POST", "/api/input/submit", `{"chat_id":"` + id + `","content":7}`, 400, "content"},
		{"submit neither", "POST", "/api/input/submit", `{"chat_id":"` + id + `"}`, 400, "content"},
		{"submit both", "POST", "/api/input/submit", `{"chat_id":"` + id + `","content":"x","ui_event_id":"u"}`, 400, "content"},
		{"submit unknown ui_event_id", "POST", "/api/input/submit", `{"chat_id":"` + id + `","ui_event_id":"nope","data":{}}`, 404, "ui_event_id"},
		{"submit unknown chat", "POST", "/api/input/submit", `{"chat_id":"nope","content":"x"}`, 404, "nope"},
		{"submit unknown field", "POST", "/api/input/submit", `{"chat_id":"` + id + `","content":"x","extra":1}`, 400, "extra"},
		{"submit oversized", "POST", "/api/input/submit", big, 413, "body"},
		{"list bad limit", "GET", "/api/chats/acme?limit=0", nil, 400, "limit"},
		{"list bad status", "GET", "/api/chats/acme?status=zzz", nil, 400, "status"},
		{"events bad after", "GET", "/api/chats/acme/" + id + "/events?after=-1", nil, 400, "after"},
		{"events bad limit", "GET", "/api/chats/acme/" + id + "/events?limit=x", nil, 400, "limit"},
		{"stream bad Last-Event-ID", "GET", "/api/chats/acme/" + id + "/stream?last_sequence=x", nil, 400, "last_sequence"},
		{"ws bad last_sequence", "GET", "/ws/acme/" + id + "?last_sequence=-3", nil, 400, "last_sequence"},
		{"ws last_sequence past the end", "GET", "/ws/acme/" + id + "?last_sequence=999", nil, 400, "last_sequence"},
		{"stream last_sequence past the end", "GET", "/api/chats/acme/" + id + "/stream?last_sequence=999", nil, 400, "last_sequence"},
		{"resume waiting chat", "POST", "/api/chats/acme/" + id + "/resume", nil, 409, "waiting_input"},
		{"events malformed", "POST", "/api/events", `{"type":`, 400, "malformed JSON"},
		{"events no type", "POST", "/api/events", `{"chat_id":"` + id + `"}`, 400, "type"},
		{"events bad type", "POST", "/api/events", `{"type":"a b","chat_id":"` + id + `"}`, 400, "type"},
		{"events reserved type", "POST", "/api/events", `{"type":"chat.text","chat_id":"` + id + `"}`, 400, "type"},
		{"events user_query", "POST", "/api/events", `{"type":"user_query","chat_id":"` + id + `"}`, 400, "type"},
		{"events tool report", "POST", "/api/events", `{"type":"tool.executed","chat_id":"` + id + `","payload":{"tool_name":"x1","status":"y1"}}`, 400, "type"},
		{"events no chat", "POST", "/api/events", `{"type":"webhook.x"}`, 400, "chat_id"},
		{"events unknown field", "POST", "/api/events", `{"type":"webhook.x","chat_id":"` + id + `","bogus":1}`, 400, "bogus"},
		{"events bad source", "POST", "/api/events", `{"type":"webhook.x","chat_id":"` + id + `","metadata":{"source":"martian"}}`, 400, "metadata.source"},
		{"events sequence", "POST", "/api/events", `{"type":"webhook.x","chat_id":"` + id + `","sequence":3}`, 400, "sequence"},
		{"events oversized", "POST", "/api/events", `{"type":"webhook.x","chat_id":"` + id + `","payload":"` + strings.Repeat("a", 5000) + `"}`, 413, "body"},
		{"prompt no content", "POST", "/sessions/" + id + "/prompt", `{}`, 400, "content"},
		{"prompt mistyped", "POST", "/sessions/" + id + "/prompt", `{"content":["x"]}`, 400, "content"},
		{"unknown route", "GET", "/api/nope", nil, 404, "no such endpoint"},
	}
	for _, tc := range cases {
		r := e.do(t, tc.method, tc.path, key, tc.body)
		var eb errorBody
		if r.status != tc.status || json.Unmarshal(r.body, &eb) != nil || !strings.Contains(eb.Error.Message, tc.mention) || eb.Error.Code == "" {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, r.status, r.body, tc.status, tc.mention)
		}
	}

	// WebSocket messages: each gets an error reply naming the field; the
	// connection goes on.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := e.dial(ctx, t, id, before.LastSequence, key)
	defer c.CloseNow()
	wsCases := []struct{ msg, mention string }{
		{`{"type":`, "incomplete JSON"},
		{`{"type":"ping",}`, "malformed JSON"},
		{`[]`, "object"},
		{`{}`, "type"},
		{`{"type":"dance"}`, "type"},
		{`{"type":7}`, "type"},
		{`{"type":"user.input.submit"}`, "content"},
		{`{"type":"user.input.submit","content":5}`, "content"},
		{`{"type":"user.input.submit","content":"  "}`, "content"},
		{`{"type":"user.input.submit","content":"x","chat_id":"other"}`, "chat_id"},
		{`{"type":"user.input.submit","content":"x","last_sequence":1}`, "last_sequence"},
		{`{"type":"ui.tool.response","data":{}}`, "ui_event_id"},
		{`{"type":"ui.tool.response","ui_event_id":"nope","data":{}}`, "ui_event_id"},
		{`{"type":"resume"}`, "last_sequence"},
		{`{"type":"resume","last_sequence":-1}`, "last_sequence"},
		{`{"type":"resume","last_sequence":"1"}`, "last_sequence"},
		{`{"type":"resume","last_sequence":999}`, "last_sequence"},
		{`{"type":"ping","content":"x"}`, "content"},
		{`{"type":"auth","token":"bk_x"}`, "auth"},
		{`{"type":"ping","extra":true}`, "extra"},
	}
	for _, tc := range wsCases {
		if err := c.Write(ctx, websocket.MessageText, []byte(tc.msg)); err != nil {
			t.Fatal(err)
		}
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("ws %s: %v", tc.msg, err)
		}
		var rep wsReply
		if json.Unmarshal(raw, &rep) != nil || rep.Type != "error" || !strings.Contains(rep.Data.Message, tc.mention) {
			t.Errorf("ws %s: %s, want an error naming %q", tc.msg, raw, tc.mention)
		}
	}
	writeMsg(ctx, t, c, map[string]any{"type": "ping", "id": "p1"})
	if _, raw, err := c.Read(ctx); err != nil || !bytes.Contains(raw, []byte(`"type":"pong"`)) || !bytes.Contains(raw, []byte(`"id":"p1"`)) {
		t.Fatalf("ping: %v %s", err, raw)
	}
	// An oversized message closes the connection with 1009.
	big2 := `{"type":"user.input.submit","content":"` + strings.Repeat("a", DefaultMaxMessage) + `"}`
	_ = c.Write(ctx, websocket.MessageText, []byte(big2))
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("oversized message: %v, want close 1009", err)
	}

	after := e.waitStatus(t, id, baton.ChatWaitingInput)
	if after.LastSequence != before.LastSequence {
		t.Fatalf("bad input changed the chat: sequence %d -> %d", before.LastSequence, after.LastSequence)
	}
	// A completed chat refuses messages with 409.
	h := newEnv(t, withWorkflows(benchDir))
	done := h.start(t, "bench", nil)
	h.waitStatus(t, done, baton.ChatCompleted)
	if r := h.do(t, "POST", "/api/input/submit", h.keys[scopeAda], map[string]any{"chat_id": done, "content": "more"}); r.status != 409 {
		t.Errorf("message to a completed chat: %d %s", r.status, r.body)
	}
	if r := h.do(t, "POST", "/api/chats/acme/"+done+"/resume", h.keys[scopeAda], nil); r.status != 409 {
		t.Errorf("resume a completed chat: %d %s", r.status, r.body)
	}
}

// TestSubmitRetryAfterTheChatMovedOn: a message retried with its
// idempotency key once the chat has moved on (it waits for a form the
// message led to, which takes no message) gets the first answer again, on
// both routes that take a key, and is recorded once; a message without a
// key is refused there.
func TestSubmitRetryAfterTheChatMovedOn(t *testing.T) {
	e := newEnv(t)
	key := e.keys[scopeAda]
	id := e.start(t, "generator", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	submit := func() response {
		return e.do(t, "POST", "/api/input/submit", key, map[string]any{"chat_id": id, "content": "A weekly newsletter."}, "Idempotency-Key", "msg-1")
	}
	if r := submit(); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatWaitingSecret)
	if r := submit(); r.status != http.StatusAccepted {
		t.Fatalf("retry once the chat waits for its form: %d %s, want the first answer again", r.status, r.body)
	}
	if r := e.do(t, "POST", "/sessions/"+id+"/prompt", key, map[string]any{"content": "A weekly newsletter."}, "Idempotency-Key", "msg-1"); r.status != http.StatusOK {
		t.Fatalf("the same retry through the session route: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/api/input/submit", key, map[string]any{"chat_id": id, "content": "Another."}); r.status != http.StatusConflict {
		t.Fatalf("a new message while the chat waits for its form: %d %s, want 409", r.status, r.body)
	}
	evs, err := e.store.Events(context.Background(), scopeAda, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == baton.TypeChatText && strings.Contains(string(ev.Payload), "A weekly newsletter.") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the message is recorded %d times, want once", n)
	}
}

// TestUIResponseValidation: a UI tool response must answer a request
// pending in this chat, and a secret form's data must be an object of
// strings; answered requests are refused.
func TestUIResponseValidation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := e.start(t, "generator", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	other := e.start(t, "generator", nil)
	e.waitStatus(t, other, baton.ChatWaitingInput)
	e.submitHTTP(t, &clientMessage{ChatID: id, Content: ptr("A weekly newsletter.")})
	c := e.waitStatus(t, id, baton.ChatWaitingSecret)
	secret := c.Pending[0].UIEventID
	key := e.keys[scopeAda]
	for _, tc := range []struct {
		body   map[string]any
		status int
		field  string
	}{
		{map[string]any{"chat_id": other, "ui_event_id": secret, "data": map[string]string{"NEWSLETTER_API_KEY": "x"}}, 404, "ui_event_id"},
		{map[string]any{"chat_id": id, "ui_event_id": secret, "data": []int{1}}, 400, "data"},
		{map[string]any{"chat_id": id, "ui_event_id": secret, "data": map[string]int{"NEWSLETTER_API_KEY": 1}}, 400, "data"},
		{map[string]any{"chat_id": id, "ui_event_id": secret}, 400, "data"},
		{map[string]any{"chat_id": id, "ui_event_id": secret, "data": map[string]string{"NEWSLETTER_API_KEY": "sk\x00x"}}, 400, "data.NEWSLETTER_API_KEY: contains a NUL byte"},
		{map[string]any{"chat_id": id, "ui_event_id": secret, "status": "maybe", "data": map[string]string{}}, 400, "status"},
		{map[string]any{"chat_id": id, "content": "hi"}, 409, "ui.tool.response"},
	} {
		r := e.do(t, "POST", "/api/input/submit", key, tc.body)
		if r.status != tc.status || !strings.Contains(r.errorMessage(), tc.field) {
			t.Errorf("%v: %d %s, want %d naming %s", tc.body, r.status, r.body, tc.status, tc.field)
		}
	}
	e.submitHTTP(t, &clientMessage{ChatID: id, UIEventID: secret, Status: "success", Data: json.RawMessage(`{"NEWSLETTER_API_KEY":"` + testSecret + `"}`)})
	e.waitStatus(t, id, baton.ChatWaitingUITool)
	r := e.do(t, "POST", "/api/input/submit", key, map[string]any{"chat_id": id, "ui_event_id": secret, "data": map[string]string{"NEWSLETTER_API_KEY": "again"}})
	if r.status != 404 || !strings.Contains(r.errorMessage(), "already answered") {
		t.Errorf("answer twice: %d %s", r.status, r.body)
	}
	// The chat view shows what a client may see: never __secrets.
	r = e.do(t, "GET", "/api/chats/acme/"+id, key, nil)
	if r.status != 200 || bytes.Contains(r.body, []byte("__secrets")) || bytes.Contains(r.body, []byte(testSecret)) {
		t.Fatalf("chat view: %d %s", r.status, r.body)
	}
	raw, _ := e.store.GetChat(ctx, scopeAda, id)
	if !bytes.Contains(raw.Context, []byte("__secrets")) {
		t.Fatalf("the store has no sealed secrets, the check above proves nothing: %s", raw.Context)
	}
	view := r.json(t)
	if p, _ := view["pending"].([]any); len(p) != 1 {
		t.Errorf("pending: %v", view["pending"])
	}
}

func ptr[T any](v T) *T { return &v }

// TestEndpoints exercises the happy paths of the remaining endpoints.
func TestEndpoints(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	key := e.keys[scopeAda]
	for _, p := range []string{"/healthz", "/readyz", "/api/openapi.json"} {
		if r := e.do(t, "GET", p, "", nil); r.status != 200 {
			t.Errorf("%s: %d", p, r.status)
		}
	}
	r := e.do(t, "GET", "/api/workflows", key, nil)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"visual_agents":["Talker"]`)) || bytes.Contains(r.body, []byte("system_message")) || bytes.Contains(r.body, []byte("You tell stories")) {
		t.Fatalf("workflows: %d %s", r.status, r.body)
	}
	id := e.start(t, "bench", map[string]any{"message": "a story please"})
	e.waitStatus(t, id, baton.ChatCompleted)
	r = e.do(t, "GET", "/api/chats/acme?workflow=bench&status=completed&limit=5", key, nil)
	if r.status != 200 || !bytes.Contains(r.body, []byte(id)) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/api/chats/acme/"+id+"/events?limit=2", key, nil)
	var page historyPage
	if r.status != 200 || json.Unmarshal(r.body, &page) != nil || page.LastSequence != 2 || !page.More || page.ChatID != id {
		t.Fatalf("events page: %d %s", r.status, r.body)
	}
	// External event: accepted, idempotent by id, observed on the bus once.
	sub, err := e.bus.Subscribe([]string{"webhook.*"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev := map[string]any{"id": "evt-1", "type": "webhook.received", "chat_id": id, "payload": map[string]any{"ok": true}, "metadata": map[string]any{"app": "umbrella"}}
	for range 2 {
		if r := e.do(t, "POST", "/api/events", key, ev); r.status != http.StatusAccepted || !bytes.Contains(r.body, []byte(`"id":"evt-1"`)) {
			t.Fatalf("external event: %d %s", r.status, r.body)
		}
	}
	got, err := sub.Wait(context.Background(), func(baton.Event) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if app := got.Metadata.App; app != "acme" || got.Metadata.Source != baton.SourceEnv {
		t.Fatalf("external event scope: app %q source %q: the client's metadata must not choose the tenant", got.Metadata.App, got.Metadata.Source)
	}
	select {
	case dup := <-sub.C():
		t.Fatalf("duplicate id delivered twice: %+v", dup)
	default:
	}
	// Delete: the chat is gone, session.deleted is published, streams end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := e.dial(ctx, t, id, e.waitStatus(t, id, baton.ChatCompleted).LastSequence, key)
	defer c.CloseNow()
	waitStreams(t, e, 1)
	if r := e.do(t, "DELETE", "/api/chats/acme/"+id, key, nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != CloseNotFound {
		t.Errorf("stream of a deleted chat: %v, want close %d", err, CloseNotFound)
	}
	if r := e.do(t, "GET", "/api/chats/acme/"+id, key, nil); r.status != 404 {
		t.Errorf("get after delete: %d", r.status)
	}
	if r := e.do(t, "DELETE", "/api/chats/acme/"+id, key, nil); r.status != 404 {
		t.Errorf("delete twice: %d", r.status)
	}
}

// TestRateLimit: a key's bucket empties and the next request is 429.
func TestRateLimit(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.RateLimit, c.RateBurst = 0.001, 3 }))
	codes := []int{}
	for range 4 {
		codes = append(codes, e.do(t, "GET", "/api/chats/acme", e.keys[scopeAda], nil).status)
	}
	if !slices.Equal(codes, []int{200, 200, 200, 429}) {
		t.Fatalf("statuses %v, want 200 200 200 429", codes)
	}
	if r := e.do(t, "GET", "/api/chats/acme", e.keys[scopeBob], nil); r.status != 200 {
		t.Fatalf("another key is limited too: %d", r.status)
	}
}

// TestRateLimit_Metrics: Prometheus scrapes take rate tokens like every
// other request, with the metrics token and in dev mode without one.
func TestRateLimit_Metrics(t *testing.T) {
	limited := func(c *Config) { c.RateLimit, c.RateBurst, c.MetricsToken = 0.001, 2, testMetricsToken }
	e := newEnv(t, withMetrics(), withConfig(limited))
	dev := newEnv(t, withMetrics(), withConfig(limited), withConfig(func(c *Config) { c.Dev = true }))
	for _, p := range []string{"/metrics", "/metrics/prometheus"} {
		for _, tc := range []struct {
			e   *env
			key string
		}{{e, testMetricsToken}, {dev, ""}} {
			tc.e.limiterReset()
			codes := []int{}
			for range 3 {
				codes = append(codes, tc.e.do(t, "GET", p, tc.key, nil).status)
			}
			if !slices.Equal(codes, []int{200, 200, 429}) {
				t.Errorf("%s (dev %v): statuses %v, want 200 200 429", p, tc.e.cfg.Dev, codes)
			}
		}
	}
}

const testMetricsToken = "scraper-token-0123456789"

// TestMetrics_OnlyTheOperatorsToken: the Prometheus series add up every
// tenant, so a tenant's API key does not open them; the operator's metrics
// token does, and without one set they are closed (dev mode aside).
func TestMetrics_OnlyTheOperatorsToken(t *testing.T) {
	e := newEnv(t, withMetrics(), withConfig(func(c *Config) { c.MetricsToken = testMetricsToken }))
	closed := newEnv(t, withMetrics())
	for _, p := range []string{"/metrics", "/metrics/prometheus"} {
		for _, tc := range []struct {
			what   string
			e      *env
			bearer string
			status int
		}{
			{"the metrics token", e, testMetricsToken, http.StatusOK},
			{"a tenant's API key", e, e.keys[scopeAda], http.StatusUnauthorized},
			{"nothing", e, "", http.StatusUnauthorized},
			{"the token with a byte more", e, testMetricsToken + "x", http.StatusUnauthorized},
			{"the token's prefix", e, testMetricsToken[:8], http.StatusUnauthorized},
			{"an API key, no token set", closed, closed.keys[scopeAda], http.StatusForbidden},
			{"a guess, no token set", closed, "x", http.StatusForbidden},
		} {
			r := tc.e.do(t, "GET", p, tc.bearer, nil)
			if r.status != tc.status {
				t.Errorf("GET %s with %s: %d %s, want %d", p, tc.what, r.status, r.body, tc.status)
			}
			if tc.status == http.StatusOK && !bytes.Contains(r.body, []byte("baton_")) {
				t.Errorf("GET %s with %s: no baton series:\n%.300s", p, tc.what, r.body)
			}
			if r.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s with %s: 401 without WWW-Authenticate", p, tc.what)
			}
		}
	}
}

// limiterReset refills every rate bucket.
func (e *env) limiterReset() {
	e.srv.limiter.mu.Lock()
	clear(e.srv.limiter.buckets)
	e.srv.limiter.mu.Unlock()
}

// TestDevMode: without a key, dev mode acts as user "dev" of the URL's app.
func TestDevMode(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Dev = true }))
	r := e.do(t, "POST", "/api/chats/acme/bench/start", "", nil)
	if r.status != http.StatusCreated {
		t.Fatalf("dev start: %d %s", r.status, r.body)
	}
	id, _ := r.json(t)["chat_id"].(string)
	if _, err := e.store.GetChat(context.Background(), baton.Scope{App: "acme", User: DevUser}, id); err != nil {
		t.Fatalf("dev chat is not in scope acme/dev: %v", err)
	}
	if r := e.do(t, "GET", "/api/chats/acme/"+id, e.keys[scopeAda], nil); r.status != 404 {
		t.Errorf("ada sees the dev user's chat: %d", r.status)
	}
	if r := e.do(t, "POST", "/api/input/submit", "", map[string]any{"chat_id": id, "content": "x"}); r.status != 400 || !strings.Contains(r.errorMessage(), "app") {
		t.Errorf("dev submit without app: %d %s", r.status, r.body)
	}
	if !IsLoopback("127.0.0.1:8080") || !IsLoopback("[::1]:80") || !IsLoopback("localhost:1") || IsLoopback("0.0.0.0:8080") || IsLoopback(":8080") || IsLoopback("10.0.0.1:80") {
		t.Errorf("IsLoopback is wrong")
	}
}

// TestCORS: an allowed origin gets CORS headers and preflights; others 403.
func TestCORS(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.AllowedOrigins = []string{"https://app.example.com"} }))
	r := e.do(t, "OPTIONS", "/api/chats/acme", "", nil, "Origin", "https://app.example.com")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" || !strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", r.status, r.header)
	}
	// A browser's OpenAI SDK asks for its x-stainless-* headers and the
	// chat header; only those it may send are allowed.
	r = e.do(t, "OPTIONS", "/v1/chat/completions", "", nil, "Origin", "https://app.example.com",
		"Access-Control-Request-Headers", "authorization, x-stainless-os, x-baton-chat-id, x-evil")
	allow := strings.ToLower(r.header.Get("Access-Control-Allow-Headers"))
	if r.status != 204 || !strings.Contains(allow, "x-stainless-os") || !strings.Contains(allow, "x-baton-chat-id") || strings.Contains(allow, "x-evil") {
		t.Fatalf("preflight of /v1/chat/completions: %d, allowed %q", r.status, allow)
	}
	if !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "X-Baton-Chat-Id") {
		t.Fatalf("X-Baton-Chat-Id not exposed: %v", r.header)
	}
	if r := e.do(t, "GET", "/api/chats/acme", e.keys[scopeAda], nil, "Origin", "https://other.example.com"); r.status != 403 {
		t.Fatalf("other origin: %d", r.status)
	}
	if r := e.do(t, "GET", "/api/chats/acme", e.keys[scopeAda], nil); r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("no origin: %d %v", r.status, r.header)
	}
}

// TestStartIdempotencyKey retries a start with its Idempotency-Key: the
// retry answers 200 with the same chat, the chat runs once (its first
// message recorded once), another body with the key is 409 naming the key,
// and the key makes another chat for another user or another workflow.
func TestStartIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	const path = "/api/chats/acme/generator/start"
	body := map[string]any{"message": "a newsletter please", "context": map[string]any{}}
	first := e.do(t, "POST", path, e.keys[scopeAda], body, "Idempotency-Key", "start-1")
	if first.status != http.StatusCreated {
		t.Fatalf("first start: %d %s", first.status, first.body)
	}
	id, _ := first.json(t)["chat_id"].(string)
	for i := range 2 {
		again := e.do(t, "POST", path, e.keys[scopeAda], body, "Idempotency-Key", "start-1")
		if again.status != http.StatusOK || again.json(t)["chat_id"] != id {
			t.Fatalf("retry %d: %d %s, want 200 with chat %s", i, again.status, again.body, id)
		}
	}
	other := e.do(t, "POST", path, e.keys[scopeAda], map[string]any{"message": "something else"}, "Idempotency-Key", "start-1")
	if other.status != http.StatusConflict || !strings.Contains(other.errorMessage(), `"start-1"`) {
		t.Fatalf("another body with the key: %d %s, want 409 naming the key", other.status, other.body)
	}
	e.waitStatus(t, id, baton.ChatWaitingInput)
	texts := 0
	for _, raw := range e.history(t, id) {
		if bytes.Contains(raw, []byte("a newsletter please")) && bytes.Contains(raw, []byte(`"chat.text"`)) {
			texts++
		}
	}
	if texts != 1 {
		t.Errorf("the first message is recorded %d times, want once", texts)
	}
	chats, err := e.store.ListChats(context.Background(), scopeAda, baton.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chats) != 1 {
		t.Errorf("ada has %d chats after a start and its retries, want 1", len(chats))
	}
	bob := e.do(t, "POST", path, e.keys[scopeBob], body, "Idempotency-Key", "start-1")
	if bob.status != http.StatusCreated || bob.json(t)["chat_id"] == id {
		t.Errorf("bob with ada's key: %d %s, want 201 and another chat", bob.status, bob.body)
	}
	hello := e.do(t, "POST", "/api/chats/acme/hello/start", e.keys[scopeAda], nil, "Idempotency-Key", "start-1")
	if hello.status != http.StatusCreated || hello.json(t)["chat_id"] == id {
		t.Errorf("another workflow with the key: %d %s, want 201 and another chat", hello.status, hello.body)
	}
	if bad := e.do(t, "POST", path, e.keys[scopeAda], body, "Idempotency-Key", "no spaces"); bad.status != http.StatusBadRequest {
		t.Errorf("malformed key: %d %s, want 400", bad.status, bad.body)
	}
}

// TestSubmit_DoubleTextingReject: a workflow whose double_texting is
// reject answers 409 to a message sent while the chat's run goes, names
// the policy, and records nothing of it.
func TestSubmit_DoubleTextingReject(t *testing.T) {
	e := newEnv(t, withWorkflows("testdata/policy"))
	id := e.start(t, "strict", map[string]any{"message": "first"})
	// The chat is running from its creation until Talker has streamed its
	// answer, which takes seconds.
	r := e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], map[string]any{"chat_id": id, "content": "second"})
	if r.status != http.StatusConflict || !strings.Contains(r.errorMessage(), "double_texting: reject") {
		t.Fatalf("a message while the run goes: %d %s, want 409 naming the policy", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatWaitingInput)
	for _, raw := range e.history(t, id) {
		if bytes.Contains(raw, []byte(`"second"`)) {
			t.Fatalf("the refused message is in the history: %s", raw)
		}
	}
	if r := e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], map[string]any{"chat_id": id, "content": "second"}); r.status != http.StatusAccepted {
		t.Fatalf("a message while the chat waits: %d %s, want 202", r.status, r.body)
	}
}

// TestPrompt_DoubleTextingReject: the seed route POST /sessions/{id}/prompt
// keeps the workflow's double_texting policy as /api/input/submit does: 409
// naming the policy while the run goes, nothing recorded; 200 once the chat
// waits.
func TestPrompt_DoubleTextingReject(t *testing.T) {
	e := newEnv(t, withWorkflows("testdata/policy"))
	id := e.start(t, "strict", map[string]any{"message": "first"})
	// The chat is running from its creation until Talker has streamed its
	// answer, which takes seconds.
	r := e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]any{"content": "second"})
	if r.status != http.StatusConflict || !strings.Contains(r.errorMessage(), "double_texting: reject") {
		t.Fatalf("a prompt while the run goes: %d %s, want 409 naming the policy", r.status, r.body)
	}
	e.waitStatus(t, id, baton.ChatWaitingInput)
	for _, raw := range e.history(t, id) {
		if bytes.Contains(raw, []byte(`"second"`)) {
			t.Fatalf("the refused prompt is in the history: %s", raw)
		}
	}
	if r := e.do(t, "POST", "/sessions/"+id+"/prompt", e.keys[scopeAda], map[string]any{"content": "second"}); r.status != http.StatusOK {
		t.Fatalf("a prompt while the chat waits: %d %s, want 200", r.status, r.body)
	}
}
