package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// TestWALStartsOver checks that under steady appends, with the writer's own
// checkpoints off, the background checkpointer still lets the WAL start over
// instead of growing with everything ever written, and that nothing is lost
// on the way.
func TestWALStartsOver(t *testing.T) {
	defer func(r, c, p int, i, m time.Duration) {
		walRestartFrames, walCaughtUp, ckptPages, ckptInterval, ckptMaxInterval = r, c, p, i, m
	}(walRestartFrames, walCaughtUp, ckptPages, ckptInterval, ckptMaxInterval)
	walRestartFrames, walCaughtUp, ckptPages, ckptInterval, ckptMaxInterval = 256, 64, 64, time.Millisecond, 4*time.Millisecond

	path := filepath.Join(t.TempDir(), "baton.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	scope := baton.Scope{App: "app", User: "user"}
	const chats, appends = 20, 300
	ids := make([]string, chats)
	for i := range ids {
		c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "wal"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	payload := []byte(`{"kind":"text","content":"padding padding padding padding padding padding padding padding"}`)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for range appends {
				e := baton.NewEvent(baton.TypeChatText, baton.Metadata{Source: baton.SourceLLM}, payload)
				if _, err := s.Append(ctx, scope, id, []baton.Event{e}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// Every append dirties a page or more, so without a restart the WAL
	// would hold chats*appends pages and more; restarts keep it near
	// walRestartFrames (4x is the most the checkpointer lets it grow before
	// it asks the writer regardless). The file never shrinks, so its size is
	// the most it ever held: the bound is half of what a WAL that never
	// started over would hold, which a checkpointer stalled by a slow disk
	// for a while still keeps under.
	written := int64(chats * appends * 4096)
	limit := written / 2
	if fi.Size() > limit {
		t.Errorf("WAL is %d bytes after about %d bytes written; want at most %d", fi.Size(), written, limit)
	}
	for _, id := range ids {
		evs, err := s.Events(ctx, scope, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != appends || evs[len(evs)-1].Sequence != appends {
			t.Fatalf("chat %s: %d events", id, len(evs))
		}
	}
	var check string
	if err := s.rdb.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
}
