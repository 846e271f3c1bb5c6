package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// errRunCancelled is the cause of a run's context cancelled by run.cancel.
var errRunCancelled = errors.New("the run was cancelled")

// cancelBuffer is the buffer of the engine's run.cancel subscription.
const cancelBuffer = 1024

// maxPendingCancels bounds the cancels kept for runs not started yet.
const maxPendingCancels = 4096

// cancels holds the cancel functions of the runs in progress on this
// instance and the cancels that arrived before their run started.
type cancels struct {
	mu   sync.Mutex
	runs map[string]context.CancelCauseFunc // chat → its run's cancel
	// pending holds, per chat, the ids of the cancels seen and not used,
	// their lane events not handled yet, oldest first: a run that starts
	// takes the oldest (the one queued on the lane right after it), and a
	// lane event removes its own id only, so a second cancel seen before
	// the first one's lane event still stops the run queued between them.
	pending map[string][]string
	// stopped holds the ids of the cancels that stopped a run, until their
	// lane event; laned those whose lane event was handled before this
	// instance's watcher saw them (the bus delivers the two in either
	// order): such a cancel comes too late for every run queued before it,
	// and must stop no later one.
	stopped, laned idRing
	sub            *bus.Subscription
	closing        bool // set by stopWatchingCancels: subscribe no more
	done           chan struct{}
}

// maxPendingPerChat bounds the cancels kept for one chat's runs not
// started yet. Each cancel stops one run, the oldest cancel the first run
// to start; past the bound the oldest cancel is dropped, so with more than
// this many cancels waiting the last queued run is not stopped.
const maxPendingPerChat = 16

// idRing is a set of cancel ids that holds at most maxPendingCancels of
// them, forgetting the oldest added first. An id is forgotten only after
// maxPendingCancels newer ones: far more than the run.cancel subscription
// may lag behind the lanes (cancelBuffer), so a forgotten laned id is never
// seen late by the watcher and taken for a live cancel, as emptying the
// whole set at once could.
type idRing struct {
	m    map[string]bool
	ring []string // the ids in the order added; a deleted id keeps its slot
	next int      // the slot written next, holding the oldest once full
}

func (r *idRing) has(id string) bool { return r.m[id] }

func (r *idRing) delete(id string) { delete(r.m, id) }

func (r *idRing) add(id string) {
	if r.m == nil {
		r.m = map[string]bool{}
	}
	if len(r.ring) < maxPendingCancels {
		r.ring = append(r.ring, id)
	} else {
		delete(r.m, r.ring[r.next]) // the oldest, if still there
		r.ring[r.next] = id
		r.next = (r.next + 1) % maxPendingCancels
	}
	r.m[id] = true
}

// len returns how many ids the set holds.
func (r *idRing) len() int { return len(r.m) }

// Cancel asks the run of chatID in progress to stop (see baton.TypeRunCancel). It
// returns once the request is published, not once the run stopped: the
// chat.run_complete with status "cancelled" says so. A chat with no run in
// progress is left as it is. Callers check the chat's scope first.
func (e *Engine) Cancel(ctx context.Context, scope baton.Scope, chatID string) error {
	ev := baton.NewInput(scope, baton.TypeRunCancel, chatID, nil)
	ev.Metadata.Source = baton.SourceUser
	return e.publishEvent(ctx, ev)
}

// watchCancels subscribes to run.cancel and starts the goroutine that
// applies them; Close stops it.
func (e *Engine) watchCancels() error {
	e.cancels.runs = map[string]context.CancelCauseFunc{}
	e.cancels.pending = map[string][]string{}
	sub, err := e.bus.Subscribe([]string{baton.TypeRunCancel}, bus.Buffer(cancelBuffer))
	if err != nil {
		return fmt.Errorf("engine: watch run.cancel: %w", err)
	}
	e.cancels.sub = sub
	e.cancels.done = make(chan struct{})
	go func() {
		defer close(e.cancels.done)
		for {
			for ev := range sub.C() {
				e.cancelRun(ev.ChatID(), ev.ID)
			}
			// Dropped for falling behind (it never should: applying a cancel
			// is a map lookup): subscribe again, unless the bus or the
			// engine closed it.
			if err := sub.Err(); err == nil || errors.Is(err, baton.ErrClosed) {
				return
			}
			e.log.Warn("engine: the run.cancel subscription fell behind; subscribing again", "err", sub.Err())
			next, err := e.bus.Subscribe([]string{baton.TypeRunCancel}, bus.Buffer(cancelBuffer))
			if err != nil {
				return
			}
			e.cancels.mu.Lock()
			if e.cancels.closing {
				e.cancels.mu.Unlock()
				next.Close()
				return
			}
			e.cancels.sub = next
			e.cancels.mu.Unlock()
			sub = next
		}
	}()
	return nil
}

// stopWatchingCancels ends the run.cancel subscription and its goroutine.
func (e *Engine) stopWatchingCancels() {
	e.cancels.mu.Lock()
	sub := e.cancels.sub
	e.cancels.closing = true
	e.cancels.mu.Unlock()
	if sub == nil {
		return
	}
	sub.Close()
	<-e.cancels.done
}

// cancelRun cancels the chat's run in progress here, or, when none is,
// remembers the cancel for a run about to start: one queued on the chat's
// lane before the cancel (its lane event, handleCancel, forgets it).
func (e *Engine) cancelRun(chatID, eventID string) {
	e.cancels.mu.Lock()
	defer e.cancels.mu.Unlock()
	if e.cancels.laned.has(eventID) {
		// Its lane turn has passed: a run in progress now began after it.
		e.cancels.laned.delete(eventID)
		return
	}
	if cancel, ok := e.cancels.runs[chatID]; ok {
		cancel(errRunCancelled)
		e.cancels.stopped.add(eventID)
		return
	}
	ids := e.cancels.pending[chatID]
	if ids == nil && len(e.cancels.pending) >= maxPendingCancels {
		// Forgetting cancels loses them (a queued run goes on) but never
		// makes one stop a run queued after it.
		clear(e.cancels.pending)
	}
	if len(ids) >= maxPendingPerChat {
		ids = slices.Delete(ids, 0, 1)
	}
	e.cancels.pending[chatID] = append(ids, eventID)
}

// handleCancel is the lane's handler of run.cancel: every run queued before
// it has had its chance to be cancelled, so a cancel not used by then is
// forgotten (it must not stop a later run). Only this cancel is: another
// of the chat, seen since, still stops the run queued before it.
func (e *Engine) handleCancel(_ context.Context, ev baton.Event) error {
	e.cancels.mu.Lock()
	defer e.cancels.mu.Unlock()
	chatID := ev.ChatID()
	seen := e.cancels.stopped.has(ev.ID)
	e.cancels.stopped.delete(ev.ID)
	if ids := e.cancels.pending[chatID]; slices.Contains(ids, ev.ID) {
		seen = true
		if ids = slices.DeleteFunc(ids, func(id string) bool { return id == ev.ID }); len(ids) == 0 {
			delete(e.cancels.pending, chatID)
		} else {
			e.cancels.pending[chatID] = ids
		}
	}
	if !seen {
		e.cancels.laned.add(ev.ID) // for the watcher, when it sees it
	}
	return nil
}

// cancellable returns a context for a run of chatID that run.cancel stops
// (already stopped when a cancel came first), and what to call when the
// run returns.
func (e *Engine) cancellable(ctx context.Context, chatID string) (context.Context, func()) {
	runCtx, cancel := context.WithCancelCause(ctx)
	e.cancels.mu.Lock()
	e.cancels.runs[chatID] = cancel
	if ids := e.cancels.pending[chatID]; len(ids) > 0 {
		// The oldest: the run is the one queued before it. The newer ones
		// wait for the runs queued after it.
		if len(ids) == 1 {
			delete(e.cancels.pending, chatID)
		} else {
			e.cancels.pending[chatID] = ids[1:]
		}
		e.cancels.stopped.add(ids[0]) // until its lane event
		cancel(errRunCancelled)
	}
	e.cancels.mu.Unlock()
	return runCtx, func() {
		e.cancels.mu.Lock()
		delete(e.cancels.runs, chatID)
		e.cancels.mu.Unlock()
		cancel(nil)
	}
}

// wasCancelled reports whether runCtx, made by cancellable under ctx, was
// cancelled by run.cancel (and not by a shutdown or a lost lease).
func wasCancelled(ctx, runCtx context.Context) bool {
	return ctx.Err() == nil && errors.Is(context.Cause(runCtx), errRunCancelled)
}

// recordCancelled records the end of a cancelled run: chat.run_complete with
// status "cancelled" and the chat's status cancelled. The state is read
// afresh from the store (the run may have stopped between a step and its
// record); a chat that ended, paused or stopped meanwhile is left as it is.
func (e *Engine) recordCancelled(ctx context.Context, r *run) error {
	fresh, err := e.load(ctx, r.scope, r.st.chat.ID, false)
	if err != nil {
		return fmt.Errorf("record the cancel of chat %s: %w", r.st.chat.ID, err)
	}
	fresh.fence = r.fence
	st := fresh.st
	if st.done || st.isFailed() || len(st.waitingUI()) > 0 || st.chat.Status != baton.ChatRunning {
		return nil
	}
	fresh.logger().Info("engine: run cancelled")
	status := baton.ChatCancelled
	ev := baton.NewChatEvent(baton.TypeChatRunComplete, st.chat.ID, "", baton.RunCompletePayload{
		Kind: "run_complete", Status: "cancelled", Reason: "stopped by the person", TotalTurns: st.turns,
	})
	return fresh.record(ctx, []baton.Event{ev}, &baton.ChatUpdate{Status: &status})
}

// runCancelled reports whether a chat.run_complete payload is a cancelled run's.
func runCancelled(payload json.RawMessage) bool {
	var p struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(payload, &p) == nil && p.Status == "cancelled"
}
