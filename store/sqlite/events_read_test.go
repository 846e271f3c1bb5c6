package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/storetest"
)

// appendTexts appends n small chat.text events to a new chat and returns it.
func appendTexts(t *testing.T, s baton.Store, scope baton.Scope, n int) baton.Chat {
	t.Helper()
	ctx := context.Background()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; {
		k := min(500, n-done)
		batch := make([]baton.Event, k)
		for i := range batch {
			batch[i] = storetest.TextEvent("A", "hello")
		}
		if _, err := s.Append(ctx, scope, c.ID, batch, nil); err != nil {
			t.Fatal(err)
		}
		done += k
	}
	return c
}

// Events reads a chat in blocks, each a statement of its own: a chat
// deleted between two blocks must give all its events or ENOTFOUND, never
// the blocks read before the delete as if they were the whole chat.
func TestEvents_DeletedMidReadIsAllOrNothing(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	const total = 3000
	calScope := storetest.NewScope()
	cal := appendTexts(t, s, calScope, total)
	began := time.Now()
	if evs, err := s.Events(ctx, calScope, cal.ID, 0, 0); err != nil || len(evs) != total {
		t.Fatalf("calibration read: %d, %v", len(evs), err)
	}
	d := time.Since(began) // how long a whole read takes
	for try := range 20 {
		scope := storetest.NewScope()
		c := appendTexts(t, s, scope, total)
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			evs, err := s.Events(ctx, scope, c.ID, 0, 0)
			done <- result{len(evs), err}
		}()
		time.Sleep(d * time.Duration(2+try%6) / 10) // aim the delete at the read's middle
		if err := s.DeleteChat(ctx, scope, c.ID); err != nil {
			t.Fatal(err)
		}
		switch r := <-done; {
		case r.err != nil && baton.ErrorCode(r.err) == baton.ENOTFOUND, r.err == nil && r.n == total:
		case r.err != nil:
			t.Fatal(r.err)
		default:
			t.Fatalf("try %d: Events of a chat deleted mid-read returned %d of its %d events and no error", try, r.n, total)
		}
	}
}
