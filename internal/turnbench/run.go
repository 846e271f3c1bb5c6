package turnbench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/store/sqlite"
)

// Timing is what one turn took, as its client saw it.
type Timing struct {
	// FirstToken is the time from the turn's start to the first text delta
	// of the reply (0 when none was seen).
	FirstToken time.Duration
	// Total is the time from the turn's start to the pause.
	Total time.Duration
}

// Turner runs turns, each in a new chat, and is safe for concurrent use.
type Turner interface {
	// Name names the variant: floor, mem, sqlite, served, ….
	Name() string
	// Turn runs one turn in a new chat: the person's message to the pause.
	Turn(ctx context.Context) (Timing, error)
	// Close releases what the turner holds; ctx bounds a graceful stop.
	Close(ctx context.Context) error
}

// serverCPUReader is a Turner whose work happens in another process: it
// reads that process's CPU time.
type serverCPUReader interface {
	ServerCPU(ctx context.Context) (time.Duration, error)
}

// heapReader is a Turner whose chats live in another process: it reads
// that process's live heap, after a collection.
type heapReader interface {
	ServerHeap(ctx context.Context) (uint64, error)
}

// storeCounter is a Turner that reads its store's commits and read
// queries (0 for a store that does not count them).
type storeCounter interface {
	Commits(ctx context.Context) (uint64, error)
	Reads(ctx context.Context) (uint64, error)
}

// storeStats returns the counters of a store that keeps them (SQLite's
// does): zero for any other.
func storeStats(st any) sqlite.Stats {
	c, ok := st.(interface{ Stats() sqlite.Stats })
	if !ok {
		return sqlite.Stats{}
	}
	return c.Stats()
}

// Result is what Run measured.
type Result struct {
	Variant     string
	Concurrency int
	Turns       int
	Elapsed     time.Duration
	// CPU is this process's CPU time (user+system) over the run: the
	// client, the fake model, and for embedded variants baton itself.
	CPU time.Duration
	// ServerCPU is the server process's CPU time over the run, for a
	// served variant whose server this process spawned; 0 otherwise.
	ServerCPU time.Duration
	// Commits is how many transactions the store committed over the run,
	// for a store that counts them (SQLite); 0 otherwise.
	Commits uint64
	// Reads is how many read queries the store ran over the run (SQLite;
	// 0 otherwise).
	Reads uint64
	// Allocs and AllocBytes are this process's heap allocations over the run.
	Allocs, AllocBytes uint64
	// Latency and FirstToken hold every turn's timing, sorted.
	Latency, FirstToken []time.Duration
}

// TurnsPerSec is the run's throughput.
func (r *Result) TurnsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Turns) / r.Elapsed.Seconds()
}

// CPUPerTurn is the CPU time of the process baton runs in, per turn: the
// server's for a served variant with a spawned server, this process's
// otherwise.
func (r *Result) CPUPerTurn() time.Duration {
	if r.Turns == 0 {
		return 0
	}
	if r.ServerCPU > 0 {
		return r.ServerCPU / time.Duration(r.Turns)
	}
	return r.CPU / time.Duration(r.Turns)
}

// ClientCPUPerTurn is this process's CPU time per turn.
func (r *Result) ClientCPUPerTurn() time.Duration {
	if r.Turns == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Turns)
}

// AllocsPerTurn is this process's allocations per turn.
func (r *Result) AllocsPerTurn() float64 {
	if r.Turns == 0 {
		return 0
	}
	return float64(r.Allocs) / float64(r.Turns)
}

// Percentile returns the p-th percentile (0–100) of sorted durations, 0
// for none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1)*p/100 + 0.5)
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Run runs turns turns of t, concurrency of them in flight, and measures
// them. progress, when not nil, is called after each turn with the number
// done (from the turn's goroutine: it must be quick and safe for concurrent
// use). The first failed turn ends the run with its error.
func Run(ctx context.Context, t Turner, turns, concurrency int, progress func(done int)) (Result, error) {
	if turns < 1 {
		return Result{}, fmt.Errorf("turns: %d; want at least 1", turns)
	}
	if concurrency < 1 {
		return Result{}, fmt.Errorf("concurrency: %d; want at least 1", concurrency)
	}
	concurrency = min(concurrency, turns)
	res := Result{Variant: t.Name(), Concurrency: concurrency, Turns: turns}
	srv, _ := t.(serverCPUReader)
	var srv0 time.Duration
	if srv != nil {
		var err error
		switch srv0, err = srv.ServerCPU(ctx); {
		case errors.Is(err, ErrNoProcess):
			srv = nil // a server elsewhere: its CPU is not ours to read
		case err != nil:
			return res, err
		}
	}
	counter, _ := t.(storeCounter)
	var commits0, reads0 uint64
	if counter != nil {
		var err error
		switch commits0, err = counter.Commits(ctx); {
		case errors.Is(err, ErrNoProcess):
			counter = nil
		case err != nil:
			return res, err
		default:
			if reads0, err = counter.Reads(ctx); err != nil {
				return res, err
			}
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		mu         sync.Mutex
	)
	timings := make([]Timing, 0, turns)
	cpu0, t0 := CPUTime(), time.Now()
	for range concurrency {
		wg.Go(func() {
			local := make([]Timing, 0, turns/concurrency+1)
			defer func() {
				mu.Lock()
				timings = append(timings, local...)
				mu.Unlock()
			}()
			for next.Add(1) <= int64(turns) {
				tm, err := t.Turn(ctx)
				if err != nil {
					cancel(err)
					return
				}
				local = append(local, tm)
				n := done.Add(1)
				if progress != nil {
					progress(int(n))
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed, res.CPU = time.Since(t0), CPUTime()-cpu0
	runtime.ReadMemStats(&ms1)
	res.Allocs, res.AllocBytes = ms1.Mallocs-ms0.Mallocs, ms1.TotalAlloc-ms0.TotalAlloc
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	if srv != nil {
		srv1, err := srv.ServerCPU(ctx)
		if err != nil {
			return res, err
		}
		res.ServerCPU = srv1 - srv0
	}
	if counter != nil {
		n, err := counter.Commits(ctx)
		if err != nil {
			return res, err
		}
		res.Commits = n - commits0
		if n, err = counter.Reads(ctx); err != nil {
			return res, err
		}
		res.Reads = n - reads0
	}
	for _, tm := range timings {
		res.Latency = append(res.Latency, tm.Total)
		if tm.FirstToken > 0 {
			res.FirstToken = append(res.FirstToken, tm.FirstToken)
		}
	}
	slices.Sort(res.Latency)
	slices.Sort(res.FirstToken)
	return res, nil
}

// IdleHeap runs chats turns of t (concurrency in flight), each leaving its
// chat paused, and returns the live heap those paused chats hold, in bytes
// per chat: the heap after a collection, after minus before, over chats.
// It is the server process's heap for a served variant with a spawned
// server, this process's otherwise.
func IdleHeap(ctx context.Context, t Turner, chats, concurrency int, progress func(done int)) (float64, error) {
	if chats < 1 {
		return 0, errors.New("idle chats: want at least 1")
	}
	heap := localHeap
	if h, ok := t.(heapReader); ok {
		heap = h.ServerHeap
	}
	h0, err := heap(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := Run(ctx, t, chats, concurrency, progress); err != nil {
		return 0, err
	}
	h1, err := heap(ctx)
	if err != nil {
		return 0, err
	}
	return (float64(h1) - float64(h0)) / float64(chats), nil
}

// localHeap is this process's live heap after a full collection (two: the
// first moves sync.Pool contents to the victim cache, the second frees
// them).
func localHeap(context.Context) (uint64, error) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, nil
}
