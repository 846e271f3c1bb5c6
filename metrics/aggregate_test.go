package metrics_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// aggregate asks the collector's /metrics/perf/aggregate handler as the
// test user of app.
func aggregate(t *testing.T, h *harness, app string) (agg struct {
	TotalTurns     int64   `json:"total_turns"`
	TotalToolCalls int64   `json:"total_tool_calls"`
	TotalTokens    int64   `json:"total_tokens"`
	TotalCost      float64 `json:"total_cost"`
	ActiveChats    int64   `json:"active_chats"`
}) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.col.AggregateHandler(func(*http.Request) (baton.Scope, error) { return baton.Scope{App: app, User: testScope.User}, nil }).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/perf/aggregate", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("aggregate: %d %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &agg); err != nil {
		t.Fatal(err)
	}
	return agg
}

// gauge reads a gauge of the collector's registry.
func gauge(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.col.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestAggregateSurvivesRestart runs the generator, stops everything, opens
// the same store in a new process's collector and checks that
// /metrics/perf/aggregate still reports the tenant's tokens and cost (from
// the usage rows); turns and tool calls count what this process observed.
func TestAggregateSurvivesRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "baton.db")
	h := newHarness(t, config{db: db, engine: true})
	id := h.driveGenerator()
	h.waitObserved(1)
	_, usage := scriptedUsage(t, h, "generator", id)
	before := aggregate(t, h, testScope.App)
	if before.TotalTokens != usage.PromptTokens+usage.CompletionTokens || before.TotalCost != 0 || before.TotalTurns == 0 || before.TotalToolCalls == 0 {
		t.Fatalf("before the restart: %+v, want %d tokens, no cost (scripted), turns and tool calls", before, usage.PromptTokens+usage.CompletionTokens)
	}
	h.close() // flushes the rollups

	again := newHarness(t, config{db: db, engine: true})
	after := aggregate(t, again, testScope.App)
	if after.TotalTokens != before.TotalTokens || after.TotalCost != before.TotalCost {
		t.Errorf("after the restart: %+v, want the tokens and cost of %+v", after, before)
	}
	if other := aggregate(t, again, "other-app"); other.TotalTokens != 0 || other.TotalTurns != 0 {
		t.Errorf("another app sees %+v", other)
	}
}

// TestAggregateActiveChats holds a run in its model call and checks that
// the app's active_chats and the baton_active_chats gauge both count it,
// and both drop to 0 when it ends; another app's aggregate counts none.
func TestAggregateActiveChats(t *testing.T) {
	gate := make(chan struct{})
	h := newHarness(t, config{gate: gate, engine: true})
	id := h.start("hello")
	testenv.Eventually(t, 10*time.Second, "the run to start", func() error {
		if n := h.eng.Active(); n != 1 {
			return fmt.Errorf("%d runs active", n)
		}
		return nil
	})
	if got, g := aggregate(t, h, testScope.App).ActiveChats, gauge(t, h, "baton_active_chats"); got != 1 || g != 1 {
		t.Errorf("during the run: active_chats %d, baton_active_chats %v; want 1 and 1", got, g)
	}
	if got := aggregate(t, h, "other-app").ActiveChats; got != 0 {
		t.Errorf("another app: active_chats %d", got)
	}
	close(gate) // every model call goes through from now on
	h.waitStatus(id, baton.ChatCompleted)
	if got, g := aggregate(t, h, testScope.App).ActiveChats, gauge(t, h, "baton_active_chats"); got != 0 || g != 0 {
		t.Errorf("after the run: active_chats %d, baton_active_chats %v; want 0 and 0", got, g)
	}
}
