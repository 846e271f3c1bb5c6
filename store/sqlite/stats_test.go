package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

func TestStats(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "stats.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.RunStats(t, s)
}

// TestStatsCountOnlyWrites: an append refused in a batch (its chat out of
// the caller's scope) is no write and, alone in its batch, no commit —
// whether the writer ran it in bulk or alone — since commits and writes a
// turn are figures the benchmarks report.
func TestStatsCountOnlyWrites(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	scope, other := storetest.NewScope(), storetest.NewScope()
	id := createChats(t, s, scope, "w", 1)[0]
	before := s.Stats()
	if err := s.RecordUsage(ctx, other, baton.UsageRecord{ChatID: id, Usage: baton.Usage{PromptTokens: 1}}); baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("usage of another scope's chat: %v, want ENOTFOUND", err)
	}
	if _, err := s.Append(ctx, other, id, []baton.Event{storetest.TextEvent("A", "x")}, nil); baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("append to another scope's chat: %v, want ENOTFOUND", err)
	}
	if st := s.Stats(); st.Commits != before.Commits || st.Writes != before.Writes {
		t.Fatalf("two refused writes counted as %d commit(s) and %d write(s)", st.Commits-before.Commits, st.Writes-before.Writes)
	}
	if _, err := s.Append(ctx, scope, id, []baton.Event{storetest.TextEvent("A", "x")}, nil); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Commits != before.Commits+1 || st.Writes != before.Writes+1 {
		t.Fatalf("one append counted as %d commit(s) and %d write(s), want 1 and 1", st.Commits-before.Commits, st.Writes-before.Writes)
	}
}
