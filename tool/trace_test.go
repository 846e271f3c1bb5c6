package tool_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/tool"
)

// spanOf is a stand-in for metrics.ToolSpanContext: a span context per
// call, in one trace per chat.
func spanOf(chatID, callID string) trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], "trace:"+chatID)
	copy(sid[:], callID)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// traceparents records the traceparent header of every request.
type traceparents struct {
	mu  sync.Mutex
	got []string
}

func (p *traceparents) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.got = append(p.got, r.Header.Get("traceparent"))
		p.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (p *traceparents) seen(want string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.got {
		if g == want {
			return true
		}
	}
	return false
}

func (p *traceparents) any() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.got {
		if g != "" {
			return true
		}
	}
	return false
}

func wantTraceparent(chatID, callID string) string {
	sc := spanOf(chatID, callID)
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// TestToolTraceparent checks that with WithTraceContext an HTTP tool's
// request and an MCP tools/call over HTTP carry the W3C traceparent of
// their call's span, and that without it (tracing off) none is sent.
func TestToolTraceparent(t *testing.T) {
	var seen traceparents
	srv := httptest.NewServer(seen.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"content": "done"}`))
	})))
	defer srv.Close()
	mcpSrv := newMCPServer()
	hs := httptest.NewServer(seen.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpSrv }, nil)))
	t.Cleanup(hs.Close) // after the registries' Close, which ends the sessions
	specs := []tool.Spec{
		{Agent: "A", Name: "orders", URL: srv.URL + "/orders", TimeoutSeconds: 5, AllowPrivateNetwork: true},
		{Agent: "A", Kind: tool.KindMCP, Server: "web", Tools: []string{"greet"}},
	}
	servers := tool.WithMCPServers(map[string]tool.MCPServer{"web": {URL: hs.URL, AllowPrivateNetwork: true}})

	off := newRegistry(t, specs, servers)
	mustCall(t, lookup(t, off, "A", "orders"), callCtx("h0"), `{}`)
	mustCall(t, lookup(t, off, "A", "greet"), callCtx("m0"), `{"name": "Ada"}`)
	if seen.any() {
		t.Fatalf("a traceparent was sent with tracing off: %q", seen.got)
	}

	on := newRegistry(t, specs, servers, tool.WithTraceContext(spanOf))
	if res := mustCall(t, lookup(t, on, "A", "orders"), callCtx("h1"), `{}`); res.Status != "ok" {
		t.Fatalf("orders = %+v", res)
	}
	if !seen.seen(wantTraceparent("chat-1", "h1")) {
		t.Errorf("the HTTP tool's request had traceparents %q, want %s", seen.got, wantTraceparent("chat-1", "h1"))
	}
	if res := mustCall(t, lookup(t, on, "A", "greet"), callCtx("m1"), `{"name": "Ada"}`); res.Status != "ok" {
		t.Fatalf("greet = %+v", res)
	}
	if !seen.seen(wantTraceparent("chat-1", "m1")) {
		t.Errorf("the MCP server's requests had traceparents %q, want %s for tools/call", seen.got, wantTraceparent("chat-1", "m1"))
	}
}
