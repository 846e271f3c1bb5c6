package postgres_test

import (
	"fmt"
	"testing"

	"github.com/batonhq/baton/store/storetest"
)

// BenchmarkAppend: one chat appended to sequentially, and 1,000 chats
// appended to concurrently (the pool has the default size).
func BenchmarkAppend(b *testing.B) {
	dsn, schema := freshSchema(b)
	for _, chats := range []int{1, 1000} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) {
			storetest.BenchAppend(b, open(b, dsn, schema), chats)
		})
	}
}

func BenchmarkReplay10k(b *testing.B) {
	dsn, schema := freshSchema(b)
	storetest.BenchReplay(b, open(b, dsn, schema), 10_000)
}
