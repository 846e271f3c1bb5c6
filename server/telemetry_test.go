package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/metrics"
)

// TestHTTPTelemetry checks what an operator sees of HTTP requests: a
// server span per request, named by its route and the child of the
// caller's W3C traceparent, whose span the chat's run.start input carries
// (so the run's trace links to it); and baton_http_request_duration_seconds
// by method, route pattern and status, never a raw path.
func TestHTTPTelemetry(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithIDGenerator(metrics.IDGenerator()))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	e := newEnv(t, withMetrics(), withConfig(func(c *Config) { c.TracerProvider = tp }))
	inputs, err := e.bus.Subscribe([]string{baton.TypeRunStart}, bus.Buffer(16))
	if err != nil {
		t.Fatal(err)
	}
	defer inputs.Close()

	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := e.do(t, "POST", "/api/chats/acme/hello/start", e.keys[scopeAda], nil, "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if r.status != http.StatusCreated {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	id, _ := r.json(t)["chat_id"].(string)
	e.waitStatus(t, id, baton.ChatCompleted)
	for range 2 {
		if r := e.do(t, "GET", "/api/chats/acme/"+id, e.keys[scopeAda], nil); r.status != http.StatusOK {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
	}
	if r := e.do(t, "GET", "/api/chats/acme/no-such-chat", e.keys[scopeAda], nil); r.status != http.StatusNotFound {
		t.Fatalf("get unknown: %d", r.status)
	}

	// The server span: named by the route, in the caller's trace.
	var start sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		if s.Name() == "POST /api/chats/{app}/{workflow}/start" {
			start = s
		}
	}
	if start == nil {
		t.Fatalf("no span named by the start route among %d spans", len(spans.GetSpans()))
	}
	if start.SpanContext().TraceID().String() != callerTrace || start.Parent().SpanID().String() != callerSpan {
		t.Errorf("start span in trace %s under %s, want the caller's %s under %s",
			start.SpanContext().TraceID(), start.Parent().SpanID(), callerTrace, callerSpan)
	}
	var route string
	for _, kv := range start.Attributes() {
		if kv.Key == "http.route" {
			route = kv.Value.AsString()
		}
	}
	if route != "/api/chats/{app}/{workflow}/start" {
		t.Errorf("http.route %q", route)
	}
	// The input the request published carries the request's span.
	select {
	case ev := <-inputs.C():
		if got := engine.TraceParentOf(ev); got.SpanID() != start.SpanContext().SpanID() || got.TraceID() != start.SpanContext().TraceID() {
			t.Errorf("run.start carries %v, want the request's span %v", got, start.SpanContext())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no run.start observed")
	}

	// The series: by route pattern and status, never a path with an id.
	mfs, err := e.srv.cfg.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "baton_http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if strings.Contains(l["route"], id) || strings.Contains(l["route"], "no-such-chat") {
				t.Errorf("a route label with an id: %v", l)
			}
			counts[l["method"]+" "+l["route"]+" "+l["status"]] = m.GetHistogram().GetSampleCount()
		}
	}
	for k, want := range map[string]uint64{
		"POST /api/chats/{app}/{workflow}/start 201": 1,
		"GET /api/chats/{app}/{chat_id} 200":         2,
		"GET /api/chats/{app}/{chat_id} 404":         1,
	} {
		if counts[k] != want {
			t.Errorf("%s: %d requests, want %d (have %v)", k, counts[k], want, counts)
		}
	}
}
