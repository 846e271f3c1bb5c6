package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton"
)

// chatAt is a store whose one chat is at a given last sequence; the rest of
// the engine's Store is left nil: verify reads the chat alone.
type chatAt struct {
	Store
	last  int64
	reads int
}

func (s *chatAt) GetChat(_ context.Context, _ baton.Scope, id string) (baton.Chat, error) {
	s.reads++
	return baton.Chat{ID: id, LastSequence: s.last}, nil
}

// A run whose state was taken from the cache on trust and has nothing to
// record checks the state against the chat before an effect (flush with
// nothing staged): a chat the store moved past stops the run with
// ErrStale; a chat as the state knows it is checked once.
func TestFlush_NothingStaged_ChecksATrustedState(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		storeLast int64
		stale     bool
	}{
		{"current", 4, false},
		{"behind the store", 6, true},
	} {
		s := &chatAt{last: tc.storeLast}
		r := &run{e: &Engine{store: s}, st: &state{chat: baton.Chat{ID: "c1", LastSequence: 4}}, expectNext: 5}
		err := r.flush(ctx)
		if got := errors.Is(err, baton.ErrStale); got != tc.stale {
			t.Fatalf("%s: flush = %v, want stale %v", tc.name, err, tc.stale)
		}
		if tc.stale {
			continue
		}
		if err := r.flush(ctx); err != nil || s.reads != 1 {
			t.Fatalf("%s: a second flush: %v after %d reads, want nil after 1 (checked once)", tc.name, err, s.reads)
		}
	}
	// A state built from the store is not checked.
	s := &chatAt{last: 9}
	r := &run{e: &Engine{store: s}, st: &state{chat: baton.Chat{ID: "c1", LastSequence: 4}}}
	if err := r.flush(ctx); err != nil || s.reads != 0 {
		t.Fatalf("flush of a checked state: %v after %d reads, want nil and none", err, s.reads)
	}
}
