package sqlite_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

// commitDelayPatience is how long TestCommitDelayFollowsTheCommits waits
// for its writers; they take milliseconds.
var commitDelayPatience = time.Minute

// TestCommitDelayFollowsTheCommits gives the writer an hour of commit delay
// and many writers at once: the writer may wait for more writes only as
// long as its previous commit took (TestLingerFor has the rule), so every
// write still returns at once — were the hour the bound, a batch of two
// would hold its writers until the store closed. Every chat stays gapless
// and in order.
func TestCommitDelayFollowsTheCommits(t *testing.T) {
	s := openTemp(t, sqlite.WithCommitDelay(time.Hour))
	ctx := context.Background()
	scope := storetest.NewScope()
	const writers, each = 8, 25
	ids := createChats(t, s, scope, "delay", writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for _, id := range ids {
		wg.Go(func() {
			for range each {
				if _, err := s.Append(ctx, scope, id, []baton.Event{storetest.TextEvent("A", "x")}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(commitDelayPatience):
		t.Fatalf("%d writers of %d appends each still wait after %v: the writer held a batch past the previous commit's time", writers, each, commitDelayPatience)
	}
	close(errs)
	for err := range errs {
		t.Fatalf("append: %v (the writer waited for company past the previous commit's time?)", err)
	}
	for _, id := range ids {
		evs, err := s.Events(ctx, scope, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != each {
			t.Fatalf("chat %s has %d events; want %d", id, len(evs), each)
		}
		for i, ev := range evs {
			if ev.Sequence != int64(i+1) {
				t.Fatalf("chat %s: event %d has sequence %d", id, i, ev.Sequence)
			}
		}
	}
	t.Logf("stats %+v", s.Stats())
	if st := s.Stats(); st.Writes < writers*each {
		t.Fatalf("stats %+v: fewer writes than the %d appends", st, writers*each)
	}
}
