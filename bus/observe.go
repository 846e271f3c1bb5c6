package bus

import (
	"context"
	"slices"
	"sync"

	"github.com/batonhq/baton"
)

// ErrSlowSubscriber is the reason a subscription was dropped: its buffer was
// full when an event arrived. The subscriber should re-subscribe and fill
// what it missed from the store (chat.* events carry sequences for that).
var ErrSlowSubscriber = baton.Errorf(baton.EUNAVAILABLE, "subscriber too slow: dropped")

// Subscription receives copies of the events that match its patterns, as
// they are accepted by Publish or sent by Broadcast. It takes no part in
// routing: observing an event does not handle it.
type Subscription struct {
	bus      *Bus
	matchers []matcher // nil: every event
	chatID   string    // "" : every chat

	mu     sync.Mutex // guards ch against a send racing a close
	ch     chan baton.Event
	closed bool
	err    error
}

// SubscribeOption narrows or sizes a subscription.
type SubscribeOption func(*Subscription)

// ForChat limits a subscription to the events of one chat. Such
// subscriptions are indexed by chat id: an event is offered only to its own
// chat's, so a subscription per chat for thousands of chats costs each
// event no more than one.
func ForChat(chatID string) SubscribeOption { return func(s *Subscription) { s.chatID = chatID } }

// Buffer sets the subscription's buffer; a subscription whose buffer is full
// when an event arrives is dropped.
func Buffer(n int) SubscribeOption {
	return func(s *Subscription) { s.ch = make(chan baton.Event, max(n, 1)) }
}

// Subscribe watches events whose type matches any of patterns (none: every
// event). Events of one chat arrive in the order each publisher published
// them. The subscription ends when Close is called, when the bus closes, or
// when it falls behind by more than its buffer; then C is closed and Err says
// why.
func (b *Bus) Subscribe(patterns []string, opts ...SubscribeOption) (*Subscription, error) {
	s := &Subscription{bus: b}
	if len(patterns) > 0 {
		ms, err := compilePatterns(patterns)
		if err != nil {
			return nil, err
		}
		s.matchers = ms
	}
	for _, o := range opts {
		o(s)
	}
	if s.ch == nil {
		s.ch = make(chan baton.Event, b.observerBuffer)
	}
	b.obsMu.Lock()
	defer b.obsMu.Unlock()
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, baton.ErrClosed
	}
	if s.chatID != "" {
		// Indexed by chat: an event costs its own chat's subscriptions,
		// not a check of every chat's.
		b.chatObsMu.Lock()
		if b.chatObs == nil {
			b.chatObs = make(map[string][]*Subscription)
		}
		b.chatObs[s.chatID] = append(slices.Clip(b.chatObs[s.chatID]), s)
		b.chatObsMu.Unlock()
		return s, nil
	}
	next := append(slices.Clone(*b.observers.Load()), s)
	b.observers.Store(&next)
	return s, nil
}

// C returns the channel of events. It is closed when the subscription ends.
func (s *Subscription) C() <-chan baton.Event { return s.ch }

// Err returns why the subscription ended: nil while it runs or after Close,
// ErrSlowSubscriber when it was dropped, baton.ErrClosed when the bus closed.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() { s.bus.unsubscribe(s, nil) }

// Broadcast sends a transient event to the observers that match it, without
// routing it to a handler and without de-duplication: this is how stream.*
// deltas reach stream hubs and metrics (spec/environment-events.md §3.5).
// It never blocks; after Close it returns baton.ErrClosed.
func (b *Bus) Broadcast(ev baton.Event) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return baton.ErrClosed
	}
	b.stats.broadcasts.Add(1)
	b.observe(ev)
	return nil
}

// observe delivers ev to every matching subscription without blocking:
// those of every chat, then those of ev's chat, found by its id.
func (b *Bus) observe(ev baton.Event) {
	b.deliver(ev, *b.observers.Load())
	if chatID := ev.Metadata.TriggerSessionID; chatID != "" {
		b.chatObsMu.RLock()
		subs := b.chatObs[chatID]
		b.chatObsMu.RUnlock()
		b.deliver(ev, subs)
	}
}

func (b *Bus) deliver(ev baton.Event, subs []*Subscription) {
	for _, s := range subs {
		if s.matchers != nil && !matchAny(s.matchers, ev.Type) {
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			continue
		}
		select {
		case s.ch <- ev:
			s.mu.Unlock()
		default:
			s.mu.Unlock()
			b.stats.observerDrops.Add(1)
			b.log.Warn("bus: dropped slow subscriber", "event_type", ev.Type, "chat_id", ev.Metadata.TriggerSessionID, "buffer", cap(s.ch))
			b.unsubscribe(s, ErrSlowSubscriber)
		}
	}
}

func (b *Bus) unsubscribe(s *Subscription, reason error) {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.err = reason
		close(s.ch)
	}
	s.mu.Unlock()
	if s.chatID != "" {
		b.chatObsMu.Lock()
		defer b.chatObsMu.Unlock()
		cur := b.chatObs[s.chatID]
		if i := slices.Index(cur, s); i >= 0 {
			if len(cur) == 1 {
				delete(b.chatObs, s.chatID)
			} else {
				b.chatObs[s.chatID] = slices.Delete(slices.Clone(cur), i, i+1)
			}
		}
		return
	}
	b.obsMu.Lock()
	defer b.obsMu.Unlock()
	cur := *b.observers.Load()
	if i := slices.Index(cur, s); i >= 0 {
		next := slices.Delete(slices.Clone(cur), i, i+1)
		b.observers.Store(&next)
	}
}

func (b *Bus) closeObservers() {
	// Load under obsMu: a Subscribe that saw the bus open has stored its
	// subscription by the time we get the lock, so none is missed.
	b.obsMu.Lock()
	subs := slices.Clone(*b.observers.Load())
	b.chatObsMu.RLock()
	for _, cs := range b.chatObs {
		subs = append(subs, cs...)
	}
	b.chatObsMu.RUnlock()
	b.obsMu.Unlock()
	for _, s := range subs {
		b.unsubscribe(s, baton.ErrClosed)
	}
}

// Wait blocks until the subscription delivers an event for which match
// returns true, the subscription ends, or ctx is done. It is a convenience
// for tests and simple clients.
func (s *Subscription) Wait(ctx context.Context, match func(baton.Event) bool) (baton.Event, error) {
	for {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				if err := s.Err(); err != nil {
					return baton.Event{}, err
				}
				return baton.Event{}, baton.ErrClosed
			}
			if match(ev) {
				return ev, nil
			}
		case <-ctx.Done():
			return baton.Event{}, ctx.Err()
		}
	}
}

// OriginKey is the metadata key under which a bridge between instances
// (package natsbridge) names the instance an event came from, when it
// broadcasts another instance's event to this bus's observers.
const OriginKey = "origin"

// Remote reports whether ev was recorded by another instance and only
// broadcast here. Observers that count or persist what this instance did
// (metrics, rollups, traces) skip remote events, or every instance would
// count each event once.
func Remote(ev baton.Event) bool {
	_, ok := ev.Metadata.Extra[OriginKey]
	return ok
}
