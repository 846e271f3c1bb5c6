package engine_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/tool"
)

// turnProvider answers like a model in a tool loop, with no delay: a tool
// call after the person's message, a text after the tool's result. It is
// stateless, as the scripted provider is.
func turnProvider() harnessOption {
	return fake(func(req *baton.Request) ([]baton.Delta, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == baton.RoleUser {
			return callTool("", "lookup", `{"word":"baton"}`), nil
		}
		return reply("A baton is passed from one runner to the next."), nil
	})
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
// allocations per turn, CPU time per turn (both cores), and turns/s.
//
//	go test -run '^$' -bench BenchmarkTurn -benchmem ./engine
func BenchmarkTurn(b *testing.B) {
	for _, inFlight := range []int{1, 50, 1000} {
		b.Run(fmt.Sprintf("chats=%d", inFlight), func(b *testing.B) {
			t := &testing.T{}
			h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider())
			defer h.close()
			ctx := context.Background()
			ids := make([]string, inFlight)
			waits := make([]*bus.Subscription, inFlight)
			for i := range ids {
				ids[i] = start(t, h, "assistant")
				h.waitStatus(ids[i], baton.ChatWaitingInput)
				sub, err := h.bus.Subscribe([]string{baton.TypeChatInputRequest}, bus.ForChat(ids[i]), bus.Buffer(4))
				if err != nil {
					b.Fatal(err)
				}
				waits[i] = sub
			}
			per := (b.N + inFlight - 1) / inFlight
			b.ReportAllocs()
			b.ResetTimer()
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
							waits[i].Close()
							c, err := h.eng.Start(ctx, testScope, "assistant", engine.StartOptions{})
							if err != nil {
								b.Error(err)
								return
							}
							if waits[i], err = h.bus.Subscribe([]string{baton.TypeChatInputRequest}, bus.ForChat(c.ID), bus.Buffer(4)); err != nil {
								b.Error(err)
								return
							}
							ids[i] = c.ID
							if _, ok := <-waits[i].C(); !ok { // its first input request
								b.Error("subscription ended")
								return
							}
						}
						if err := h.eng.Submit(ctx, testScope, ids[i], "What is a baton?", "api"); err != nil {
							b.Error(err)
							return
						}
						if _, ok := <-waits[i].C(); !ok {
							b.Error("subscription ended")
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed, cpu := time.Since(t0), cpuTime()-cpu0
			b.StopTimer()
			turns := float64(per * inFlight)
			b.ReportMetric(turns/elapsed.Seconds(), "turns/s")
			b.ReportMetric(float64(cpu.Microseconds())/turns, "cpu-µs/turn")
			if t.Failed() {
				b.Fatal("harness failed")
			}
		})
	}
}

// BenchmarkResume100 measures rebuilding a 100-message chat from the store
// alone: read its events and fold them into the state the engine resumes
// from (target: under 1 ms).
//
//	go test -run '^$' -bench BenchmarkResume100 -benchmem ./engine
func BenchmarkResume100(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider())
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
	b.ReportMetric(float64(len(in.Messages)), "messages")
	b.ReportMetric(float64(in.Chat.LastSequence), "events")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.eng.Inspect(ctx, testScope, id); err != nil {
			b.Fatal(err)
		}
	}
}
