package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/batonhq/baton"
)

var _ baton.KeyStore = (*Store)(nil)

// CreateKey stores an API key's hash and scope; see baton.KeyStore.
func (s *Store) CreateKey(ctx context.Context, k baton.APIKey) (baton.APIKey, error) {
	if err := k.Validate(); err != nil {
		return baton.APIKey{}, err
	}
	k.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	k.Revoked = false
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		_, err := w.exec(ctx, `INSERT INTO api_keys (hash, app, user_id, name, created_at) VALUES (?, ?, ?, ?, ?)`,
			k.Hash, k.App, k.User, k.Name, micros(k.CreatedAt))
		if isUnique(err) {
			return baton.Errorf(baton.ECONFLICT, "api key: hash already in use")
		}
		return storeErr("create key", err)
	})
	if err != nil {
		return baton.APIKey{}, err
	}
	return k, nil
}

// LookupKey returns the live key with this hash; see baton.KeyStore.
func (s *Store) LookupKey(ctx context.Context, hash string) (baton.APIKey, error) {
	if s.closed.Load() {
		return baton.APIKey{}, baton.ErrClosed
	}
	k := baton.APIKey{Hash: hash}
	var created int64
	s.reads.Add(1)
	st, release := s.pointRead(ctx, s.r.lookupKey, lookupKeySQL)
	defer release()
	err := st.QueryRowContext(ctx, hash).Scan(&k.App, &k.User, &k.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return baton.APIKey{}, baton.Errorf(baton.ENOTFOUND, "api key not found")
	}
	if err != nil {
		return baton.APIKey{}, s.readErr("lookup key", err)
	}
	k.CreatedAt = fromMicros(created)
	return k, nil
}

// RevokeKey revokes the key with this hash; see baton.KeyStore.
func (s *Store) RevokeKey(ctx context.Context, hash string) error {
	return s.write(ctx, func(ctx context.Context, w *wconn) error {
		res, err := w.exec(ctx, `UPDATE api_keys SET revoked = 1 WHERE hash = ?`, hash)
		if err != nil {
			return storeErr("revoke key", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return baton.Errorf(baton.ENOTFOUND, "api key not found")
		}
		return nil
	})
}
