package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/metrics"
)

// expectedCost is the cost of the scripted generator run: the scripted
// provider reports its calls under its own model, which has no price, not
// under the workflow's gpt-4o-mini.
func expectedCost(u baton.Usage) float64 {
	return llm.Cost(scripted.Model, u, nil)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestGeneratorTotals runs the generator and checks that every figure —
// the aggregate, the per-chat endpoint, the usage rows, the persisted
// rollup and the app totals budgets use — equals the sum of the scripted
// usage exactly.
func TestGeneratorTotals(t *testing.T) {
	h := newHarness(t, config{})
	id := h.driveGenerator()
	h.waitObserved(1)
	calls, want := scriptedUsage(t, h, "generator", id)
	wantCost := expectedCost(want)

	agg := h.col.Snapshot()
	if agg.TotalTokens != want.TotalTokens() || !near(agg.TotalCost, wantCost) {
		t.Errorf("aggregate: %d tokens $%v, want %d tokens $%v", agg.TotalTokens, agg.TotalCost, want.TotalTokens(), wantCost)
	}
	evs, err := h.store.Events(context.Background(), testScope, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var turns, toolResponses int64
	for _, ev := range evs {
		switch {
		case ev.Type == baton.TypeChatSelectSpeaker && !strings.Contains(string(ev.Payload), `"_synthetic":true`):
			turns++
		case ev.Type == baton.TypeChatToolResponse:
			toolResponses++
		}
	}
	if agg.TotalTurns != turns || agg.TotalToolCalls != toolResponses || turns == 0 || toolResponses == 0 {
		t.Errorf("aggregate: %d turns, %d tool calls; the chat recorded %d native select_speaker and %d tool responses",
			agg.TotalTurns, agg.TotalToolCalls, turns, toolResponses)
	}

	req := httptest.NewRequest("GET", "/metrics/perf/chats/"+id, nil)
	perf, err := h.col.ChatPerf(req, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	if perf.ModelCalls != calls || perf.PromptTokens != want.PromptTokens || perf.CompletionTokens != want.CompletionTokens ||
		perf.TotalTokens != want.TotalTokens() || !near(perf.TotalCost, wantCost) || perf.Workflow != "generator" || perf.TotalTurns != turns {
		t.Errorf("chat perf = %+v, want %d calls, %+v, $%v", perf, calls, want, wantCost)
	}
	var agentTokens int64
	for name, a := range perf.AgentStats {
		agentTokens += a.Tokens
		if a.ModelCalls > 0 && (a.AvgLatencyMS < 0 || a.Turns == 0) {
			t.Errorf("agent %s: %+v", name, a)
		}
	}
	if agentTokens != want.TotalTokens() || perf.AgentStats["InterviewAgent"].ModelCalls != 2 {
		t.Errorf("per-agent tokens sum to %d, want %d; agents %+v", agentTokens, want.TotalTokens(), perf.AgentStats)
	}

	// The rollup written by the collector's writer equals the same sums.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.col.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err := h.store.WorkflowStats(context.Background(), testScope.App, "generator", 0)
	if err != nil || len(rs) != 1 {
		t.Fatalf("WorkflowStats = %+v, %v", rs, err)
	}
	r := rs[0]
	if r.ChatID != id || r.Calls != calls || r.Usage != want || !near(r.Cost, wantCost) || r.Turns != turns || r.ToolCalls != toolResponses {
		t.Errorf("rollup = %+v, want %d calls %+v $%v %d turns %d tool calls", r, calls, want, wantCost, turns, toolResponses)
	}
	app, err := h.col.AppTotals(context.Background(), testScope.App)
	if err != nil || app.TotalTokens() != want.TotalTokens() || !near(app.Cost, wantCost) {
		t.Errorf("AppTotals = %+v, %v; want %d tokens", app, err, want.TotalTokens())
	}
}

// blockingStats is a StatsStore whose writes wait until released.
type blockingStats struct {
	baton.StatsStore
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStats) AddChatStats(ctx context.Context, d baton.ChatStats) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.StatsStore.AddChatStats(ctx, d)
}

// TestStalledWriterDoesNotDelayTheRun blocks the rollup writer for the
// whole run: the run completes, the full queue is counted, and once the
// writer is released nothing was lost.
func TestStalledWriterDoesNotDelayTheRun(t *testing.T) {
	blocked := &blockingStats{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, config{
		opts: metrics.Options{Queue: 1, FlushInterval: time.Millisecond},
		stats: func(s baton.StatsStore) baton.StatsStore {
			blocked.StatsStore = s
			return blocked
		},
	})
	id := h.driveGenerator() // fails the test if the run does not complete
	h.waitObserved(1)
	select {
	case <-blocked.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer never started a write")
	}
	// The writer is stuck in its first write and the queue (1) is full:
	// later flushes are counted as drops while the run went on.
	testenv.Eventually(t, 5*time.Second, "a full-queue drop to be counted while the writer is blocked", func() error {
		if gathered(t, h.col.Registry(), "baton_metrics_rollup_queue_full_total") == 0 {
			return errors.New("none counted")
		}
		return nil
	})
	if !strings.Contains(h.logs.String(), "rollup queue full") {
		t.Error("the full queue was not logged")
	}
	close(blocked.release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.col.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, want := scriptedUsage(t, h, "generator", id)
	rs, err := h.store.WorkflowStats(context.Background(), testScope.App, "generator", 0)
	if err != nil || len(rs) != 1 || rs[0].ChatID != id || rs[0].Usage != want {
		t.Fatalf("after release, rollups = %+v, %v; want %+v (pending deltas kept, nothing lost)", rs, err, want)
	}
}

// TestPrometheus scrapes /metrics after a run and parses it with the
// Prometheus text parser.
func TestPrometheus(t *testing.T) {
	h := newHarness(t, config{})
	id := h.driveGenerator()
	h.waitObserved(1)
	h.col.WSConnected(1)
	h.col.WSConnected(1)
	h.col.WSConnected(-1)
	h.col.WSDropped()

	srv := httptest.NewServer(h.col.PrometheusHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	calls, want := scriptedUsage(t, h, "generator", id)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		mf := mfs[name]
		if mf == nil {
			t.Fatalf("no %s", name)
		}
		var sum float64
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"baton_tokens_total", map[string]string{"model": scripted.Model, "kind": "prompt"}, float64(want.PromptTokens)},
		{"baton_tokens_total", map[string]string{"model": scripted.Model, "kind": "completion"}, float64(want.CompletionTokens)},
		{"baton_model_calls_total", map[string]string{"model": scripted.Model}, float64(calls)},
		{"baton_model_latency_seconds", map[string]string{"model": scripted.Model}, float64(calls)},
		{"baton_runs_ended_total", map[string]string{"workflow": "generator", "status": "success"}, 1},
		{"baton_websocket_connections", nil, 1},
		{"baton_websocket_slow_consumer_drops_total", nil, 1},
		{"baton_metrics_subscription_drops_total", nil, 0},
	}
	for _, c := range checks {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := value("baton_cost_usd_total", nil); !near(got, expectedCost(want)) {
		t.Errorf("cost = %v, want %v", got, expectedCost(want))
	}
	for _, name := range []string{"baton_turns_total", "baton_tool_calls_total", "baton_synthetic_speaker_events_total",
		"baton_store_append_seconds", "baton_bus_events_published_total", "baton_model_time_to_first_token_seconds"} {
		if value(name, nil) <= 0 {
			t.Errorf("%s: nothing counted", name)
		}
	}
	for _, name := range []string{"baton_bus_duplicates_total", "baton_bus_handler_errors_total"} {
		if mfs[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	// Bounded cardinality: no label carries a chat, user or message id.
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "chat_id", "chat", "user", "message_id":
					t.Errorf("%s has label %s", name, lp.GetName())
				}
			}
		}
	}
}

// TestChatEndpointIsTenantScoped asks for a chat's figures as its owner,
// as another user of the app and as another app.
func TestChatEndpointIsTenantScoped(t *testing.T) {
	h := newHarness(t, config{})
	id := h.start("hello")
	h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed)
	h.waitObserved(1)

	scopeOf := func(r *http.Request) (baton.Scope, error) {
		if r.Header.Get("X-App") == "" {
			return baton.Scope{}, baton.Errorf(baton.EUNAUTHORIZED, "no key")
		}
		return baton.Scope{App: r.Header.Get("X-App"), User: r.Header.Get("X-User")}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics/perf/chats/{chat_id}", h.col.ChatHandler(scopeOf))
	mux.Handle("GET /metrics/perf/aggregate", h.col.AggregateHandler(scopeOf))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string, s baton.Scope) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if s.App != "" {
			req.Header.Set("X-App", s.App)
			req.Header.Set("X-User", s.User)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, []byte(b.String())
	}

	resp, body := get("/metrics/perf/chats/"+id, testScope)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("owner: status %d %s", resp.StatusCode, body)
	}
	var perf metrics.ChatPerf
	if err := json.Unmarshal(body, &perf); err != nil {
		t.Fatal(err)
	}
	if perf.ChatID != id || perf.TotalTokens == 0 || len(perf.AgentStats) == 0 {
		t.Errorf("owner sees %s", body)
	}
	for _, s := range []baton.Scope{{App: testScope.App, User: "mallory"}, {App: "other", User: testScope.User}} {
		resp, body := get("/metrics/perf/chats/"+id, s)
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), id) {
			t.Errorf("scope %+v: status %d %s, want 404 that names nothing", s, resp.StatusCode, body)
		}
	}
	if resp, _ := get("/metrics/perf/chats/"+id, baton.Scope{}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no scope: status %d, want 401", resp.StatusCode)
	}
	var agg metrics.Aggregate
	_, body = get("/metrics/perf/aggregate", baton.Scope{App: "other", User: "x"})
	if err := json.Unmarshal(body, &agg); err != nil || agg.TotalTokens != 0 || agg.Timestamp.IsZero() {
		t.Errorf("another app's aggregate = %s (%v), want zero totals", body, err)
	}
	// Another user of the same app sees none of this user's usage: the
	// tenant is app and user.
	_, body = get("/metrics/perf/aggregate", baton.Scope{App: testScope.App, User: "mallory"})
	if err := json.Unmarshal(body, &agg); err != nil || agg.TotalTokens != 0 || agg.TotalTurns != 0 || agg.ActiveChats != 0 {
		t.Errorf("another user's aggregate = %s (%v), want zero totals", body, err)
	}
	_, body = get("/metrics/perf/aggregate", testScope)
	if err := json.Unmarshal(body, &agg); err != nil || agg.TotalTokens != perf.TotalTokens || agg.TotalTurns == 0 {
		t.Errorf("own aggregate = %s (%v), want %d tokens", body, err, perf.TotalTokens)
	}
}

// TestBudgets ends a chat at its per-chat token limit, and an app's next
// chat at the app's limit, both with chat.run_complete {status:
// "budget_exceeded"} before a model call.
func TestBudgets(t *testing.T) {
	h := newHarness(t, config{budget: &metrics.BudgetConfig{Chat: metrics.Limits{MaxTokens: 300}, Apps: map[string]metrics.Limits{"acme": {MaxTokens: 500}}}})
	ctx := context.Background()
	id := h.start("generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(ctx, testScope, id, "A weekly newsletter.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	secret := h.pending(id, baton.PendingSecret)
	if err := h.eng.RespondUI(ctx, testScope, id, secret.UIEventID, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"sk-test"}`)); err != nil {
		t.Fatal(err)
	}
	c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed)
	if c.Status != baton.ChatCompleted || lastStatus(t, h, id) != "budget_exceeded" || !strings.Contains(lastReason(t, h, id), "chat token budget") {
		t.Fatalf("chat ended %s with %q (%s), want completed with budget_exceeded", c.Status, lastStatus(t, h, id), lastReason(t, h, id))
	}
	total, _, err := h.store.ChatUsage(ctx, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	// 188 tokens after the first call, 410 after the second: the third is refused.
	if total.TotalTokens() != 410 || total.Calls != 2 {
		t.Errorf("chat used %d tokens in %d calls before its budget stopped it, want 410 in 2", total.TotalTokens(), total.Calls)
	}
	h.waitObserved(1)

	// The app has spent 410 of its 500: a new chat's first call goes ahead
	// (598 in all), its second is refused by the app's budget.
	id2 := h.start("generator")
	h.waitStatus(id2, baton.ChatWaitingInput)
	testenv.Eventually(t, 5*time.Second, "the app's totals to reach 598 tokens", func() error {
		app, err := h.col.AppTotals(ctx, testScope.App)
		if err != nil {
			t.Fatal(err)
		}
		if n := app.TotalTokens(); n != 598 {
			return fmt.Errorf("app totals %d tokens", n)
		}
		return nil
	})
	if err := h.eng.Submit(ctx, testScope, id2, "Another newsletter.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id2, baton.ChatCompleted, baton.ChatFailed)
	if lastStatus(t, h, id2) != "budget_exceeded" || !strings.Contains(lastReason(t, h, id2), "app token budget") {
		t.Errorf("second chat ended with %q (%s), want budget_exceeded by the app's budget", lastStatus(t, h, id2), lastReason(t, h, id2))
	}
}

func lastEvent(t *testing.T, h *harness, id string) map[string]any {
	t.Helper()
	evs, err := h.store.Events(context.Background(), testScope, id, 0, 0)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events: %v", err)
	}
	var p map[string]any
	_ = json.Unmarshal(evs[len(evs)-1].Payload, &p)
	return p
}

func lastStatus(t *testing.T, h *harness, id string) string {
	s, _ := lastEvent(t, h, id)["status"].(string)
	return s
}

func lastReason(t *testing.T, h *harness, id string) string {
	s, _ := lastEvent(t, h, id)["reason"].(string)
	return s
}

// TestSubscriptionDropIsCountedAndReplaced holds the collector's goroutine
// in a chat lookup and overflows its buffer meanwhile, so the bus drops the
// subscription: the drop is counted and logged, and the collector observes
// again.
//
// It waits on sync points only: the lookup says when the goroutine is held,
// the bus's drop counter says when the subscription is gone, and a probe
// event the collector counts says when the new subscription is in place.
// (Flooding a one-event buffer instead depended on the scheduler: under load
// the collector kept up and was never dropped, or the next run began before
// it had subscribed again, or its one-event buffer overflowed again during
// the run, and the run's end was missed.)
func TestSubscriptionDropIsCountedAndReplaced(t *testing.T) {
	const buffer = 256 // more than a hello run sends, so only the overflow below drops
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // never leave the collector held
	h := newHarness(t, config{
		opts: metrics.Options{Buffer: buffer},
		chats: func(next metrics.ChatLookup) metrics.ChatLookup {
			return func(ctx context.Context, scope baton.Scope, chatID string) (baton.Chat, error) {
				if chatID == "held" {
					holdOnce.Do(func() { close(held) })
					<-release // the collector's goroutine waits here, its buffer filling
				}
				return next(ctx, scope, chatID)
			}
		},
	})
	// A resumed run of a scoped chat makes the collector look the chat up
	// (a run.start does not: its chat may not exist yet).
	if err := h.bus.Broadcast(baton.NewInput(testScope, baton.TypeRunResume, "held", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the collector never looked the chat up")
	}
	probe := func() error {
		return h.bus.Broadcast(baton.NewEvent(baton.TypeStreamStart, baton.Metadata{TriggerSessionID: "c"}, json.RawMessage(`{"message_id":"m","agent":"a"}`)))
	}
	for range buffer + 1 {
		if err := probe(); err != nil {
			t.Fatal(err)
		}
	}
	if drops := h.bus.Stats().ObserverDrops; drops != 1 {
		t.Fatalf("the bus dropped %d subscriptions after overflowing the held collector's buffer, want 1", drops)
	}
	releaseOnce.Do(func() { close(release) })

	testenv.Eventually(t, 10*time.Second, "the collector to count the drop", func() error {
		if n := gathered(t, h.col.Registry(), "baton_metrics_subscription_drops_total"); n != 1 {
			return fmt.Errorf("%v drops counted", n)
		}
		return nil
	})
	if !strings.Contains(h.logs.String(), "subscribing again") {
		t.Error("the drop was not logged")
	}
	// The drop is counted before the collector subscribes again: a probe
	// sent before that is missed, so send one per poll until one is seen.
	base := gathered(t, h.col.Registry(), "baton_metrics_events_observed_total")
	testenv.Eventually(t, 10*time.Second, "the collector to observe a probe on its new subscription", func() error {
		if n := gathered(t, h.col.Registry(), "baton_metrics_events_observed_total"); n > base {
			return nil
		}
		if err := probe(); err != nil {
			return err
		}
		return errors.New("no probe observed since the drop")
	})
	// It observes again: a whole run is counted.
	id := h.start("hello")
	h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed)
	h.waitObserved(1)
	if drops := h.bus.Stats().ObserverDrops; drops != 1 {
		t.Errorf("the bus dropped %d subscriptions, want only the one the test caused", drops)
	}
}

// TestBudgetStoreErrorLetsTheCallGoAhead: the budget hook reports a store
// error, which the engine logs and ignores (invariant 9).
func TestBudgetStoreErrorLetsTheCallGoAhead(t *testing.T) {
	h := newHarness(t, config{})
	f := h.col.Budget(metrics.BudgetConfig{Chat: metrics.Limits{MaxTokens: 1}})
	over, _, err := f(context.Background(), testScope, baton.Chat{ID: "nope"}, nil)
	if err == nil || over {
		t.Fatalf("budget of an unknown chat = %v, %v; want an error", over, err)
	}
}

// TestCloseGivesUpOnAStalledWriter: Close with a deadline returns when the
// writer is stuck, counts what it dropped, and leaves no goroutine behind
// (goleak in TestMain).
func TestCloseGivesUpOnAStalledWriter(t *testing.T) {
	blocked := &blockingStats{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, config{
		opts: metrics.Options{FlushInterval: time.Millisecond},
		stats: func(s baton.StatsStore) baton.StatsStore {
			blocked.StatsStore = s
			return blocked
		},
	})
	id := h.start("hello")
	h.waitStatus(id, baton.ChatCompleted)
	h.waitObserved(1)
	select {
	case <-blocked.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer never started a write")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.col.Close(ctx); err == nil {
		t.Fatal("Close returned nil with the writer stuck")
	}
	if gathered(t, h.col.Registry(), "baton_metrics_rollup_errors_total") == 0 {
		t.Error("the dropped write was not counted")
	}
}

// TestRemoteEventsAreNotCounted: with several instances, an event another
// instance recorded reaches this one's observers tagged with its origin;
// only the instance that recorded it counts it, so totals add up across
// instances instead of doubling.
func TestRemoteEventsAreNotCounted(t *testing.T) {
	b := bus.New()
	defer b.Close(context.Background())
	col, err := metrics.New(metrics.Options{Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	usage := func(remote bool) baton.Event {
		ev := baton.NewEvent(baton.TypeChatUsageSummary, baton.Metadata{TriggerSessionID: "c1"},
			json.RawMessage(`{"kind":"usage_summary","agent":"A","model":"m","prompt_tokens":10,"completion_tokens":5,"cost":0.5}`))
		if remote {
			ev.Metadata.Extra = map[string]json.RawMessage{bus.OriginKey: json.RawMessage(`"other"`)}
		}
		return ev
	}
	col.Observe(usage(true))
	if s := col.Snapshot(); s.TotalTokens != 0 || s.TotalCost != 0 {
		t.Fatalf("a remote event was counted: %+v", s)
	}
	col.Observe(usage(false))
	if s := col.Snapshot(); s.TotalTokens != 15 || s.TotalCost != 0.5 {
		t.Fatalf("the local event gave %+v, want 15 tokens and $0.5", s)
	}
}
