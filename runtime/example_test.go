package runtime_test

import (
	"context"
	"fmt"
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
