package server

import (
	"context"
	"errors"
	"log/slog"
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
// and fans each out to the subscribers of its chat, through a bounded queue
// per subscriber. It never blocks on a subscriber: a subscriber whose queue
// is full is cut off (kickSlow) and replays from the store when it comes
// back (invariant 9). A chat's envelope is built once per event, shared by
// all its subscribers.
type hub struct {
	bus      *bus.Bus
	log      *slog.Logger
	buffer   int // the hub's bus subscription buffer
	queueLen int // each subscriber's queue

	mu    sync.Mutex
	chats map[string]*hubChat

	delivered atomic.Int64 // frames queued to subscribers
	done      chan struct{}
}

type hubChat struct {
	wf   *workflow.Workflow
	subs map[*subscriber]struct{}
}

// subscriber is one stream (a WebSocket or an SSE response) of one chat.
type subscriber struct {
	chatID string
	q      chan *frame
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
	defer close(h.done)
	sub, err := h.bus.Subscribe(hubPatterns, bus.Buffer(h.buffer))
	ready <- err
	if err != nil {
		return
	}
	defer func() { sub.Close(); h.kickAll(kickShutdown) }()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.C():
			if ok {
				h.dispatch(&ev)
				continue
			}
			if !errors.Is(sub.Err(), bus.ErrSlowSubscriber) {
				return // the bus closed
			}
			h.log.Warn("server: hub subscription dropped as slow; resubscribing and asking every stream to replay")
			if sub, err = h.bus.Subscribe(hubPatterns, bus.Buffer(h.buffer)); err != nil {
				return
			}
			h.kickAll(kickResync)
		}
	}
}

// dispatch queues ev to the subscribers of its chat.
func (h *hub) dispatch(ev *baton.Event) {
	chatID := ev.ChatID()
	h.mu.Lock()
	c := h.chats[chatID]
	if c == nil {
		h.mu.Unlock()
		return
	}
	wf := c.wf
	h.mu.Unlock()
	if ev.Type == baton.TypeSessionDeleted {
		h.kickChat(chatID, kickDeleted)
		return
	}
	f := encodeFrame(wf, ev) // outside the lock: the only costly step
	if f.data == nil && f.seq == 0 {
		return // a hidden stream event: nothing to tell
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c = h.chats[chatID]
	if c == nil {
		return
	}
	for s := range c.subs {
		select {
		case s.q <- f:
			h.delivered.Add(1)
		default:
			delete(c.subs, s)
			s.kick(kickSlow)
		}
	}
	if len(c.subs) == 0 {
		delete(h.chats, chatID)
	}
}

// subscribe adds a subscriber to chatID. Events published from now on are
// queued to it; the caller replays earlier ones from the store.
func (h *hub) subscribe(chatID string, wf *workflow.Workflow) (*subscriber, error) {
	s := &subscriber{chatID: chatID, q: make(chan *frame, h.queueLen), kicked: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return nil, baton.Errorf(baton.EUNAVAILABLE, "server is shutting down")
	default:
	}
	c := h.chats[chatID]
	if c == nil {
		c = &hubChat{wf: wf, subs: map[*subscriber]struct{}{}}
		h.chats[chatID] = c
	}
	c.subs[s] = struct{}{}
	return s, nil
}

// unsubscribe removes s; it is idempotent.
func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chats[s.chatID]; c != nil {
		delete(c.subs, s)
		if len(c.subs) == 0 {
			delete(h.chats, s.chatID)
		}
	}
}

func (h *hub) kickChat(chatID string, reason int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chats[chatID]; c != nil {
		for s := range c.subs {
			s.kick(reason)
		}
		delete(h.chats, chatID)
	}
}

func (h *hub) kickAll(reason int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, c := range h.chats {
		for s := range c.subs {
			s.kick(reason)
		}
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
