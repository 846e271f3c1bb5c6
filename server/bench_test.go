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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
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
// The clients run in a child process. It reports envelopes delivered per
// second over the whole run and in its busiest second; the latency from
// persist (the recorder's commit) to the client's read, p50 and p99, of the
// recorded events (deltas have no persist time); the CPU per envelope of the
// server process (server, engine, store) and of the clients; and the
// server's memory per idle connection.
//
//   - "burst": each chat is one visual agent streaming 65 deltas (75
//     envelopes, 7 of them recorded) as fast as the machine goes, all chats
//     started at once: the throughput figure. The CPU is saturated, so its
//     latency is queueing.
//   - "paced": the same chats with a delta every 20 ms, like a model, one
//     chat started per millisecond. A chat streams for 1.3 s and the last
//     one starts ~1 s in, so the 1,000 chats offer 50,000 envelopes/s only
//     for a few hundred milliseconds (the busiest second carries ~45,000)
//     and ~30,000 a second over the run, all of it delivered. 3 of a chat's
//     7 recorded events come before its stream and 4 after it, mostly while
//     the load ramps up or down.
//   - "sustained": four agents speak in turn, each streaming the same paced
//     answer (5.2 s a chat, 291 envelopes, 19 recorded), one chat started
//     per millisecond: 50,000 envelopes/s offered for ~4 s, with the
//     recorded events between turns inside that plateau. Its p99 is the
//     latency figure at the target throughput.
//
// Run it with
//
//	go test -run '^$' -bench BenchmarkWS -benchmem -benchtime 1x ./server/
//
// BATON_BENCH_CHATS=N runs N chats instead of 1,000.
func BenchmarkWS(b *testing.B) {
	b.Run("burst", func(b *testing.B) { benchWS(b, "bench", 0) })
	b.Run("paced", func(b *testing.B) { benchWS(b, "benchpaced", time.Millisecond) })
	b.Run("sustained", func(b *testing.B) { benchWS(b, "benchlong", time.Millisecond) })
}

func benchWS(b *testing.B, workflowName string, stagger time.Duration) {
	chats := 1000
	if n, err := strconv.Atoi(os.Getenv("BATON_BENCH_CHATS")); err == nil && n > 0 {
		chats = n
	}
	for range b.N {
		b.StopTimer()
		stamp := &stampPublisher{at: make(map[string]time.Time, chats*20)}
		// One key watches all 1,000 chats here, as 1,000 clients' keys would:
		// no per-key cap on streams.
		e := newEnv(b, withWorkflows(benchDir), withPublisher(stamp), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
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

		// The clients run in a child process, as they would on other
		// machines: in this one they would share the server's scheduler
		// and garbage collector, and a goroutine woken by the network
		// waits for a busy scheduler's poll (up to 10 ms), which no real
		// client costs the server.
		clients := startLoadClients(b, e, ids)
		testenv.Eventually(b, 60*time.Second, "every chat's stream to open", func() error {
			if n := e.srv.Streams(); n < chats {
				return fmt.Errorf("%d streams open", n)
			}
			return nil
		})

		schedBefore := schedLatencies()
		cpuBefore := cpuTime()
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
		rep, clientCPU := clients.wait(b)
		elapsed := time.Unix(0, rep.Last).Sub(start)
		b.StopTimer()
		cpu := cpuTime() - cpuBefore
		schedP99 := schedLatencyP99(schedBefore, schedLatencies())

		total := 0
		var lat []time.Duration
		stamp.mu.Lock()
		for i, rs := range rep.Recv {
			total += rep.Counts[i]
			for _, r := range rs {
				if at, ok := stamp.at[ids[i]+"/"+strconv.FormatInt(r[0], 10)]; ok {
					lat = append(lat, time.Duration(r[1]-at.UnixNano()))
				}
			}
		}
		stamp.mu.Unlock()
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no latencies measured")
		}
		pct := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1000 }
		peak := int64(0) // envelopes in the busiest second (100 ticks)
		var window int64
		for k := range rep.Ticks {
			window += rep.Ticks[k]
			if k >= 100 {
				window -= rep.Ticks[k-100]
			}
			peak = max(peak, window)
		}
		b.ReportMetric(float64(total)/elapsed.Seconds(), "envelopes/s")
		b.ReportMetric(float64(peak), "envelopes/s-peak-1s")
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(schedP99*1000, "sched-p99-ms")
		b.ReportMetric(float64(cpu.Microseconds())/float64(total), "server-cpu-µs/envelope")
		b.ReportMetric(float64(clientCPU.Microseconds())/float64(total), "client-cpu-µs/envelope")
		b.ReportMetric(perConnServer/1024, "KiB/idle-conn-server")
		b.Logf("%d chats, %d envelopes (%d recorded) in %v, busiest second %d; CPU %v server, %v clients; persist-to-client p50 %.2f ms p99 %.2f ms max %.2f ms; %.1f KiB per idle connection in the server",
			chats, total, len(lat), elapsed, peak, cpu, clientCPU, pct(0.5), pct(0.99), pct(1), perConnServer/1024)
		cancel()
	}
}

// loadClients is the child process (this test binary, running
// TestHelperLoadClients) that reads every chat of a load run.
type loadClients struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

// loadReport is what the load clients saw; times are Unix nanoseconds, so
// that they compare with the server's.
type loadReport struct {
	Counts []int        // envelopes received, per chat
	Recv   [][][2]int64 // per chat: [sequence, received at] of each recorded event
	Ticks  []int64      // envelopes received per 10 ms since Base
	Base   int64        // when the clients were ready
	Last   int64        // when the last envelope arrived
}

// startLoadClients starts the child, which opens one WebSocket per chat.
func startLoadClients(b *testing.B, e *env, ids []string) *loadClients {
	b.Helper()
	cfg, _ := json.Marshal(idleClients{URL: "ws" + strings.TrimPrefix(e.ts.URL, "http"), Key: e.keys[scopeAda], IDs: ids})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLoadClients$")
	cmd.Env = append(os.Environ(), "BATON_LOAD_CLIENTS="+string(cfg))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &loadClients{cmd: cmd, out: bufio.NewReaderSize(stdout, 1<<20)}
	if line, err := c.out.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("load clients: %q %v", line, err)
	}
	return c
}

// wait returns the child's report once every chat has ended, and the CPU
// the child used.
func (c *loadClients) wait(b *testing.B) (loadReport, time.Duration) {
	b.Helper()
	var rep loadReport
	line, err := c.out.ReadString('\n')
	if err == nil {
		err = json.Unmarshal([]byte(strings.TrimPrefix(line, "report ")), &rep)
	}
	if err != nil {
		b.Fatalf("load clients: %.200q: %v", line, err)
	}
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("load clients: %v", err)
	}
	ru, _ := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if ru == nil {
		return rep, 0
	}
	return rep, time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestHelperLoadClients is the child of startLoadClients; it does nothing in
// a normal test run.
func TestHelperLoadClients(t *testing.T) {
	raw := os.Getenv("BATON_LOAD_CLIENTS")
	if raw == "" {
		t.Skip("the child process of BenchmarkWS")
	}
	var cfg idleClients
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cfg.Key)
	conns := make([]*websocket.Conn, len(cfg.IDs))
	for i, id := range cfg.IDs {
		c, _, err := websocket.Dial(context.Background(), cfg.URL+"/ws/acme/"+id, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	rep := loadReport{Counts: make([]int, len(conns)), Recv: make([][][2]int64, len(conns)), Base: time.Now().UnixNano()}
	ticks := make([]atomic.Int64, 6000)
	var last atomic.Int64
	fmt.Println("ready")
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			// One buffer per connection, and no deadline on the read (a
			// context with one costs a timer per read).
			var buf bytes.Buffer
			for {
				buf.Reset()
				_, r, err := c.Reader(context.Background())
				if err == nil {
					_, err = buf.ReadFrom(r)
				}
				if err != nil {
					t.Errorf("chat %d: %v", i, err)
					return
				}
				now := time.Now().UnixNano()
				raw := buf.Bytes()
				rep.Counts[i]++
				if k := (now - rep.Base) / int64(10*time.Millisecond); k < int64(len(ticks)) {
					ticks[k].Add(1)
				}
				if s := seqOf(raw); s > 0 {
					rep.Recv[i] = append(rep.Recv[i], [2]int64{s, now})
				}
				if bytes.HasPrefix(raw, []byte(`{"type":"chat.run_complete"`)) {
					for {
						if l := last.Load(); now <= l || last.CompareAndSwap(l, now) {
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	rep.Last = last.Load()
	n := len(ticks)
	for n > 0 && ticks[n-1].Load() == 0 {
		n--
	}
	rep.Ticks = make([]int64, n)
	for k := range rep.Ticks {
		rep.Ticks[k] = ticks[k].Load()
	}
	out, _ := json.Marshal(rep)
	fmt.Printf("report %s\n", out)
	for _, c := range conns {
		wg.Go(func() { c.Close(websocket.StatusNormalClosure, "") })
	}
	wg.Wait()
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
	testenv.Eventually(b, 60*time.Second, "every idle client's stream to open", func() error {
		if n := e.srv.Streams(); n < len(ids) {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	stdin.Close() // the child closes its connections and exits
	if err := cmd.Wait(); err != nil {
		b.Fatalf("idle clients: %v", err)
	}
	testenv.Eventually(b, 60*time.Second, "every idle client's stream to close", func() error {
		if n := e.srv.Streams(); n != 0 {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
	return float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / float64(len(ids))
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

// cpuTime is the CPU the process has used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
