package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// TestForChat_IndexedByChat: a ForChat subscription is kept in the per-chat
// index, not in the list every event is checked against, so 1,000 chats'
// subscriptions leave an event of another chat nothing to look at; each
// still gets its own chat's events (filtered by its patterns), is dropped
// when slow, leaves the index when closed, and ends when the bus closes.
func TestForChat_IndexedByChat(t *testing.T) {
	b, _ := newTestBus(t)
	const chats = 1000
	subs := make([]*Subscription, chats)
	for i := range subs {
		s, err := b.Subscribe([]string{"chat.*"}, ForChat(fmt.Sprintf("c%d", i)), Buffer(2))
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	all, err := b.Subscribe(nil, Buffer(16))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if got := len(*b.observers.Load()); got != 1 {
		t.Fatalf("observers checked against every event = %d, want 1 (the unfiltered one)", got)
	}

	_ = b.Broadcast(event("chat.message", "c7"))
	_ = b.Broadcast(event("stream.text", "c7")) // not a chat.* event
	_ = b.Broadcast(event("chat.message", "elsewhere"))
	if ev := <-subs[7].C(); ev.ChatID() != "c7" || ev.Type != "chat.message" {
		t.Fatalf("c7 got %s of %q", ev.Type, ev.ChatID())
	}
	for i, s := range subs {
		if n := len(s.C()); n != 0 {
			t.Fatalf("chat c%d has %d events queued, want 0", i, n)
		}
	}
	if n := len(all.C()); n != 3 {
		t.Fatalf("the unfiltered subscription has %d events, want 3", n)
	}

	// Slow: a full buffer drops the subscription, and only it.
	for range 3 {
		_ = b.Broadcast(event("chat.message", "c8"))
	}
	for range subs[8].C() {
	}
	if err := subs[8].Err(); !errors.Is(err, ErrSlowSubscriber) {
		t.Fatalf("slow c8 ended with %v, want ErrSlowSubscriber", err)
	}
	subs[9].Close()
	b.chatObsMu.RLock()
	_, has8 := b.chatObs["c8"]
	_, has9 := b.chatObs["c9"]
	left := len(b.chatObs)
	b.chatObsMu.RUnlock()
	if has8 || has9 || left != chats-2 {
		t.Fatalf("index after a drop and a close: c8 %v, c9 %v, %d chats; want neither and %d", has8, has9, left, chats-2)
	}

	drain(t, b)
	for _, i := range []int{0, 7, chats - 1} {
		for range subs[i].C() {
		}
		if err := subs[i].Err(); !errors.Is(err, baton.ErrClosed) {
			t.Fatalf("c%d after the bus closed: %v, want ErrClosed", i, err)
		}
	}
}

// TestFanout_WatchDeliverStop: Deliver calls only the watchers of the
// event's chat, in the order they watch; a stopped watcher (also one
// stopped from within its own call) is not called again, and stop is
// idempotent.
func TestFanout_WatchDeliverStop(t *testing.T) {
	var f Fanout
	var got []string
	for i := range 1000 {
		id := fmt.Sprintf("c%d", i)
		defer f.Watch(id, func(ev *baton.Event) { got = append(got, id+"/"+ev.ID) })()
	}
	stopA := f.Watch("c1", func(ev *baton.Event) { got = append(got, "a/"+ev.ID) })
	var stopSelf func()
	stopSelf = f.Watch("c1", func(ev *baton.Event) {
		got = append(got, "self/"+ev.ID)
		stopSelf()
	})
	if n := f.Deliver(&baton.Event{ID: "e1", Metadata: baton.Metadata{TriggerSessionID: "c1"}}); n != 3 {
		t.Fatalf("Deliver called %d watchers, want 3", n)
	}
	stopA()
	stopA()
	if n := f.Deliver(&baton.Event{ID: "e2", Metadata: baton.Metadata{TriggerSessionID: "c1"}}); n != 1 {
		t.Fatalf("Deliver after two stops called %d watchers, want 1", n)
	}
	if n := f.Deliver(&baton.Event{ID: "e3", Metadata: baton.Metadata{TriggerSessionID: "nobody"}}); n != 0 {
		t.Fatalf("Deliver to an unwatched chat called %d watchers", n)
	}
	want := []string{"c1/e1", "a/e1", "self/e1", "c1/e2"}
	if !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if w := f.Watchers(); w != 1000 {
		t.Fatalf("watchers = %d, want 1000", w)
	}
}

// TestFanout_FeedRunsResyncsAndStops: a feed delivers the bus's events
// to their chats' watchers; when the bus drops its subscription as slow it
// subscribes again and calls onResync before the next event; Run returns
// when its context ends, and Close ends a Run that is waiting.
func TestFanout_FeedRunsResyncsAndStops(t *testing.T) {
	b, _ := newTestBus(t)
	var f Fanout
	got := make(chan *baton.Event, 64)
	defer f.Watch("c1", func(ev *baton.Event) { got <- ev })()

	feed, err := f.Feed(b, []string{"chat.*"}, Buffer(2))
	if err != nil {
		t.Fatal(err)
	}
	// Overflow the feed's subscription before Run reads it: dropped as slow.
	for range 3 {
		_ = b.Broadcast(event("chat.message", "c1"))
	}
	resynced := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- feed.Run(ctx, func() { resynced <- struct{}{} }) }()
	timeout := time.After(10 * time.Second) // catches a hang only
	for range 2 {                           // the two events buffered before the drop
		select {
		case <-got:
		case <-timeout:
			t.Fatal("buffered events not delivered")
		}
	}
	select {
	case <-resynced:
	case <-timeout:
		t.Fatal("no resync after the subscription was dropped")
	}
	after := event("chat.message", "c1")
	_ = b.Broadcast(after)
	_ = b.Broadcast(event("stream.text", "c1")) // not fed
	select {
	case ev := <-got:
		if ev.ID != after.ID {
			t.Fatalf("after the resync got %s, want %s", ev.ID, after.ID)
		}
	case <-timeout:
		t.Fatal("event after the resync not delivered")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("run = %v", err)
	}

	// Close ends a waiting Run.
	feed2, err := f.Feed(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { ran <- feed2.Run(context.Background(), nil) }()
	feed2.Close()
	if err := <-ran; err != nil {
		t.Fatalf("run after close = %v", err)
	}
	drain(t, b)
	if _, err := f.Feed(b, nil); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("feed on a closed bus = %v, want ErrClosed", err)
	}
}
