package metrics

import (
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is what the running binary says of its build.
type BuildInfo struct {
	Version   string // the main module's version, "(devel)" for a build from a checkout
	Revision  string // the VCS revision it was built from, or ""
	Modified  bool   // the work tree had changes
	GoVersion string
}

// ReadBuildInfo reads the binary's build information.
func ReadBuildInfo() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return BuildInfo{Version: "(unknown)"}
	}
	out := BuildInfo{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if out.Version == "" {
		out.Version = "(devel)"
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			out.Revision = kv.Value
		case "vcs.modified":
			out.Modified = kv.Value == "true"
		}
	}
	return out
}

// ServiceVersion is the version a trace backend and a dashboard show: the
// module version of a released build (v1.4.0), else the VCS revision it was
// built from (12 hex digits, "+dirty" when the tree had changes), else
// "(devel)". Never Go's version: that is a separate field.
func (b BuildInfo) ServiceVersion() string {
	if b.Version != "" && b.Version != "(devel)" {
		return b.Version
	}
	if b.Revision != "" {
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if b.Modified {
			rev += "+dirty"
		}
		return rev
	}
	return b.Version
}

// httpBuckets cover a cached read (a millisecond) to a long request; a
// WebSocket or SSE stream lasts as long as its connection and lands in +Inf.
var httpBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// ObserveHTTP counts one served request by method, route pattern (as the
// server's mux names it, "/api/chats/{app}"; "" for a request refused
// before routing) and status, with its duration. The server calls it; it
// never blocks.
func (c *Collector) ObserveHTTP(method, route string, status int, d time.Duration) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "OTHER" // a client's invented method must not make a series
	}
	if route == "" {
		route = "unmatched"
	}
	c.prom.httpDuration.WithLabelValues(method, route, strconv.Itoa(status)).Observe(d.Seconds())
}

func newHTTPDuration() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "baton", Name: "http_request_duration_seconds",
		Help:    "HTTP requests served, by method, route pattern and status; _count counts them. A stream (WebSocket, SSE) is observed when it ends.",
		Buckets: httpBuckets}, []string{"method", "route", "status"})
}

func newBuildInfo(b BuildInfo) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "baton", Name: "build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": b.ServiceVersion(), "revision": b.Revision, "goversion": b.GoVersion}})
	g.Set(1)
	return g
}
