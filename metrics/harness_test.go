package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
)

const workflowsDir = "../workflows"

var testScope = baton.Scope{App: "acme", User: "ada"}

// harness is the runtime with the scripted provider on a real SQLite file:
// a real bus, and a metrics collector (and, when asked, a tracer) watching.
type harness struct {
	t     *testing.T
	rt    *runtime.Runtime
	logs  *testenv.LogBuffer
	store *sqlite.Store
	stats baton.StatsStore // what the collector writes rollups to
	bus   *bus.Bus
	eng   *engine.Engine
	col   *metrics.Collector
	spans *tracetest.InMemoryExporter
	tp    *sdktrace.TracerProvider
	// inputCtx is the context inputs are given with (default Background):
	// a test puts a caller's span context in it.
	inputCtx context.Context
}

type config struct {
	opts    metrics.Options
	budget  *metrics.BudgetConfig
	tracing bool
	tp      *sdktrace.TracerProvider // tracing with this provider (default: in memory)
	db      string                   // the SQLite file (default: a new one)
	gate    chan struct{}            // when set, every model call waits for a receive from it
	engine  bool                     // the collector counts runs in progress with the engine (Active, ActiveIn)
	stats   func(baton.StatsStore) baton.StatsStore
	chats   func(metrics.ChatLookup) metrics.ChatLookup // wraps the collector's chat lookup
}

func newHarness(t *testing.T, cfg config) *harness {
	t.Helper()
	ctx := context.Background()
	if cfg.db == "" {
		cfg.db = filepath.Join(t.TempDir(), "baton.db")
	}
	h := &harness{t: t, logs: &testenv.LogBuffer{}, inputCtx: context.Background()}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.tracing || cfg.tp != nil {
		h.tp = cfg.tp
		if h.tp == nil {
			h.spans = tracetest.NewInMemoryExporter()
			h.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans), sdktrace.WithIDGenerator(metrics.IDGenerator()))
		}
		tp := h.tp
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // after the test read the spans
	}
	rt, err := runtime.Open(ctx, runtime.Config{
		StoreURL: "sqlite:" + cfg.db, WorkflowsDir: workflowsDir, Logger: log,
		SecretKey: []byte("0123456789abcdef0123456789abcdef"), TracerProvider: h.tp,
		Metrics: func(o *metrics.Options) {
			opts := cfg.opts
			opts.Bus, opts.Chats, opts.Usage, opts.Logger = o.Bus, o.Chats, o.Usage, o.Logger
			if cfg.chats != nil {
				opts.Chats = cfg.chats(opts.Chats)
			}
			opts.Stats = o.Stats
			if cfg.stats != nil {
				opts.Stats = cfg.stats(o.Stats)
			}
			h.stats = opts.Stats
			if cfg.engine {
				opts.Active, opts.ActiveIn = o.Active, o.ActiveIn
			}
			*o = opts
		},
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			p, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
			if err != nil || cfg.gate == nil {
				return p, err
			}
			return gated{p, cfg.gate}, nil
		},
		Budget: budgetOf(cfg.budget),
	})
	if err != nil {
		t.Fatalf("open runtime: %v", err)
	}
	h.rt, h.store, h.bus, h.eng, h.col = rt, rt.Store().(*sqlite.Store), rt.Bus(), rt.Engine(), rt.Metrics()
	t.Cleanup(h.close)
	return h
}

// close closes the runtime: the bus drains, then the tracer, the collector,
// the engine and the store close.
func (h *harness) close() {
	if h.rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.rt.Close(ctx); err != nil {
		h.t.Errorf("runtime close: %v", err)
	}
	h.rt = nil
}

// budgetOf is the budget a test asks for, or none.
func budgetOf(b *metrics.BudgetConfig) metrics.BudgetConfig {
	if b == nil {
		return metrics.BudgetConfig{}
	}
	return *b
}

func (h *harness) start(wf string) string {
	h.t.Helper()
	c, err := h.eng.Start(h.inputCtx, testScope, wf, baton.StartOptions{})
	if err != nil {
		h.t.Fatalf("start %s: %v", wf, err)
	}
	return c.ID
}

// waitStatus polls the store, with a deadline, until the chat reaches one
// of the statuses and the engine is idle.
func (h *harness) waitStatus(chatID string, want ...baton.ChatStatus) baton.Chat {
	h.t.Helper()
	var c baton.Chat
	testenv.Eventually(h.t, 10*time.Second, fmt.Sprintf("chat %s to reach one of %v with the engine idle", chatID, want), func() error {
		var err error
		c, err = h.store.GetChat(context.Background(), testScope, chatID)
		if err != nil {
			return err
		}
		if !slices.Contains(want, c.Status) || h.bus.Pending() != 0 || h.eng.Active() != 0 {
			return fmt.Errorf("status %q, %d events pending on the bus, %d runs active", c.Status, h.bus.Pending(), h.eng.Active())
		}
		return nil
	})
	return c
}

func (h *harness) pending(chatID, kind string) baton.PendingRequest {
	h.t.Helper()
	c, err := h.store.GetChat(context.Background(), testScope, chatID)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range c.Pending {
		if p.Kind == kind {
			return p
		}
	}
	h.t.Fatalf("chat %s has no pending %s request: %+v", chatID, kind, c.Pending)
	return baton.PendingRequest{}
}

// driveGenerator runs the generator workflow to run_complete as the person
// would: answer the interview, give the API key, approve the plan.
func (h *harness) driveGenerator() string {
	t := h.t
	t.Helper()
	ctx := h.inputCtx
	id := h.start("generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(ctx, testScope, id, "A weekly newsletter from our team notes.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	secret := h.pending(id, baton.PendingSecret)
	if err := h.eng.RespondUI(ctx, testScope, id, secret.UIEventID, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"sk-test"}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingUITool)
	plan := h.pending(id, baton.PendingUITool)
	if err := h.eng.RespondUI(ctx, testScope, id, plan.UIEventID, "success", json.RawMessage(`{"action":"approve"}`)); err != nil {
		t.Fatal(err)
	}
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("generator ended %s", c.Status)
	}
	return id
}

// waitObserved waits until the collector has counted n ended runs, so that
// every event of those runs has been observed.
func (h *harness) waitObserved(n float64) {
	h.t.Helper()
	testenv.Eventually(h.t, 10*time.Second, fmt.Sprintf("the collector to count %v ended runs", n), func() error {
		if got := gathered(h.t, h.col.Registry(), "baton_runs_ended_total"); got < n {
			return fmt.Errorf("the collector observed %v ended runs", got)
		}
		return nil
	})
}

// gathered sums every series of a counter family.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// scriptedUsage sums the usage of the scripted replies the chat consumed:
// an agent that made n model calls (counted from the recorded
// chat.usage_summary events) consumed the first n replies of its script.
// A reply the run never asks for (ReviewAgent's second, after its transfer)
// is not part of the total.
func scriptedUsage(t *testing.T, h *harness, wf, chatID string) (calls int64, u baton.Usage) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(workflowsDir, wf, "scripted.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Agents map[string][]struct {
			Usage struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
				Cached     int64 `json:"cached_tokens"`
			} `json:"usage"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	evs, err := h.store.Events(context.Background(), testScope, chatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for _, ev := range evs {
		if ev.Type == baton.TypeChatUsageSummary {
			var p struct{ Agent string }
			_ = json.Unmarshal(ev.Payload, &p)
			used[p.Agent]++
		}
	}
	for agent, n := range used {
		replies := s.Agents[agent]
		if n > len(replies) {
			t.Fatalf("%s made %d model calls; its script has %d replies", agent, n, len(replies))
		}
		for _, r := range replies[:n] {
			calls++
			u = u.Add(baton.Usage{PromptTokens: r.Usage.Prompt, CompletionTokens: r.Usage.Completion, CachedTokens: r.Usage.Cached})
		}
	}
	if calls == 0 {
		t.Fatal("the chat made no model calls")
	}
	return calls, u
}

// gated holds every model call until the test lets it through.
type gated struct {
	baton.Provider
	gate chan struct{}
}

func (g gated) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		select {
		case <-g.gate:
		case <-ctx.Done():
			yield(baton.Delta{}, ctx.Err())
			return
		}
		for d, err := range g.Provider.Stream(ctx, req) {
			if !yield(d, err) {
				return
			}
		}
	}
}
