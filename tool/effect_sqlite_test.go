package tool_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
)

// TestEffectOnceSQLite runs the exactly-once scenarios against the real
// SQLite store, then closes it and opens the file again: the effects
// recorded before the restart are replayed, not run a second time.
func TestEffectOnceSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "baton.db")
	open := func() *sqlite.Store {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := open()
	if _, err := s.CreateChat(ctx, baton.Scope{App: "app", User: "u"}, baton.Chat{ID: "chat-1", App: "app", User: "u", Workflow: "wf"}); err != nil {
		t.Fatalf("create chat: %v", err)
	}
	testEffectOnce(t, s, func() baton.EffectLedger {
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		return open()
	})
}
