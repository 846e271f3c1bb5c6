package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/coder/websocket"
)

// TestStartContextOnlyClientSettable: a client may preset at start only the
// variables the workflow marks client_settable, each of its declared type.
// Derived variables (the interview's, the key form's) and mistyped values
// are a 400 naming the variable, and no chat is created.
func TestStartContextOnlyClientSettable(t *testing.T) {
	e := newEnv(t)
	key := e.keys[scopeAda]
	for _, c := range []struct {
		body    string
		mention string
	}{
		{`{"context":{"interview_complete":true,"api_keys_collected":true}}`, "context.api_keys_collected"},
		{`{"context":{"interview_complete":true}}`, "context.interview_complete"},
		{`{"context":{"plan_name":"x"}}`, "context.plan_name"},
		{`{"context":{"audience":5}}`, "context.audience"},
		{`{"context":{"__secrets":{"OPENAI_API_KEY":"x"}}}`, "context.__secrets"},
	} {
		r := e.do(t, "POST", "/api/chats/acme/generator/start", key, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errorMessage(), c.mention) {
			t.Errorf("start %s: %d %s, want 400 naming %s", c.body, r.status, r.body, c.mention)
		}
	}
	chats, err := e.store.ListChats(context.Background(), scopeAda, baton.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chats) != 0 {
		t.Fatalf("refused starts created %d chats", len(chats))
	}
	// The one client-settable variable, with its type, is taken.
	id := e.start(t, "generator", map[string]any{"context": map[string]any{"audience": "triage my inbox"}})
	c := e.waitStatus(t, id, baton.ChatWaitingInput)
	var vars map[string]any
	if err := json.Unmarshal(c.Context, &vars); err != nil {
		t.Fatal(err)
	}
	if vars["audience"] != "triage my inbox" || vars["interview_complete"] != false {
		t.Fatalf("context after start: %v", vars)
	}
}

// dialFrom opens a WebSocket to ada's chat from a local address of its
// own (127.0.0.x), with no key: it waits for its auth message.
func (e *env) dialFrom(ctx context.Context, from, chatID string) (*websocket.Conn, *http.Response, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	u := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/ws/acme/" + chatID
	return websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc})
}

// TestWS_UnauthenticatedHandshakesPerAddress: one address without a key
// cannot hold more than its share of the sockets waiting for their auth
// message, nor open them faster than its rate; a browser at another
// address still gets in, authenticates by its first message and is served.
func TestWS_UnauthenticatedHandshakesPerAddress(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) {
		c.MaxPendingAuth, c.MaxPendingAuthPerAddr, c.AuthTimeout = 4, 2, 30*time.Second
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	var held []*websocket.Conn
	defer func() {
		for _, c := range held {
			c.CloseNow()
		}
	}()
	for i := range 3 {
		c, resp, err := e.dialFrom(ctx, "127.0.0.1", chat.ID)
		if i < 2 {
			if err != nil {
				t.Fatalf("attacker socket %d: %v", i, err)
			}
			held = append(held, c)
			continue
		}
		if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a third waiting socket from one address: %v, want 429", err)
		}
	}
	victim, _, err := e.dialFrom(ctx, "127.0.0.2", chat.ID)
	if err != nil {
		t.Fatalf("a browser at another address is locked out: %v", err)
	}
	defer victim.CloseNow()
	writeMsg(ctx, t, victim, map[string]any{"type": "auth", "token": e.keys[scopeAda]})
	writeMsg(ctx, t, victim, map[string]any{"type": "ping", "id": "p1"})
	if v := wsReplyTo(ctx, t, victim, "p1"); v.Type != "pong" {
		t.Fatalf("the browser is not served: %s", v.raw)
	}
	// The handshake rate: a burst of handshakes from one address ends in
	// 429 even when each socket leaves at once.
	r := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.HandshakeRate, c.HandshakeBurst = 0.001, 3 }))
	codes := []int{}
	for range 4 {
		c, resp, err := r.dialFrom(ctx, "127.0.0.3", chat.ID)
		switch {
		case err == nil:
			codes = append(codes, http.StatusSwitchingProtocols)
			c.CloseNow()
		case resp != nil:
			codes = append(codes, resp.StatusCode)
		default:
			t.Fatal(err)
		}
	}
	if !slices.Equal(codes, []int{101, 101, 101, 429}) {
		t.Fatalf("handshakes from one address: %v, want 101 101 101 429", codes)
	}
}

// TestWS_AuthDeadlineCloses4401: a socket that sends no auth message is
// closed at its deadline with the documented 4401 frame, not dropped.
func TestWS_AuthDeadlineCloses4401(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.AuthTimeout = 100 * time.Millisecond }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := e.dialFrom(ctx, "127.0.0.1", "any-chat")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != CloseUnauthorized {
		t.Fatalf("no auth message until the deadline: %v, want close 4401", err)
	}
}

// TestInputsAuthenticatedFirst: a request with a wrong key, or none,
// is 401 whatever its body holds (it is not parsed), and wrong keys from
// one address run out into 429 while a right key, from that address or
// another, is served; nothing is recorded on ada's chat.
func TestInputsAuthenticatedFirst(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.AuthFailRate, c.AuthFailBurst = 0.001, 3 }))
	id := e.start(t, "generator", nil)
	before := e.waitStatus(t, id, baton.ChatWaitingInput)
	for _, p := range []string{"/api/input/submit", "/api/events", "/sessions/" + id + "/prompt"} {
		if r := e.do(t, "POST", p, "", `{"chat_id":`); r.status != http.StatusUnauthorized {
			t.Errorf("POST %s, no key, malformed body: %d %s, want 401", p, r.status, r.body)
		}
	}
	codes := []int{}
	for range 4 {
		codes = append(codes, e.do(t, "POST", "/api/input/submit", "bk_wrong", `{"chat_id":`).status)
	}
	if !slices.Equal(codes, []int{401, 401, 401, 429}) {
		t.Fatalf("wrong keys from one address: %v, want 401 401 401 429", codes)
	}
	// A right key from the guessing address (a reverse proxy's, shared by
	// every client) is still served; its next wrong key is still 429.
	if r := e.do(t, "GET", "/api/chats/acme", e.keys[scopeAda], nil); r.status != http.StatusOK {
		t.Errorf("the guessing address with a right key: %d %s, want 200", r.status, r.body)
	}
	if r := e.do(t, "POST", "/api/input/submit", "bk_wrong", `{"chat_id":`); r.status != http.StatusTooManyRequests {
		t.Errorf("the guessing address with a wrong key after a right one: %d, want 429", r.status)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/chats/acme", nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[scopeAda])
	resp, err := (&http.Client{Transport: &http.Transport{DialContext: d.DialContext}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a right key from another address: %d", resp.StatusCode)
	}
	if after := e.waitStatus(t, id, baton.ChatWaitingInput); after.LastSequence != before.LastSequence {
		t.Fatalf("the chat changed: %d -> %d", before.LastSequence, after.LastSequence)
	}
}

// TestDevMode_AppNamesValidated: in dev mode the app of the URL is held to
// the rule of a key's app: %ff (invalid UTF-8) is a 400 naming app, and no
// chat is left behind in any state.
func TestDevMode_AppNamesValidated(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.Dev = true }))
	for _, p := range []string{"/api/chats/%ff/hello/start", "/api/chats/a%00b/hello/start", "/api/chats/" + strings.Repeat("a", 129) + "/hello/start"} {
		r := e.do(t, "POST", p, "", nil)
		if r.status != http.StatusBadRequest || !strings.HasPrefix(r.errorMessage(), "app:") {
			t.Errorf("POST %s in dev mode: %d %s, want 400 naming app", p, r.status, r.body)
		}
	}
	for _, app := range []string{"\xff", "a\x00b"} {
		chats, err := e.store.ListChats(context.Background(), baton.Scope{App: app, User: DevUser}, baton.ListOptions{})
		if err == nil && len(chats) != 0 {
			t.Fatalf("app %q has %d chats", app, len(chats))
		}
	}
}

// TestMetricsAggregate_TenantScoped: /metrics/perf/aggregate shows a key
// its own tenant's usage (app and user): bob, of ada's app, sees none of
// ada's turns; the operator's metrics token sees every app's.
func TestMetricsAggregate_TenantScoped(t *testing.T) {
	e := newEnv(t, withMetrics(), withConfig(func(c *Config) { c.MetricsToken = testMetricsToken })) // the runtime's collector, started
	id := e.start(t, "hello", nil)
	e.waitStatus(t, id, baton.ChatCompleted)
	agg := func(bearer string) map[string]any {
		t.Helper()
		r := e.do(t, "GET", "/metrics/perf/aggregate", bearer, nil)
		if r.status != http.StatusOK {
			t.Fatalf("aggregate: %d %s", r.status, r.body)
		}
		return r.json(t)
	}
	testenv.Eventually(t, 10*time.Second, "ada's turns to reach the metrics (the collector reads the bus)", func() error {
		if a := agg(e.keys[scopeAda]); a["total_turns"] == 0.0 {
			return fmt.Errorf("aggregate %v", a)
		}
		return nil
	})
	if b := agg(e.keys[scopeBob]); b["total_turns"] != 0.0 || b["total_tokens"] != 0.0 || b["active_chats"] != 0.0 {
		t.Errorf("bob sees ada's usage: %v", b)
	}
	if op := agg(testMetricsToken); op["total_turns"] == 0.0 {
		t.Errorf("the operator's token sees no turns: %v", op)
	}
}
