package server

import (
	"net/http"
	"strings"

	"github.com/felixge/httpsnoop"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instrument wraps the server's handler with what an operator watches:
//
//   - with Config.TracerProvider, a server span per request (otelhttp,
//     named by the route pattern, e.g. "POST /api/chats/{app}/{workflow}/start"),
//     the child of the caller's W3C traceparent when it sent one. The
//     request's context holds the span, so an input the request publishes
//     carries it (engine.WithTraceParent) and the run it starts links to it.
//   - with Config.Metrics, the request's duration by method, route pattern
//     (never the raw path: its ids would make the series unbounded) and
//     status, baton_http_request_duration_seconds.
//
// Health checks and metric scrapes get no span: they would drown the
// traces a person is looking for.
func (s *Server) instrument(h http.Handler) http.Handler {
	if s.cfg.Metrics != nil {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// httpsnoop keeps the writer's Hijacker and Flusher: WebSocket
			// and SSE work through it.
			m := httpsnoop.CaptureMetrics(next, w, r)
			// The mux set r.Pattern on this request (it routes the request
			// it is given, not a copy).
			route := routeOf(r.Pattern)
			s.cfg.Metrics.ObserveHTTP(r.Method, route, m.Code, m.Duration)
			if route != "" {
				trace.SpanFromContext(r.Context()).SetAttributes(attribute.String("http.route", route))
			}
		})
	}
	if tp := s.cfg.TracerProvider; tp != nil {
		h = otelhttp.NewHandler(h, "baton",
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(propagation.TraceContext{}),
			otelhttp.WithFilter(func(r *http.Request) bool {
				p := r.URL.Path
				return p != "/healthz" && p != "/readyz" && p != "/metrics" && p != "/metrics/prometheus"
			}))
	}
	return h
}

// routeOf is the path part of a mux pattern ("GET /api/chats/{app}" →
// "/api/chats/{app}"); "" for a request no route took (refused before
// routing).
func routeOf(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return pattern[i+1:]
	}
	return pattern
}
