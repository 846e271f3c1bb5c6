package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// chatBuffer is the size of a run segment's bus subscription. A reader
// slower than the run is dropped by the bus when it is full (invariant 9);
// the iterator then subscribes again and fills the gap from the store, so
// only stream deltas (never stored) can be missed.
const chatBuffer = 1024

// storePage is how many recorded events one store read fills a gap with.
const storePage = 256

// Chat is a handle on one chat of a runtime: each of its methods sends one
// input and returns the events of the run segment it causes, as an
// iterator. It is meant for one goroutine at a time: a segment's iterator
// runs to its end before the next input is sent.
type Chat struct {
	rt       *Runtime
	scope    baton.Scope
	id       string
	workflow string
	last     int64 // the sequence of the last recorded event yielded

	subscribed func(*bus.Subscription) // in tests: sees each subscription made
	buffer     int                     // in tests: the subscription's buffer (0: chatBuffer)
}

// Chat returns a handle on a new chat of workflowName in scope. Nothing is
// stored until Start is ranged over.
func (rt *Runtime) Chat(scope baton.Scope, workflowName string) *Chat {
	return &Chat{rt: rt, scope: scope, id: baton.NewID(), workflow: workflowName}
}

// OpenChat returns a handle on an existing chat of scope: its next
// segment's iterator yields the recorded events that follow the chat's
// last one now.
func (rt *Runtime) OpenChat(ctx context.Context, scope baton.Scope, chatID string) (*Chat, error) {
	chat, err := rt.store.GetChat(ctx, scope, chatID)
	if err != nil {
		return nil, fmt.Errorf("open chat %s: %w", chatID, err)
	}
	return &Chat{rt: rt, scope: scope, id: chat.ID, workflow: chat.Workflow, last: chat.LastSequence}, nil
}

// ID returns the chat's id.
func (c *Chat) ID() string { return c.id }

// Scope returns the app and user the chat belongs to.
func (c *Chat) Scope() baton.Scope { return c.scope }

// LastSequence returns the sequence of the last recorded event the chat's
// iterators yielded.
func (c *Chat) LastSequence() int64 { return c.last }

// Start creates the chat (opts.ChatID is ignored: the handle's id is used)
// and returns the events of its first run segment.
//
// Like every iterator of Chat, it does nothing until ranged over: then it
// subscribes to the chat's events, sends the input, and yields each
// recorded chat.* event exactly once, in sequence order, with the stream.*
// deltas as they arrive, until the event that ends the segment —
// chat.input_request, a chat.tool_call awaiting the person (its
// pending_kind is set: answer it with RespondUI), chat.run_complete or
// chat.error — which it yields last. Decode payloads with
// baton.DecodePayload. A failure to send the input, the end of ctx (its
// error) or the bus closing is yielded as the error of the last pair.
// Breaking out of the loop early stops the subscription; ranging twice
// sends the input twice.
func (c *Chat) Start(ctx context.Context, opts baton.StartOptions) iter.Seq2[baton.Event, error] {
	opts.ChatID = c.id
	return c.segment(ctx, func(ctx context.Context) error {
		_, err := c.rt.engine.Start(ctx, c.scope, c.workflow, opts)
		return err
	})
}

// Send sends the person's message (a user_query from source "api") and
// returns the events of the run segment it causes (see Start).
func (c *Chat) Send(ctx context.Context, content string) iter.Seq2[baton.Event, error] {
	return c.segment(ctx, func(ctx context.Context) error {
		return c.rt.engine.Submit(ctx, c.scope, c.id, content, "api")
	})
}

// RespondUI answers the UI tool or secret form the chat waits for
// (uiEventID is the ui_event_id of its chat.tool_call; status is
// "success" or "cancelled"), and returns the events of the run segment it
// causes (see Start).
func (c *Chat) RespondUI(ctx context.Context, uiEventID, status string, data json.RawMessage) iter.Seq2[baton.Event, error] {
	return c.segment(ctx, func(ctx context.Context) error {
		return c.rt.engine.RespondUI(ctx, c.scope, c.id, uiEventID, status, data)
	})
}

// Resume resumes the chat (a retry after chat.error) and returns the
// events of the run segment it causes (see Start).
func (c *Chat) Resume(ctx context.Context) iter.Seq2[baton.Event, error] {
	return c.segment(ctx, func(ctx context.Context) error {
		return c.rt.engine.Resume(ctx, c.scope, c.id)
	})
}

// EndsSegment reports whether ev ends a run segment: the chat waits for
// the person (chat.input_request, a chat.tool_call with a pending_kind) or
// its run ended (chat.run_complete, chat.error).
func EndsSegment(ev *baton.Event) bool {
	switch ev.Type {
	case baton.TypeChatInputRequest, baton.TypeChatRunComplete, baton.TypeChatError:
		return true
	case baton.TypeChatToolCall:
		p, err := baton.DecodePayload[baton.ToolCallPayload](ev)
		return err == nil && p.PendingKind != ""
	}
	return false
}

// segment returns the iterator of one run segment: subscribe, send, then
// yield live events, filling any gap in the sequences from the store.
func (c *Chat) segment(ctx context.Context, send func(context.Context) error) iter.Seq2[baton.Event, error] {
	return func(yield func(baton.Event, error) bool) {
		// Subscribed before the input is sent: the first event cannot be
		// missed, and no goroutine is started (the loop reads here).
		sub, err := c.subscribe()
		if err != nil {
			yield(baton.Event{}, err)
			return
		}
		defer func() { sub.Close() }()
		if err := send(ctx); err != nil {
			yield(baton.Event{}, fmt.Errorf("chat %s: %w", c.id, err))
			return
		}
		for {
			// Checked first: a select with events waiting too would pick
			// at random, and the loop could run on after ctx ended.
			if err := ctx.Err(); err != nil {
				yield(baton.Event{}, err)
				return
			}
			var ev baton.Event
			var ok bool
			select {
			case <-ctx.Done():
				yield(baton.Event{}, ctx.Err())
				return
			case ev, ok = <-sub.C():
			}
			if !ok {
				if !errors.Is(sub.Err(), bus.ErrSlowSubscriber) {
					yield(baton.Event{}, fmt.Errorf("chat %s: events: %w", c.id, baton.ErrClosed))
					return
				}
				// Dropped for being slow: subscribe again, then read what
				// was recorded meanwhile from the store (what is recorded
				// after the new subscription comes on it too, and is
				// skipped by sequence).
				if sub, err = c.subscribe(); err != nil {
					yield(baton.Event{}, err)
					return
				}
				if done, cont := c.fill(ctx, 0, yield); done || !cont {
					return
				}
				continue
			}
			if ev.Sequence == 0 {
				// A stream delta (never stored) or an unrecorded event.
				if !yield(ev, nil) {
					return
				}
				continue
			}
			if ev.Sequence <= c.last {
				continue // yielded already, from the store
			}
			if ev.Sequence > c.last+1 {
				if done, cont := c.fill(ctx, ev.Sequence-1, yield); done || !cont {
					return
				}
			}
			if done, cont := c.yieldRecorded(ev, yield); done || !cont {
				return
			}
		}
	}
}

func (c *Chat) subscribe() (*bus.Subscription, error) {
	n := chatBuffer
	if c.buffer > 0 {
		n = c.buffer
	}
	sub, err := c.rt.bus.Subscribe([]string{"chat.*", "stream.*"}, bus.ForChat(c.id), bus.Buffer(n))
	if err != nil {
		return nil, fmt.Errorf("chat %s: subscribe: %w", c.id, err)
	}
	if c.subscribed != nil {
		c.subscribed(sub)
	}
	return sub, nil
}

// yieldRecorded yields a recorded event and notes its sequence. done says
// the segment ended with it, cont whether the caller still ranges.
func (c *Chat) yieldRecorded(ev baton.Event, yield func(baton.Event, error) bool) (done, cont bool) {
	c.last = ev.Sequence
	if !yield(ev, nil) {
		return false, false
	}
	return EndsSegment(&ev), true
}

// fill yields the recorded events after c.last from the store, up to
// sequence upTo (0: all there are).
func (c *Chat) fill(ctx context.Context, upTo int64, yield func(baton.Event, error) bool) (done, cont bool) {
	for ev, err := range baton.EventsAfter(ctx, c.rt.store, c.scope, c.id, c.last, storePage) {
		if err != nil {
			yield(baton.Event{}, fmt.Errorf("chat %s: events after %d: %w", c.id, c.last, err))
			return false, false
		}
		if upTo > 0 && ev.Sequence > upTo {
			return false, true
		}
		if done, cont := c.yieldRecorded(ev, yield); done || !cont {
			return done, cont
		}
	}
	return false, true
}
