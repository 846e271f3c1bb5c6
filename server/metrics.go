package server

import (
	"net/http"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/metrics"
)

// metricsHandler serves a metrics endpoint built from the collector, or
// 503 when metrics are off. The routes exist either way, so the OpenAPI
// document and the routes stay equal.
func (s *Server) metricsHandler(build func(*metrics.Collector) http.Handler) http.HandlerFunc {
	var h http.Handler
	if s.cfg.Metrics != nil {
		h = build(s.cfg.Metrics)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if h == nil {
			s.writeError(w, r, unavailable("metrics are off", nil))
			return
		}
		h.ServeHTTP(w, r)
	}
}

// metricsScope is the tenant of a /metrics/perf request: the API key's
// scope (in --dev mode without a key, ?app= names the app). The metrics
// handlers write its errors with baton.ErrorMessage, so a key store that
// is down is reported here, and shown as the generic message.
func (s *Server) metricsScope(r *http.Request) (baton.Scope, error) {
	p, err := s.principal(r, r.URL.Query().Get("app"))
	if baton.ErrorCode(err) == baton.EUNAVAILABLE {
		s.log.Warn("server: unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		return baton.Scope{}, unavailable(msgUnavailable, err)
	}
	return p.scope, err
}

// prometheusHandler serves the Prometheus text format to any valid API key
// (a scraper's bearer token), or to anyone in --dev mode. The series carry
// no chat, user or message ids. Like every request, a scrape takes a token
// from the key's (in dev mode without a key, the client address's) rate
// bucket: a scraper every few seconds never notices, and the registry's
// encoding is not free for a client that asks without end.
func prometheusHandler(s *Server) func(*metrics.Collector) http.Handler {
	return func(c *metrics.Collector) http.Handler {
		prom := c.PrometheusHandler()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			if s.cfg.Dev && bearer(r) == "" {
				if !s.limiter.allow(devLimitKey(r)) {
					err = errRateLimited
				}
			} else {
				_, err = s.principal(r, "")
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			prom.ServeHTTP(w, r)
		})
	}
}
