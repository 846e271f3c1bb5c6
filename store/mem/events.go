package mem

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"

	"github.com/batonhq/baton"
)

// Append assigns the chat's next sequences to events and applies u, both
// or neither; see baton.EventStore. Everything is checked with the chat
// locked before anything changes, so a failed append leaves no trace and
// two appends can neither repeat nor skip a sequence.
func (s *Store) Append(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	evs, err := baton.PrepareEvents(chatID, events)
	if err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	// The store keeps its own copies (made before the lock is taken): the
	// caller may reuse its payloads and maps.
	kept := make([]baton.Event, len(evs))
	for i := range evs {
		kept[i] = cloneEvent(evs[i])
	}
	err = s.write(ctx, scope, chatID, func(c *chat) error {
		if last := int64(len(c.events)); u != nil && u.ExpectNext > 0 && last+1 != u.ExpectNext {
			return baton.StaleNext(chatID, u.ExpectNext, last)
		}
		for i := range evs {
			id := evs[i].ID
			_, dup := c.ids[id]
			if dup || containsID(evs[:i], id) {
				return baton.Errorf(baton.ECONFLICT, "event %q: already recorded in chat %q", id, chatID)
			}
		}
		ap, err := s.prepare(c, u)
		if err != nil {
			return err
		}
		seq := int64(len(c.events))
		for i := range kept {
			seq++
			kept[i].Sequence, evs[i].Sequence = seq, seq
			c.ids[kept[i].ID] = struct{}{}
		}
		c.events = append(c.events, kept...)
		c.c.LastSequence = seq
		ap.apply(s, c, now())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

func containsID(evs []baton.Event, id string) bool {
	for i := range evs {
		if evs[i].ID == id {
			return true
		}
	}
	return false
}

// Events returns up to limit of the chat's events after the given
// sequence; see baton.EventStore. The events are copies: their payloads
// share one new buffer (one allocation for a whole replay), each capped so
// that an append to one cannot run into the next. The copying is done
// after the chat's lock is let go, so that a long replay does not hold up
// the chat's appends: a recorded event never changes, and an append never
// writes where a slice taken before it can see.
func (s *Store) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	var src []baton.Event
	err := s.read(ctx, scope, chatID, func(c *chat) error {
		// Sequences are 1 … len(events), no gap: event n is events[n-1].
		from := min(max(after, 0), int64(len(c.events)))
		src = c.events[from:]
		if limit > 0 && len(src) > limit {
			src = src[:limit]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]baton.Event, len(src))
	copy(out, src)
	n := 0
	for i := range src {
		n += len(src[i].Payload)
	}
	buf := make([]byte, 0, n)
	for i := range out {
		e := &out[i]
		if e.Payload != nil {
			start := len(buf)
			buf = append(buf, e.Payload...)
			e.Payload = json.RawMessage(buf[start:len(buf):len(buf)])
		}
		e.Metadata.Extra = cloneExtra(e.Metadata.Extra)
	}
	return out, nil
}

// cloneEvent returns a copy of e that shares no memory with it.
func cloneEvent(e baton.Event) baton.Event {
	if e.Payload != nil {
		e.Payload = bytes.Clone(e.Payload)
	}
	e.Metadata.Extra = cloneExtra(e.Metadata.Extra)
	return e
}

// cloneExtra returns a deep copy of metadata's extra keys (nil for none).
func cloneExtra(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k, v := range out {
		out[k] = bytes.Clone(v)
	}
	return out
}

// AddInput stores an accepted input in its chat's inbox; see
// baton.InboxStore.
func (s *Store) AddInput(ctx context.Context, scope baton.Scope, ev baton.Event) (baton.Input, bool, error) {
	ev, err := baton.PrepareInput(ev)
	if err != nil {
		return baton.Input{}, false, err
	}
	var in baton.Input
	added := false
	err = s.write(ctx, scope, ev.Metadata.TriggerSessionID, func(c *chat) error {
		if x := c.inputID[ev.ID]; x != nil {
			in = copyInput(x)
			return nil
		}
		x := &baton.Input{Event: cloneEvent(ev), Seq: s.inputSeq.Add(1), AcceptedAt: now()}
		c.inputs = append(c.inputs, x)
		c.inputID[ev.ID] = x
		c.waiting++
		in, added = copyInput(x), true
		return nil
	})
	return in, added, err
}

func copyInput(x *baton.Input) baton.Input {
	in := *x
	in.Event = cloneEvent(x.Event)
	return in
}

// Inputs returns the chat's inputs not taken yet, oldest first; see
// baton.InboxStore.
func (s *Store) Inputs(ctx context.Context, scope baton.Scope, chatID string) ([]baton.Input, error) {
	var out []baton.Input
	err := s.read(ctx, scope, chatID, func(c *chat) error {
		if c.waiting == 0 {
			return nil
		}
		out = make([]baton.Input, 0, c.waiting)
		for _, x := range c.inputs {
			if x.ConsumedAt.IsZero() {
				out = append(out, copyInput(x))
			}
		}
		return nil
	})
	return out, err
}

// ChatsWithInputs lists the chats with inputs not taken yet, the one with
// the oldest waiting input first; see baton.InboxStore. It reads every chat
// the store holds: it is for recovery after a restart.
func (s *Store) ChatsWithInputs(ctx context.Context, limit int) ([]baton.Chat, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	type found struct {
		c     baton.Chat
		first int64
	}
	var all []found
	_, err := s.scan(ctx, int(^uint(0)>>1), func(c *chat) bool {
		if c.waiting == 0 {
			return false
		}
		for _, x := range c.inputs {
			if x.ConsumedAt.IsZero() {
				all = append(all, found{c.snapshot(false), x.Seq})
				break
			}
		}
		return false // collected above, with the seq that orders it
	})
	if err != nil {
		return nil, err
	}
	sortBy(all, func(f found) int64 { return f.first })
	out := make([]baton.Chat, 0, min(limit, len(all)))
	for _, f := range all[:min(limit, len(all))] {
		out = append(out, f.c)
	}
	return out, nil
}

// ForkChat creates f.Chat with copies of the first f.At events of f.From;
// see baton.ForkStore.
func (s *Store) ForkChat(ctx context.Context, scope baton.Scope, f baton.Fork) (baton.Chat, error) {
	if err := baton.ValidateFork(&f); err != nil {
		return baton.Chat{}, err
	}
	c := f.Chat
	if err := c.PrepareCreate(scope); err != nil {
		return baton.Chat{}, err
	}
	var copied []baton.Event
	err := s.read(ctx, scope, f.From, func(src *chat) error {
		if last := int64(len(src.events)); f.At > last {
			return baton.ForkBeyond(f.At, last)
		}
		copied = make([]baton.Event, f.At)
		for i := range copied {
			e := cloneEvent(src.events[i])
			e.Payload = baton.RenameIn(e.Payload, f.Rename)
			e.Metadata.TriggerSessionID = c.ID
			copied[i] = e
		}
		return nil
	})
	if err != nil {
		return baton.Chat{}, err
	}
	return s.create(scope, c, copied, nil)
}
