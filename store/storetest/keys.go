package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// RunKeys checks a baton.KeyStore: a created key is found by its hash with
// the scope it grants, a duplicate hash is ECONFLICT, a revoked or unknown
// key is ENOTFOUND, and a malformed key is EINVALID.
func RunKeys(t *testing.T, ks baton.KeyStore) {
	ctx := context.Background()
	scope := NewScope()
	sum := sha256.Sum256([]byte("key-" + baton.NewID()))
	hash := hex.EncodeToString(sum[:])
	k, err := ks.CreateKey(ctx, baton.APIKey{Hash: hash, App: scope.App, User: scope.User, Name: "ci"})
	if err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if k.CreatedAt.IsZero() {
		t.Errorf("CreateKey: CreatedAt not set")
	}
	got, err := ks.LookupKey(ctx, hash)
	if err != nil {
		t.Fatalf("LookupKey: %v", err)
	}
	if got.Scope() != scope || got.Name != "ci" || got.Hash != hash {
		t.Errorf("LookupKey = %+v, want scope %+v name ci", got, scope)
	}
	if _, err := ks.CreateKey(ctx, baton.APIKey{Hash: hash, App: "other", User: "other"}); !errors.Is(err, baton.ErrConflict) {
		t.Errorf("CreateKey duplicate: %v, want conflict", err)
	}
	for _, bad := range []baton.APIKey{{Hash: "short", App: "a", User: "u"}, {Hash: hash[:63] + "0", User: "u"}, {Hash: hash[:63] + "0", App: "a"},
		{Hash: hash[:63] + "0", App: "\xff", User: "u"}, {Hash: hash[:63] + "0", App: "a\x00b", User: "u"}, {Hash: hash[:63] + "0", App: "a", User: strings.Repeat("u", 129)}} {
		if _, err := ks.CreateKey(ctx, bad); !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("CreateKey(%+v): %v, want invalid", bad, err)
		}
	}
	unknown := sha256.Sum256([]byte("unknown-" + baton.NewID()))
	if _, err := ks.LookupKey(ctx, hex.EncodeToString(unknown[:])); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("LookupKey unknown: %v, want not found", err)
	}
	if err := ks.RevokeKey(ctx, hash); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if _, err := ks.LookupKey(ctx, hash); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("LookupKey after revoke: %v, want not found", err)
	}
	if err := ks.RevokeKey(ctx, hex.EncodeToString(unknown[:])); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("RevokeKey unknown: %v, want not found", err)
	}
}
