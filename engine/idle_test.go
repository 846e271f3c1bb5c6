package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
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

// TestAnsweredChatLeavesNoInboxCount: without leases the engine counts the
// inputs kept for a chat until a run reads its inbox. A chat whose UI tool
// was answered (a kept input, which the run's read for UI responses takes)
// and which then pauses on another UI tool holds no count: a chat
// abandoned there would hold it for good.
func TestAnsweredChatLeavesNoInboxCount(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "loop"), os.DirFS(filepath.Join(loopDir, "loop"))); err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(dir, "loop", "tools.json")
	raw, err := os.ReadFile(tools)
	if err != nil {
		t.Fatal(err)
	}
	// No timeout: the second confirm waits for the person for good.
	if err := os.WriteFile(tools, bytes.Replace(raw, []byte(`"timeout_seconds": 0.2`), []byte(`"timeout_seconds": 0`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	h := newHarness(t, withWorkflows(dir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if req.Agent == "Ping" && n.Add(1) <= 2 {
				return callTool(fmt.Sprintf("c%d", n.Load()), "confirm", `{"question":"sure?"}`), nil
			}
			return reply("going on"), nil
		}))
	ctx := context.Background()
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatWaitingUITool)
	first := h.pending(id, baton.PendingUITool).UIEventID
	if err := h.eng.RespondUI(ctx, testScope, id, first, "success", json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the second confirm to be pending", func() error {
		c, err := h.store.GetChat(ctx, testScope, id)
		if err != nil {
			return err
		}
		for _, p := range c.Pending {
			if p.Kind == baton.PendingUITool && p.UIEventID != first {
				return nil
			}
		}
		return fmt.Errorf("pending: %+v", c.Pending)
	})
	h.settle()
	if held := h.eng.PerChatEntries(id); len(held) != 0 {
		t.Errorf("chat %s, paused on its second UI tool, still has entries in %v", id, held)
	}
}
