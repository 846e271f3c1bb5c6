package server

import (
	"encoding/json"
	"testing"

	"github.com/batonhq/baton"
)

// TestHubWatchesEachFollowedChatOnce: the hub has one watcher on its
// fan-out per chat with streams — not per stream — from the first stream to
// the last, and none once a chat is deleted or the hub stops; events reach
// only their own chat's streams.
func TestHubWatchesEachFollowedChatOnce(t *testing.T) {
	h := newHub(nil, quietLogger(), 1, 8)
	a1, _ := h.subscribe("a", nil)
	a2, _ := h.subscribe("a", nil)
	b1, _ := h.subscribe("b", nil)
	if w := h.fan.Watchers(); w != 2 {
		t.Fatalf("watchers with streams on two chats = %d, want 2", w)
	}
	ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "a"}, json.RawMessage(`{"kind":"text","agent":"a"}`))
	ev.Sequence = 1
	h.dispatch(&ev)
	if a1.q.waiting() != 1 || a2.q.waiting() != 1 || b1.q.waiting() != 0 {
		t.Fatalf("queued a1 %d, a2 %d, b1 %d; want 1, 1, 0", a1.q.waiting(), a2.q.waiting(), b1.q.waiting())
	}
	h.unsubscribe(a1)
	if w := h.fan.Watchers(); w != 2 {
		t.Fatalf("watchers after one of two streams left = %d, want 2", w)
	}
	h.unsubscribe(a2)
	if w := h.fan.Watchers(); w != 1 {
		t.Fatalf("watchers after chat a's last stream left = %d, want 1", w)
	}
	del := baton.Event{ID: "e2", Type: baton.TypeSessionDeleted, Metadata: baton.Metadata{TriggerSessionID: "b"}}
	h.dispatch(&del)
	if w := h.fan.Watchers(); w != 0 || b1.reason.Load() != kickDeleted {
		t.Fatalf("after chat b was deleted: %d watchers, b1 kicked with %d; want 0 and %d", w, b1.reason.Load(), kickDeleted)
	}
	c1, _ := h.subscribe("c", nil)
	h.stop()
	if w := h.fan.Watchers(); w != 0 || c1.reason.Load() != kickShutdown {
		t.Fatalf("after stop: %d watchers, c1 kicked with %d; want 0 and %d", w, c1.reason.Load(), kickShutdown)
	}
}
