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
			s.writeError(w, r, baton.Errorf(baton.EUNAVAILABLE, "metrics are off"))
			return
		}
		h.ServeHTTP(w, r)
	}
}

// metricsScope is the tenant of a /metrics/perf request: the API key's
// scope (in --dev mode without a key, ?app= names the app).
func (s *Server) metricsScope(r *http.Request) (baton.Scope, error) {
	p, err := s.principal(r, r.URL.Query().Get("app"))
	return p.scope, err
}

// prometheusHandler serves the Prometheus text format to any valid API key
// (a scraper's bearer token), or to anyone in --dev mode. The series carry
// no chat, user or message ids.
func prometheusHandler(s *Server) func(*metrics.Collector) http.Handler {
	return func(c *metrics.Collector) http.Handler {
		prom := c.PrometheusHandler()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !(s.cfg.Dev && bearer(r) == "") {
				if _, err := s.authenticate(r, bearer(r), ""); err != nil {
					s.writeError(w, r, err)
					return
				}
			}
			prom.ServeHTTP(w, r)
		})
	}
}
