package bus_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// The seed's default rules: a specific handler for user queries, logging for
// session events, and a fallback for everything else. The highest-priority
// matching rule handles each event.
func ExampleBus_RegisterRule() {
	b := bus.New()
	handled := make(chan string, 3)
	record := func(name string) bus.Handler {
		return func(_ context.Context, ev baton.Event) error {
			handled <- name + " <- " + ev.Type
			return nil
		}
	}
	_ = b.RegisterRule(bus.Rule{Name: "user_query", Types: []string{baton.TypeUserQuery}, Priority: 100, Handler: record("engine")})
	_ = b.RegisterRule(bus.Rule{Name: "sessions", Types: []string{"session.*"}, Priority: 50, Handler: record("log")})
	_ = b.RegisterRule(bus.Rule{Name: "fallback", Types: []string{"*"}, Priority: 10, Handler: record("event-handler agent")})

	ctx := context.Background()
	for _, typ := range []string{baton.TypeUserQuery, baton.TypeSessionCreated, "webhook.received"} {
		// One chat: its events are handled in this order.
		_ = b.Publish(ctx, baton.NewEvent(typ, baton.Metadata{TriggerSessionID: "chat-1"}, nil))
	}
	_ = b.Close(ctx) // drains: every accepted event is handled before Close returns
	close(handled)
	for h := range handled {
		fmt.Println(h)
	}
	// Output:
	// engine <- user_query
	// log <- session.created
	// event-handler agent <- webhook.received
}

// Publishing the same event id twice handles it once.
func ExampleBus_Publish() {
	b := bus.New()
	_ = b.RegisterRule(bus.Rule{Types: []string{"*"}, Handler: func(context.Context, baton.Event) error { return nil }})
	ctx := context.Background()
	ev := baton.NewEvent(baton.TypeUserQuery, baton.Metadata{TriggerSessionID: "chat-1", Source: baton.SourceUser},
		json.RawMessage(`{"content":"hello"}`))
	_ = b.Publish(ctx, ev)
	_ = b.Publish(ctx, ev) // a client retried: dropped as a duplicate, not an error
	_ = b.Close(ctx)
	s := b.Stats()
	fmt.Println("handled:", s.Handled, "duplicates:", s.Duplicates)
	// Output: handled: 1 duplicates: 1
}

// Observers watch events without handling them; stream deltas reach them by
// Broadcast, never through a rule.
func ExampleBus_Subscribe() {
	b := bus.New()
	sub, _ := b.Subscribe([]string{"stream.*"}, bus.ForChat("chat-1"))
	_ = b.Broadcast(baton.NewEvent(baton.TypeStreamText, baton.Metadata{TriggerSessionID: "chat-1", Source: baton.SourceLLM},
		json.RawMessage(`{"delta":"Hel"}`)))
	_ = b.Broadcast(baton.NewEvent(baton.TypeStreamText, baton.Metadata{TriggerSessionID: "chat-2"}, nil)) // another chat: not seen
	ev := <-sub.C()
	fmt.Println(ev.Type, string(ev.Payload))
	sub.Close()
	_ = b.Close(context.Background())
	// Output: stream.text {"delta":"Hel"}
}

// A Fanout follows many chats from one goroutine: one bus subscription
// (the feed), and a watcher per chat, found by the event's chat id.
func ExampleFanout() {
	b := bus.New()
	var fan bus.Fanout
	got := make(chan string, 2)
	stop := fan.Watch("chat-1", func(ev *baton.Event) { got <- ev.Type }) // must not block
	defer stop()

	feed, err := fan.Feed(b, []string{"chat.*"}, bus.Buffer(64))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- feed.Run(ctx, func() { fmt.Println("missed events: catch up from the store") }) }()

	_ = b.Broadcast(baton.NewEvent("chat.message", baton.Metadata{TriggerSessionID: "chat-2"}, nil)) // no watcher
	_ = b.Broadcast(baton.NewEvent("chat.message", baton.Metadata{TriggerSessionID: "chat-1"}, nil))
	fmt.Println(<-got)
	cancel()
	<-ran
	_ = b.Close(context.Background())
	// Output:
	// chat.message
}
