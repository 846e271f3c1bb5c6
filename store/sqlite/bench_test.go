package sqlite_test

import (
	"fmt"
	"testing"

	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

// BenchmarkAppend: one chat appended to sequentially, and 1,000 chats
// appended to concurrently, with group commit (the default) and without
// (every append its own transaction and fsync).
func BenchmarkAppend(b *testing.B) {
	for _, chats := range []int{1, 1000} {
		for _, gc := range []struct {
			name  string
			batch int
			sync  string
		}{{"groupcommit", sqlite.DefaultMaxBatch, "FULL"}, {"nogroupcommit", 1, "FULL"}, {"groupcommit-syncnormal", sqlite.DefaultMaxBatch, "NORMAL"}} {
			b.Run(fmt.Sprintf("chats=%d/%s", chats, gc.name), func(b *testing.B) {
				s := openTemp(b, sqlite.WithMaxBatch(gc.batch), sqlite.WithSynchronous(gc.sync))
				storetest.BenchAppend(b, s, chats)
				st := s.Stats()
				b.ReportMetric(float64(st.Writes)/float64(max(1, st.Commits)), "writes/commit")
			})
		}
	}
}

// BenchmarkAppend4: 1,000 chats each appending 4 events at a time, with group commit.
func BenchmarkAppend4(b *testing.B) {
	s := openTemp(b)
	storetest.BenchAppendN(b, s, 1000, 4)
	st := s.Stats()
	b.ReportMetric(float64(st.Writes)/float64(max(1, st.Commits)), "writes/commit")
}

func BenchmarkReplay10k(b *testing.B) {
	storetest.BenchReplay(b, openTemp(b), 10_000)
}
