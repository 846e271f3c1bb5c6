package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/store/storetest"
	"github.com/jackc/pgx/v5"
)

// freshSchema creates a schema with a random name for this test run and
// drops it when the test ends.
func freshSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = testenv.PostgresDSN(t)
	schema = fmt.Sprintf("batontest_%s", randomSuffix())
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return dsn, schema
}

func randomSuffix() string {
	id := baton.NewID()
	out := make([]byte, 0, len(id))
	for i := 0; i < len(id); i++ {
		if id[i] != '-' {
			out = append(out, id[i])
		}
	}
	return string(out)
}

func open(t testing.TB, dsn, schema string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	dsn, schema := freshSchema(t)
	storetest.Run(t, func(t *testing.T) baton.Store { return open(t, dsn, schema) })
}

func TestTwoPoolsOneChat(t *testing.T) {
	dsn, schema := freshSchema(t)
	storetest.RunTwoWriters(t, open(t, dsn, schema), open(t, dsn, schema))
}

// TestTwoStoresBatchesNeverDeadlock: two processes' batchers append to the
// same chats at once, one with plain appends (merged into one statement
// for the whole batch), the other with appends that update the chat (a
// transaction of one statement per append). Each takes the chats' rows in
// the same order, and a transaction the database rolls back all the same
// is run again: no append fails.
func TestTwoStoresBatchesNeverDeadlock(t *testing.T) {
	dsn, schema := freshSchema(t)
	a, b := open(t, dsn, schema), open(t, dsn, schema)
	ctx := context.Background()
	scope := storetest.NewScope()
	const chats, writers, appends = 30, 40, 80
	ids := make([]string, chats)
	for i := range ids {
		c, err := a.CreateChat(ctx, scope, baton.Chat{Workflow: "w"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*2*writers*appends)
	for si, s := range []baton.Store{a, b, a, b} {
		for w := range writers {
			wg.Go(func() {
				for i := range appends {
					var u *baton.ChatUpdate
					if si%2 == 1 {
						turn := "x"
						u = &baton.ChatUpdate{TurnAgent: &turn}
					}
					if _, err := s.Append(ctx, scope, ids[(w*31+i*17)%chats], []baton.Event{storetest.TextEvent("A", "x")}, u); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Errorf("append: %v", err)
		}
	}
	if n > 0 {
		t.Fatalf("%d appends failed", n)
	}
	total := 0
	for _, id := range ids {
		c, err := a.GetChat(ctx, scope, id)
		if err != nil {
			t.Fatal(err)
		}
		total += int(c.LastSequence)
	}
	if total != 2*2*writers*appends {
		t.Fatalf("%d events recorded, want %d", total, 2*2*writers*appends)
	}
}

// TestConcurrentOpenNewSchema opens one new schema from several pools at
// once, as processes starting together do: every Open must succeed (CREATE
// SCHEMA IF NOT EXISTS outside the migration lock raced on pg_namespace).
func TestConcurrentOpenNewSchema(t *testing.T) {
	for range 5 {
		dsn, schema := freshSchema(t)
		errs := make(chan error, 4)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				s, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
				if err == nil {
					s.Close()
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Open of new schema %s: %v", schema, err)
			}
		}
	}
}

// TestSynchronousCommit: the store's connections commit with
// synchronous_commit=on even where the server or the role turned it off
// (here, the connection's startup options), since recorder.Record promises
// a flushed WAL.
func TestSynchronousCommit(t *testing.T) {
	dsn, schema := freshSchema(t)
	sep := "&"
	if !strings.Contains(dsn, "?") {
		sep = "?"
	}
	off := dsn + sep + "options=" + strings.ReplaceAll(url.QueryEscape("-c synchronous_commit=off"), "+", "%20")
	s := open(t, off, schema)
	var got string
	if err := s.Pool().QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "on" {
		t.Fatalf("synchronous_commit = %s, want on", got)
	}
}
