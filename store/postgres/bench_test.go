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
			s := open(b, dsn, schema)
			storetest.BenchAppend(b, s, chats)
			st := s.Stats()
			b.ReportMetric(float64(st.Appends)/float64(max(1, st.Commits)), "appends/commit")
		})
	}
}

// BenchmarkAppend4: 1,000 chats each appending 4 events at a time.
func BenchmarkAppend4(b *testing.B) {
	dsn, schema := freshSchema(b)
	s := open(b, dsn, schema)
	storetest.BenchAppendN(b, s, 1000, 4)
	st := s.Stats()
	b.ReportMetric(float64(st.Appends)/float64(max(1, st.Commits)), "appends/commit")
}

// BenchmarkAppendPaced: 1,000 chats appending at a fixed total rate (an open
// loop, see storetest.BenchAppendPaced): the latency below saturation.
func BenchmarkAppendPaced(b *testing.B) {
	dsn, schema := freshSchema(b)
	for _, rate := range []float64{10_000, 25_000} {
		b.Run(fmt.Sprintf("chats=1000/rate=%.0f", rate), func(b *testing.B) {
			s := open(b, dsn, schema)
			storetest.BenchAppendPaced(b, s, 1000, rate)
			st := s.Stats()
			b.ReportMetric(float64(st.Appends)/float64(max(1, st.Commits)), "appends/commit")
		})
	}
}

func BenchmarkReplay10k(b *testing.B) {
	dsn, schema := freshSchema(b)
	storetest.BenchReplay(b, open(b, dsn, schema), 10_000)
}
