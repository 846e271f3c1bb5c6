package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/batonhq/baton"
)

// Fanout hands events to watchers of their chat. Watchers are indexed by
// chat id, so delivering an event costs one map lookup and a call per
// watcher of that chat, whatever the number of chats watched. It is the
// fan-out the server's stream hub is built on, and serves an embedder that
// follows many chats from one place.
//
// A Fanout is fed by a [Feed] (one bus subscription read on one goroutine)
// or by calling Deliver. Watchers are called on the feeding goroutine, in
// the order the events arrive, and must not block: a watcher that needs
// to wait queues the event to its own bounded queue and cuts its reader
// off when that is full, as the bus does with a slow subscription
// (invariant 9: a slow reader never holds up the run).
//
// The zero value is ready to use.
type Fanout struct {
	mu    sync.RWMutex
	chats map[string][]*watcher // a chat's slice is replaced, never changed in place
	n     atomic.Int64          // live watchers
}

type watcher struct {
	fn      func(*baton.Event)
	stopped atomic.Bool
}

// Watch calls fn with every event of chatID delivered from now on ("" is
// the events that have no chat), until stop is called. stop is idempotent;
// once it has returned fn is not called again, unless a Deliver that
// started before is still calling it (stop may be called from fn).
func (f *Fanout) Watch(chatID string, fn func(*baton.Event)) (stop func()) {
	w := &watcher{fn: fn}
	f.mu.Lock()
	if f.chats == nil {
		f.chats = make(map[string][]*watcher)
	}
	// A fresh slice: a Deliver ranging over the old one is not disturbed.
	f.chats[chatID] = append(slices.Clip(f.chats[chatID]), w)
	f.mu.Unlock()
	f.n.Add(1)
	var once sync.Once
	return func() { once.Do(func() { f.unwatch(chatID, w) }) }
}

func (f *Fanout) unwatch(chatID string, w *watcher) {
	w.stopped.Store(true)
	f.n.Add(-1)
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.chats[chatID]
	i := slices.Index(cur, w)
	if i < 0 {
		return
	}
	if len(cur) == 1 {
		delete(f.chats, chatID) // an unwatched chat costs nothing
		return
	}
	f.chats[chatID] = slices.Delete(slices.Clone(cur), i, i+1)
}

// Deliver calls the watchers of ev's chat with ev and returns how many it
// called. It does not block but for the watchers themselves.
func (f *Fanout) Deliver(ev *baton.Event) int {
	f.mu.RLock()
	ws := f.chats[ev.ChatID()]
	f.mu.RUnlock()
	n := 0
	for _, w := range ws {
		if !w.stopped.Load() {
			w.fn(ev)
			n++
		}
	}
	return n
}

// Watchers returns the number of live watchers.
func (f *Fanout) Watchers() int { return int(f.n.Load()) }

// Feed is a Fanout's source: one bus subscription, read by Run. Its owner
// calls Run once (which closes the subscription when it returns) or, if it
// never does, Close. A Fanout may have several feeds (say, one per event
// pattern); each calls the watchers from its own goroutine.
type Feed struct {
	fan      *Fanout
	bus      *Bus
	patterns []string
	opts     []SubscribeOption

	mu  sync.Mutex
	sub *Subscription
}

// Feed subscribes to b's events whose type matches patterns (none: every
// event) and returns the feed whose Run delivers them to f's watchers.
// opts size the subscription (Buffer); it is an error if b is closed.
func (f *Fanout) Feed(b *Bus, patterns []string, opts ...SubscribeOption) (*Feed, error) {
	sub, err := b.Subscribe(patterns, opts...)
	if err != nil {
		return nil, fmt.Errorf("fan-out feed: %w", err)
	}
	return &Feed{fan: f, bus: b, patterns: patterns, opts: opts, sub: sub}, nil
}

// Run delivers the feed's events to the fan-out's watchers until ctx is
// done, the bus closes or Close is called; it returns nil then, and
// closes its subscription. If the bus drops the subscription for being
// too slow, Run subscribes again at once and calls onResync (if not nil)
// before the next event: some events reached no watcher, and every watcher
// must make up for them (for chat.* events, from the store). It returns an
// error only if that new subscription fails for another reason than the
// bus closing.
func (fd *Feed) Run(ctx context.Context, onResync func()) error {
	defer fd.Close()
	for {
		fd.mu.Lock()
		sub := fd.sub
		fd.mu.Unlock()
		if sub == nil {
			return nil // closed
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-sub.C():
			if ok {
				fd.fan.Deliver(&ev)
				continue
			}
			if !errors.Is(sub.Err(), ErrSlowSubscriber) {
				return nil // the bus closed, or Close was called
			}
			next, err := fd.bus.Subscribe(fd.patterns, fd.opts...)
			if errors.Is(err, baton.ErrClosed) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("fan-out feed: subscribe again: %w", err)
			}
			fd.mu.Lock()
			if fd.sub == nil { // Close meanwhile
				fd.mu.Unlock()
				next.Close()
				return nil
			}
			fd.sub = next
			fd.mu.Unlock()
			if onResync != nil {
				onResync()
			}
		}
	}
}

// Close ends the feed's subscription; a running Run returns. It is
// idempotent.
func (fd *Feed) Close() {
	fd.mu.Lock()
	sub := fd.sub
	fd.sub = nil
	fd.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
}
