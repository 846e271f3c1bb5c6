package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store/sqlite"
)

// TestKeysCreateAndRevoke: the printed key resolves to its scope by its
// hash, the database holds no copy of the key, and revoke removes it.
func TestKeysCreateAndRevoke(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "baton.db")
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"keys", "create", "--store", "sqlite:" + db, "--app", "acme", "--user", "ada", "--name", "ci"}, &out, &errb); code != 0 {
		t.Fatalf("keys create: exit %d: %s", code, errb.String())
	}
	key := strings.TrimSpace(out.String())
	if !strings.HasPrefix(key, server.KeyPrefix) || len(key) < 40 {
		t.Fatalf("printed key %q", key)
	}
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	k, err := st.LookupKey(ctx, server.HashKey(key))
	st.Close()
	if err != nil || k.Scope() != (baton.Scope{App: "acme", User: "ada"}) {
		t.Fatalf("lookup: %+v %v", k, err)
	}
	for _, f := range []string{db, db + "-wal"} {
		raw, _ := os.ReadFile(f)
		if bytes.Contains(raw, []byte(key)) || bytes.Contains(raw, []byte(key[len(server.KeyPrefix):])) {
			t.Fatalf("%s holds the key itself", f)
		}
	}
	out.Reset()
	// The key on the command line is refused (it would be in the process
	// list), and nothing is revoked; on stdin it revokes.
	if code := run(ctx, []string{"keys", "revoke", "--store", "sqlite:" + db, "--key", key}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "process list") {
		t.Fatalf("keys revoke --key: exit %d: %s", code, errb.String())
	}
	if st, err := sqlite.Open(ctx, db); err != nil {
		t.Fatal(err)
	} else if _, err := st.LookupKey(ctx, server.HashKey(key)); err != nil {
		st.Close()
		t.Fatalf("a refused revoke removed the key: %v", err)
	} else {
		st.Close()
	}
	stdin = strings.NewReader(key + "\n")
	t.Cleanup(func() { stdin = os.Stdin })
	if code := run(ctx, []string{"keys", "revoke", "--store", "sqlite:" + db}, &out, &errb); code != 0 {
		t.Fatalf("keys revoke < key: exit %d: %s", code, errb.String())
	}
	st, err = sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.LookupKey(ctx, server.HashKey(key)); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("lookup after revoke: %v", err)
	}
	if code := run(ctx, []string{"keys", "create", "--store", "sqlite:" + db, "--app", "acme"}, &out, &errb); code != 2 {
		t.Fatalf("create without --user: exit %d", code)
	}
}

// A key made in a memory store would be gone when the command exits:
// keys refuses mem: as a usage error that says so, printing no key.
func TestKeysRefuseMemStore(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"keys", "create", "--store", "mem:", "--app", "acme", "--user", "ada"}, &out, &errb)
	if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "mem:") || !strings.Contains(errb.String(), "keeps nothing") {
		t.Fatalf("keys create --store mem: exit %d, stdout %q, stderr %q; want 2, no key, and why", code, out.String(), errb.String())
	}
}
