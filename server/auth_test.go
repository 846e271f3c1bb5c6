package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/coder/websocket"
)

// TestDev_RefusesForeignHost: in dev mode (no key needed) a request whose
// Host or Origin is not this machine is 403 — a page on attacker.example
// whose name was rebound to 127.0.0.1 cannot drive the server — while
// localhost, 127.0.0.0/8 and [::1], with any port, are served.
func TestDev_RefusesForeignHost(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Dev = true }))
	do := func(method, path, host, origin string) response {
		t.Helper()
		req, err := http.NewRequest(method, e.ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, body: body, header: resp.Header}
	}
	for _, tc := range []struct{ host, origin string }{
		{"attacker.example:8080", "http://attacker.example:8080"}, // DNS rebinding: Host and Origin agree
		{"attacker.example:8080", ""},
		{"127.0.0.1:8080", "http://attacker.example:8080"},
		{"localhost.attacker.example", ""},
		{"10.0.0.1:8080", ""},
	} {
		r := do("POST", "/api/chats/acme/bench/start", tc.host, tc.origin)
		if r.status != http.StatusForbidden || r.json(t)["error"] == nil || !strings.Contains(r.errorMessage(), "localhost") {
			t.Errorf("Host %q Origin %q: %d %s, want 403 JSON", tc.host, tc.origin, r.status, r.body)
		}
	}
	if r := do("GET", "/ws/acme/c1", "attacker.example", ""); r.status != http.StatusForbidden {
		t.Errorf("rebound WebSocket handshake: %d", r.status)
	}
	for _, tc := range []struct{ host, origin string }{
		{"localhost:8080", "http://localhost:8080"},
		{"LOCALHOST", ""},
		{"127.0.0.1:9", ""},
		{"127.1.2.3", "http://127.1.2.3"},
		{"[::1]:8080", "http://[::1]:8080"},
		{"[::1]", ""},
	} {
		if r := do("GET", "/api/chats/acme", tc.host, tc.origin); r.status != http.StatusOK {
			t.Errorf("Host %q Origin %q: %d %s, want 200", tc.host, tc.origin, r.status, r.body)
		}
	}

	// Without --dev a key is needed anyway, and the Host is not checked.
	prod := newEnv(t, withWorkflows(benchDir))
	req, _ := http.NewRequest("GET", prod.ts.URL+"/api/chats/acme", nil)
	req.Host = "baton.example.com"
	req.Header.Set("Authorization", "Bearer "+prod.keys[scopeAda])
	resp, err := prod.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a keyed request to a named host without --dev: %d", resp.StatusCode)
	}
}

// TestRevokedKey_WebSocketInput: an input on a WebSocket whose key was
// revoked after the handshake is refused (unauthorized), nothing is
// recorded, and the connection is closed with 1008.
func TestRevokedKey_WebSocketInput(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := e.start(t, "notify", nil)
	before := e.waitStatus(t, id, baton.ChatWaitingInput).LastSequence
	c := e.dial(ctx, t, id, before, e.keys[scopeAda])
	defer c.CloseNow()
	if err := e.store.RevokeKey(ctx, HashKey(e.keys[scopeAda])); err != nil {
		t.Fatal(err)
	}
	writeMsg(ctx, t, c, map[string]any{"type": "user.input.submit", "content": "after revocation", "id": "m1"})
	_, raw, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read the reply: %v", err)
	}
	if v := decodeEnvelope(t, raw); v.Type != "error" || v.str("code") != baton.EUNAUTHORIZED || v.str("id") != "m1" {
		t.Fatalf("reply to an input of a revoked key: %s", raw)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after the refusal: %v, want close 1008", err)
	}
	if c := e.waitStatus(t, id, baton.ChatWaitingInput); c.LastSequence != before {
		t.Fatalf("the revoked key's input was recorded: last sequence %d, was %d", c.LastSequence, before)
	}
}

// TestRevokedKey_StreamsEnd: the periodic re-check closes a revoked key's
// WebSocket (1008) and ends its SSE stream (without "event: reconnect"),
// while a dev-mode connection without a key, which has no key to revoke,
// stays open.
func TestRevokedKey_StreamsEnd(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.KeyRecheck = 10 * time.Millisecond }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c.CloseNow()
	resp, body := e.openSSE(ctx, t, chat.ID, "")
	defer resp.Body.Close()
	waitStreams(t, e, 2)
	if err := e.store.RevokeKey(ctx, HashKey(e.keys[scopeAda])); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("WebSocket of a revoked key: %v, want close 1008", err)
	}
	for _, ev := range readSSE(t, body, func(sseEvent) bool { return false }) {
		if ev.event == "reconnect" {
			t.Fatalf("SSE stream of a revoked key asks to reconnect")
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the SSE stream of a revoked key did not end")
	}

	dev := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Dev, c.KeyRecheck = true, 5*time.Millisecond }))
	devChat, err := dev.store.CreateChat(ctx, baton.Scope{App: "acme", User: DevUser}, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	dc := dev.dial(ctx, t, devChat.ID, 0, "")
	defer dc.CloseNow()
	time.Sleep(50 * time.Millisecond) // several re-check periods: nothing to wait for, the point is that nothing happens
	writeMsg(ctx, t, dc, map[string]any{"type": "ping"})
	if _, raw, err := dc.Read(ctx); err != nil || !strings.Contains(string(raw), `"pong"`) {
		t.Fatalf("dev-mode connection without a key after re-checks: %s %v", raw, err)
	}
}

// TestDevMode_BrowserWithKey: in dev mode, a browser that has a key (Bearer
// on HTTP, ?auth=message and the auth message on the WebSocket, as
// web/app.js does) follows its own chat; a keyless one follows the dev
// user's chats; a wrong key is 4401.
func TestDevMode_BrowserWithKey(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Dev = true }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := e.start(t, "bench", nil) // ada's, with her key
	e.waitStatus(t, id, baton.ChatCompleted)
	dialByMessage := func() *websocket.Conn { // a browser with a key: no header
		t.Helper()
		c, err := e.tryDialQuery(ctx, id, "last_sequence=0&auth=message", "")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		return c
	}
	c := dialByMessage()
	defer c.CloseNow()
	writeMsg(ctx, t, c, map[string]any{"type": "auth", "token": e.keys[scopeAda]})
	got, err := readUntilComplete(ctx, c)
	if err != nil {
		t.Fatalf("a key's browser in dev mode: %v", err)
	}
	sameEnvelopes(t, "dev mode with a key", got, e.history(t, id))

	// A wrong key is refused, not taken for the dev user.
	bad := dialByMessage()
	defer bad.CloseNow()
	writeMsg(ctx, t, bad, map[string]any{"type": "auth", "token": "bk_wrong"})
	if _, _, err := bad.Read(ctx); websocket.CloseStatus(err) != CloseUnauthorized {
		t.Fatalf("wrong key in dev mode: %v, want 4401", err)
	}
	// A browser without a key sends nothing and follows the dev user's chat.
	r := e.do(t, "POST", "/api/chats/acme/bench/start", "", nil)
	devID, _ := r.json(t)["chat_id"].(string)
	dc := e.dial(ctx, t, devID, 0, "")
	defer dc.CloseNow()
	if _, err := readUntilComplete(ctx, dc); err != nil {
		t.Fatalf("dev user's chat: %v", err)
	}
	// Ada's chat without her key (nor ?auth=message) is the dev user's:
	// not found (at once: TestDevMode_ForeignChatClosesAtOnce).
	nc := e.dial(ctx, t, id, 0, "")
	defer nc.CloseNow()
	if _, _, err := nc.Read(ctx); websocket.CloseStatus(err) != CloseNotFound {
		t.Fatalf("another user's chat without a key in dev mode: %v, want 4404", err)
	}
	// A dev chat's connection may still name a key, which must own the chat.
	kc := e.dial(ctx, t, devID, 0, "")
	defer kc.CloseNow()
	writeMsg(ctx, t, kc, map[string]any{"type": "auth", "token": e.keys[scopeAda]})
	for {
		_, _, err := kc.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != CloseNotFound {
				t.Fatalf("ada's key on the dev user's chat: %v, want 4404", err)
			}
			break
		}
	}
}

// TestStreamCaps_DevWithoutKeyUncapped: dev mode without a key (one
// developer on loopback) is not held to the per-key cap.
func TestStreamCaps_DevWithoutKeyUncapped(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Dev, c.MaxStreamsPerKey = true, 2 }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev := baton.Scope{App: "acme", User: DevUser}
	chat, err := e.store.CreateChat(ctx, dev, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		c, err := e.tryDial(ctx, chat.ID, 0, "")
		if err != nil {
			t.Fatalf("dev stream %d: %v", i+1, err)
		}
		defer c.CloseNow()
	}
}

// TestStreamCaps: a key has at most MaxStreamsPerKey streams open,
// WebSocket and SSE together (429 beyond, other keys unaffected, a slot
// freed by a closed stream usable again); at most MaxPendingAuth sockets may
// wait for their auth message at once.
func TestStreamCaps(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey, c.MaxPendingAuth = 2, 1 }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	c1 := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c1.CloseNow()
	resp, _ := e.openSSE(ctx, t, chat.ID, "")
	defer resp.Body.Close()
	waitStreams(t, e, 2)
	_, hresp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws/acme/"+chat.ID,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + e.keys[scopeAda]}}})
	if err == nil || hresp == nil || hresp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third stream of a key: %v %v, want 429", err, hresp)
	}
	if r := e.do(t, "GET", "/api/chats/acme/"+chat.ID+"/stream", e.keys[scopeAda], nil); r.status != http.StatusTooManyRequests || r.json(t)["error"] == nil {
		t.Fatalf("third SSE stream of a key: %d %s", r.status, r.body)
	}
	// Another key's streams are its own: bob may not see ada's chat (404), not 429.
	if r := e.do(t, "GET", "/api/chats/acme/"+chat.ID+"/stream", e.keys[scopeBob], nil); r.status != http.StatusNotFound {
		t.Fatalf("another key: %d", r.status)
	}
	c1.Close(websocket.StatusNormalClosure, "")
	testenv.Eventually(t, 10*time.Second, "the closed stream's slot to come back (the server ends the closed stream)", func() error {
		c3, err := e.tryDial(ctx, chat.ID, 0, e.keys[scopeAda])
		if err != nil {
			return err
		}
		c3.CloseNow()
		return nil
	})

	// One socket waits for its auth message; the next is refused.
	waiter := e.dial(ctx, t, chat.ID, 0, "")
	defer waiter.CloseNow()
	testenv.Eventually(t, 10*time.Second, "the first socket to wait for its auth message", func() error {
		if n := e.srv.pendingAuth.Load(); n < 1 {
			return fmt.Errorf("%d sockets waiting for auth", n)
		}
		return nil
	})
	_, hresp, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws/acme/"+chat.ID, nil)
	if err == nil || hresp == nil || hresp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second socket waiting for auth: %v %v, want 429", err, hresp)
	}
}

// TestLoopbackHost is the Host check of dev mode.
func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:80": true, "LocalHost.:1": true, "127.0.0.1": true, "127.255.0.9:443": true,
		"[::1]": true, "[::1]:8080": true, "::1": true,
		"": false, "localhost.example": false, "evil.localhost.example:80": false, "10.0.0.1": false, "[::2]:80": false,
		"0.0.0.0:80": false, "128.0.0.1": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestDevMode_ForeignChatClosesAtOnce: in dev mode, a socket opened without
// a key for a chat the dev user does not have (another user's, or none at
// all) is closed with 4404 at once: without ?auth=message it is the dev
// user's, who needs no auth message, so nothing is worth waiting for
// (AuthTimeout is 30 s here; the bound below is a hang, not a speed).
func TestDevMode_ForeignChatClosesAtOnce(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Dev, c.AuthTimeout = true, 30*time.Second }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ada, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, chatID string }{
		{"another user's chat", ada.ID},
		{"a chat that does not exist", "no-such-chat"},
	} {
		c := e.dial(ctx, t, tc.chatID, 0, "")
		began := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, raw, err := c.Read(rctx)
		rcancel()
		c.CloseNow()
		if websocket.CloseStatus(err) != CloseNotFound {
			t.Fatalf("%s in dev mode without a key: %s %v after %v, want close 4404 at once", tc.what, raw, err, time.Since(began))
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Fatalf("%s in dev mode without a key: closed 4404 after %v, want at once", tc.what, d)
		}
	}
	if n := e.srv.pendingAuth.Load(); n != 0 {
		t.Errorf("%d sockets still counted as waiting for auth", n)
	}
	// A socket that says it will authenticate (?auth=message) is left its
	// first message: a key's browser may follow the key's chat, and one
	// whose first message is not an auth message is 4401.
	kc, err := e.tryDialQuery(ctx, ada.ID, "auth=message", "")
	if err != nil {
		t.Fatal(err)
	}
	defer kc.CloseNow()
	writeMsg(ctx, t, kc, map[string]any{"type": "auth", "token": e.keys[scopeAda]})
	writeMsg(ctx, t, kc, map[string]any{"type": "ping", "id": "p1"})
	if v := wsReplyTo(ctx, t, kc, "p1"); v.Type != "pong" {
		t.Fatalf("a key's socket with ?auth=message: %s", v.raw)
	}
	pc, err := e.tryDialQuery(ctx, ada.ID, "auth=message", "")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.CloseNow()
	writeMsg(ctx, t, pc, map[string]any{"type": "ping"})
	if _, _, err := pc.Read(ctx); websocket.CloseStatus(err) != CloseUnauthorized {
		t.Fatalf("?auth=message, then no auth message: %v, want close 4401", err)
	}
	if _, err := e.tryDialQuery(ctx, ada.ID, "auth=header", ""); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("?auth=header: %v, want the handshake refused with 400", err)
	}
}
