package recorder_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

// checkingPublisher fails the test if it is given an event the store does
// not already hold, with the same id and sequence (invariant 1).
type checkingPublisher struct {
	t     *testing.T
	store baton.Store
	mu    sync.Mutex
	got   []baton.Event
}

func (p *checkingPublisher) Publish(scope baton.Scope, chatID string, events []baton.Event) {
	for _, e := range events {
		stored, err := p.store.Events(context.Background(), scope, chatID, e.Sequence-1, 1)
		if err != nil || len(stored) != 1 || stored[0].ID != e.ID || stored[0].Sequence != e.Sequence {
			p.t.Errorf("published event %s (sequence %d) that the store does not hold: %v %v", e.ID, e.Sequence, stored, err)
		}
	}
	p.mu.Lock()
	p.got = append(p.got, events...)
	p.mu.Unlock()
}

func newStore(t *testing.T) *sqlite.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "baton.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPersistBeforePublish(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	pub := &checkingPublisher{t: t, store: s}
	rec := recorder.New(s, pub)
	scope := storetest.NewScope()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			evs := []baton.Event{storetest.TextEvent("A", "hi"), storetest.TextEvent("B", "there")}
			u := &baton.ChatUpdate{Context: map[string]json.RawMessage{"i": json.RawMessage(`1`)}}
			if i%2 == 0 {
				u = nil
			}
			if _, err := rec.Record(ctx, scope, c.ID, evs, u); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(pub.got) != 40 {
		t.Fatalf("published %d events, want 40", len(pub.got))
	}
	seen := map[int64]bool{}
	for _, e := range pub.got {
		if seen[e.Sequence] || e.Sequence < 1 || e.Sequence > 40 {
			t.Fatalf("published sequence %d twice or out of range", e.Sequence)
		}
		seen[e.Sequence] = true
	}
}

type countingPublisher struct{ n int }

func (p *countingPublisher) Publish(baton.Scope, string, []baton.Event) { p.n++ }

func TestFailedAppendPublishesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	pub := &countingPublisher{}
	rec := recorder.New(s, pub)
	scope := storetest.NewScope()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := rec.Record(ctx, scope, c.ID, []baton.Event{storetest.TextEvent("A", "one")}, nil)
	if err != nil || pub.n != 1 {
		t.Fatalf("Record = %v, %v; published %d times", first, err, pub.n)
	}
	dup := storetest.TextEvent("A", "dup")
	dup.ID = first[0].ID
	stream := baton.NewEvent(baton.TypeStreamText, baton.Metadata{}, json.RawMessage(`{"delta":"x"}`))
	cases := []struct {
		name   string
		scope  baton.Scope
		events []baton.Event
		u      *baton.ChatUpdate
		code   string
	}{
		{"duplicate event", scope, []baton.Event{storetest.TextEvent("A", "x"), dup}, nil, baton.ECONFLICT},
		{"unknown pending", scope, []baton.Event{storetest.TextEvent("A", "x")}, &baton.ChatUpdate{ResolvePending: []string{"nope"}}, baton.ENOTFOUND},
		{"other scope", storetest.NewScope(), []baton.Event{storetest.TextEvent("A", "x")}, nil, baton.ENOTFOUND},
		{"stream event", scope, []baton.Event{stream}, nil, baton.EINVALID},
	}
	for _, tc := range cases {
		_, err := rec.Record(ctx, tc.scope, c.ID, tc.events, tc.u)
		if baton.ErrorCode(err) != tc.code {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.code)
		}
	}
	s.Close()
	_, err = rec.Record(ctx, scope, c.ID, []baton.Event{storetest.TextEvent("A", "x")}, nil)
	if !errors.Is(err, baton.ErrUnavailable) {
		t.Errorf("closed store: %v, want unavailable", err)
	}
	if pub.n != 1 {
		t.Fatalf("failed records published %d times", pub.n-1)
	}
}

// Create holds to invariant 1 as Record does: the chat and its first
// events are in the store before created is called and before anything is
// published, and a create the store refuses (an id in use) publishes
// nothing and calls nothing.
func TestCreatePersistsBeforePublish(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	pub := &checkingPublisher{t: t, store: s}
	rec := recorder.New(s, pub)
	if !rec.CanCreate() {
		t.Fatal("a recorder on SQLite cannot create chats")
	}
	scope := storetest.NewScope()
	calls := 0
	created := func(c baton.Chat) {
		calls++
		if got, err := s.GetChat(ctx, scope, c.ID); err != nil || got.LastSequence != 2 {
			t.Errorf("created called before the chat was stored: %+v %v", got, err)
		}
		if len(pub.got) != 0 {
			t.Error("events published before created was called")
		}
	}
	c, evs, err := rec.Create(ctx, scope, baton.Chat{Workflow: "hello"}, nil,
		[]baton.Event{storetest.TextEvent("A", "hi"), storetest.TextEvent("B", "there")}, nil, created)
	if err != nil || len(evs) != 2 || calls != 1 || len(pub.got) != 2 {
		t.Fatalf("Create: %v, %d events, created called %d times, %d published", err, len(evs), calls, len(pub.got))
	}
	_, _, err = rec.Create(ctx, scope, baton.Chat{ID: c.ID, Workflow: "hello"}, nil, []baton.Event{storetest.TextEvent("A", "again")}, nil, created)
	if baton.ErrorCode(err) != baton.ECONFLICT || calls != 1 || len(pub.got) != 2 {
		t.Fatalf("Create of an id in use: %v, created called %d times, %d published; want conflict and nothing", err, calls, len(pub.got))
	}
}
