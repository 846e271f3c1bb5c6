package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// One owner per chat across instances. When Config.InstanceID is set,
// several engines may share one store (PostgreSQL): every run first takes
// the chat's lease in the store (instance id, expiry, and a fencing token
// that increases on every takeover), renews it while it runs, and stamps
// every append with the token, so the store refuses an append from an owner
// that lost the lease — one that stalled past its expiry and woke up after
// another instance took over can never append. A run that cannot get the
// lease because another live instance runs the chat waits for it (the
// other run is short: it ends at the chat's next pause). Engine.Run also
// looks for running chats whose owner's lease expired (the instance died)
// and resumes them here, so a dead instance's chats move on by themselves,
// with side effects still exactly once through the effect ledger.
//
// Without an instance id there are no leases: one process owns its store.

// DefaultLeaseTTL is how long a lease lasts without renewal.
const DefaultLeaseTTL = 15 * time.Second

// DefaultStartGrace is how long a chat never started is left to its start
// input before a takeover starts it without it: longer than natsbridge's
// default drain delay (30 s for NATS to remove a dead instance's consumer,
// then up to 30 s AckWait for what it had pulled).
const DefaultStartGrace = 90 * time.Second

// held is a lease a run holds, with its renewal goroutine.
type held struct {
	token int64
	stop  context.CancelFunc
	done  chan struct{}
}

// acquire takes chatID's lease for this instance, waiting while another
// live instance holds it, and renews it until release. lost is cancelled if
// a renewal finds the lease taken over: the run must stop.
//
// The chat is marked running (for sweepTakeovers) before the lease is
// taken, and unmarked after it is freed (release): in between, a live lease
// under this instance's id is never taken for a previous life's.
func (e *Engine) acquire(ctx context.Context, chatID string) (h *held, runCtx context.Context, err error) {
	e.markRunning(chatID, 1)
	defer func() {
		if err != nil {
			e.markRunning(chatID, -1)
		}
	}()
	backoff := 10 * time.Millisecond
	var lease baton.Lease
	var renewed time.Time // the lease runs until renewed+TTL, at the latest
	for {
		var err error
		renewed = time.Now()
		lease, err = e.store.AcquireLease(ctx, chatID, e.instance, e.leaseTTL)
		if err == nil {
			break
		}
		if !errors.Is(err, baton.ErrConflict) {
			return nil, nil, fmt.Errorf("lease of chat %s: %w", chatID, err)
		}
		select { // another instance runs the chat: wait for its run to end
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, e.leaseTTL/4)
	}
	runCtx, lost := context.WithCancelCause(ctx)
	h = &held{token: lease.Token, stop: func() { lost(context.Canceled) }, done: make(chan struct{})}
	go func() { // owned by the run: stopped by release
		defer close(h.done)
		tick := time.NewTicker(e.leaseTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				// A renewal that does not answer before the lease would run
				// out is given up then: a store that hangs (no free
				// connection, packets dropped) must not keep the run going
				// past its lease, while another instance takes the chat
				// over and may run its tools again.
				at := time.Now()
				rctx, cancel := context.WithDeadline(runCtx, renewed.Add(e.leaseTTL))
				_, err := e.store.RenewLease(rctx, chatID, e.instance, h.token, e.leaseTTL)
				cancel()
				switch {
				case err == nil:
					renewed = at // renewed no earlier than it was asked
				case runCtx.Err() != nil:
					return
				case errors.Is(err, baton.ErrConflict) || time.Since(renewed) >= e.leaseTTL:
					// Taken over, or expired while the store did not answer:
					// another instance may run the chat now.
					e.log.Warn("engine: lost the chat's lease; stopping its run", "chat_id", chatID, "err", err)
					lost(errLeaseLost)
					return
				default:
					// A transient failure (a pool timeout, a network blip)
					// while the lease still runs: try again at the next tick
					// rather than stop a run that may be inside a tool call.
					e.log.Warn("engine: could not renew the chat's lease; trying again", "chat_id", chatID, "err", err)
				}
			}
		}
	}()
	return h, runCtx, nil
}

// leased takes chatID's lease when this engine shares its store (an
// instance id; without one it returns ctx and no lease). It returns the
// run's context, cancelled if a renewal finds the lease taken over, and end,
// which the handler defers with its error: end frees the lease and marks
// the error of a run whose lease was taken over as errLeaseLost, so that
// againOnLeaseLoss handles the event again. The engine's inputs and the
// event-handler agent's events share it.
func (e *Engine) leased(ctx context.Context, chatID string) (context.Context, *held, func(*error), error) {
	if e.instance == "" {
		return ctx, nil, func(*error) {}, nil
	}
	lease, runCtx, err := e.acquire(ctx, chatID)
	if err != nil {
		return ctx, nil, nil, err
	}
	return runCtx, lease, func(err *error) {
		if *err != nil && errors.Is(context.Cause(runCtx), errLeaseLost) {
			*err = fmt.Errorf("%w: %w", errLeaseLost, *err)
		}
		e.release(chatID, lease)
	}, nil
}

// release stops renewing and frees the lease (best effort: an expired one
// frees itself).
func (e *Engine) release(chatID string, h *held) {
	if h == nil {
		return
	}
	h.stop()
	<-h.done
	defer e.markRunning(chatID, -1) // after the lease is freed (see acquire)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.store.ReleaseLease(ctx, chatID, e.instance, h.token); err != nil && !errors.Is(err, baton.ErrConflict) {
		e.log.Warn("engine: release lease", "chat_id", chatID, "err", err)
	}
}

// markRunning counts a run of chatID in (+1) or out (-1) of e.running.
func (e *Engine) markRunning(chatID string, d int) {
	e.runningMu.Lock()
	defer e.runningMu.Unlock()
	if n := e.running[chatID] + d; n > 0 {
		e.running[chatID] = n
	} else {
		delete(e.running, chatID)
	}
}

// sweepTakeovers resumes running chats whose lease is free or expired: their
// owner died mid-run. It only reads the lease — taking it to test it would
// race with this instance's own runs (a run that just took the lease would
// see it released under it) — and publishes run.resume; the resumed run
// takes the lease properly, and if several instances resume one chat at
// once the lease runs them one after the other, the later ones finding the
// work done.
//
// A live lease held under this instance's own id by no run of this process
// is this instance's previous life: it was restarted with the same id
// (kill -9, a crash) while running the chat. It is taken back at once —
// AcquireLease extends an owner's own lease — instead of after it expires.
// A run of this process is in running from before it takes its lease until
// after it frees it, so its own live lease is never taken for that.
func (e *Engine) sweepTakeovers(ctx context.Context) error {
	chats, err := e.store.ChatsByStatus(ctx, baton.ChatRunning, 10000)
	if err != nil {
		return err
	}
	for _, c := range chats {
		e.runningMu.Lock()
		mine := e.running[c.ID] > 0
		e.runningMu.Unlock()
		if e.workflows[c.Workflow] == nil || mine {
			continue // not ours to run, or running here now
		}
		if c.LastSequence == 0 && time.Since(c.CreatedAt) < e.startGrace {
			// Created, never started: its run.start, with the person's
			// first message, is still on its way (queued for a dead
			// instance, drained by another after a while). A resume now
			// would start the chat without that message.
			continue
		}
		lease, err := e.store.GetLease(ctx, c.ID)
		if err != nil {
			return err
		}
		live := lease.Owner != "" && time.Now().Before(lease.Expires)
		previousLife := live && lease.Owner == e.instance
		if !previousLife {
			if time.Since(c.UpdatedAt) < e.leaseTTL {
				// Changed within a TTL: a chat just started, or just
				// written by its owner, has a live process behind it; a
				// dead owner's chat stops changing.
				continue
			}
			if live {
				continue // a live owner runs it
			}
		}
		e.takeovers.Add(1)
		if previousLife {
			e.log.Info("engine: taking back a running chat this instance held before its restart", "chat_id", c.ID, "instance", e.instance)
		} else {
			e.log.Info("engine: taking over a running chat whose owner's lease expired", "chat_id", c.ID, "instance", e.instance)
		}
		if err := e.Resume(ctx, baton.Scope{App: c.App, User: c.User}, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// InstanceID returns this engine's instance id ("" without leases).
func (e *Engine) InstanceID() string { return e.instance }

// LeasesHeld returns how many chats this instance runs under a lease now.
func (e *Engine) LeasesHeld() int {
	e.runningMu.Lock()
	defer e.runningMu.Unlock()
	return len(e.running)
}

// LeaseLosses returns how many runs lost their chat's lease midway: a
// renewal came later than the lease's TTL (an overloaded or paused
// process), so another instance took the chat over.
func (e *Engine) LeaseLosses() int64 { return e.leaseLosses.Load() }

// StaleStates returns how many runs found that the chat's state this
// engine had cached was behind the store, and handled their event again
// from the store: without leases, another process wrote to a chat this
// one runs, which the store's single owner rules out (0 when it holds).
func (e *Engine) StaleStates() int64 { return e.staleStates.Load() }

// Takeovers returns how many chats this instance took over from dead owners.
func (e *Engine) Takeovers() int64 { return e.takeovers.Load() }

// IsInput reports whether ev is an input the chat's owner must handle, for
// a router that sends inputs to the instance owning the chat (package
// natsbridge): every event of a chat that is published to the bus — a
// person's message, a UI response, a run start, resume or cancel, an external or
// background-task event — except the facts the engine publishes about its
// own run (tool.*, session.created, session.updated), its coalesced wakes
// (scheduled on the instance that recorded the events they follow) and
// recorded or streamed chat events. The rules that observe the session
// facts run where the chat runs, which is where they are published.
func IsInput(ev baton.Event) bool {
	switch ev.Type {
	case baton.TypeRunWake, baton.TypeSessionCreated, baton.TypeSessionUpdated:
		return false
	}
	if ev.ChatID() == "" {
		return false
	}
	for _, own := range []string{"tool.", "chat.", "stream."} {
		if strings.HasPrefix(ev.Type, own) {
			return false
		}
	}
	return true
}

// maxLeaseRetries bounds how often one event is handled again after its run
// lost the chat's lease.
const maxLeaseRetries = 5

// handleLeased is the engine rule's handler: handle, and with leases, handle
// again when the run lost the chat's lease midway — its renewal came late
// (a loaded or paused process) and another instance took the chat over, so
// the store refused the run's next append. An input whose run lost the
// lease before recording it would otherwise be dropped; handled again, the
// run waits for the new owner to finish, reloads the chat and records the
// input, or skips it if it was recorded after all (the chat's state knows
// its inputs by event id). For run.start, run.resume and wakes a second
// pass finds the work done and returns.
func (e *Engine) handleLeased(ctx context.Context, ev baton.Event) error {
	return e.againOnLeaseLoss(ctx, ev, e.handle)
}

// againOnLeaseLoss runs handle, and with leases runs it again (up to
// maxLeaseRetries times) while it fails because its run lost the chat's
// lease: the engine's inputs (handleLeased) and the event-handler agent's
// events alike.
//
// It also runs handle once more when it failed with baton.ErrStale: the run
// took its chat's state from the cache on trust (load, without leases) and
// the store had moved past it. The state was dropped (a run that fails
// leaves none), so the second run rebuilds it from the store.
func (e *Engine) againOnLeaseLoss(ctx context.Context, ev baton.Event, handle func(context.Context, baton.Event) error) error {
	stale := false
	for attempt := 0; ; attempt++ {
		err := handle(ctx, ev)
		if err != nil && !stale && ctx.Err() == nil && errors.Is(err, baton.ErrStale) {
			stale = true
			e.staleStates.Add(1)
			e.log.Warn("engine: the chat's cached state was behind the store (another process wrote to it); handling the event again from the store",
				"chat_id", ev.ChatID(), "event_id", ev.ID, "event_type", ev.Type, "err", err)
			attempt--
			continue
		}
		if err == nil || e.instance == "" || ctx.Err() != nil || attempt == maxLeaseRetries || !lostLease(err) {
			return err
		}
		e.leaseLosses.Add(1)
		e.log.Warn("engine: the run lost the chat's lease; handling the event again under a new one",
			"chat_id", ev.ChatID(), "event_id", ev.ID, "event_type", ev.Type, "attempt", attempt+1, "err", err)
	}
}

// errLeaseLost is the cause of a run's context cancelled because a
// renewal found its lease taken over.
var errLeaseLost = errors.New("the chat's lease was taken over")

// lostLease reports whether err says a run lost its chat's lease: the store
// refused a fenced append, or the renewal failed and cancelled the run
// (leased adds errLeaseLost then).
func lostLease(err error) bool {
	return errors.Is(err, baton.ErrFenced) || errors.Is(err, errLeaseLost)
}
