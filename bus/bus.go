// Package bus is baton's event bus: every event is published here, routed by
// rules to exactly one handler, and delivered in order per chat.
//
// It implements the EventBus of spec/environment-events.md in Go:
//
//   - Routing: a [Rule] names event type patterns (exact, list, glob such as
//     "session.*", or "*"), a [Handler], a priority and whether it is enabled.
//     The highest-priority enabled matching rule handles an event; ties go to
//     the rule registered first. An event no rule matches is logged as a
//     warning and counted; Publish does not fail for it.
//   - Idempotency: an event id already accepted for the same chat within the
//     idempotency window (bounded by count and by age, see
//     [WithIdempotencyWindow]) is dropped and counted, not an error. Ids are
//     per chat, so a client-chosen id in one tenant's chat never drops
//     another's event.
//   - Ordering: events of one chat (metadata.trigger_session_id) are handled
//     in the order they were accepted, one at a time, on the chat's lane.
//     Different chats run in parallel, up to [WithConcurrency] lanes at once.
//     Events with no chat share one ordered lane of their own.
//   - Containment: a handler's error or panic is logged with the event's id
//     and type and counted; it never stops the bus or the chat's later events.
//   - Backpressure: each lane holds at most [WithLaneCapacity] events;
//     Publish waits for room or returns the context's error.
//   - Observers: [Bus.Subscribe] watches all events or some patterns without
//     taking part in routing; [Bus.Broadcast] sends transient events (stream.*)
//     to observers only. A slow observer is dropped, never waited for.
//     Subscriptions limited to one chat ([ForChat]) are indexed by chat id:
//     an event is offered to its own chat's only, so a subscription per
//     chat for 10,000 chats costs each event what one does.
//   - Per-chat fan-out: a [Fanout] hands the events of one subscription
//     (its [Feed]) to watchers registered per chat, also indexed by chat
//     id, on one goroutine its owner runs. Watchers must not block; the
//     server's stream hub is one, queueing each event to its streams'
//     bounded queues and cutting off a stream that falls too far behind.
//     When the bus drops the feed's subscription as slow, the feed
//     subscribes again and tells its owner, whose watchers then catch up
//     from the store.
//   - Shutdown: [Bus.Close] stops accepting, drains what was accepted and
//     returns when every goroutine the bus started has ended.
//
// A chat's lane is kept after it empties, so a busy chat allocates nothing per
// event; at most 4,096 idle lanes are kept, after which all idle ones are
// dropped at once. Idle chats cost bounded memory and no goroutine.
package bus

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
)

// Defaults for the options.
const (
	DefaultConcurrency     = 4096
	DefaultLaneCapacity    = 1024
	DefaultWindowCount     = 100_000
	DefaultWindowAge       = 15 * time.Minute
	DefaultObserverBuffer  = 256
	defaultBatch           = 32 // events taken from a lane per lock
	defaultFairnessQuantum = 64 // events a worker handles on one lane before letting a waiting lane in
	maxIdleLanes           = 4096
	maxSpins               = 8 // yields a worker makes looking for work before it parks
)

// Bus routes events to handlers. The zero value is not usable; call New.
type Bus struct {
	log            *slog.Logger
	now            func() time.Time
	epoch          time.Time
	concurrency    int
	laneCapacity   int
	observerBuffer int

	rulesMu  sync.Mutex // serialises rule changes
	ruleList []*rule
	routes   atomic.Pointer[routeTable]

	ctx    context.Context // handlers' context; cancelled when a drain deadline passes
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	abandon   bool             // Close's deadline passed: drop what is still queued
	lanes     map[string]*lane // active lanes and up to maxIdleLanes idle ones
	idleLanes int
	ready     laneFIFO
	sched     scheduler
	drained   chan struct{} // closed when closed and no worker is left
	seen      *window
	observers atomic.Pointer[[]*Subscription]
	obsMu     sync.Mutex // serialises changes to observers
	chatObsMu sync.RWMutex
	chatObs   map[string][]*Subscription // ForChat subscriptions by chat; a slice is replaced, never changed in place

	router  atomic.Pointer[routerBox]                // SetRouter; nil: every event is handled here
	handled atomic.Pointer[func(baton.Event, error)] // SetHandledHook

	stats stats
}

// Option configures a Bus.
type Option func(*Bus)

// WithLogger sets the logger for warnings and handler failures.
func WithLogger(l *slog.Logger) Option { return func(b *Bus) { b.log = l } }

// WithConcurrency sets how many chat lanes may be handled at the same time.
// A chat whose lane has events waits for a free slot when the limit is
// reached. n < 1 means 1.
func WithConcurrency(n int) Option { return func(b *Bus) { b.concurrency = max(n, 1) } }

// WithLaneCapacity bounds the events queued per chat; Publish waits for room
// beyond it. n < 1 means 1.
func WithLaneCapacity(n int) Option { return func(b *Bus) { b.laneCapacity = max(n, 1) } }

// WithIdempotencyWindow sets how many event ids, and for how long, the bus
// remembers to drop duplicates. count 0 turns de-duplication off. See the
// package doc for what happens past the window.
func WithIdempotencyWindow(count int, age time.Duration) Option {
	return func(b *Bus) { b.seen = newWindow(max(count, 0), int64(age)) }
}

// WithObserverBuffer sets the default buffer of a subscription.
func WithObserverBuffer(n int) Option { return func(b *Bus) { b.observerBuffer = max(n, 1) } }

// WithClock sets the clock used for the idempotency window (tests).
func WithClock(now func() time.Time) Option { return func(b *Bus) { b.now = now } }

// New returns a running bus with no rules.
func New(opts ...Option) *Bus {
	b := &Bus{
		log:            slog.Default(),
		now:            time.Now,
		concurrency:    DefaultConcurrency,
		laneCapacity:   DefaultLaneCapacity,
		observerBuffer: DefaultObserverBuffer,
		lanes:          make(map[string]*lane),
		drained:        make(chan struct{}),
	}
	for _, o := range opts {
		o(b)
	}
	b.sched.init(b.concurrency)
	if b.seen == nil {
		b.seen = newWindow(DefaultWindowCount, int64(DefaultWindowAge))
	}
	b.epoch = b.now()
	// Handlers get b.ctx; its value marks what they publish (also from
	// contexts derived from it), which Close's drain still accepts.
	b.ctx, b.cancel = context.WithCancel(context.WithValue(context.Background(), handlerKey{}, b))
	b.routes.Store(newRouteTable(nil))
	b.observers.Store(&[]*Subscription{})
	return b
}

// lane is one chat's queue: a ring of events waiting to be handled.
type lane struct {
	key    string
	buf    []baton.Event
	head   int
	n      int
	active bool          // a worker owns the lane, or it waits in the ready queue
	space  chan struct{} // non-nil while a publisher waits for room; closed when room is made
}

func (l *lane) push(ev baton.Event) {
	if l.n == len(l.buf) {
		grown := make([]baton.Event, max(8, 2*len(l.buf)))
		for i := 0; i < l.n; i++ {
			grown[i] = l.buf[(l.head+i)%len(l.buf)]
		}
		l.buf, l.head = grown, 0
	}
	l.buf[(l.head+l.n)%len(l.buf)] = ev
	l.n++
}

// popInto moves up to len(dst) events into dst and returns how many.
func (l *lane) popInto(dst []baton.Event) int {
	k := min(l.n, len(dst))
	for i := 0; i < k; i++ {
		dst[i] = l.buf[l.head]
		l.buf[l.head] = baton.Event{} // let the payload be collected
		l.head = (l.head + 1) % len(l.buf)
	}
	l.n -= k
	return k
}

// laneFIFO is the queue of lanes that have events but no worker.
type laneFIFO struct {
	items []*lane
	head  int
}

func (q *laneFIFO) push(l *lane) { q.items = append(q.items, l) }

func (q *laneFIFO) pop() *lane {
	if q.head == len(q.items) {
		return nil
	}
	l := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return l
}

func (q *laneFIFO) len() int { return len(q.items) - q.head }

// Router sends some published events to another process instead of this
// bus: with several instances, a chat's inputs go to the instance that owns
// the chat (package natsbridge). Route reports whether it took ev; an
// error fails the Publish.
type Router interface {
	Route(ctx context.Context, ev baton.Event) (routed bool, err error)
}

type routerBox struct{ r Router }

// SetRouter makes Publish offer every event to r first; nil removes it.
// Events r takes reach this bus, if at all, through PublishLocal on the
// instance r chose.
func (b *Bus) SetRouter(r Router) {
	if r == nil {
		b.router.Store(nil)
		return
	}
	b.router.Store(&routerBox{r})
}

// SetHandledHook sets a function called, on the chat's lane, after each
// event's handler returned, with the handler's error (a panic is an error;
// an event no rule matched has none); nil removes it. A router
// acknowledges delivered inputs with it: an input handled without error is
// let go, one whose handling failed is delivered again.
func (b *Bus) SetHandledHook(f func(baton.Event, error)) {
	if f == nil {
		b.handled.Store(nil)
		return
	}
	b.handled.Store(&f)
}

// Publish accepts ev for routing. It returns once the event is queued on its
// chat's lane (not once it is handled), after delivering it to matching
// observers, or once the router set with SetRouter took it (the router
// then answers for duplicates). A duplicate id within the idempotency
// window is dropped and Publish returns nil. When
// the lane is full Publish waits for room or for ctx; after Close it
// returns baton.ErrClosed — except, while Close drains, for an event a
// handler publishes (with its context, or one derived from it): the work
// in flight finishes with its consequences (a tool that ends during the
// drain still reports tool.executed), and the drain waits for them too.
//
// ev must have an ID and a Type (NewEvent fills both).
func (b *Bus) Publish(ctx context.Context, ev baton.Event) error {
	if ev.ID == "" || ev.Type == "" {
		return baton.Errorf(baton.EINVALID, "publish: event id and type are required")
	}
	if rb := b.router.Load(); rb != nil {
		routed, err := rb.r.Route(ctx, ev)
		if err != nil {
			return fmt.Errorf("publish %s %s: %w", ev.Type, ev.ID, err)
		}
		if routed {
			return nil
		}
	}
	_, err := b.PublishLocal(ctx, ev)
	return err
}

// PublishLocal is Publish without the router: ev is handled on this bus. It
// reports whether ev was accepted (false for a duplicate id within the
// idempotency window).
func (b *Bus) PublishLocal(ctx context.Context, ev baton.Event) (accepted bool, err error) {
	return b.publishLocal(ctx, ev, true)
}

// PublishAgain is PublishLocal for an event whose id the bus may have seen:
// it is accepted even within the idempotency window. A router uses it for
// an input delivered again because its earlier handling failed.
func (b *Bus) PublishAgain(ctx context.Context, ev baton.Event) error {
	_, err := b.publishLocal(ctx, ev, false)
	return err
}

func (b *Bus) publishLocal(ctx context.Context, ev baton.Event, dedup bool) (accepted bool, err error) {
	if ev.ID == "" || ev.Type == "" {
		return false, baton.Errorf(baton.EINVALID, "publish: event id and type are required")
	}
	key := ev.Metadata.TriggerSessionID
	b.mu.Lock()
	for {
		if b.closed && !b.drainAccepts(ctx) {
			b.mu.Unlock()
			return false, baton.ErrClosed
		}
		now := int64(b.now().Sub(b.epoch))
		if dedup && b.seen.contains(key, ev.ID, now) {
			b.mu.Unlock()
			b.stats.duplicates.Add(1)
			return false, nil
		}
		l := b.lanes[key]
		if l == nil {
			l = &lane{key: key}
			b.lanes[key] = l
		} else if !l.active && l.n == 0 {
			b.idleLanes--
		}
		if l.n < b.laneCapacity {
			b.seen.add(key, ev.ID, now)
			l.push(ev)
			if !l.active {
				b.activate(l)
			}
			b.mu.Unlock()
			b.stats.published.Add(1)
			b.observe(ev)
			return true, nil
		}
		// Full: wait for the lane's worker to make room, then try again
		// (the id may have been accepted by another publisher meanwhile).
		if l.space == nil {
			l.space = make(chan struct{})
		}
		space := l.space
		b.mu.Unlock()
		b.stats.waits.Add(1)
		select {
		case <-space:
		case <-ctx.Done():
			return false, fmt.Errorf("publish %s %s: lane full: %w", ev.Type, ev.ID, ctx.Err())
		}
		b.mu.Lock()
	}
}

// handlerKey marks the context the bus gives its handlers.
type handlerKey struct{}

// drainAccepts reports whether a closed bus still accepts an event
// published with ctx: one a handler of this bus publishes while the drain
// runs, before its deadline. A worker is then running (the handler's, or
// another that will find the lane in the ready queue before it exits), so
// the event is handled before drained is closed; after the drain — no
// worker left — nothing is accepted, so no goroutine starts after Close.
// b.mu is held.
func (b *Bus) drainAccepts(ctx context.Context) bool {
	return !b.abandon && b.sched.workers > 0 && ctx.Value(handlerKey{}) == b
}

// dispatch hands ev to the rule that wins it, containing errors and panics.
func (b *Bus) dispatch(ev baton.Event) {
	r := b.routes.Load().route(ev.Type)
	var err error
	if r == nil {
		b.stats.unmatched.Add(1)
		b.log.Warn("bus: no rule matched event", "event_id", ev.ID, "event_type", ev.Type, "chat_id", ev.Metadata.TriggerSessionID)
	} else {
		err = b.call(r, ev)
		b.stats.handled.Add(1)
	}
	if h := b.handled.Load(); h != nil {
		(*h)(ev, err)
	}
}

// call runs r's handler on ev and returns its error; a panic is logged,
// counted and returned as an error.
func (b *Bus) call(r *rule, ev baton.Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			b.stats.panics.Add(1)
			b.log.Error("bus: handler panicked", "rule", r.Name, "event_id", ev.ID, "event_type", ev.Type,
				"chat_id", ev.Metadata.TriggerSessionID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler %s panicked: %v", r.Name, p)
		}
	}()
	if err = r.Handler(b.ctx, ev); err != nil {
		b.stats.errors.Add(1)
		b.log.Error("bus: handler failed", "rule", r.Name, "event_id", ev.ID, "event_type", ev.Type,
			"chat_id", ev.Metadata.TriggerSessionID, "err", err)
	}
	return err
}

// Close stops accepting events (Publish returns baton.ErrClosed, but for
// the events handlers publish meanwhile), waits
// until every accepted event has been handled, closes every subscription,
// and returns when all goroutines the bus started have ended. If ctx ends
// first, handlers' context is cancelled, events still queued are dropped and
// counted as abandoned, and Close returns ctx's error once the running
// handlers have returned. Close is idempotent.
func (b *Bus) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		b.sched.close() // parked workers exit; no lane is activated after closed
		for _, l := range b.lanes {
			if l.space != nil {
				close(l.space) // waiting publishers see closed and return ErrClosed
				l.space = nil
			}
		}
		if b.sched.workers == 0 {
			close(b.drained)
		}
	}
	b.mu.Unlock()

	var err error
	select {
	case <-b.drained:
	case <-ctx.Done():
		err = ctx.Err()
		b.mu.Lock()
		b.abandon = true
		b.mu.Unlock()
		b.cancel()
		<-b.drained
	}
	b.cancel()
	b.sched.stopWatchdog()
	b.closeObservers()
	return err
}

// Stats are the bus's counters since New.
type Stats struct {
	Published     uint64 // events accepted
	Handled       uint64 // events a rule's handler was called for (including failures)
	Duplicates    uint64 // events dropped as already seen
	Unmatched     uint64 // events no rule matched
	HandlerErrors uint64 // handlers that returned an error
	Panics        uint64 // handlers that panicked
	Abandoned     uint64 // accepted events dropped because Close's deadline passed
	PublishWaits  uint64 // times Publish waited for room on a full lane
	Broadcasts    uint64 // transient events sent to observers
	ObserverDrops uint64 // subscriptions dropped for being too slow
}

type stats struct {
	published, handled, duplicates, unmatched, errors, panics, abandoned, waits, broadcasts, observerDrops atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (b *Bus) Stats() Stats {
	s := &b.stats
	return Stats{
		Published:     s.published.Load(),
		Handled:       s.handled.Load(),
		Duplicates:    s.duplicates.Load(),
		Unmatched:     s.unmatched.Load(),
		HandlerErrors: s.errors.Load(),
		Panics:        s.panics.Load(),
		Abandoned:     s.abandoned.Load(),
		PublishWaits:  s.waits.Load(),
		Broadcasts:    s.broadcasts.Load(),
		ObserverDrops: s.observerDrops.Load(),
	}
}

// Pending returns how many accepted events are queued and not yet handed to a handler.
func (b *Bus) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lanes {
		n += l.n
	}
	return n
}
