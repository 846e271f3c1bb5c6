package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// TestPointReadsBorrowTheIdleWriter: a read of a chat right after a commit
// runs on the writer's connection when the writer is idle, and finds what
// was committed.
func TestPointReadsBorrowTheIdleWriter(t *testing.T) {
	s, scope, c := openWithChat(t)
	ctx := t.Context()
	before := s.Stats()
	for i := range 5 {
		if _, err := s.Append(ctx, scope, c.ID, []baton.Event{baton.NewChatEvent(baton.TypeChatText, c.ID, "user", baton.TextPayload{Kind: "text", Content: "hi"})}, nil); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetChat(ctx, scope, c.ID)
		if err != nil || got.LastSequence != int64(i+1) {
			t.Fatalf("GetChat after append %d: %+v, %v", i+1, got, err)
		}
		if ins, err := s.Inputs(ctx, scope, c.ID); err != nil || len(ins) != 0 {
			t.Fatalf("Inputs: %v, %v", ins, err)
		}
	}
	// The writer is idle between the appends: allow for the odd read that
	// came while it still held its connection (a checkpoint).
	if st := s.Stats(); st.WriterReads-before.WriterReads < 5 {
		t.Fatalf("%d of %d reads on the writer's connection; want 5 or more", st.WriterReads-before.WriterReads, st.Reads-before.Reads)
	}
}

// TestPointReadsNeverSeeAnOpenBatch: while the writer's transaction is open,
// a read neither waits for it nor sees what it wrote: the read runs on the
// pool and finds the chat as last committed.
func TestPointReadsNeverSeeAnOpenBatch(t *testing.T) {
	s, scope, c := openWithChat(t)
	ctx := t.Context()
	inBatch, release := make(chan struct{}), make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let) // before the store's Close, which would wait for the writer
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.write(ctx, func(ctx context.Context, w *wconn) error {
			if _, err := w.exec(ctx, `UPDATE chats SET last_sequence = 99 WHERE id = ?`, c.ID); err != nil {
				return err
			}
			close(inBatch)
			<-release
			return errTestRollback // nothing of it is committed
		})
	}()
	select {
	case <-inBatch:
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not start")
	}
	before := s.Stats()
	got, err := s.GetChat(ctx, scope, c.ID)
	let()
	if err != nil || got.LastSequence != 0 {
		t.Fatalf("GetChat during the writer's batch: %+v, %v; want the committed chat (sequence 0)", got, err)
	}
	if n := s.Stats().WriterReads - before.WriterReads; n != 0 {
		t.Fatalf("%d reads borrowed the writer's connection mid-batch", n)
	}
	if err := <-wrote; err != errTestRollback {
		t.Fatalf("write: %v", err)
	}
	// And the connection is lent again once the batch is rolled back.
	before = s.Stats()
	if got, err := s.GetChat(ctx, scope, c.ID); err != nil || got.LastSequence != 0 {
		t.Fatalf("GetChat after the rollback: %+v, %v", got, err)
	}
	if n := s.Stats().WriterReads - before.WriterReads; n != 1 {
		t.Fatalf("%d reads on the writer's connection after the rollback; want 1", n)
	}
}

// openWithChat opens a store in a temporary folder, closed with the test,
// and creates a chat in it.
func openWithChat(t *testing.T) (*Store, baton.Scope, baton.Chat) {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "baton.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	scope := baton.Scope{App: "app", User: "u"}
	c, err := s.CreateChat(t.Context(), scope, baton.Chat{Workflow: "w"})
	if err != nil {
		t.Fatal(err)
	}
	return s, scope, c
}

var errTestRollback = baton.Errorf(baton.ECONFLICT, "test: roll back")

// TestPointReadsGiveWayToTheWriter: once the writer waits for its
// connection, no read borrows it, even in the moment between a borrowed
// read's end and the writer's taking it (TryLock could take the mutex ahead
// of the waiting writer, again and again).
func TestPointReadsGiveWayToTheWriter(t *testing.T) {
	s, scope, c := openWithChat(t)
	ctx := t.Context()
	for i := range 50 {
		// A borrowed read in progress (the writer may hold its connection
		// for a checkpoint: then borrow again).
		var release func()
		testenv.Eventually(t, 10*time.Second, "a read borrowing the idle writer's connection", func() error {
			st, rel := s.pointRead(ctx, s.r.getChat, getChatSQL)
			if st == s.r.getChat {
				rel()
				return errors.New("the read ran on the pool")
			}
			release = sync.OnceFunc(rel)
			return nil
		})
		t.Cleanup(release) // before the store's Close, which would wait for the writer
		wrote := make(chan error, 1)
		go func() {
			_, err := s.Append(ctx, scope, c.ID, []baton.Event{baton.NewChatEvent(baton.TypeChatText, c.ID, "user", baton.TextPayload{Kind: "text", Content: "hi"})}, nil)
			wrote <- err
		}()
		testenv.Eventually(t, 10*time.Second, "the writer waiting for its connection", func() error {
			if !s.writerWaits.Load() {
				return errors.New("not waiting")
			}
			return nil
		})
		commits := s.Stats().Commits
		release()
		st, release2 := s.pointRead(ctx, s.r.getChat, getChatSQL)
		// A read that borrowed the connection now holds it: the writer
		// cannot commit meanwhile, so the count says whether it had
		// committed first (then the connection was free to borrow).
		tookIt := st != s.r.getChat && s.Stats().Commits == commits
		release2()
		if tookIt {
			t.Fatalf("round %d: a read borrowed the connection the writer was waiting for", i)
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
	}
}
