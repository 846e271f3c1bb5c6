package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

func openTemp(t testing.TB, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "baton.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) baton.Store { return openTemp(t) })
}

func TestTwoHandlesOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baton.db")
	var stores []*sqlite.Store
	for range 2 {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	storetest.RunTwoWriters(t, stores[0], stores[1])
}
