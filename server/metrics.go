package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
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

// prometheusHandler serves the Prometheus text format to the operator's
// scraper, which presents Config.MetricsToken (or to anyone in --dev mode
// without a bearer). A tenant's API key is refused: the series add up
// every tenant. Like every request, a scrape takes a token from a rate
// bucket (the scraper's own, or in dev mode the client address's): a
// scraper every few seconds never notices, and the registry's encoding is
// not free for a client that asks without end.
func prometheusHandler(s *Server) func(*metrics.Collector) http.Handler {
	want := sha256.Sum256([]byte(s.cfg.MetricsToken))
	return func(c *metrics.Collector) http.Handler {
		prom := c.PrometheusHandler()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			switch tok := bearer(r); {
			case s.cfg.Dev && tok == "":
				if !s.limiter.allow(devLimitKey(r)) {
					err = errRateLimited
				}
			case s.cfg.MetricsToken == "":
				err = errNoMetricsToken
			case tok == "":
				err = errMetricsToken
			default:
				// Hashes of equal length, compared in constant time: the
				// comparison tells nothing of the token's length or prefix.
				got := sha256.Sum256([]byte(tok))
				if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
					err = errMetricsToken
				} else if !s.limiter.allow("metrics-scraper") {
					err = errRateLimited
				}
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			prom.ServeHTTP(w, r)
		})
	}
}

var (
	// errMetricsToken answers a scrape without the metrics token (a
	// tenant's API key among them).
	errMetricsToken = baton.Errorf(baton.EUNAUTHORIZED, "missing or wrong metrics token: /metrics takes the operator's BATON_METRICS_TOKEN as Authorization: Bearer <token>, not an API key")
	// errNoMetricsToken answers a scrape when no metrics token is set.
	errNoMetricsToken = baton.Errorf(baton.EFORBIDDEN, "/metrics is closed: the operator sets BATON_METRICS_TOKEN to open it to a Prometheus scraper")
)

// aggregateHandler serves GET /metrics/perf/aggregate: with an API key, the
// key's tenant's totals (app and user, like every other route); with the
// operator's metrics token, every app's.
func (s *Server) aggregateHandler() http.HandlerFunc {
	tenant := s.perfHandler((*metrics.Collector).AggregateHandler)
	operator := s.metricsHandler(func(c *metrics.Collector) http.Handler { return c.AggregateHandler(nil) })
	want := sha256.Sum256([]byte(s.cfg.MetricsToken))
	return func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(bearer(r)))
		if s.cfg.MetricsToken == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			tenant(w, r)
			return
		}
		if !s.limiter.allow("metrics-scraper") {
			s.writeError(w, r, errRateLimited)
			return
		}
		operator(w, r)
	}
}
