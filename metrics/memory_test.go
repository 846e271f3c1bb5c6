package metrics_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/metrics"
)

// sumStats is a StatsStore that adds up the rollups it is given.
type sumStats struct {
	mu    sync.Mutex
	turns int64
	tools int64
	chats map[string]bool
}

func (s *sumStats) AddChatStats(_ context.Context, d baton.ChatStats) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns += d.Turns
	s.tools += d.ToolCalls
	if s.chats == nil {
		s.chats = map[string]bool{}
	}
	s.chats[d.ChatID] = true
	return nil
}

func (s *sumStats) WorkflowStats(context.Context, string, string, int) ([]baton.ChatStats, error) {
	return nil, nil
}

func (s *sumStats) AppStats(context.Context, string) (baton.ChatStats, error) {
	return baton.ChatStats{}, nil
}

// finishChats has c observe n finished chats of one turn each.
func finishChats(c *metrics.Collector, from, n int) {
	scope := baton.Scope{App: "acme", User: "ada"}
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("chat-%d", i)
		c.NoteScope(scope, id)
		for _, ev := range turnEvents(id, 0) {
			c.Observe(ev)
		}
		c.Observe(chatEv(baton.TypeChatRunComplete, id, `{"kind":"run_complete","status":"completed"}`))
	}
}

func lookupWF(_ context.Context, _ baton.Scope, id string) (baton.Chat, error) {
	return baton.Chat{ID: id, Workflow: "wf"}, nil
}

// TestCollector_ChatsBoundedByCount: however many chats finish, the
// collector holds at most MaxChats of them, and the rollup of each chat put
// out of memory reaches the store: nothing is undercounted.
func TestCollector_ChatsBoundedByCount(t *testing.T) {
	bs := bus.New()
	defer bs.Close(context.Background())
	st := &sumStats{}
	c, err := metrics.New(metrics.Options{Bus: bs, Stats: st, Chats: lookupWF, MaxChats: 100, Queue: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	finishChats(c, 0, n)
	if got := c.ChatsInMemory(); got > 100 {
		t.Fatalf("%d chats in memory after %d finished, want at most MaxChats 100", got, n)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st.turns != n || st.tools != n || len(st.chats) != n {
		t.Fatalf("rollups: %d turns, %d tool calls of %d chats; want %d of each", st.turns, st.tools, len(st.chats), n)
	}
}

// BenchmarkFinishedChatsHeap reports the heap the collector holds after
// 100,000 finished chats (each one turn: a select_speaker, 20 deltas, the
// text, a tool call, its usage, run_complete), and the chats it keeps,
// which must be at most its cap (DefaultMaxChats).
func BenchmarkFinishedChatsHeap(b *testing.B) {
	const chats = 100000
	for range b.N {
		bs := bus.New()
		c, err := metrics.New(metrics.Options{Bus: bs, Stats: &sumStats{}, Chats: lookupWF, Queue: chats})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		finishChats(c, 0, chats)
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := c.ChatsInMemory()
		if held > metrics.DefaultMaxChats {
			b.Fatalf("%d chats in memory, cap %d", held, metrics.DefaultMaxChats)
		}
		heap := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
		// A held chat costs ~1.6 KB (one agent, one turn): 4 KiB is the
		// bound, far below the 100,000 chats' ~99 MB without the cap.
		if limit := float64(metrics.DefaultMaxChats) * 4096; heap > limit {
			b.Fatalf("heap grew %.1f MB after %d chats, more than %.1f MB for the %d the cap keeps", heap/(1<<20), chats, limit/(1<<20), metrics.DefaultMaxChats)
		}
		b.ReportMetric(heap/(1<<20), "heap-MB")
		b.ReportMetric(float64(held), "chats-held")
		runtime.KeepAlive(c)
		_ = c.Close(context.Background())
		_ = bs.Close(context.Background())
	}
}

// TestTracer_ChatsBoundedByCount: the tracer keeps the open spans of at
// most its cap of chats; the least recently active one's run span is ended
// (exported) when a newer chat would pass the cap, the others stay open.
func TestTracer_ChatsBoundedByCount(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	bs := bus.New()
	defer bs.Close(context.Background())
	tr := metrics.NewTracer(bs, tp, nil).WithMaxChats(2)
	scope := baton.Scope{App: "acme", User: "ada"}
	for i := range 3 {
		tr.Observe(baton.NewInput(scope, baton.TypeRunStart, fmt.Sprintf("chat-%d", i), nil))
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want the run of chat-0 only", len(spans))
	}
	if got := spans[0].Attributes; !strings.Contains(fmt.Sprint(got), "chat-0") {
		t.Fatalf("ended span %q %v, want chat-0's run", spans[0].Name, got)
	}
}

// holdStats is a StatsStore whose first write waits for first, and the
// others for rest, counting the writes in flight and the most at once.
type holdStats struct {
	sumStats
	calls       atomic.Int64
	inflight    atomic.Int64
	most        atomic.Int64 // the most in flight at once
	first, rest chan struct{}
}

func (s *holdStats) AddChatStats(ctx context.Context, d baton.ChatStats) error {
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	wait := s.rest
	if s.calls.Add(1) == 1 {
		wait = s.first
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.sumStats.AddChatStats(ctx, d)
}

// rollupQueue reads the gauge of the rollups waiting for the writer.
func rollupQueue(t *testing.T, c *metrics.Collector) int64 {
	t.Helper()
	mfs, err := c.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "baton_metrics_rollup_queue" {
			return int64(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Fatal("no baton_metrics_rollup_queue gauge")
	return 0
}

// TestRollupsOfAFlushAreWrittenTogether: rollups waiting in the queue
// together reach the store together, so that its group commit makes them
// one commit, not one per chat (each an fsync); none is lost. The first
// write is held until every chat's rollup is queued or being written (the
// final flush of Close queues one per chat); then the writer must take the
// waiting ones at once.
func TestRollupsOfAFlushAreWrittenTogether(t *testing.T) {
	bs := bus.New()
	defer bs.Close(context.Background())
	st := &holdStats{first: make(chan struct{}), rest: make(chan struct{})}
	c, err := metrics.New(metrics.Options{Bus: bs, Stats: st, Chats: lookupWF, Queue: 4096, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	finishChats(c, 0, n)
	closed := make(chan error, 1)
	go func() { closed <- c.Close(context.Background()) }()
	released := 0
	defer func() {
		switch released { // a failed wait: let Close end
		case 0:
			close(st.first)
			fallthrough
		case 1:
			close(st.rest)
			<-closed
		}
	}()
	testenv.Eventually(t, 10*time.Second, "every rollup queued or being written", func() error {
		if q, w := rollupQueue(t, c), st.inflight.Load(); q+w != n {
			return fmt.Errorf("%d queued, %d being written", q, w)
		}
		return nil
	})
	close(st.first)
	released++
	testenv.Eventually(t, 10*time.Second, "the waiting rollups written at once", func() error {
		if got := st.most.Load(); got < 2 {
			return fmt.Errorf("at most %d in flight at once", got)
		}
		return nil
	})
	close(st.rest)
	released++
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.turns != n || len(st.chats) != n {
		t.Fatalf("rollups: %d turns of %d chats; want %d of each", st.turns, len(st.chats), n)
	}
}
