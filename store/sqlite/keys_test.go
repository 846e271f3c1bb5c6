package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

func TestKeys(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.RunKeys(t, s)
}
