package server

import (
	"context"
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

// perfHandler serves a /metrics/perf endpoint for the caller's tenant:
// the server authenticates the request and answers its errors as on every
// other route (401 with WWW-Authenticate, 429, 503 logged with its cause),
// then build's handler reads the scope it found.
func (s *Server) perfHandler(build func(*metrics.Collector, metrics.ScopeFunc) http.Handler) http.HandlerFunc {
	return s.metricsHandler(func(c *metrics.Collector) http.Handler {
		h := build(c, perfScope)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := s.principal(r, r.URL.Query().Get("app")) // in --dev mode without a key, ?app= names the app
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), perfScopeKey{}, p.scope)))
		})
	})
}

// perfScopeKey is the request context key of the scope perfHandler found.
type perfScopeKey struct{}

// perfScope is the metrics handlers' ScopeFunc: the scope perfHandler put
// in the request's context.
func perfScope(r *http.Request) (baton.Scope, error) {
	scope, ok := r.Context().Value(perfScopeKey{}).(baton.Scope)
	if !ok {
		return baton.Scope{}, baton.Errorf(baton.EINTERNAL, "metrics: a request without its scope")
	}
	return scope, nil
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
