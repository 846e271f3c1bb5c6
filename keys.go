package baton

import (
	"context"
	"time"
)

// APIKey is a stored API key: never the key itself, only its hash, and the
// scope it grants. A request that presents the key acts as (App, User).
type APIKey struct {
	// Hash is the hex SHA-256 of the key; the key itself is shown once, at
	// creation, and never stored.
	Hash      string
	App, User string
	// Name is a label for people (what the key is for).
	Name      string
	CreatedAt time.Time
	// Revoked is true once the key was revoked; LookupKey never returns one.
	Revoked bool
}

// Scope returns the tenant scope the key grants.
func (k APIKey) Scope() Scope { return Scope{App: k.App, User: k.User} }

// Validate checks a key to create: a SHA-256 hash in hex (64 characters),
// an app, a user and a valid scope. Every KeyStore calls it in CreateKey,
// so that the stores refuse the same keys with the same messages.
func (k APIKey) Validate() error {
	switch {
	case len(k.Hash) != 64:
		return Errorf(EINVALID, "api key hash: want 64 hex characters (SHA-256)")
	case k.App == "":
		return Errorf(EINVALID, "api key app: required")
	case k.User == "":
		return Errorf(EINVALID, "api key user: required")
	}
	if err := k.Scope().Validate(); err != nil {
		return Errorf(EINVALID, "api key %s", ErrorMessage(err))
	}
	return nil
}

// KeyStore keeps API keys by hash. store/sqlite and store/postgres implement it.
type KeyStore interface {
	// CreateKey stores a key's hash with the scope it grants; a hash in use
	// is ECONFLICT.
	CreateKey(ctx context.Context, k APIKey) (APIKey, error)
	// LookupKey returns the live (not revoked) key with this hash, or ENOTFOUND.
	LookupKey(ctx context.Context, hash string) (APIKey, error)
	// RevokeKey revokes the key with this hash; an unknown hash is ENOTFOUND.
	RevokeKey(ctx context.Context, hash string) error
}
