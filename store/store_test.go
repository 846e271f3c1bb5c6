package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/jackc/pgx/v5"
)

func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nested", "dir", "baton.db")
	s, err := store.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created: %v", err)
	}
}

func TestOpenDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	s, err := store.Open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(".baton", "baton.db")); err != nil {
		t.Fatalf("default store not under ./.baton: %v", err)
	}
}

func TestOpenPostgres(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := "batontest_open_" + strings.ReplaceAll(baton.NewID(), "-", "")
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	s, err := store.Open(ctx, dsn+sep+"search_path="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestOpenUnknown(t *testing.T) {
	_, err := store.Open(context.Background(), "mysql://root:hunter2@db/x")
	if baton.ErrorCode(err) != baton.EINVALID {
		t.Fatalf("Open(mysql) = %v, want invalid", err)
	}
	if msg := baton.ErrorMessage(err); strings.Contains(msg, "hunter2") {
		t.Fatalf("error leaks the password: %s", msg)
	}
}

// mem: opens an empty memory store; anything after the colon is refused,
// naming the URL (a memory store has no path to give).
func TestOpenMem(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, "mem:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.CreateChat(ctx, baton.Scope{App: "a", User: "u"}, baton.Chat{Workflow: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetChat(ctx, baton.Scope{App: "a", User: "u"}, c.ID); err != nil {
		t.Fatal(err)
	}
	// Another mem: store is another, empty, store.
	other, err := store.Open(ctx, "mem:")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.GetChat(ctx, baton.Scope{App: "a", User: "u"}, c.ID); baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("a second mem: store has the first one's chat: %v", err)
	}
	_, err = store.Open(ctx, "mem:/tmp/x")
	if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(baton.ErrorMessage(err), "mem:/tmp/x") {
		t.Fatalf("Open(mem:/tmp/x) = %v, want invalid naming the URL", err)
	}
}

// TestOpenSQLiteCommitDelay: the commit delay given to Open reaches the
// SQLite store; without it the store has its default.
func TestOpenSQLiteCommitDelay(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []store.Option
		want time.Duration
	}{
		{"default", nil, sqlite.DefaultCommitDelay},
		{"off", []store.Option{store.WithSQLiteCommitDelay(0)}, 0},
		{"set", []store.Option{store.WithSQLiteCommitDelay(3 * time.Millisecond)}, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "baton.db"), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.(*sqlite.Store).CommitDelay(); got != tc.want {
				t.Fatalf("commit delay %v; want %v", got, tc.want)
			}
		})
	}
}
