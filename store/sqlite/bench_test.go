package sqlite_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

// BenchmarkAppend: one chat appended to sequentially, and 1,000 chats
// appended to concurrently, with group commit (the default) and without
// (every append its own transaction and fsync).
func BenchmarkAppend(b *testing.B) {
	for _, chats := range []int{1, 1000} {
		for _, gc := range []struct {
			name  string
			batch int
			sync  string
		}{{"groupcommit", sqlite.DefaultMaxBatch, "FULL"}, {"nogroupcommit", 1, "FULL"}, {"groupcommit-syncnormal", sqlite.DefaultMaxBatch, "NORMAL"}} {
			b.Run(fmt.Sprintf("chats=%d/%s", chats, gc.name), func(b *testing.B) {
				s := openTemp(b, sqlite.WithMaxBatch(gc.batch), sqlite.WithSynchronous(gc.sync))
				storetest.BenchAppend(b, s, chats)
				st := s.Stats()
				b.ReportMetric(float64(st.Writes)/float64(max(1, st.Commits)), "writes/commit")
			})
		}
	}
}

// BenchmarkAppend4: 1,000 chats each appending 4 events at a time, with group commit.
func BenchmarkAppend4(b *testing.B) {
	s := openTemp(b)
	storetest.BenchAppendN(b, s, 1000, 4)
	st := s.Stats()
	b.ReportMetric(float64(st.Writes)/float64(max(1, st.Commits)), "writes/commit")
}

// BenchmarkAppendPaced: 1,000 chats appending at a fixed total rate (an open
// loop, see storetest.BenchAppendPaced), with group commit and
// synchronous=FULL: the latency below saturation. 25,000 events/s is half the
// target capacity. Each rate runs with the default commit delay and without
// one (delay=0), which is the latency the delay trades for fewer commits.
func BenchmarkAppendPaced(b *testing.B) {
	for _, rate := range []float64{10_000, 25_000, 50_000} {
		for _, delay := range []time.Duration{sqlite.DefaultCommitDelay, 0} {
			b.Run(fmt.Sprintf("chats=1000/rate=%.0f/delay=%v", rate, delay), func(b *testing.B) {
				s := openTemp(b, sqlite.WithCommitDelay(delay))
				storetest.BenchAppendPaced(b, s, 1000, rate)
				st := s.Stats()
				b.ReportMetric(float64(st.Writes)/float64(max(1, st.Commits)), "writes/commit")
			})
		}
	}
}

func BenchmarkReplay10k(b *testing.B) {
	storetest.BenchReplay(b, openTemp(b), 10_000)
}

// BenchmarkGetChat reads chats of a store holding 1,000, one at a time, as
// the engine does at the start of every input: one goroutine, so ns/op and
// allocs/op are the read's own cost.
func BenchmarkGetChat(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	scope := baton.Scope{App: "app", User: "u"}
	ids := chatsWithEvents(b, s, scope, 1000, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.GetChat(ctx, scope, ids[i%len(ids)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// chatsWithEvents creates n chats in scope, each with events text events,
// and returns their ids.
func chatsWithEvents(b *testing.B, s *sqlite.Store, scope baton.Scope, n, events int) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"})
		if err != nil {
			b.Fatal(err)
		}
		evs := make([]baton.Event, events)
		for j := range evs {
			evs[j] = storetest.TextEvent("user", "hi")
		}
		if _, err := s.Append(ctx, scope, c.ID, evs, nil); err != nil {
			b.Fatal(err)
		}
		ids[i] = c.ID
	}
	return ids
}

// BenchmarkInputsEmpty: reading an empty inbox, which a run does at each
// input point (a pause, the end of a run) to take the messages that came
// while it ran.
func BenchmarkInputsEmpty(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	scope := storetest.NewScope()
	chat, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "wf"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if ins, err := s.Inputs(ctx, scope, chat.ID); err != nil || len(ins) != 0 {
			b.Fatal(ins, err)
		}
	}
}

// BenchmarkEventsNew reads the whole of chats of five events each, as a
// stream does when it opens on a new chat (its replay), one at a time.
func BenchmarkEventsNew(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	scope := baton.Scope{App: "app", User: "u"}
	ids := chatsWithEvents(b, s, scope, 1000, 5)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if evs, err := s.Events(ctx, scope, ids[i%len(ids)], 0, 0); err != nil || len(evs) != 5 {
			b.Fatal(len(evs), err)
		}
		i++
	}
}

// BenchmarkReadAfterCommit is what a read costs right after a commit, as
// the reads of a served turn come: each iteration appends to a chat (a
// commit) and then reads it. read-cpu-µs/op is the process's CPU time
// (getrusage) around the read alone.
func BenchmarkReadAfterCommit(b *testing.B) {
	for _, read := range []string{"GetChat", "Inputs", "Events"} {
		b.Run(read, func(b *testing.B) {
			s := openTemp(b)
			ctx := context.Background()
			scope := baton.Scope{App: "app", User: "u"}
			c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var cpu time.Duration
			for b.Loop() {
				last, err := s.Append(ctx, scope, c.ID, []baton.Event{storetest.TextEvent("user", "hi")}, nil)
				if err != nil {
					b.Fatal(err)
				}
				cpu0 := cpuTime()
				switch read {
				case "GetChat":
					_, err = s.GetChat(ctx, scope, c.ID)
				case "Inputs":
					_, err = s.Inputs(ctx, scope, c.ID)
				case "Events":
					_, err = s.Events(ctx, scope, c.ID, last[0].Sequence-1, 0)
				}
				cpu += cpuTime() - cpu0
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "read-cpu-µs/op")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
