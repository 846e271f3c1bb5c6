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
	e.cancels.pending = map[string]bool{}
	ctx := context.Background()
	lane := baton.NewEvent(baton.TypeRunCancel, baton.Metadata{TriggerSessionID: "c1"}, nil)

	e.cancelRun("c1") // no run yet: kept for the queued one
	runCtx, done := e.cancellable(ctx, "c1")
	if !wasCancelled(ctx, runCtx) {
		t.Fatal("the run queued before the cancel was not stopped")
	}
	done()
	_ = e.handleCancel(ctx, lane)

	e.cancelRun("c1") // seen after its run ended…
	_ = e.handleCancel(ctx, lane)
	runCtx, done = e.cancellable(ctx, "c1") // …the next run is not stopped
	if runCtx.Err() != nil {
		t.Fatal("a run queued after the cancel's lane event was stopped")
	}
	e.cancelRun("c1") // a run in progress
	if !wasCancelled(ctx, runCtx) {
		t.Fatal("the run in progress was not stopped")
	}
	done()

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
