package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

const envPath = "BATON_SQLITE_CRASH_PATH"

func TestMain(m *testing.M) {
	if storetest.IsCrashChild() {
		storetest.CrashChildMain(func(ctx context.Context) (baton.Store, error) {
			return sqlite.Open(ctx, os.Getenv(envPath))
		})
	}
	os.Exit(m.Run())
}

// TestCrash kills a process appending to SQLite 20 times (see storetest.RunCrash).
func TestCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.db")
	storetest.RunCrash(t, func(t *testing.T) baton.Store {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, []string{envPath + "=" + path})
}
