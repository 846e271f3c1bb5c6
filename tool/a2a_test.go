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
