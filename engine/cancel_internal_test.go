package engine

import (
	"context"
	"testing"

	"github.com/batonhq/baton"
)

// TestCancels_PendingUntilTheLaneEvent: a cancel seen while no run of the
// chat is in progress stops the next run to start (one queued on the
// chat's lane before the cancel) — but only until the cancel's own lane
// event is handled: a run queued after it is not stopped. A cancel of a run
// in progress stops it, with a cause that tells it from a shutdown.
func TestCancels_PendingUntilTheLaneEvent(t *testing.T) {
	e := &Engine{}
	e.cancels.runs = map[string]context.CancelCauseFunc{}
	e.cancels.pending = map[string]string{}
	e.cancels.stopped, e.cancels.laned = map[string]bool{}, map[string]bool{}
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
	if len(e.cancels.pending)+len(e.cancels.stopped)+len(e.cancels.laned) != 0 {
		t.Errorf("cancels left: %v %v %v", e.cancels.pending, e.cancels.stopped, e.cancels.laned)
	}

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
