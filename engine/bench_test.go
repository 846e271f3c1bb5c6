package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store/mem"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// turnProvider answers like a model in a tool loop, with no delay: a tool
// call after the person's message, a text after the tool's result. It is
// stateless, as the scripted provider is.
func turnProvider() harnessOption { return fake(turnModel) }

// turnModel is turnProvider's model.
func turnModel(req *baton.Request) ([]baton.Delta, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == baton.RoleUser {
		return callTool("", "lookup", `{"word":"baton"}`), nil
	}
	return reply("A baton is passed from one runner to the next."), nil
}

var lookupTool = tool.WithFuncs(tool.MustFunc("lookup", "Look a word up.", func(_ context.Context, _ *baton.CallContext, in struct {
	Word string `json:"word"`
}) (string, error) {
	return "a short stick passed in a relay", nil
}))

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// turnsPerChat bounds a benchmark chat's length.
const turnsPerChat = 20

// BenchmarkTurn measures the runtime's own cost of one turn — the person's
// message, a streamed model call that calls a Go tool, the tool, a second
// streamed model call with the answer, the handoff back to the person — on
// a real SQLite store with a provider that costs nothing. Every event is
// recorded (persisted) before it is published. Reported: wall time and
// allocations per turn, CPU time per turn (both cores), turns/s, and the
// store's appends and commits per turn (commits are shared by the chats in
// flight: group commit).
//
// The end of each turn is seen through one bus subscription for all chats,
// routed by chat here, so the bus does not scan a subscription per chat for
// every event: the turn's cost, not the observers'.
//
//	go test -run '^$' -bench BenchmarkTurn -benchmem ./engine
func BenchmarkTurn(b *testing.B) {
	for _, inFlight := range []int{1, 50, 1000} {
		b.Run(fmt.Sprintf("chats=%d", inFlight), func(b *testing.B) {
			t := &testing.T{}
			h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider(), withLogLevel(slog.LevelInfo))
			defer h.close()
			var stats0 sqlite.Stats
			turns := turnLoop(b, h.eng, h.bus, inFlight, func() { stats0 = h.store.Stats() })
			stats := h.store.Stats()
			b.ReportMetric(float64(stats.Writes-stats0.Writes)/turns, "writes/turn")
			b.ReportMetric(float64(stats.Commits-stats0.Commits)/turns, "commits/turn")
			if t.Failed() {
				b.Fatal("harness failed")
			}
		})
	}
}

// BenchmarkMemTurn is BenchmarkTurn on the memory store (store/mem): the
// same workflow, provider, tool, logging and loop, with no SQLite under
// the recorder. The difference from BenchmarkTurn is what the SQLite store
// costs a turn; what is left is the runtime's own cost.
//
//	go test -run '^$' -bench BenchmarkMemTurn -benchmem ./engine
func BenchmarkMemTurn(b *testing.B) {
	for _, inFlight := range []int{1, 50, 1000} {
		b.Run(fmt.Sprintf("chats=%d", inFlight), func(b *testing.B) {
			eng, bs := memEngine(b)
			turnLoop(b, eng, bs, inFlight, nil)
		})
	}
}

// memEngine is an engine on a memory store, configured as newHarness
// configures its own for BenchmarkTurn (logging at info into a buffer);
// b's cleanup closes the bus, the engine and the store, in that order.
func memEngine(b *testing.B) (*engine.Engine, *bus.Bus) {
	b.Helper()
	st := mem.New()
	log := slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	bs := bus.New(bus.WithLogger(log))
	wfs, err := workflow.LoadAll(os.DirFS(loopDir))
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: bs}), Bus: bs,
		Workflows: wfs, WorkflowRoot: loopDir, ToolOptions: stubFuncs(wfs, lookupTool),
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return fakeProvider(turnModel), nil },
		Logger:    log, SecretKey: []byte("0123456789abcdef0123456789abcdef"), TimeoutSweep: 20 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := bs.Close(ctx); err != nil {
			b.Errorf("bus close: %v", err)
		}
		_ = eng.Close()
		_ = st.Close()
	})
	return eng, bs
}

// BenchmarkPostgresTurn is BenchmarkTurn on PostgreSQL, one instance
// without leases (as `baton serve --store postgres://…` runs alone). Its
// CPU per turn is baton's process only: the PostgreSQL server's is not in
// it, unlike SQLite's, which runs in the process.
//
//	BATON_TEST_POSTGRES_DSN=… go test -run '^$' -bench BenchmarkPostgresTurn -benchmem ./engine
func BenchmarkPostgresTurn(b *testing.B) {
	for _, inFlight := range []int{1, 50} {
		b.Run(fmt.Sprintf("chats=%d", inFlight), func(b *testing.B) {
			dsn, schema := pgSchema(b)
			in := newInstance(b, dsn, schema, "", nil, turnModel)
			turnLoop(b, in.eng, in.bus, inFlight, nil)
		})
	}
}

// turnLoop runs b.N turns of the assistant workflow over inFlight chats on
// eng, each turn ended by the chat's next input request, seen on bs; a
// fresh chat every turnsPerChat turns. It reports turns/s and CPU per turn
// and returns the turns run. started, when not nil, runs when the timing
// starts.
func turnLoop(b *testing.B, eng *engine.Engine, bs *bus.Bus, inFlight int, started func()) float64 {
	ctx := context.Background()
	ids := make([]string, inFlight)
	var mu sync.Mutex
	waits := map[string]chan struct{}{} // by chat: its input requests
	waitFor := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch := waits[id]
		if ch == nil {
			ch = make(chan struct{}, 4)
			waits[id] = ch
		}
		return ch
	}
	sub, err := bs.Subscribe([]string{baton.TypeChatInputRequest}, bus.Buffer(4*inFlight+64))
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	go func() { // ends when sub closes
		for ev := range sub.C() {
			waitFor(ev.ChatID()) <- struct{}{}
		}
	}()
	for i := range ids {
		c, err := eng.Start(ctx, testScope, "assistant", baton.StartOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = c.ID
		<-waitFor(ids[i])
	}
	per := (b.N + inFlight - 1) / inFlight
	b.ReportAllocs()
	b.ResetTimer()
	if started != nil {
		started()
	}
	cpu0, t0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range per {
				if n > 0 && n%turnsPerChat == 0 {
					// A fresh chat every 20 turns: a turn of a realistic
					// conversation, not of one that grows without end.
					c, err := eng.Start(ctx, testScope, "assistant", baton.StartOptions{})
					if err != nil {
						b.Error(err)
						return
					}
					ids[i] = c.ID
					<-waitFor(c.ID) // its first input request
				}
				if err := eng.Submit(ctx, testScope, ids[i], "What is a baton?", "api"); err != nil {
					b.Error(err)
					return
				}
				<-waitFor(ids[i])
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	turns := float64(per * inFlight)
	b.ReportMetric(turns/elapsed.Seconds(), "turns/s")
	b.ReportMetric(float64(cpu.Microseconds())/turns, "cpu-µs/turn")
	return turns
}

// BenchmarkResume100 measures rebuilding a 100-message chat from the store
// alone: read its events and fold them into the state the engine resumes
// from (target: under 1 ms).
//
//	go test -run '^$' -bench BenchmarkResume100 -benchmem ./engine
func BenchmarkResume100(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider(), withLogLevel(slog.LevelInfo))
	defer h.close()
	ctx := context.Background()
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	for i := 0; i < 34; i++ { // 34 turns: 34 questions, 34 tool results, 34 answers (tool-only replies aside)
		if err := h.eng.Submit(ctx, testScope, id, fmt.Sprint("question ", i), "api"); err != nil {
			b.Fatal(err)
		}
		h.waitStatus(id, baton.ChatWaitingInput)
	}
	in, err := h.eng.Inspect(ctx, testScope, id)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.eng.Inspect(ctx, testScope, id); err != nil {
			b.Fatal(err)
		}
	}
	// Reported after the loop: resetting the timer drops reported metrics.
	b.ReportMetric(float64(len(in.Messages)), "messages")
	b.ReportMetric(float64(in.Chat.LastSequence), "events")
}
