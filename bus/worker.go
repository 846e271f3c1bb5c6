package bus

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
)

// Scheduling: a few running workers drain many lanes.
//
// A lane with events is "activated": handed to a spinning worker (one that
// just ran out of work and is yielding for a moment before it parks), to a
// parked worker, or to a new worker while fewer than softWorkers are running
// unblocked; otherwise it joins the ready queue, which running workers drain
// in turn (fairly: a worker leaves a lane after defaultFairnessQuantum events
// when others wait).
//
// Handlers may block for a long time (the engine runs a whole chat run in
// one). A watchdog, armed only while lanes wait in the ready queue, looks
// every watchdogPeriod for workers stuck in the same handler call since its
// last look, and starts replacement workers for them, up to the concurrency
// limit. So a blocked chat delays other chats by at most a couple of periods,
// and at saturation the bus runs few goroutines and switches rarely.
const watchdogPeriod = time.Millisecond

type scheduler struct {
	concurrency int
	soft        int // running unblocked workers wanted
	maxIdle     int

	// guarded by Bus.mu
	workers  int // running workers: busy, spinning or parked
	idle     int // parked on wake
	spinning int // yielding, looking at the ready queue
	stuck    int // workers the watchdog last saw stuck in one handler call
	set      map[*worker]struct{}
	wake     chan *lane // hands a lane to a parked worker; closed by close
	closed   bool

	timer    *time.Timer
	armed    bool
	watching sync.WaitGroup // a watchdog callback is armed or running
}

// worker is one goroutine's state, as the watchdog sees it.
type worker struct {
	busy  atomic.Bool   // inside a handler call
	calls atomic.Uint64 // handler calls finished
	seen  uint64        // calls at the watchdog's last look (guarded by Bus.mu)
}

func (s *scheduler) init(concurrency int) {
	s.concurrency = concurrency
	procs := runtime.GOMAXPROCS(0)
	s.soft = min(concurrency, max(2, procs))
	s.maxIdle = min(concurrency, 2*procs+2)
	s.wake = make(chan *lane, s.maxIdle)
	s.set = make(map[*worker]struct{})
}

func (s *scheduler) close() {
	s.closed = true
	close(s.wake)
	s.idle = 0
}

// activate gives l a worker, or queues it for the next free one. b.mu is held.
func (b *Bus) activate(l *lane) {
	l.active = true
	s := &b.sched
	switch {
	case s.spinning > 0:
		b.ready.push(l) // a spinning worker takes it within a yield
	case s.idle > 0:
		s.idle--
		s.wake <- l // buffered for every parked worker: never blocks
	case s.workers-s.stuck < s.soft && s.workers < s.concurrency:
		b.spawn(l)
	default:
		b.ready.push(l)
		b.armWatchdog()
	}
}

// spawn starts a worker that owns l. b.mu is held.
func (b *Bus) spawn(l *lane) {
	w := &worker{}
	b.sched.workers++
	b.sched.set[w] = struct{}{}
	go b.work(w, l)
}

// work handles lanes until it finds none for a while, then parks for more
// or exits. It owns l on entry.
func (b *Bus) work(w *worker, l *lane) {
	var batch [defaultBatch]baton.Event
	handled, spins := 0, 0
	for {
		b.mu.Lock()
		if l == nil {
			if l = b.nextLane(w); l == nil {
				b.mu.Unlock()
				return
			}
			handled = 0
		}
		if b.abandon {
			b.stats.abandoned.Add(uint64(l.n))
			l.popInto(make([]baton.Event, l.n))
		}
		if l.n == 0 && b.ready.len() == 0 && spins < maxSpins && !b.sched.closed {
			// The lane ran dry and nothing else waits: keep it for a few
			// yields, so that the chat's next event is a plain push.
			spins++
			b.sched.spinning++
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
			b.sched.spinning--
			b.mu.Unlock()
			continue
		}
		spins = 0
		if l.n == 0 {
			b.retire(l)
			l = nil
			b.mu.Unlock()
			continue
		}
		if handled >= defaultFairnessQuantum && b.ready.len() > 0 {
			b.ready.push(l) // let a waiting lane in; l keeps its place in line
			l = nil
			b.mu.Unlock()
			continue
		}
		k := l.popInto(batch[:])
		if l.space != nil {
			close(l.space) // wake publishers waiting for room
			l.space = nil
		}
		b.mu.Unlock()
		for i := 0; i < k; i++ {
			w.busy.Store(true)
			b.dispatch(batch[i])
			w.busy.Store(false)
			w.calls.Add(1)
			batch[i] = baton.Event{}
		}
		handled += k
	}
}

// nextLane finds the worker its next lane: from the ready queue, after a few
// yields, or from a parked wait. It returns nil when the worker should exit,
// having accounted for it. b.mu is held on entry and on return.
func (b *Bus) nextLane(w *worker) *lane {
	s := &b.sched
	for spins := 0; ; spins++ {
		if l := b.ready.pop(); l != nil {
			return l
		}
		if s.closed || spins == maxSpins || s.workers-s.stuck > s.soft {
			break
		}
		// Yield a moment before parking: under load the next lane usually
		// shows up within microseconds, and finding it here saves a park and
		// a wake-up, which cost far more than a few yields.
		s.spinning++
		b.mu.Unlock()
		runtime.Gosched()
		b.mu.Lock()
		s.spinning--
	}
	if !s.closed && s.idle < s.maxIdle {
		s.idle++
		b.mu.Unlock()
		l := <-s.wake
		b.mu.Lock()
		if l != nil {
			return l
		}
	}
	s.workers--
	delete(s.set, w)
	if s.closed && s.workers == 0 {
		close(b.drained)
	}
	return nil
}

// retire marks an empty lane idle. When too many lanes are idle, all idle
// ones are dropped at once: rebuilding the map, rather than deleting keys one
// by one, keeps its lookups fast. b.mu is held.
func (b *Bus) retire(l *lane) {
	l.active = false
	l.head = 0
	if len(l.buf) > 64 {
		l.buf = nil // a burst grew it; do not keep the memory for an idle chat
	}
	b.idleLanes++
	if b.idleLanes <= maxIdleLanes {
		return
	}
	keep := make(map[string]*lane, len(b.lanes)-b.idleLanes)
	for k, v := range b.lanes {
		if v.active || v.n > 0 {
			keep[k] = v
		}
	}
	b.lanes, b.idleLanes = keep, 0
}

// armWatchdog schedules a look at stuck workers. b.mu is held.
func (b *Bus) armWatchdog() {
	s := &b.sched
	if s.armed || s.closed && b.abandon {
		return
	}
	s.armed = true
	s.watching.Add(1)
	if s.timer == nil {
		s.timer = time.AfterFunc(watchdogPeriod, b.watch)
	} else {
		s.timer.Reset(watchdogPeriod)
	}
}

// watch counts workers stuck in one handler call since the last look and
// starts workers for waiting lanes in their place.
func (b *Bus) watch() {
	defer b.sched.watching.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &b.sched
	s.armed = false
	stuck := 0
	for w := range s.set {
		c := w.calls.Load()
		if w.busy.Load() && c == w.seen {
			stuck++
		}
		w.seen = c
	}
	s.stuck = stuck
	for b.ready.len() > 0 && s.workers-s.stuck < s.soft && s.workers < s.concurrency && !s.closed {
		b.spawn(b.ready.pop())
	}
	if b.ready.len() > 0 {
		b.armWatchdog()
	}
}

// stopWatchdog waits until no watchdog callback is armed or running.
func (s *scheduler) stopWatchdog() {
	// Called after the bus drained: nothing arms the timer any more.
	if s.timer != nil && s.timer.Stop() {
		s.watching.Done() // it was armed and will not run
	}
	s.watching.Wait()
}
