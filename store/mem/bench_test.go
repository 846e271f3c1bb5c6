package mem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/mem"
	"github.com/batonhq/baton/store/storetest"
)

// BenchmarkAppend: one chat appended to sequentially, and 1,000 chats
// appended to concurrently (the same loop as store/sqlite's).
//
//	go test -run '^$' -bench BenchmarkAppend -benchmem ./store/mem
func BenchmarkAppend(b *testing.B) {
	for _, chats := range []int{1, 1000} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) {
			s := mem.New()
			defer s.Close()
			storetest.BenchAppend(b, s, chats)
		})
	}
}

// BenchmarkReplay10k reads a chat of 10,000 events (each read a copy).
func BenchmarkReplay10k(b *testing.B) {
	s := mem.New()
	defer s.Close()
	storetest.BenchReplay(b, s, 10_000)
}

// BenchmarkChatsByStatus: the engine's sweep (every second) of the chats
// waiting for a UI tool, 10 of 100,000: it reads the 10, not the 100,000.
func BenchmarkChatsByStatus(b *testing.B) {
	ctx := context.Background()
	s := mem.New()
	defer s.Close()
	scope := storetest.NewScope()
	for i := range 100_000 {
		st := baton.ChatCompleted
		if i%10_000 == 0 {
			st = baton.ChatWaitingUITool
		}
		if _, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w", Status: st}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		cs, err := s.ChatsByStatus(ctx, baton.ChatWaitingUITool, 10_000)
		if err != nil || len(cs) != 10 {
			b.Fatalf("ChatsByStatus = %d chats, %v; want 10", len(cs), err)
		}
	}
}
