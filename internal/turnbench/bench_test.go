package turnbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(ServerEnv) != "" {
		os.Exit(ServeChild()) // this binary re-executed as the served variant's server
	}
	os.Exit(m.Run())
}

// idleChats is how many paused chats the idle sub-benchmarks leave behind:
// BATON_BENCH_CHATS, else 1,000.
func idleChats(tb testing.TB) int {
	if s := os.Getenv("BATON_BENCH_CHATS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("BATON_BENCH_CHATS=%q: want a positive number", s)
		}
		return n
	}
	return 1000
}

// floors holds the floor's CPU per turn by concurrency, measured earlier
// in the same run (the floor sub-benchmarks run first).
var floors = struct {
	sync.Mutex
	cpu map[int]time.Duration
}{cpu: map[int]time.Duration{}}

// floorCPU returns the floor's CPU per turn at concurrency, if a floor
// sub-benchmark of this run measured it. It is not measured on the side:
// a profile of one variant (-cpuprofile with -bench …/sqlite/par50) holds
// that variant only.
func floorCPU(concurrency int) (time.Duration, bool) {
	floors.Lock()
	defer floors.Unlock()
	d, ok := floors.cpu[concurrency]
	return d, ok
}

// variant opens a Turner for a benchmark; b's cleanup closes it.
type variant struct {
	name string
	open func(b *testing.B, m *Model, concurrency int) Turner
}

// closeTurner closes t at the end of one round of a sub-benchmark: not in
// b.Cleanup, which runs after the last round, so that no round measures
// the heap while an earlier round's runtime is still open or being freed.
func closeTurner(b *testing.B, t Turner) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.Close(ctx); err != nil {
		b.Errorf("close %s: %v", t.Name(), err)
	}
}

var variants = []variant{
	{"floor", func(b *testing.B, m *Model, c int) Turner { return NewFloor(m.URL, "bench", ModelName, c) }},
	{"mem", func(b *testing.B, m *Model, c int) Turner { return openEmbedded(b, m, "mem", "mem:") }},
	{"sqlite", func(b *testing.B, m *Model, c int) Turner {
		return openEmbedded(b, m, "sqlite", "sqlite:"+filepath.Join(b.TempDir(), "baton.db"))
	}},
	{"served", func(b *testing.B, m *Model, c int) Turner {
		return spawnServed(b, m, "sqlite:"+filepath.Join(b.TempDir(), "baton.db"), c)
	}},
}

func openEmbedded(tb testing.TB, m *Model, name, storeURL string) *Embedded {
	tb.Helper()
	e, err := OpenEmbedded(tb.Context(), EmbeddedConfig{Name: name, StoreURL: storeURL, BaseURL: m.URL, APIKey: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// spawnServed re-executes this test binary as the server (TestMain runs
// ServeChild) and returns the served variant against it.
func spawnServed(tb testing.TB, m *Model, storeURL string, concurrency int, opts ...func(*ServerConfig)) *Served {
	tb.Helper()
	cfg := ServerConfig{StoreURL: storeURL, BaseURL: m.URL, APIKey: "bench", Model: ModelName}
	for _, o := range opts {
		o(&cfg)
	}
	if base := os.Getenv("BATON_BENCH_SERVER_CPUPROFILE"); base != "" {
		// One file per sub-benchmark: served/par50 → BASE.served-par50.
		name := tb.Name()
		if _, sub, ok := strings.Cut(name, "/"); ok {
			name = sub
		}
		cfg.CPUProfile = base + "." + strings.ReplaceAll(name, "/", "-")
	}
	p, err := SpawnServer(tb.Context(), os.Args[0], []string{"-test.run=^$"}, os.Environ(), cfg, os.Stderr)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := NewServed(ServedConfig{URL: p.URL, APIKey: p.Key, Concurrency: concurrency, Server: p})
	if err != nil {
		_ = p.Close(context.Background())
		tb.Fatal(err)
	}
	return s
}

// BenchmarkProductionTurn measures a production turn — the person's
// message in a new chat, a streamed call of the Go tool echo, the tool's
// result, a streamed 20-word reply, the pause — against one fake
// OpenAI-compatible model on a loopback listener, in four variants: the
// floor (the turn by hand with openai-go, nothing persisted), baton
// embedded on the memory store and on SQLite (synchronous=FULL, a real
// file), and served (HTTP start + WebSocket, the server in a child process:
// its CPU is the server's). Each runs one turn at a time (seq) and 50 in
// flight (par50); the idle sub-benchmarks leave BATON_BENCH_CHATS (default
// 1,000) chats paused and report the heap each holds.
//
// Reported: cpu-ms/turn (the process baton runs in; the fake model's share
// is in every variant's, the floor's included), client-cpu-ms/turn (served:
// this process), turns/s, x-floor (CPU per turn over the floor's at the
// same concurrency, measured in the same run: reported when the floor's
// sub-benchmark ran first, as it does unless -bench leaves it out),
// allocs/op (one op is one turn; this process), model-conns/turn (the
// connections the fake model accepted), commits/turn (SQLite's
// transactions), heap-B/idle-chat.
//
//	go test -run '^$' -bench BenchmarkProductionTurn ./internal/turnbench
//	go test -run '^$' -bench 'ProductionTurn/sqlite/par50' -benchtime 3000x -cpuprofile cpu.out ./internal/turnbench
func BenchmarkProductionTurn(b *testing.B) {
	m, err := StartModel()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	for _, v := range variants {
		for _, c := range []int{1, 50} {
			name := "seq"
			if c > 1 {
				name = fmt.Sprintf("par%d", c)
			}
			b.Run(v.name+"/"+name, func(b *testing.B) {
				t := v.open(b, m, c)
				defer closeTurner(b, t)
				// Warm up: connections (as many as turns in flight, so that
				// model-conns/turn counts the run's dials, not the ramp-up),
				// pools, the store's first pages.
				if _, err := Run(b.Context(), t, max(c, 10), c, nil); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				conns := m.Conns()
				b.ResetTimer()
				r, err := Run(b.Context(), t, b.N, c, nil)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(m.Conns()-conns)/float64(b.N), "model-conns/turn")
				if r.Reads > 0 {
					b.ReportMetric(float64(r.Reads)/float64(b.N), "reads/turn")
				}
				if r.Commits > 0 {
					b.ReportMetric(float64(r.Commits)/float64(b.N), "commits/turn")
				}
				if v.name == "floor" {
					floors.Lock()
					floors.cpu[c] = r.CPUPerTurn()
					floors.Unlock()
				}
				b.ReportMetric(ms(r.CPUPerTurn()), "cpu-ms/turn")
				if r.ServerCPU > 0 {
					b.ReportMetric(ms(r.ClientCPUPerTurn()), "client-cpu-ms/turn")
				}
				b.ReportMetric(r.TurnsPerSec(), "turns/s")
				if floor, ok := floorCPU(c); ok {
					b.ReportMetric(float64(r.CPUPerTurn())/float64(floor), "x-floor")
				}
			})
		}
		if v.name == "floor" {
			continue // a hand-written loop keeps no chat
		}
		b.Run(v.name+"/idle", func(b *testing.B) {
			t := v.open(b, m, 50)
			defer closeTurner(b, t)
			n := idleChats(b)
			b.ResetTimer()
			per, err := IdleHeap(b.Context(), t, n, 50, nil)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			writeHeapProfile(b, v.name)
			b.ReportMetric(per, "heap-B/idle-chat")
			b.ReportMetric(float64(n), "chats")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeHeapProfile writes this process's heap profile while its idle chats
// are held, to $BATON_BENCH_HEAPPROFILE.<variant> when that is set: the
// profile -memprofile writes comes after the runtime closed. Run with
// -test.memprofilerate=1 to see every allocation.
func writeHeapProfile(b *testing.B, variant string) {
	base := os.Getenv("BATON_BENCH_HEAPPROFILE")
	if base == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(base + "." + variant)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}
