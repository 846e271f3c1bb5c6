package engine

import (
	"context"
	"errors"
	"testing"
)

// TestInterruptSparesACallThatKnowsTheInput: a message interrupts the
// chat's model call in progress unless its run had recorded the message
// before the call began (it took it from the inbox between the message's
// keep and the interrupt): the call answers it, or a later message.
func TestInterruptSparesACallThatKnowsTheInput(t *testing.T) {
	e := &Engine{}
	ctx, end := e.modelCall(context.Background(), "c1", []string{"m0", "m1"})
	defer end()
	for _, known := range []string{"m1", "m0"} {
		e.interrupt("c1", known)
		if ctx.Err() != nil {
			t.Fatalf("%s, a message the call knows, interrupted it", known)
		}
	}
	e.interrupt("c2", "m2") // another chat's
	if ctx.Err() != nil {
		t.Fatal("another chat's message interrupted the call")
	}
	e.interrupt("c1", "m2")
	if !errors.Is(context.Cause(ctx), errInterrupted) {
		t.Fatalf("a new message did not interrupt the call: %v", context.Cause(ctx))
	}
}
