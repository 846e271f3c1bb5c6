package natsbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/workflow"
)

// TestInstances_TakeoverWaitsForAQueuedStart: instance A created a chat and
// died before handling its run.start, which carries the person's first
// message and waits on A's input subject. B's takeover sweep must not
// resume the chat (it would start without that message, and the run.start
// drained later would find it started): B drains A's inputs once NATS
// removes A's idle consumer, and the chat starts with the message.
func TestInstances_TakeoverWaitsForAQueuedStart(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	st := pgStores(t, 1)[0]
	ctx := context.Background()
	nsName := namespace(t, natsURL)
	b := newInstanceWith(t, "B", st, natsURL, echoDir, instanceOptions{leaseTTL: 300 * time.Millisecond, inactiveAfter: 2 * time.Second})
	eng, br := b.eng, b.bridge

	// A was alive (its consumer exists), created the chat and routed its
	// run.start to itself; then it died.
	js := jetStream(t, natsURL)
	stream, err := js.Stream(ctx, natsbridge.InputStream(nsName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "inputs-A", FilterSubject: nsName + ".inputs.A.>",
		AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	chat, err := st.CreateChat(ctx, devScope, baton.Chat{ID: baton.NewID(), Workflow: "echo", Status: baton.ChatRunning, Context: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	start := baton.NewInput(devScope, baton.TypeRunStart, chat.ID, json.RawMessage(`{"message":"hello"}`))
	data, err := json.Marshal(start)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(nsName + ".inputs.A." + chat.ID)
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, start.ID)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}

	// The chat's lease expires after 300 ms, A's consumer after 2 s; B
	// drains A's subject a little later.
	testenv.Eventually(t, 20*time.Second, "the queued run.start to be handled", func() error {
		evs, err := st.Events(ctx, devScope, chat.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, e := range evs {
			var p struct{ Agent, Content string }
			if e.Type == baton.TypeChatText && json.Unmarshal(e.Payload, &p) == nil && p.Agent == workflow.UserAgent {
				msgs = append(msgs, p.Content)
			}
		}
		if len(msgs) > 0 {
			if len(msgs) != 1 || msgs[0] != "hello" {
				t.Fatalf("the person's messages: %q, want the first message once", msgs)
			}
			return nil
		}
		if len(evs) > 0 && eng.Takeovers() > 0 {
			t.Fatalf("a takeover started the chat without its first message (%d events recorded)", len(evs))
		}
		return fmt.Errorf("no message of the person recorded; input stats %+v", br.InputStats())
	})
}
