package server

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// TestHubWatchesAChatWhileStreamsFollowIt: the hub tells its watcher (the
// NATS bridge, with several instances) when a chat gets its first stream
// here, and releases it when the last one leaves or the chat is kicked, so
// an instance receives exactly the chats its clients follow.
func TestHubWatchesAChatWhileStreamsFollowIt(t *testing.T) {
	h := newHub(nil, quietLogger(), 1, 8)
	var mu sync.Mutex
	watching := map[string]int{}
	h.watch = func(chatID string) func() {
		mu.Lock()
		watching[chatID]++
		mu.Unlock()
		return func() {
			mu.Lock()
			watching[chatID]--
			mu.Unlock()
		}
	}
	count := func(chatID string) int {
		mu.Lock()
		defer mu.Unlock()
		return watching[chatID]
	}
	a1, _ := h.subscribe("a", nil)
	a2, _ := h.subscribe("a", nil)
	b1, _ := h.subscribe("b", nil)
	if count("a") != 1 || count("b") != 1 {
		t.Fatalf("watches %v; want one per followed chat", watching)
	}
	h.unsubscribe(a1)
	if count("a") != 1 {
		t.Fatal("the chat was released while a stream still follows it")
	}
	h.unsubscribe(a2)
	h.unsubscribe(a2) // idempotent
	if count("a") != 0 {
		t.Fatalf("chat a still watched (%d) after its last stream left", count("a"))
	}
	h.kickChat("b", kickSlow)
	h.unsubscribe(b1) // the kicked stream leaves afterwards
	if count("b") != 0 {
		t.Fatalf("chat b still watched (%d) after it was kicked", count("b"))
	}
	d1, _ := h.subscribe("d", nil)
	for i := range int64(d1.q.limit + 1) { // nobody reads: the stream is cut off
		ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "d"}, json.RawMessage(`{"kind":"text","agent":"a"}`))
		ev.Sequence = i + 1
		h.dispatch(&ev)
	}
	if d1.reason.Load() != kickSlow || count("d") != 0 {
		t.Fatalf("chat d still watched (%d) after its only stream was cut off (kick %d)", count("d"), d1.reason.Load())
	}
	c1, _ := h.subscribe("c", nil)
	h.stop()
	h.unsubscribe(c1)
	if count("c") != 0 {
		t.Fatalf("chat c still watched (%d) after the hub stopped", count("c"))
	}
}

// TestHubSecondStreamWaitsForTheFirstWatch: a stream that arrives while
// the chat's first stream is still setting up its watch must not replay
// before the watch is in place — it would miss what is recorded between.
func TestHubSecondStreamWaitsForTheFirstWatch(t *testing.T) {
	h := newHub(nil, quietLogger(), 1, 8)
	unblock := make(chan struct{})
	watching := make(chan struct{})
	h.watch = func(string) func() {
		close(watching)
		<-unblock // NATS is slow to confirm the subscription
		return func() {}
	}
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		if _, err := h.subscribe("a", nil); err != nil {
			t.Error(err)
		}
	}()
	<-watching
	secondDone := make(chan struct{})
	go func() {
		defer close(secondDone)
		if _, err := h.subscribe("a", nil); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-secondDone:
		t.Fatal("the second stream returned (and would replay) before the chat was watched")
	case <-time.After(100 * time.Millisecond): // it must still be waiting
	}
	close(unblock)
	<-firstDone
	<-secondDone
}
