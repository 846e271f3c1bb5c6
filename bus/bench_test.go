package bus

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// BenchmarkBusPublish measures the publish path and the hand-off to a no-op
// handler, for one chat and for 1,000 chats. events/s counts events handled
// per second of wall time, including the drain at the end; allocs/op is per
// event. Event ids are made before the timer starts, as a client would send
// them.
//
//	go test -run '^$' -bench BenchmarkBusPublish -benchmem ./bus
func BenchmarkBusPublish(b *testing.B) {
	for _, chats := range []int{1, 1000} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) {
			bus := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			var handled atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			_ = bus.RegisterRule(Rule{Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
				if handled.Add(1) == n {
					close(done)
				}
				return nil
			}})
			events := make([]baton.Event, b.N)
			chatIDs := make([]string, chats)
			for i := range chatIDs {
				chatIDs[i] = fmt.Sprintf("chat-%d", i)
			}
			for i := range events {
				events[i] = baton.Event{ID: fmt.Sprintf("ev-%d", i), Type: baton.TypeUserQuery, Metadata: baton.Metadata{TriggerSessionID: chatIDs[i%chats]}}
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					i := next.Add(1) - 1
					if err := bus.Publish(ctx, events[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if b.N > 0 {
				<-done
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			_ = bus.Close(context.Background())
		})
	}
}

// BenchmarkBusLatency reports the time from Publish to the handler starting,
// with 1,000 chats, at two loads: paced (one event every 10 µs, about 10%
// of capacity) and saturated (as fast as one publisher can go). p50 and p99
// are reported in µs.
//
//	go test -run '^$' -bench BenchmarkBusLatency ./bus
func BenchmarkBusLatency(b *testing.B) {
	for _, load := range []struct {
		name string
		gap  time.Duration
	}{{"paced", 10 * time.Microsecond}, {"saturated", 0}} {
		b.Run(load.name, func(b *testing.B) {
			bus := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			epoch := time.Now()
			lat := make([]int64, b.N)
			var handled atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			_ = bus.RegisterRule(Rule{Types: []string{"*"}, Handler: func(_ context.Context, ev baton.Event) error {
				// The benchmark carries the publish time (ns since epoch) in Timestamp.
				i := handled.Add(1)
				lat[i-1] = int64(time.Since(epoch)) - ev.Timestamp
				if i == n {
					close(done)
				}
				return nil
			}})
			events := make([]baton.Event, b.N)
			for i := range events {
				events[i] = baton.Event{ID: fmt.Sprintf("ev-%d", i), Type: "tick", Metadata: baton.Metadata{TriggerSessionID: fmt.Sprintf("chat-%d", i%1000)}}
			}
			ctx := context.Background()
			b.ResetTimer()
			next := time.Now()
			for i := range events {
				if load.gap > 0 {
					next = next.Add(load.gap)
					for time.Now().Before(next) {
						runtime.Gosched() // a real publisher waits on the network, leaving the CPU to others
					}
				}
				events[i].Timestamp = int64(time.Since(epoch))
				if err := bus.Publish(ctx, events[i]); err != nil {
					b.Fatal(err)
				}
			}
			if b.N > 0 {
				<-done
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
			_ = bus.Close(context.Background())
		})
	}
}

// BenchmarkFanout measures delivering one event to one chat's subscriber
// while 1, 100 or 10,000 chats are subscribed: ns/op is per delivered
// event and should not grow with the number of chats, since subscriptions
// are indexed by chat id. "subscribe" is a ForChat channel subscription per
// chat (Broadcast, then the subscriber's receive); "watch" is a Fanout
// watcher per chat (Deliver).
//
//	go test -run '^$' -bench BenchmarkFanout -benchmem ./bus
func BenchmarkFanout(b *testing.B) {
	for _, chats := range []int{1, 100, 10000} {
		ids := make([]string, chats)
		events := make([]baton.Event, chats)
		for i := range ids {
			ids[i] = fmt.Sprintf("chat-%d", i)
			events[i] = baton.Event{ID: fmt.Sprintf("ev-%d", i), Type: baton.TypeStreamText, Metadata: baton.Metadata{TriggerSessionID: ids[i]}}
		}
		b.Run(fmt.Sprintf("chats=%d/subscribe", chats), func(b *testing.B) {
			bus := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			defer bus.Close(context.Background())
			subs := make([]*Subscription, chats)
			for i, id := range ids {
				s, err := bus.Subscribe([]string{"stream.*"}, ForChat(id), Buffer(1))
				if err != nil {
					b.Fatal(err)
				}
				subs[i] = s
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := i % chats
				_ = bus.Broadcast(events[k])
				<-subs[k].C()
			}
		})
		b.Run(fmt.Sprintf("chats=%d/watch", chats), func(b *testing.B) {
			var f Fanout
			delivered := 0
			for _, id := range ids {
				defer f.Watch(id, func(*baton.Event) { delivered++ })()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.Deliver(&events[i%chats])
			}
			b.StopTimer()
			if delivered != b.N {
				b.Fatalf("delivered %d of %d", delivered, b.N)
			}
		})
	}
}
