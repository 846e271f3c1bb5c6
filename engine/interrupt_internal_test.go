package engine

import (
	"context"
	"errors"
	"testing"
)

// TestInterruptSparesTheCallAnsweringTheInput: a message interrupts the
// chat's model call in progress unless that call answers the message
// itself (its run took it from the inbox between its keep and the
// interrupt).
func TestInterruptSparesTheCallAnsweringTheInput(t *testing.T) {
	e := &Engine{}
	ctx, end := e.modelCall(context.Background(), "c1", "m1")
	defer end()
	e.interrupt("c1", "m1")
	if ctx.Err() != nil {
		t.Fatal("the message the call answers interrupted it")
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
