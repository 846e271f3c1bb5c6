package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/workflow"
)

// Why a hub ends a subscriber. The stream closes with the matching
// WebSocket code (see closeCode) or ends the SSE response.
const (
	kickSlow     = iota + 1 // its queue was full: reconnect and replay
	kickResync              // the hub lost events (its own subscription was dropped): reconnect and replay
	kickShutdown            // the server is shutting down: reconnect later
	kickDeleted             // the chat was deleted
)

// hub receives every chat.* and stream.* event through ONE bus subscription
// and fans each out, through a bus.Fanout (indexed by chat id), to the
// subscribers of its chat, through a bounded queue per subscriber. It never blocks on a subscriber: a lagging subscriber's
// deltas are merged (see queue), and one whose queue is full of recorded
// events is cut off (kickSlow) and replays from the store when it comes
// back (invariant 9). A chat's envelope is built once per event, shared by
// all its subscribers.
type hub struct {
	bus      *bus.Bus
	log      *slog.Logger
	buffer   int // the hub's bus subscription buffer
	queueLen int // each subscriber's queue
	// watch, if set, is told when this instance starts following a chat
	// (its first subscriber) and returns what to call when it stops (its
	// last leaves): with several instances, the NATS bridge then receives
	// only the chats followed here (Config.Watch).
	watch func(chatID string) (release func())

	fan   bus.Fanout // a watcher per followed chat, delivering to its subscribers
	mu    sync.Mutex
	chats map[string]*hubChat

	delivered atomic.Int64 // frames queued to subscribers (merged deltas included)
	done      chan struct{}
}

type hubChat struct {
	wf      *workflow.Workflow
	subs    []*subscriber // one or a few: a slice ranges faster than a map
	release func()        // from watch; nil without one
	unwatch func()        // ends the chat's watcher on the hub's fan-out
	ready   chan struct{} // closed once the first stream's watch is in place; nil after, or without a watch
}

// forget ends following c; h.mu is held.
func (c *hubChat) forget() {
	c.unwatch()
	if c.release != nil {
		c.release()
		c.release = nil
	}
}

// subscriber is one stream (a WebSocket or an SSE response) of one chat.
type subscriber struct {
	chatID string
	q      queue
	kicked chan struct{} // closed when the hub ends the subscriber
	reason atomic.Int32  // a kick* constant, set before kicked is closed
	once   sync.Once
}

func (s *subscriber) kick(reason int) {
	s.once.Do(func() {
		s.reason.Store(int32(reason))
		close(s.kicked)
	})
}

func newHub(b *bus.Bus, log *slog.Logger, buffer, queueLen int) *hub {
	return &hub{bus: b, log: log, buffer: buffer, queueLen: queueLen, chats: map[string]*hubChat{}, done: make(chan struct{})}
}

var hubPatterns = []string{"chat.*", "stream.*", baton.TypeSessionDeleted}

// run receives events until ctx is done or the bus closes, then ends every
// subscriber. A dropped hub subscription is replaced at once, and every
// subscriber is told to reconnect, since some events never reached it.
func (h *hub) run(ctx context.Context, ready chan<- error) {
	defer h.stop()
	feed, err := h.fan.Feed(h.bus, hubPatterns, bus.Buffer(h.buffer))
	ready <- err
	if err != nil {
		return
	}
	if err := feed.Run(ctx, func() {
		h.log.Warn("server: hub subscription dropped as slow; resubscribing and asking every stream to replay")
		h.kickAll(kickResync)
	}); err != nil {
		h.log.Error("server: hub subscription lost", "err", err)
	}
}

// dispatch queues ev to the subscribers of its chat, through the chat's
// watcher on the fan-out.
func (h *hub) dispatch(ev *baton.Event) { h.fan.Deliver(ev) }

// deliver queues ev to c's subscribers; it is c's watcher on the fan-out.
func (h *hub) deliver(chatID string, c *hubChat, ev *baton.Event) {
	h.mu.Lock()
	if h.chats[chatID] != c {
		h.mu.Unlock()
		return // the chat's last stream left meanwhile
	}
	wf := c.wf
	h.mu.Unlock()
	if ev.Type == baton.TypeSessionDeleted {
		h.kickChat(chatID, kickDeleted)
		return
	}
	f := pooledFrame(wf, ev) // outside the lock: the only costly step
	if f.data == nil && f.seq == 0 {
		f.recycle() // a hidden stream event: nothing to tell
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.chats[chatID] != c || len(c.subs) == 0 {
		f.recycle()
		return
	}
	// Every stream releases the frame once it is done with it, which may
	// be as soon as it is queued; one cut off here never will, so it is
	// released for it.
	f.refs.Store(int32(len(c.subs)))
	d := lazyDelta{ev: ev}
	kept := c.subs[:0]
	for _, s := range c.subs {
		if s.q.push(f, &d, wf) {
			kept = append(kept, s)
		} else {
			s.kick(kickSlow)
			f.release()
		}
	}
	clear(c.subs[len(kept):])
	c.subs = kept
	h.delivered.Add(int64(len(kept)))
	if len(c.subs) == 0 {
		c.forget()
		delete(h.chats, chatID)
	}
}

// subscribe adds a subscriber to chatID. Events published from now on are
// queued to it; the caller replays earlier ones from the store. With a
// watch, it returns only once this instance receives the chat from other
// instances — for a chat's first stream, after the watch; for a stream
// that arrives meanwhile, after the first stream's watch — so that nothing
// falls between the replay and the first live event.
func (h *hub) subscribe(chatID string, wf *workflow.Workflow) (*subscriber, error) {
	s := &subscriber{chatID: chatID, q: newQueue(h.queueLen), kicked: make(chan struct{})}
	h.mu.Lock()
	select {
	case <-h.done:
		h.mu.Unlock()
		return nil, unavailable("server is shutting down: reconnect later", nil)
	default:
	}
	c := h.chats[chatID]
	first := c == nil
	if first {
		c = &hubChat{wf: wf}
		c.unwatch = h.fan.Watch(chatID, func(ev *baton.Event) { h.deliver(chatID, c, ev) })
		if h.watch != nil {
			c.ready = make(chan struct{})
		}
		h.chats[chatID] = c
	}
	c.subs = append(c.subs, s)
	ready := c.ready
	h.mu.Unlock()
	switch {
	case first && ready != nil:
		// Watch may wait for NATS: not under the hub's lock.
		release := h.watch(chatID)
		h.mu.Lock()
		if h.chats[chatID] == c {
			c.release = release
		} else {
			release() // its subscribers left meanwhile
		}
		c.ready = nil
		h.mu.Unlock()
		close(ready)
	case ready != nil:
		<-ready // the first stream's watch is in place
	}
	return s, nil
}

// unsubscribe removes s; it is idempotent.
func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chats[s.chatID]; c != nil {
		if i := slices.Index(c.subs, s); i >= 0 {
			c.subs = slices.Delete(c.subs, i, i+1)
		}
		if len(c.subs) == 0 {
			c.forget()
			delete(h.chats, s.chatID)
		}
	}
}

func (h *hub) kickChat(chatID string, reason int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chats[chatID]; c != nil {
		for _, s := range c.subs {
			s.kick(reason)
		}
		c.forget()
		delete(h.chats, chatID)
	}
}

// stop ends every subscriber with kickShutdown and refuses new ones: a
// stream learns of the server's shutdown from its kicked channel alone.
func (h *hub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.done) // under mu: no subscribe slips in between the kicks and this
	for id, c := range h.chats {
		for _, s := range c.subs {
			s.kick(kickShutdown)
		}
		c.forget()
		delete(h.chats, id)
	}
}

func (h *hub) kickAll(reason int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, c := range h.chats {
		for _, s := range c.subs {
			s.kick(reason)
		}
		c.forget()
		delete(h.chats, id)
	}
}

// subscribers returns the number of live subscribers (for tests and stats).
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.chats {
		n += len(c.subs)
	}
	return n
}
