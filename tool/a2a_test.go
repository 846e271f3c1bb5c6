package tool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// fakeAgent is an A2A agent answering message/send with a message naming
// the path it was sent to; its card (one per path prefix) names rpcURL.
type fakeAgent struct {
	srv    *httptest.Server
	rpcURL func(prefix string) string // the url a card under prefix names
	mu     sync.Mutex
	auth   []string // "path auth" of each request
	hits   atomic.Int64
}

func newFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	f := &fakeAgent{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		f.mu.Lock()
		f.auth = append(f.auth, r.URL.Path+" "+r.Header.Get("Authorization"))
		f.mu.Unlock()
		if prefix, ok := strings.CutSuffix(r.URL.Path, "/.well-known/agent-card.json"); ok {
			url := f.srv.URL + prefix + "/rpc"
			if f.rpcURL != nil {
				url = f.rpcURL(prefix)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{
				"name": "fake", "description": "fake", "version": "1", "protocolVersion": "0.3.0",
				"url": url, "preferredTransport": "JSONRPC", "capabilities": map[string]any{},
				"defaultInputModes": []string{"text"}, "defaultOutputModes": []string{"text"}, "skills": []any{},
			})
			return
		}
		var req struct {
			ID any `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
			"kind": "message", "messageId": "m1", "role": "agent",
			"parts": []any{map[string]any{"kind": "text", "text": "at " + r.URL.Path}}}})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAgent) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...)
}

// TestA2ATool_SecretCannotChooseTheHost: a person's secret in the card
// url's host or user info fails the call before any request is made, so
// the operator's token never goes where the person points it.
func TestA2ATool_SecretCannotChooseTheHost(t *testing.T) {
	f := newFakeAgent(t)
	host := strings.TrimPrefix(f.srv.URL, "http://")
	t.Setenv("A2A_TEST_TOKEN", "operator-token")
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Name: "host", Kind: tool.KindA2A, A2A: tool.A2ASpec{CardURL: "http://${ACCOUNT}/", TokenFrom: "A2A_TEST_TOKEN"}, AllowPrivateNetwork: true},
		{Agent: "A", Name: "user", Kind: tool.KindA2A, A2A: tool.A2ASpec{CardURL: "http://${ACCOUNT}@" + host + "/", TokenFrom: "A2A_TEST_TOKEN"}, AllowPrivateNetwork: true},
	}, tool.WithLedger(&memLedger{}))
	for _, name := range []string{"host", "user"} {
		cc := callCtx(name)
		cc.Secrets = map[string]string{"ACCOUNT": host}
		res, err := lookup(t, r, "A", name).Call(context.Background(), cc, json.RawMessage(`{"message":"hi"}`))
		if err != nil || res.Status != "error" || !strings.Contains(res.Content, "may not choose") {
			t.Errorf("%s: %+v %v, want refused", name, res, err)
		}
	}
	if n := f.hits.Load(); n != 0 {
		t.Fatalf("the agent got %d requests", n)
	}
}

// TestA2ATool_CardPerURL: the card is cached per expanded card url, so a
// chat whose secret names another agent path talks to that agent, not to
// the one an earlier chat resolved.
func TestA2ATool_CardPerURL(t *testing.T) {
	f := newFakeAgent(t)
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Name: "ask", Kind: tool.KindA2A, A2A: tool.A2ASpec{CardURL: f.srv.URL + "/${ACCOUNT}"}, AllowPrivateNetwork: true},
	}, tool.WithLedger(&memLedger{}))
	for _, account := range []string{"one", "two", "one"} {
		cc := callCtx("c-" + account)
		cc.Secrets = map[string]string{"ACCOUNT": account}
		res := mustCall(t, lookup(t, r, "A", "ask"), cc, `{"message":"hi"}`)
		if res.Status != "ok" || res.Content != "at /"+account+"/rpc" {
			t.Errorf("account %s: %+v, want the agent at /%s/rpc", account, res, account)
		}
	}
}

// TestA2ATool_TokenOnlyToTheCardsOrigin: a card naming an endpoint on
// another origin gets no bearer token there; the card's own origin does.
func TestA2ATool_TokenOnlyToTheCardsOrigin(t *testing.T) {
	other := newFakeAgent(t)
	f := newFakeAgent(t)
	f.rpcURL = func(string) string { return other.srv.URL + "/rpc" }
	t.Setenv("A2A_TEST_TOKEN", "operator-token")
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Name: "ask", Kind: tool.KindA2A, A2A: tool.A2ASpec{CardURL: f.srv.URL, TokenFrom: "A2A_TEST_TOKEN"}, AllowPrivateNetwork: true},
	}, tool.WithLedger(&memLedger{}))
	res := mustCall(t, lookup(t, r, "A", "ask"), callCtx("c1"), `{"message":"hi"}`)
	if res.Status != "ok" || res.Content != "at /rpc" {
		t.Fatalf("call: %+v", res)
	}
	if got := f.requests(); len(got) != 1 || got[0] != "/.well-known/agent-card.json Bearer operator-token" {
		t.Errorf("card origin requests: %q, want the card fetched with the token", got)
	}
	if got := other.requests(); len(got) != 1 || got[0] != "/rpc " {
		t.Errorf("other origin requests: %q, want one without a token", got)
	}
}

// pausingAgent is an A2A agent whose every task stops at state, having
// asked "Your name?"; its card is named name.
func pausingAgent(t *testing.T, name, state string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/.well-known/agent-card.json") {
			_ = json.NewEncoder(w).Encode(map[string]any{
				"name": name, "description": "asks", "version": "1", "protocolVersion": "0.3.0",
				"url": srv.URL + "/rpc", "preferredTransport": "JSONRPC", "capabilities": map[string]any{},
				"defaultInputModes": []string{"text"}, "defaultOutputModes": []string{"text"}, "skills": []any{},
			})
			return
		}
		var req struct {
			ID any `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		said := map[string]any{"kind": "message", "messageId": "m2", "role": "agent", "parts": []any{map[string]any{"kind": "text", "text": "Your name?"}}}
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
			"kind": "task", "id": "task-1", "contextId": "ctx-1",
			"status":  map[string]any{"state": state, "message": said},
			"history": []any{map[string]any{"kind": "message", "messageId": "m1", "role": "user", "parts": []any{map[string]any{"kind": "text", "text": "hi"}}}, said},
		}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestA2ATool_RemotePause: a remote input-required is the person's
// question labelled with the remote agent's card name (the tool's name
// when the card has none); a remote auth-required is never a question for
// the person (or the model) but an error naming token_from.
func TestA2ATool_RemotePause(t *testing.T) {
	for _, tc := range []struct {
		card, state  string
		modelAnswers bool
		status       string
		want         string
	}{
		{"Registrar", "input-required", false, baton.ToolStatusInputRequired, "Registrar asks: Your name?"},
		{"", "input-required", false, baton.ToolStatusInputRequired, "ask asks: Your name?"},
		{"Registrar", "auth-required", false, baton.ToolStatusError, "configure them in the tool's a2a.token_from"},
		{"Registrar", "auth-required", true, baton.ToolStatusError, "configure them in the tool's a2a.token_from"},
	} {
		srv := pausingAgent(t, tc.card, tc.state)
		r := newRegistry(t, []tool.Spec{
			{Agent: "A", Name: "ask", Kind: tool.KindA2A, A2A: tool.A2ASpec{CardURL: srv.URL, ModelAnswers: tc.modelAnswers}, AllowPrivateNetwork: true},
		}, tool.WithLedger(&memLedger{}))
		res, err := lookup(t, r, "A", "ask").Call(context.Background(), callCtx("c1"), json.RawMessage(`{"message":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status || !strings.Contains(res.Content, tc.want) {
			t.Errorf("%s card %q (model answers %v): %+v, want %s with %q", tc.state, tc.card, tc.modelAnswers, res, tc.status, tc.want)
		}
	}
}
