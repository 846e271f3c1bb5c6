package natsbridge_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// TestCancel_ReachesTheOwner: a chat runs on instance A (its model streams
// a 300-word answer slowly); Stop is pressed through instance B (POST
// …/cancel on B). The cancel is routed to A, the owner, which stops the
// model call at once and records the run as cancelled: the chat is
// cancelled long before the answer could have ended, and none of it is
// recorded.
func TestCancel_ReachesTheOwner(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	stores := pgStores(t, 2)
	a := newInstanceIn(t, "A", stores[0], natsURL, echoDir)
	b := newInstanceIn(t, "B", stores[1], natsURL, echoDir)
	ctx := context.Background()
	deltas, err := a.bus.Subscribe([]string{baton.TypeStreamText})
	if err != nil {
		t.Fatal(err)
	}
	defer deltas.Close()
	chat, err := a.eng.Start(ctx, devScope, "slowtalk", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A streams the answer: it runs the chat and holds its lease.
	if _, err := deltas.Wait(ctx, func(ev baton.Event) bool { return ev.ChatID() == chat.ID }); err != nil {
		t.Fatal(err)
	}
	if l, err := a.store.GetLease(ctx, chat.ID); err != nil || l.Owner != "A" {
		t.Fatalf("lease %+v (%v), want A's", l, err)
	}
	asked := time.Now()
	resp, err := http.Post(b.ts.URL+"/api/chats/acme/"+chat.ID+"/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel through B: %d", resp.StatusCode)
	}
	// Without the cancel the answer streams for 30 s and the chat
	// completes; waitStatus gives up after 20 s.
	waitStatus(t, a, chat.ID, baton.ChatCancelled)
	t.Logf("cancelled %s after the request through B", time.Since(asked).Round(time.Millisecond))
	evs, err := a.store.Events(ctx, devScope, chat.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1]
	if end.Type != baton.TypeChatRunComplete {
		t.Fatalf("last event %s, want chat.run_complete", end.Type)
	}
	for _, ev := range evs {
		if ev.Type == baton.TypeChatText && ev.Metadata.TriggerAgentName == "Talker" {
			t.Errorf("the stopped answer was recorded: %s", ev.Payload)
		}
	}
}
