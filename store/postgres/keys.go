package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/batonhq/baton"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var _ baton.KeyStore = (*Store)(nil)

// CreateKey stores an API key's hash and scope; see baton.KeyStore.
func (s *Store) CreateKey(ctx context.Context, k baton.APIKey) (baton.APIKey, error) {
	if err := s.check(); err != nil {
		return baton.APIKey{}, err
	}
	if err := k.Validate(); err != nil {
		return baton.APIKey{}, err
	}
	k.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	k.Revoked = false
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO api_keys (hash, app, user_id, name, created_at) VALUES ($1, $2, $3, $4, $5)`,
			k.Hash, k.App, k.User, k.Name, k.CreatedAt)
		if _, ok := isUnique(err); ok {
			return baton.Errorf(baton.ECONFLICT, "api key: hash already in use")
		}
		return err
	})
	if err != nil {
		return baton.APIKey{}, s.dbErr("create key", err)
	}
	return k, nil
}

// LookupKey returns the live key with this hash; see baton.KeyStore.
func (s *Store) LookupKey(ctx context.Context, hash string) (baton.APIKey, error) {
	if err := s.check(); err != nil {
		return baton.APIKey{}, err
	}
	k := baton.APIKey{Hash: hash}
	err := s.pool.QueryRow(ctx, `SELECT app, user_id, name, created_at FROM api_keys WHERE hash = $1 AND NOT revoked`, hash).
		Scan(&k.App, &k.User, &k.Name, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return baton.APIKey{}, baton.Errorf(baton.ENOTFOUND, "api key not found")
	}
	if err != nil {
		return baton.APIKey{}, s.dbErr("lookup key", err)
	}
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

// RevokeKey revokes the key with this hash; see baton.KeyStore.
func (s *Store) RevokeKey(ctx context.Context, hash string) error {
	if err := s.check(); err != nil {
		return err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE api_keys SET revoked = TRUE WHERE hash = $1`, hash)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return s.dbErr("revoke key", err)
	}
	if n == 0 {
		return baton.Errorf(baton.ENOTFOUND, "api key not found")
	}
	return nil
}
