// Package store opens the baton.Store a URL names:
//
//	sqlite:PATH              SQLite file at PATH (store/sqlite)
//	sqlite:                  SQLite at ./.baton/baton.db, the default
//	postgres://… postgresql://…   PostgreSQL (store/postgres)
//	mem:                     in memory (store/mem): everything is lost at exit
//
// An empty URL is the default SQLite store. The file's directory is created
// when missing.
package store

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/mem"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/store/sqlite"
)

// DefaultURL is the store baton uses when none is given.
const DefaultURL = "sqlite:" + sqlite.DefaultPath

// Option configures Open.
type Option func(*options)

type options struct {
	log         *slog.Logger
	commitDelay *time.Duration
}

// WithLogger sets the store's logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSQLiteCommitDelay sets a SQLite store's commit delay (see
// sqlite.WithCommitDelay; 0 turns it off). Other stores ignore it.
func WithSQLiteCommitDelay(d time.Duration) Option {
	return func(o *options) { o.commitDelay = &d }
}

// sqliteOptions are the sqlite.Open options o describes.
func (o options) sqliteOptions() []sqlite.Option {
	opts := []sqlite.Option{sqlite.WithLogger(o.log)}
	if o.commitDelay != nil {
		opts = append(opts, sqlite.WithCommitDelay(*o.commitDelay))
	}
	return opts
}

// Open opens the store url names and applies its migrations. The caller
// closes it.
func Open(ctx context.Context, url string, opts ...Option) (baton.Store, error) {
	o := options{log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	switch {
	case url == "":
		return sqlite.Open(ctx, sqlite.DefaultPath, o.sqliteOptions()...)
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//")
		return sqlite.Open(ctx, path, o.sqliteOptions()...)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url, postgres.WithLogger(o.log))
	case url == "mem:" || url == "mem://":
		o.log.Warn("store: in memory (mem:): chats, events and keys are lost when the process exits")
		return mem.New(), nil
	case strings.HasPrefix(url, "mem:"):
		return nil, baton.Errorf(baton.EINVALID, "store %q: a memory store takes no path or options; use mem:", redact(url))
	default:
		return nil, baton.Errorf(baton.EINVALID, "store %q: use sqlite:PATH, postgres://… or mem:", redact(url))
	}
}

// redact drops anything that may be a password from a store URL.
func redact(url string) string {
	if i := strings.Index(url, "@"); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "…" + url[i:]
		}
		return "…" + url[i:]
	}
	return url
}
