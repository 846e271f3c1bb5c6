package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/coder/websocket"
)

// stampPublisher notes when each recorded event was handed to subscribers
// (right after its commit) and passes it on.
type stampPublisher struct {
	next interface {
		Publish(baton.Scope, string, []baton.Event)
	}
	mu sync.Mutex
	at map[string]time.Time // chatID/sequence → when persisted
}

func (p *stampPublisher) Publish(scope baton.Scope, chatID string, evs []baton.Event) {
	now := time.Now()
	p.mu.Lock()
	for _, ev := range evs {
		p.at[chatID+"/"+strconv.FormatInt(ev.Sequence, 10)] = now
	}
	p.mu.Unlock()
	p.next.Publish(scope, chatID, evs)
}

// seqOf finds the sequence of an envelope without decoding it (0 for none).
func seqOf(raw []byte) int64 {
	i := bytes.LastIndex(raw, []byte(`"sequence":`))
	if i < 0 {
		return 0
	}
	n := int64(0)
	for _, c := range raw[i+len(`"sequence":`):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// BenchmarkWS is the load run of issue 10: 1,000 chats run at once, each
// watched by its own WebSocket on loopback, scripted provider, real SQLite.
// Each chat is one visual agent streaming 65 deltas (75 envelopes, 7 of
// them recorded). "burst" streams as fast as the machine goes (throughput);
// "paced" streams a delta every 20 ms per chat, like a model, so that 1,000
// chats offer ~50,000 envelopes/s (latency under that load). It reports
// envelopes delivered per second, the latency from persist (the recorder's
// commit) to the client's read at p50 and p99, and the memory per idle
// connection (both ends, as client and server share the process).
//
//	go test -run XXX -bench BenchmarkWS -benchtime 1x ./server/
//
// BATON_BENCH_CHATS=N runs N chats instead of 1,000.
func BenchmarkWS(b *testing.B) {
	b.Run("burst", func(b *testing.B) { benchWS(b, "bench", 0) })
	b.Run("paced", func(b *testing.B) { benchWS(b, "benchpaced", time.Millisecond) })
}

func benchWS(b *testing.B, workflowName string, stagger time.Duration) {
	chats := 1000
	if n, err := strconv.Atoi(os.Getenv("BATON_BENCH_CHATS")); err == nil && n > 0 {
		chats = n
	}
	for range b.N {
		b.StopTimer()
		stamp := &stampPublisher{at: make(map[string]time.Time, chats*16)}
		e := newEnv(b, withWorkflows(benchDir), withPublisher(stamp))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		ids := make([]string, chats)
		for i := range ids {
			c, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: workflowName, Status: baton.ChatRunning})
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = c.ID
		}

		perConnServer := idleServerMemory(b, e, ids)

		// Memory per idle connection, both ends: 1,000 open WebSockets on
		// chats with nothing to send yet.
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		conns := make([]*websocket.Conn, chats)
		for i, id := range ids {
			conns[i] = e.dial(ctx, b, id, 0, e.keys[scopeAda])
		}
		for e.srv.Streams() < chats {
			time.Sleep(time.Millisecond) // polling with the context's deadline
			if ctx.Err() != nil {
				b.Fatal("streams did not open")
			}
		}
		type recv struct {
			seq int64
			at  time.Time
		}
		got := make([][]recv, chats)
		counts := make([]int, chats)
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				for {
					// No deadline on the read: a context with one costs a
					// timer per call, which is the client's cost, not the server's.
					_, raw, err := c.Read(context.Background())
					if err != nil {
						b.Errorf("chat %d: %v", i, err)
						return
					}
					counts[i]++
					if s := seqOf(raw); s > 0 {
						got[i] = append(got[i], recv{s, time.Now()})
					}
					if bytes.HasPrefix(raw, []byte(`{"type":"chat.run_complete"`)) {
						return
					}
				}
			})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perConn := float64((after.HeapInuse+after.StackInuse)-(before.HeapInuse+before.StackInuse)) / float64(chats)

		schedBefore := schedLatencies()
		b.StartTimer()
		start := time.Now()
		tick := time.NewTicker(max(stagger, time.Microsecond))
		for _, id := range ids {
			if stagger > 0 {
				<-tick.C // chats arrive one by one, as people open them
			}
			if err := e.eng.Resume(ctx, scopeAda, id); err != nil {
				b.Fatal(err)
			}
		}
		tick.Stop()
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		schedP99 := schedLatencyP99(schedBefore, schedLatencies())

		total := 0
		var lat []time.Duration
		stamp.mu.Lock()
		for i, rs := range got {
			total += counts[i]
			for _, r := range rs {
				if at, ok := stamp.at[ids[i]+"/"+strconv.FormatInt(r.seq, 10)]; ok {
					lat = append(lat, r.at.Sub(at))
				}
			}
		}
		stamp.mu.Unlock()
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no latencies measured")
		}
		pct := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1000 }
		b.ReportMetric(float64(total)/elapsed.Seconds(), "envelopes/s")
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(schedP99*1000, "sched-p99-ms")
		b.ReportMetric(perConn/1024, "KiB/idle-conn-both-ends")
		b.ReportMetric(perConnServer/1024, "KiB/idle-conn-server")
		b.Logf("%d chats, %d envelopes (%d recorded) in %v; persist-to-client p50 %.2f ms p99 %.2f ms max %.2f ms; per idle connection %.1f KiB in the server, %.1f KiB both ends in one process",
			chats, total, len(lat), elapsed, pct(0.5), pct(0.99), pct(1), perConnServer/1024, perConn/1024)
		for _, c := range conns {
			c.CloseNow()
		}
		cancel()
	}
}

// idleServerMemory opens one idle WebSocket per chat from a child process
// (this test binary, running TestHelperIdleClients) and returns the
// server's own memory per connection.
func idleServerMemory(b *testing.B, e *env, ids []string) float64 {
	b.Helper()
	cfg, _ := json.Marshal(idleClients{URL: "ws" + strings.TrimPrefix(e.ts.URL, "http"), Key: e.keys[scopeAda], IDs: ids})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperIdleClients$")
	cmd.Env = append(os.Environ(), "BATON_IDLE_CLIENTS="+string(cfg))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		b.Fatalf("idle clients: %q %v", line, err)
	}
	waitFor(b, func() bool { return e.srv.Streams() >= len(ids) })
	runtime.GC()
	runtime.ReadMemStats(&after)
	stdin.Close() // the child closes its connections and exits
	if err := cmd.Wait(); err != nil {
		b.Fatalf("idle clients: %v", err)
	}
	waitFor(b, func() bool { return e.srv.Streams() == 0 })
	return float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / float64(len(ids))
}

func waitFor(b *testing.B, ok func() bool) {
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			b.Fatal("timed out")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

type idleClients struct {
	URL, Key string
	IDs      []string
}

// TestHelperIdleClients is the child of idleServerMemory; it does nothing
// in a normal test run.
func TestHelperIdleClients(t *testing.T) {
	raw := os.Getenv("BATON_IDLE_CLIENTS")
	if raw == "" {
		t.Skip("the child process of BenchmarkWS")
	}
	var cfg idleClients
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cfg.Key)
	conns := make([]*websocket.Conn, 0, len(cfg.IDs))
	for _, id := range cfg.IDs {
		c, _, err := websocket.Dial(ctx, cfg.URL+"/ws/acme/"+id, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}
}

// schedLatencies reads the runtime's histogram of how long runnable
// goroutines waited for a CPU.
func schedLatencies() *metrics.Float64Histogram {
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	return m[0].Value.Float64Histogram()
}

// schedLatencyP99 is the 99th percentile of the waits between two reads.
func schedLatencyP99(before, after *metrics.Float64Histogram) float64 {
	var total uint64
	counts := make([]uint64, len(after.Counts))
	for i := range after.Counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	var seen uint64
	for i, c := range counts {
		seen += c
		if float64(seen) >= 0.99*float64(total) {
			return after.Buckets[i+1]
		}
	}
	return 0
}
