package baton_test

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton"
)

// pagedStore is an EventStore holding n events of one chat; it counts the
// reads and fails the read after failAfter of them (0: never).
type pagedStore struct {
	n         int64
	reads     int
	failAfter int
}

var errRead = errors.New("read failed")

func (s *pagedStore) Append(context.Context, baton.Scope, string, []baton.Event, *baton.ChatUpdate) ([]baton.Event, error) {
	return nil, errors.New("not used")
}

func (s *pagedStore) Events(_ context.Context, _ baton.Scope, _ string, after int64, limit int) ([]baton.Event, error) {
	s.reads++
	if s.failAfter > 0 && s.reads > s.failAfter {
		return nil, errRead
	}
	var out []baton.Event
	for seq := after + 1; seq <= s.n && (limit <= 0 || len(out) < limit); seq++ {
		out = append(out, baton.Event{Sequence: seq})
	}
	return out, nil
}

func TestEventsAfter(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		n, after  int64
		page      int
		wantReads int
	}{
		{"pages and a short last page", 10, 0, 4, 3},
		{"exact pages end with an empty read", 8, 0, 4, 3},
		{"after skips the first events", 10, 7, 4, 1},
		{"page 0 reads all at once", 10, 2, 0, 1},
		{"nothing after", 5, 5, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &pagedStore{n: tt.n}
			want := tt.after + 1
			for ev, err := range baton.EventsAfter(ctx, st, baton.Scope{}, "c1", tt.after, tt.page) {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if ev.Sequence != want {
					t.Fatalf("got sequence %d, want %d", ev.Sequence, want)
				}
				want++
			}
			if want != tt.n+1 {
				t.Errorf("yielded up to %d, want %d", want-1, tt.n)
			}
			if st.reads != tt.wantReads {
				t.Errorf("%d reads, want %d", st.reads, tt.wantReads)
			}
		})
	}
}

func TestEventsAfterBreakStopsReads(t *testing.T) {
	st := &pagedStore{n: 100}
	var got []int64
	for ev, err := range baton.EventsAfter(context.Background(), st, baton.Scope{}, "c1", 0, 4) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Sequence)
		if ev.Sequence == 5 {
			break
		}
	}
	if len(got) != 5 || st.reads != 2 {
		t.Errorf("got %v after %d reads, want 1..5 after 2 reads", got, st.reads)
	}
}

func TestEventsAfterErrorEndsSequence(t *testing.T) {
	st := &pagedStore{n: 100, failAfter: 1}
	var seqs, errs int
	for _, err := range baton.EventsAfter(context.Background(), st, baton.Scope{}, "c1", 0, 4) {
		if err != nil {
			if !errors.Is(err, errRead) {
				t.Errorf("error %v, want the store's", err)
			}
			errs++
			continue
		}
		seqs++
	}
	if seqs != 4 || errs != 1 {
		t.Errorf("%d events and %d errors, want 4 and 1", seqs, errs)
	}
}
