package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton"
)

// ScopeFunc returns the tenant a request acts for (the server's
// authentication), or an error that says why it has none.
type ScopeFunc func(r *http.Request) (baton.Scope, error)

// Aggregate is the body of GET /metrics/perf/aggregate: an app's totals
// (or every app's), which survive a restart (AggregateOf).
type Aggregate struct {
	TotalTurns     int64     `json:"total_turns"`
	TotalToolCalls int64     `json:"total_tool_calls"`
	TotalTokens    int64     `json:"total_tokens"`
	TotalCost      float64   `json:"total_cost"`
	ActiveChats    int64     `json:"active_chats"`
	Timestamp      time.Time `json:"timestamp"`
}

// AgentPerf is one agent's part of a ChatPerf.
type AgentPerf struct {
	Turns            int64   `json:"turns"`
	ToolCalls        int64   `json:"tool_calls"`
	ModelCalls       int64   `json:"model_calls"`
	Tokens           int64   `json:"tokens"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	Cost             float64 `json:"cost"`
	AvgLatencyMS     float64 `json:"avg_latency_ms"`
	AvgTTFTMS        float64 `json:"avg_ttft_ms"`
}

// ChatPerf is the body of GET /metrics/perf/chats/{chat_id}. Tokens and
// cost come from the chat's usage rows (the truth); turns, tool calls and
// latencies from what this process observed since it started.
type ChatPerf struct {
	ChatID           string               `json:"chat_id"`
	Workflow         string               `json:"workflow,omitempty"`
	TotalTurns       int64                `json:"total_turns"`
	TotalToolCalls   int64                `json:"total_tool_calls"`
	ModelCalls       int64                `json:"model_calls"`
	TotalTokens      int64                `json:"total_tokens"`
	PromptTokens     int64                `json:"prompt_tokens"`
	CompletionTokens int64                `json:"completion_tokens"`
	CachedTokens     int64                `json:"cached_tokens"`
	TotalCost        float64              `json:"total_cost"`
	AgentStats       map[string]AgentPerf `json:"agent_stats"`
	Timestamp        time.Time            `json:"timestamp"`
}

// Snapshot returns the aggregate figures.
func (c *Collector) Snapshot() Aggregate {
	active := c.activeChats()
	c.mu.Lock()
	defer c.mu.Unlock()
	return Aggregate{
		TotalTurns: c.global.Turns, TotalToolCalls: c.global.ToolCalls,
		TotalTokens: c.global.TotalTokens(), TotalCost: c.global.Cost,
		ActiveChats: active, Timestamp: c.now().UTC(),
	}
}

// ChatsInMemory returns the number of chats whose figures the collector
// holds in memory: at most Options.MaxChats.
func (c *Collector) ChatsInMemory() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chats.len()
}

func (c *Collector) activeChats() int64 {
	if c.opts.Active != nil {
		return c.opts.Active()
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, ch := range c.chats.all() {
		if now.Sub(ch.lastSeen) < time.Minute {
			n++
		}
	}
	return n
}

// ChatPerf returns a chat's figures for scope. A chat of another scope is
// ENOTFOUND, as is one nobody knows (with Options.Usage: one the store does
// not have in scope).
func (c *Collector) ChatPerf(r *http.Request, scope baton.Scope, chatID string) (ChatPerf, error) {
	out := ChatPerf{ChatID: chatID, AgentStats: map[string]AgentPerf{}, Timestamp: c.now().UTC()}
	known := false
	if c.opts.Usage != nil {
		total, per, err := c.opts.Usage.ChatUsage(r.Context(), scope, chatID)
		if err != nil {
			return ChatPerf{}, err
		}
		known = true
		out.ModelCalls, out.TotalCost = total.Calls, total.Cost
		out.PromptTokens, out.CompletionTokens, out.CachedTokens = total.PromptTokens, total.CompletionTokens, total.CachedTokens
		out.TotalTokens = total.TotalTokens()
		for _, a := range per {
			out.AgentStats[a.Agent] = AgentPerf{ModelCalls: a.Calls, Tokens: a.TotalTokens(), PromptTokens: a.PromptTokens,
				CompletionTokens: a.CompletionTokens, CachedTokens: a.CachedTokens, Cost: a.Cost}
		}
	}
	c.mu.Lock()
	ch, _ := c.chats.peek(chatID)
	if ch != nil && ch.scoped && ch.scope == scope {
		known = true
		out.Workflow = ch.workflow
		out.TotalTurns, out.TotalToolCalls = ch.all.Turns, ch.all.ToolCalls
		if c.opts.Usage == nil {
			out.ModelCalls, out.TotalCost = ch.all.Calls, ch.all.Cost
			out.PromptTokens, out.CompletionTokens, out.CachedTokens = ch.all.PromptTokens, ch.all.CompletionTokens, ch.all.CachedTokens
			out.TotalTokens = ch.all.TotalTokens()
		}
		for name, a := range ch.agents {
			ap := out.AgentStats[name]
			ap.Turns, ap.ToolCalls = a.Turns, a.ToolCalls
			if c.opts.Usage == nil {
				ap.ModelCalls, ap.Tokens, ap.Cost = a.Calls, a.TotalTokens(), a.Cost
				ap.PromptTokens, ap.CompletionTokens, ap.CachedTokens = a.PromptTokens, a.CompletionTokens, a.CachedTokens
			}
			if a.latN > 0 {
				ap.AvgLatencyMS = float64(a.latency.Microseconds()) / 1000 / float64(a.latN)
			}
			if a.ttftN > 0 {
				ap.AvgTTFTMS = float64(a.ttft.Microseconds()) / 1000 / float64(a.ttftN)
			}
			out.AgentStats[name] = ap
		}
	}
	c.mu.Unlock()
	if !known {
		return ChatPerf{}, baton.Errorf(baton.ENOTFOUND, "chat %q not found", chatID)
	}
	return out, nil
}

// AggregateOf returns the figures of scope's tenant (app and user), of
// scope.App's users together when scope.User is "", or of every app when
// scope is zero:
//
//   - total_tokens and total_cost from the usage rows (Options.Usage), the
//     same truth as a chat's figures and its budget: they survive a
//     restart and count every instance's calls;
//   - total_turns and total_tool_calls: of a tenant, what this process
//     observed since it started (rollups are kept per app, not per user);
//     of an app, its persisted rollups plus what this process observed
//     since it wrote them (AppTotals); of every app, what this process
//     observed since it started;
//   - active_chats: the runs in progress, as the baton_active_chats gauge
//     counts them (Options.Active; for a tenant or an app
//     Options.ActiveIn, whose sum over the tenants is the gauge).
func (c *Collector) AggregateOf(ctx context.Context, scope baton.Scope) (Aggregate, error) {
	agg := c.Snapshot()
	switch {
	case scope.App != "" && scope.User != "":
		c.mu.Lock()
		t := totals{}
		if a := c.tenants[scope]; a != nil {
			t = *a
		}
		c.mu.Unlock()
		agg.TotalTurns, agg.TotalToolCalls, agg.TotalTokens, agg.TotalCost = t.Turns, t.ToolCalls, t.TotalTokens(), t.Cost
		agg.ActiveChats = c.activeIn(scope)
	case scope.App != "":
		t, err := c.AppTotals(ctx, scope.App)
		if err != nil {
			return Aggregate{}, err
		}
		agg.TotalTurns, agg.TotalToolCalls, agg.TotalTokens, agg.TotalCost = t.Turns, t.ToolCalls, t.TotalTokens(), t.Cost
		agg.ActiveChats = c.activeIn(scope)
	}
	if c.opts.Usage != nil {
		u, err := c.opts.Usage.AppUsage(ctx, scope)
		if err != nil {
			return Aggregate{}, fmt.Errorf("metrics: usage of app %q: %w", scope.App, err)
		}
		agg.TotalTokens, agg.TotalCost = u.TotalTokens(), u.Cost
	}
	return agg, nil
}

// activeIn counts scope's runs in progress (Options.ActiveIn), else its
// chats with an event in the last minute.
func (c *Collector) activeIn(scope baton.Scope) int64 {
	if c.opts.ActiveIn != nil {
		return c.opts.ActiveIn(scope)
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, ch := range c.chats.all() {
		if ch.scoped && ch.scope.App == scope.App && (scope.User == "" || ch.scope.User == scope.User) && now.Sub(ch.lastSeen) < time.Minute {
			n++
		}
	}
	return n
}

// AggregateHandler serves GET /metrics/perf/aggregate (AggregateOf). With
// scopeOf nil it reports every app (an operator endpoint); with scopeOf the
// caller's tenant only, app and user, as everywhere else: one user of an
// app does not see the others' turns, tokens, cost and chats.
func (c *Collector) AggregateHandler(scopeOf ScopeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var scope baton.Scope
		if scopeOf != nil {
			var err error
			if scope, err = scopeOf(r); err != nil {
				writeError(w, err)
				return
			}
			if scope.App == "" || scope.User == "" {
				// A zero scope would be every app: a caller without a
				// tenant sees nothing.
				writeError(w, baton.Errorf(baton.EUNAUTHORIZED, "metrics: a request without an app and a user"))
				return
			}
		}
		agg, err := c.AggregateOf(r.Context(), scope)
		if err != nil {
			c.log.Warn("metrics: aggregate", "app", scope.App, "err", err)
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, agg)
	})
}

// ChatHandler serves GET /metrics/perf/chats/{chat_id} for the caller's
// scope (scopeOf is required): another tenant's chat is 404, like an
// unknown one (invariant 8).
func (c *Collector) ChatHandler(scopeOf ScopeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, err := scopeOf(r)
		if err != nil {
			writeError(w, err)
			return
		}
		id := r.PathValue("chat_id")
		if id == "" || len(id) > baton.MaxEventIDLen {
			writeError(w, baton.Errorf(baton.EINVALID, "chat_id: required, at most %d characters", baton.MaxEventIDLen))
			return
		}
		perf, err := c.ChatPerf(r, scope, id)
		if err != nil {
			if baton.ErrorCode(err) == baton.ENOTFOUND {
				err = baton.Errorf(baton.ENOTFOUND, "chat not found")
			}
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, perf)
	})
}

// PrometheusHandler serves the registry in the Prometheus text format, for
// GET /metrics and GET /metrics/prometheus.
func (c *Collector) PrometheusHandler() http.Handler {
	return promhttp.HandlerFor(c.opts.Registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{c}})
}

type slogPrinter struct{ c *Collector }

func (p slogPrinter) Println(v ...any) { p.c.log.Warn("metrics: prometheus", "err", v) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError writes baton's error body; internal details never leave.
func writeError(w http.ResponseWriter, err error) {
	code := baton.ErrorCode(err)
	msg := baton.ErrorMessage(err)
	var be *baton.Error
	if !errors.As(err, &be) || code == baton.EINTERNAL {
		msg = "internal error"
	}
	writeJSON(w, baton.HTTPStatus(code), map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
