package engine_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// TestPausedChatLeavesNoPerChatEntries: once a chat pauses for its user and
// the bus is settled, none of the engine's per-chat maps (runs, leases in
// progress, wakes, model calls, cancels) holds an entry for it: an idle chat
// costs only its place in the bounded state cache.
func TestPausedChatLeavesNoPerChatEntries(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider(), withInstance("i1", time.Minute))
	var ids []string
	for range 3 {
		ids = append(ids, start(t, h, "assistant"))
	}
	for _, id := range ids {
		h.waitStatus(id, baton.ChatWaitingInput)
	}
	h.settle()
	for _, id := range ids {
		if held := h.eng.PerChatEntries(id); len(held) != 0 {
			t.Errorf("paused chat %s still has entries in %v", id, held)
		}
	}
}
