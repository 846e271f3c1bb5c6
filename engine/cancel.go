package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	mu      sync.Mutex
	runs    map[string]context.CancelCauseFunc // chat → its run's cancel
	pending map[string]string                  // chat → the id of a cancel seen, its lane event not handled yet
	// stopped holds the ids of the cancels that stopped a run, until their
	// lane event; laned those whose lane event was handled before this
	// instance's watcher saw them (the bus delivers the two in either
	// order): such a cancel comes too late for every run queued before it,
	// and must stop no later one.
	stopped, laned map[string]bool
	sub            *bus.Subscription
	closing        bool // set by stopWatchingCancels: subscribe no more
	done           chan struct{}
}

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
	e.cancels.pending = map[string]string{}
	e.cancels.stopped = map[string]bool{}
	e.cancels.laned = map[string]bool{}
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
	if e.cancels.laned[eventID] {
		// Its lane turn has passed: a run in progress now began after it.
		delete(e.cancels.laned, eventID)
		return
	}
	if cancel, ok := e.cancels.runs[chatID]; ok {
		cancel(errRunCancelled)
		remember(e.cancels.stopped, eventID)
		return
	}
	if len(e.cancels.pending) >= maxPendingCancels {
		clear(e.cancels.pending)
	}
	e.cancels.pending[chatID] = eventID
}

// remember adds id to a bounded set of cancel ids.
func remember(set map[string]bool, id string) {
	if len(set) >= maxPendingCancels {
		clear(set)
	}
	set[id] = true
}

// handleCancel is the lane's handler of run.cancel: every run queued before
// it has had its chance to be cancelled, so a cancel not used by then is
// forgotten (it must not stop a later run).
func (e *Engine) handleCancel(_ context.Context, ev baton.Event) error {
	e.cancels.mu.Lock()
	defer e.cancels.mu.Unlock()
	seen := e.cancels.pending[ev.ChatID()] == ev.ID || e.cancels.stopped[ev.ID]
	delete(e.cancels.pending, ev.ChatID())
	delete(e.cancels.stopped, ev.ID)
	if !seen {
		remember(e.cancels.laned, ev.ID) // for the watcher, when it sees it
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
	if id, ok := e.cancels.pending[chatID]; ok {
		delete(e.cancels.pending, chatID)
		remember(e.cancels.stopped, id) // until its lane event
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
