package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/batonhq/baton"
)

// TestCancels_PendingUntilTheLaneEvent: a cancel seen while no run of the
// chat is in progress stops the next run to start (one queued on the
// chat's lane before the cancel) — but only until the cancel's own lane
// event is handled: a run queued after it is not stopped. A cancel of a run
// in progress stops it, with a cause that tells it from a shutdown.
func TestCancels_PendingUntilTheLaneEvent(t *testing.T) {
	e := newCancelsEngine()
	ctx := context.Background()
	lane := baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)

	e.cancelRun("c1", lane.ID) // no run yet: kept for the queued one
	runCtx, done := e.cancellable(ctx, "c1")
	if !wasCancelled(ctx, runCtx) {
		t.Fatal("the run queued before the cancel was not stopped")
	}
	done()
	_ = e.handleCancel(ctx, lane)

	second := baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)
	e.cancelRun("c1", second.ID) // seen after its run ended…
	_ = e.handleCancel(ctx, second)
	runCtx, done = e.cancellable(ctx, "c1") // …the next run is not stopped
	if runCtx.Err() != nil {
		t.Fatal("a run queued after the cancel's lane event was stopped")
	}
	third := baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)
	e.cancelRun("c1", third.ID) // a run in progress
	if !wasCancelled(ctx, runCtx) {
		t.Fatal("the run in progress was not stopped")
	}
	done()
	_ = e.handleCancel(ctx, third)

	// The lane event handled before the watcher sees the cancel (the bus
	// delivers them in either order): the late sighting stops no later run.
	fourth := baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)
	_ = e.handleCancel(ctx, fourth)
	e.cancelRun("c1", fourth.ID)
	runCtx, done = e.cancellable(ctx, "c1")
	if runCtx.Err() != nil {
		t.Fatal("a cancel seen after its lane event stopped the next run")
	}
	done()
	checkNoCancelsLeft(t, e)

	parent, shutdown := context.WithCancel(ctx)
	runCtx, done = e.cancellable(parent, "c2")
	shutdown()
	if wasCancelled(parent, runCtx) {
		t.Error("a shutdown was taken for a cancel")
	}
	done()
	if len(e.cancels.runs) != 0 {
		t.Errorf("%d runs left registered", len(e.cancels.runs))
	}
}

// newCancelsEngine is an engine with only its cancels, as watchCancels
// makes them.
func newCancelsEngine() *Engine {
	e := &Engine{}
	e.cancels.runs = map[string]context.CancelCauseFunc{}
	e.cancels.pending = map[string][]string{}
	return e
}

func checkNoCancelsLeft(t *testing.T, e *Engine) {
	t.Helper()
	if len(e.cancels.pending)+e.cancels.stopped.len()+e.cancels.laned.len() != 0 {
		t.Errorf("cancels left: pending %v, stopped %v, laned %v", e.cancels.pending, e.cancels.stopped.m, e.cancels.laned.m)
	}
}

// TestCancels_TwoInARow: two cancels of a chat seen before the first one's
// lane event each stop the run queued before them — the first one's lane
// event does not forget the second — and no run queued after both.
func TestCancels_TwoInARow(t *testing.T) {
	ctx := context.Background()
	newCancel := func() baton.Event {
		return baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)
	}
	start := func(e *Engine) (stopped bool) {
		runCtx, done := e.cancellable(ctx, "c1")
		defer done()
		return wasCancelled(ctx, runCtx)
	}

	// The lane holds A, run 2, B: no run was queued before A.
	e := newCancelsEngine()
	a, b := newCancel(), newCancel()
	e.cancelRun("c1", a.ID)
	e.cancelRun("c1", b.ID)
	_ = e.handleCancel(ctx, a)
	if !start(e) {
		t.Error("the run queued between two cancels was not stopped")
	}
	_ = e.handleCancel(ctx, b)
	if start(e) {
		t.Error("a run queued after both cancels was stopped")
	}
	checkNoCancelsLeft(t, e)

	// The lane holds run 1, A, run 2, B, run 3; both seen before run 1.
	e = newCancelsEngine()
	a, b = newCancel(), newCancel()
	e.cancelRun("c1", a.ID)
	e.cancelRun("c1", b.ID)
	if !start(e) {
		t.Error("the run queued before the first cancel was not stopped")
	}
	_ = e.handleCancel(ctx, a)
	if !start(e) {
		t.Error("the run queued before the second cancel was not stopped")
	}
	_ = e.handleCancel(ctx, b)
	if start(e) {
		t.Error("a run queued after both cancels was stopped")
	}
	checkNoCancelsLeft(t, e)
}

// TestCancels_BoundNeverRevivesACancel: when the cancels whose lane event
// came first fill their bound, the oldest is forgotten, not all of them: a
// recent one seen late by the watcher still stops no run.
func TestCancels_BoundNeverRevivesACancel(t *testing.T) {
	ctx := context.Background()
	e := newCancelsEngine()
	late := baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)
	_ = e.handleCancel(ctx, baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "old"}, nil))
	_ = e.handleCancel(ctx, late)
	for i := range maxPendingCancels - 1 { // the oldest is forgotten
		_ = e.handleCancel(ctx, baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: fmt.Sprintf("other%d", i)}, nil))
	}
	e.cancelRun("c1", late.ID) // seen after its lane event
	runCtx, done := e.cancellable(ctx, "c1")
	defer done()
	if runCtx.Err() != nil {
		t.Fatal("a cancel seen after its lane event stopped the next run once the bound was reached")
	}
	if n := e.cancels.laned.len(); n != maxPendingCancels-1 {
		t.Errorf("%d laned cancels kept, want %d", n, maxPendingCancels-1)
	}
}
