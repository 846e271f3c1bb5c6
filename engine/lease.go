package engine

import (
	"context"
	"errors"
	"fmt"
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

// leaseStore is the part of the store leases need.
type leaseStore interface {
	baton.LeaseStore
	ChatsByStatus(ctx context.Context, status baton.ChatStatus, limit int) ([]baton.Chat, error)
}

// held is a lease a run holds, with its renewal goroutine.
type held struct {
	token int64
	stop  context.CancelFunc
	done  chan struct{}
}

// acquire takes chatID's lease for this instance, waiting while another
// live instance holds it, and renews it until release. lost is cancelled if
// a renewal finds the lease taken over: the run must stop.
func (e *Engine) acquire(ctx context.Context, chatID string) (*held, context.Context, error) {
	ls := e.leases
	backoff := 10 * time.Millisecond
	var lease baton.Lease
	for {
		var err error
		lease, err = ls.AcquireLease(ctx, chatID, e.instance, e.leaseTTL)
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
	e.runningMu.Lock()
	e.running[chatID] = true
	e.runningMu.Unlock()
	runCtx, lost := context.WithCancel(ctx)
	h := &held{token: lease.Token, stop: lost, done: make(chan struct{})}
	go func() { // owned by the run: stopped by release
		defer close(h.done)
		tick := time.NewTicker(e.leaseTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				if _, err := ls.RenewLease(runCtx, chatID, e.instance, h.token, e.leaseTTL); err != nil && runCtx.Err() == nil {
					e.log.Warn("engine: lost the chat's lease; stopping its run", "chat_id", chatID, "err", err)
					lost()
					return
				}
			}
		}
	}()
	return h, runCtx, nil
}

// release stops renewing and frees the lease (best effort: an expired one
// frees itself).
func (e *Engine) release(chatID string, h *held) {
	if h == nil {
		return
	}
	h.stop()
	<-h.done
	e.runningMu.Lock()
	delete(e.running, chatID)
	e.runningMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.leases.ReleaseLease(ctx, chatID, e.instance, h.token); err != nil && !errors.Is(err, baton.ErrConflict) {
		e.log.Warn("engine: release lease", "chat_id", chatID, "err", err)
	}
}

// sweepTakeovers resumes running chats whose lease is free or expired: their
// owner died mid-run. The lease is taken only to test it, and given back at
// once; the resumed run takes it properly.
func (e *Engine) sweepTakeovers(ctx context.Context) error {
	chats, err := e.leases.ChatsByStatus(ctx, baton.ChatRunning, 10000)
	if err != nil {
		return err
	}
	for _, c := range chats {
		e.runningMu.Lock()
		mine := e.running[c.ID]
		e.runningMu.Unlock()
		if e.workflows[c.Workflow] == nil || mine {
			continue // not ours to run, or running here now
		}
		lease, err := e.leases.AcquireLease(ctx, c.ID, e.instance, e.leaseTTL)
		if err != nil {
			continue // a live owner runs it
		}
		_ = e.leases.ReleaseLease(ctx, c.ID, e.instance, lease.Token)
		e.takeovers.Add(1)
		e.log.Info("engine: taking over a running chat whose owner's lease expired", "chat_id", c.ID, "instance", e.instance)
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

// Takeovers returns how many chats this instance took over from dead owners.
func (e *Engine) Takeovers() int64 { return e.takeovers.Load() }
