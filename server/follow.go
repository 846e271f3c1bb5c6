package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
)

// followerKey is the context key of the principal a follow acts for.
type followerKey struct{}

// withFollower returns ctx carrying p, the principal the protocol adapter
// serving the request authenticated: follow re-checks its key every
// Config.KeyRecheck, as the WebSocket and SSE streams do, so that revoking
// a key ends the adapters' streams too. A context is the carrier so that
// the adapters' layers between authentication and follow need not change.
func withFollower(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, followerKey{}, p)
}

// Followed is one event a client of a chat may see, as the protocol
// adapters (AG-UI, OpenAI Chat Completions, A2A, MCP) receive it from
// follow: the same filtered envelope a WebSocket or SSE stream sends, with
// its sequence (0 for a stream delta, which is never stored).
type Followed struct {
	Sequence int64
	// Subscription counts the times follow subscribed again after falling
	// behind (0 until then). Stream deltas sent between two subscriptions
	// are lost: a message whose deltas span two subscriptions has a gap,
	// which its recorded chat.text fills.
	Subscription int
	baton.Envelope
}

// EndsSegment reports whether the event ends a run segment for a client:
// the chat now waits for the person (an input request, or a UI tool or
// form awaiting a response), or its run ended (completed or failed).
// (runtime.EndsSegment says the same of an unfiltered event.)
func (f *Followed) EndsSegment() bool {
	switch f.Type {
	case baton.TypeChatInputRequest, baton.TypeChatRunComplete, baton.TypeChatError:
		return true
	case baton.TypeChatToolCall:
		var p struct {
			PendingKind string `json:"pending_kind"`
		}
		return json.Unmarshal(f.Data, &p) == nil && p.PendingKind != ""
	}
	return false
}

// errStopFollow is what a follow callback returns to end the follow
// without an error (follow returns nil).
var errStopFollow = errors.New("server: stop following")

// follow delivers chat's events a client may see, in scope, after
// sequence last, to fn: first those in the store, then the live ones from
// the hub, as one gap-free, duplicate-free sequence (the cursor of the
// WebSocket and SSE streams), stream deltas included. It returns when fn
// returns an error (nil for errStopFollow), when ctx ends, or when the chat
// is deleted (ENOTFOUND) or the server shuts down (ErrClosed). When ctx
// carries the adapter's principal (withFollower), follow re-checks its key
// every Config.KeyRecheck and returns errRevoked once it is revoked; a
// store that cannot answer keeps the follow, as for the other streams.
//
// A follower that falls behind is not cut off as a WebSocket is (the
// adapters' clients cannot be told to replay): it subscribes again and
// replays from the store what it missed, deltas excepted, which the
// recorded events carry in full (Followed.Subscription tells a delta of a
// message that lost some).
//
// fn must not keep the envelope's Data beyond the call unless it copies
// it: Data is decoded anew for each call, so it may keep it (it is not a
// pooled buffer).
func (s *Server) follow(ctx context.Context, scope baton.Scope, chat baton.Chat, last int64, fn func(*Followed) error) error {
	return s.followEnvelopes(ctx, scope, chat, last, func(seq int64, _ string, envelope []byte, subscription int) error {
		var ev Followed
		if err := json.Unmarshal(envelope, &ev.Envelope); err != nil {
			return fmt.Errorf("follow chat %s: decode envelope: %w", chat.ID, err)
		}
		ev.Sequence, ev.Subscription = seq, subscription
		return fn(&ev)
	})
}

// followEnvelopes is follow without the decoding of each envelope: fn
// receives the event's sequence, its type, its encoded envelope, as the
// hub holds them, and the subscription it came on (Followed.Subscription).
// An adapter that decodes the envelope's data into its own struct in one
// pass saves follow's decoding into a Followed, which copies the data only
// to have it decoded again: on a streamed reply, where every delta is an
// envelope, that second pass was the adapters' largest cost after the
// network.
//
// envelope is valid only during the call (it may be a pooled buffer): fn
// must copy what it keeps.
func (s *Server) followEnvelopes(ctx context.Context, scope baton.Scope, chat baton.Chat, last int64, fn func(seq int64, typ string, envelope []byte, subscription int) error) error {
	return s.followBatched(ctx, scope, chat, last, nil, fn)
}

// batcher is a follow's writer that coalesces writes: between hold and
// release its writes wait for release's flush (eventStream).
type batcher interface {
	hold()
	release() error
}

// followBatched is followEnvelopes for a writer that coalesces: the frames
// of one delivery from the hub — all waiting already when the follow woke —
// and the events of a replay are written between b.hold and b.release, so
// that they reach the client in one flush, the last of them as soon as it
// is written. A frame that arrives alone is flushed alone, at once. b may
// be nil: fn then flushes as it likes.
func (s *Server) followBatched(ctx context.Context, scope baton.Scope, chat baton.Chat, last int64, b batcher, fn func(seq int64, typ string, envelope []byte, subscription int) error) error {
	subs := 0
	send := func(f *frame) error { return fn(f.seq, f.typ, f.data, subs) }
	p, _ := ctx.Value(followerKey{}).(principal)
	done := func(err error) error {
		if errors.Is(err, errStopFollow) {
			return nil
		}
		return err
	}
	for {
		live, err := s.subscribeLive(scope, chat, last)
		if err != nil {
			return err
		}
		err = s.followLive(ctx, p, live, b, send)
		last = live.cur.last
		live.close()
		if err != nil {
			return done(err)
		}
		switch live.kickReason() {
		case kickSlow, kickResync:
			subs++
			continue // subscribe again; the replay fills what was missed
		case kickDeleted:
			return baton.Errorf(baton.ENOTFOUND, "chat %s was deleted", chat.ID)
		default:
			return fmt.Errorf("follow chat %s: server shutting down: %w", chat.ID, baton.ErrClosed)
		}
	}
}

// followLive replays and then delivers live frames until the hub kicks the
// subscriber (nil: the caller reads why) or send or ctx fails.
func (s *Server) followLive(ctx context.Context, p principal, live *liveStream, b batcher, send func(*frame) error) error {
	if err := live.checkChat(ctx); err != nil {
		return err
	}
	holdBatch(b)
	if err := releaseBatch(b, live.replay(ctx, send)); err != nil {
		return err
	}
	var recheck <-chan time.Time // nil: no key to re-check (dev mode)
	if p.keyHash != "" {
		t := time.NewTicker(s.cfg.KeyRecheck)
		defer t.Stop()
		recheck = t.C
	}
	for {
		select {
		case <-recheck:
			if err := s.recheckKey(ctx, p); errors.Is(err, errRevoked) {
				return err
			}
		case <-live.ready():
			holdBatch(b)
			if err := releaseBatch(b, live.deliver(ctx, send)); err != nil {
				return err
			}
		case <-live.kicked():
			// Frames queued before the kick are dropped with the
			// subscription; the next subscription's replay has them.
			return nil
		case <-s.ctx.Done():
			return fmt.Errorf("follow: server shutting down: %w", baton.ErrClosed)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// holdBatch holds b, if there is one, for the writes of a delivery.
func holdBatch(b batcher) {
	if b != nil {
		b.hold()
	}
}

// releaseBatch releases b after the writes of a delivery, which returned
// err: it flushes them even after a failed write, or one that stops the
// follow (what was written before it is the client's). A failed flush is
// the error then, unless a write failed first.
func releaseBatch(b batcher, err error) error {
	if b == nil {
		return err
	}
	if ferr := b.release(); ferr != nil && (err == nil || errors.Is(err, errStopFollow)) {
		return ferr
	}
	return err
}
