package runtime_test

import (
	"context"
	"fmt"
	"iter"
	"log"
	"log/slog"
	"os"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/runtime"
)

// Open a runtime on the memory store with the example workflows, run a
// chat of hello (it needs no input), and wait for its end.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "baton") // the example workflows are written here
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rt, err := runtime.Open(ctx, runtime.Config{
		StoreURL: "mem:", // in memory: lost when the process exits
		DataDir:  dir,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(ctx)

	// Recorded events are published on the bus; subscribe before the
	// chat starts so that none is missed.
	chatID := baton.NewID()
	sub, err := rt.Bus().Subscribe([]string{"chat.*"}, bus.ForChat(chatID), bus.Buffer(256))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	scope := baton.Scope{App: "acme", User: "ada"}
	if _, err := rt.Engine().Start(ctx, scope, "hello", baton.StartOptions{ChatID: chatID}); err != nil {
		log.Fatal(err)
	}
	end, err := sub.Wait(ctx, func(ev baton.Event) bool { return ev.Type == baton.TypeChatRunComplete })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(end.Type)
	// Output: chat.run_complete
}

// Run a chat of hello as an iterator: the loop sees the run's events as
// they happen — recorded chat.* events (with their sequence) and stream
// deltas — and ends with the event that closes the run segment, here its
// chat.run_complete. Nothing to subscribe to first, nothing missed.
func ExampleChat_Start() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "baton")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rt, err := runtime.Open(ctx, runtime.Config{StoreURL: "mem:", DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(ctx)

	chat := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "hello")
	for ev, err := range chat.Start(ctx, baton.StartOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Type {
		case baton.TypeChatText:
			p, err := baton.DecodePayload[baton.TextPayload](&ev)
			if err != nil {
				log.Fatal(err)
			}
			if !p.UIHidden {
				fmt.Printf("%d %s: %s\n", ev.Sequence, p.Agent, p.Content)
			}
		case baton.TypeChatRunComplete:
			p, _ := baton.DecodePayload[baton.RunCompletePayload](&ev)
			fmt.Println(ev.Type, p.Status)
		}
	}
	// Output:
	// 4 Greeter: Action completed (Tool Call: get_time)
	// 9 Greeter: Hello! I checked the clock in UTC for you. Have a wonderful day!
	// chat.run_complete success
}

// Answer a chat's pauses: each segment ends with the event the chat waits
// on; the next input's iterator goes on from there.
func ExampleChat_Send() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "baton")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rt, err := runtime.Open(ctx, runtime.Config{StoreURL: "mem:", DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(ctx)

	chat := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "generator")
	last := func(seq iter.Seq2[baton.Event, error]) baton.Event {
		var end baton.Event
		for ev, err := range seq {
			if err != nil {
				log.Fatal(err)
			}
			end = ev
		}
		return end
	}
	end := last(chat.Start(ctx, baton.StartOptions{}))
	fmt.Println(end.Type) // the interview asks
	end = last(chat.Send(ctx, "A weekly newsletter from our team notes."))
	call, _ := baton.DecodePayload[baton.ToolCallPayload](&end)
	fmt.Println(end.Type, call.ToolName, call.PendingKind) // a secret form waits
	// Output:
	// chat.input_request
	// chat.tool_call collect_api_keys secret
}
