package natsbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/postgres"
)

// BenchmarkInstances compares one instance with three on the same machine:
// chats of the server's bench workflow (one agent streams a 64-word answer)
// started round robin, each watched over WebSocket from the next instance
// (from the same one when there is one). Reported: envelopes delivered per
// second and the p99 latency from an event's creation (its timestamp, ms)
// to a client reading it. On one 2-core machine the point is the cost of
// the cross-instance path, not a speed-up.
//
//	BATON_TEST_POSTGRES_DSN=… BATON_TEST_NATS_URL=… go test -run '^$' -bench BenchmarkInstances -benchtime 1x ./bus/natsbridge
func BenchmarkInstances(b *testing.B) {
	chats := 200
	if v := os.Getenv("BATON_BENCH_CHATS"); v != "" {
		fmt.Sscan(v, &chats)
	}
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			natsURL := os.Getenv("BATON_TEST_NATS_URL")
			if natsURL == "" || os.Getenv("BATON_TEST_POSTGRES_DSN") == "" {
				b.Skip("needs BATON_TEST_POSTGRES_DSN and BATON_TEST_NATS_URL")
			}
			stores := pgStoresB(b, n)
			ins := make([]*instance, n)
			for i := range ins {
				ins[i] = newInstanceIn(b, fmt.Sprint("i", i), stores[i], natsURL, "../../server/testdata/workflows")
			}
			for b.Loop() {
				var delivered atomic.Int64
				var mu sync.Mutex
				var lat []time.Duration
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				start := time.Now()
				var wg sync.WaitGroup
				sem := make(chan struct{}, 50)
				for i := 0; i < chats; i++ {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-sem }()
						owner, watcher := ins[i%n], ins[(i+1)%n]
						id := startChat(b, owner, "bench")
						u := "ws" + strings.TrimPrefix(watcher.ts.URL, "http") + "/ws/acme/" + id + "?last_sequence=0"
						conn, _, err := websocket.Dial(ctx, u, nil)
						if err != nil {
							b.Error(err)
							return
						}
						defer conn.CloseNow()
						conn.SetReadLimit(1 << 20)
						var mine []time.Duration
						for {
							_, raw, err := conn.Read(ctx)
							if err != nil {
								b.Error(err)
								return
							}
							now := time.Now()
							delivered.Add(1)
							var env struct {
								Type      string `json:"type"`
								Timestamp string `json:"timestamp"`
							}
							_ = json.Unmarshal(raw, &env)
							if ts, err := time.Parse(time.RFC3339Nano, env.Timestamp); err == nil {
								mine = append(mine, now.Sub(ts))
							}
							if env.Type == baton.TypeChatRunComplete {
								break
							}
						}
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				cancel()
				slices.Sort(lat)
				b.ReportMetric(float64(delivered.Load())/elapsed.Seconds(), "envelopes/s")
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				}
			}
		})
	}
}

func pgStoresB(b *testing.B, n int) []*postgres.Store {
	b.Helper()
	dsn := os.Getenv("BATON_TEST_POSTGRES_DSN")
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	var out []*postgres.Store
	for i := 0; i < n; i++ {
		st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, st)
	}
	b.Cleanup(func() { _, _ = out[0].Pool().Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`) })
	return out
}
