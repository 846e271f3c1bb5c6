package mem_test

import (
	"fmt"
	"testing"

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
