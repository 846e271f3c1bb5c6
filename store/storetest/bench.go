package storetest

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// benchPayload is a typical chat.text payload (~200 bytes).
var benchPayload = json.RawMessage(`{"kind":"text","agent":"Planner","content":"Here is the plan: first gather the requirements, then draft the outline, then write each section and review it.","index":3}`)

// BenchAppend measures Append of one event at a time on `chats` chats, each
// with its own appender goroutine (chats == 1 is one chat appended to
// sequentially, the way the engine appends to a chat). It reports events/s
// and the p50 and p99 latency of one Append in milliseconds.
func BenchAppend(b *testing.B, s baton.Store, chats int) { BenchAppendN(b, s, chats, 1) }

// BenchAppendN is BenchAppend with perAppend events in each Append (a turn
// records several events at once); b.N counts appends, events/s counts events.
func BenchAppendN(b *testing.B, s baton.Store, chats, perAppend int) {
	ctx := context.Background()
	scope := NewScope()
	ids := make([]string, chats)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "bench"})
			if err != nil {
				b.Error(err)
			}
			ids[i] = c.ID
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	var next atomic.Int64
	lat := make([][]time.Duration, chats)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range chats {
		wg.Go(func() {
			evs := make([]baton.Event, perAppend)
			for next.Add(1) <= int64(b.N) {
				for j := range evs {
					evs[j] = baton.Event{ID: baton.NewID(), Type: baton.TypeChatText, Timestamp: time.Now().UnixMilli(),
						Metadata: baton.Metadata{Source: baton.SourceLLM}, Payload: benchPayload}
				}
				t0 := time.Now()
				if _, err := s.Append(ctx, scope, ids[i], evs, nil); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(len(all)*perAppend)/elapsed.Seconds(), "events/s")
	b.ReportMetric(ms(all[len(all)/2]), "p50-ms")
	b.ReportMetric(ms(all[min(len(all)-1, len(all)*99/100)]), "p99-ms")
}

// BenchReplay measures reading back a chat of n events with Events.
func BenchReplay(b *testing.B, s baton.Store, n int) {
	ctx := context.Background()
	scope := NewScope()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 500 {
		evs := make([]baton.Event, min(500, n-i))
		for j := range evs {
			evs[j] = baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerAgentName: "Planner"}, benchPayload)
		}
		if _, err := s.Append(ctx, scope, c.ID, evs, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		evs, err := s.Events(ctx, scope, c.ID, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) != n {
			b.Fatalf("replayed %d events, want %d", len(evs), n)
		}
	}
}
