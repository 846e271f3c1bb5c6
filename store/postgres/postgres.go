// Package postgres is baton's production store on PostgreSQL (pgx/v5 pool).
//
// Sequences: an append takes its sequences with one atomic
// `UPDATE chats SET last_sequence = last_sequence + n … RETURNING`, which
// holds the chat row's lock until the transaction ends, and inserts its
// events in the same statement (or transaction). A second appender to the
// chat — in this process or another — waits for that lock and then sees the
// new last_sequence, so a repeat is impossible (and the primary key
// (chat_id, sequence) would refuse one anyway), and a gap is impossible
// because the counter moves only when the events are inserted with it.
//
// Durability: when a write returns nil its transaction is committed, and
// flushed to the WAL on disk: Open sets synchronous_commit=on on every
// connection, whatever the server's or role's default (a DSN that sets
// synchronous_commit itself is obeyed). A write that returns an error was not
// written: the caller's context may end only the wait for a connection (and
// for the batcher); once a write is sent it runs to its end on a context the
// caller cannot cancel (see write), because pgx reports a cancelled context
// as an error even when the server goes on to commit. RenewLease and
// ReleaseLease are the exception: they follow the caller's context (see
// them), so their error after it ended says nothing of the outcome.
//
// Schema: versioned migrations embedded in the binary are applied on Open
// under an advisory lock, which is also held while the schema is created, so
// several processes may open one database (and one new schema) at once.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a baton.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	schema   string
	maxBatch int
	closed   atomic.Bool

	commits, appends atomic.Int64

	reqs        chan *appendReq
	closing     chan struct{}
	batcherDone chan struct{}
}

var _ baton.Store = (*Store)(nil)

// Option configures Open.
type Option func(*config)

type config struct {
	log      *slog.Logger
	schema   string
	maxConns int32
	maxBatch int
}

// WithMaxBatch sets the most appends one group commit carries (default
// DefaultMaxBatch); 1 turns group commit off.
func WithMaxBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBatch = n
		}
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithSchema makes the store live in schema (created if missing) by setting
// search_path on every connection of the pool.
func WithSchema(schema string) Option { return func(c *config) { c.schema = schema } }

// WithMaxConns sets the pool size (default: pgxpool's, max(4, CPUs)).
func WithMaxConns(n int32) Option { return func(c *config) { c.maxConns = n } }

// migrationLock is the advisory lock key that serialises migrations.
const migrationLock = 0x0ba70

// Open connects to the database at dsn (postgres://…), and applies pending
// migrations.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	c := config{log: slog.Default(), maxBatch: DefaultMaxBatch}
	for _, o := range opts {
		o(&c)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, baton.Errorf(baton.EINVALID, "postgres: bad connection string: %w", err)
	}
	if c.maxConns > 0 {
		cfg.MaxConns = c.maxConns
	}
	if c.schema != "" {
		if strings.ContainsAny(c.schema, "\"\x00") {
			return nil, baton.Errorf(baton.EINVALID, "postgres: bad schema name %q", c.schema)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = c.schema
	}
	// A commit is durable only with synchronous_commit on (or stronger),
	// which a server or role may have turned off; the recorder's promise
	// (recorder.Record) rests on it.
	if _, set := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool, log: c.log, schema: c.schema, maxBatch: c.maxBatch,
		reqs: make(chan *appendReq), closing: make(chan struct{}), batcherDone: make(chan struct{})}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	go s.runBatcher()
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	sort.Strings(names)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return fmt.Errorf("postgres: migration lock: %w", err)
		}
		// Under the lock: two processes creating one new schema at once
		// would otherwise race on pg_namespace's unique index, IF NOT
		// EXISTS notwithstanding, and one would fail.
		if s.schema != "" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS "`+s.schema+`"`); err != nil {
				return fmt.Errorf("postgres: create schema %s: %w", s.schema, err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		for _, name := range names {
			base := filepath.Base(name)
			v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
			if err != nil {
				return fmt.Errorf("postgres: migration %s: no version number", base)
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, v).Scan(&n); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", base, err)
			}
			if n > 0 {
				continue
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return fmt.Errorf("postgres: migration %s: %w", base, err)
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", base, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, v); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", base, err)
			}
		}
		return nil
	})
}

// writeTimeout bounds a write once it has been sent, in place of the
// caller's context (see write): long enough for any write to wait out a
// chat row's lock and a busy server, short enough that a write to a server
// that stopped answering does not hang for ever.
const writeTimeout = 30 * time.Second

// write runs fn, one write (a statement or a transaction), on a connection
// of the pool. ctx ends only the wait for the connection, before anything is
// sent; fn runs on a context the caller cannot cancel, bounded by
// writeTimeout. pgx answers a context that ends while a statement or COMMIT
// is in flight with an error although the server may commit it, and an
// error from a store must mean that nothing was written.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, c *pgxpool.Conn) error) error {
	c, err := s.pool.Acquire(ctx) // an ended ctx: its error, nothing sent
	if err != nil {
		return err
	}
	defer c.Release()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	return fn(wctx, c)
}

// writeTx runs fn in a transaction, as write runs a statement.
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return fn(ctx, tx) })
	})
}

// Pool returns the connection pool, for tests and tools.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return baton.ErrClosed
	}
	return s.dbErr("ping", s.pool.Ping(ctx))
}

// Close stops the batcher after the batch in progress and closes the pool,
// waiting for connections in use to be returned.
// Later calls fail with baton.ErrClosed.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.closing)
		<-s.batcherDone
		s.pool.Close()
	}
	return nil
}

// dbErr wraps a database error: baton errors and context errors pass
// through, a closed pool is EUNAVAILABLE, anything else internal.
func (s *Store) dbErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var be *baton.Error
	if errors.As(err, &be) {
		return err
	}
	if s.closed.Load() {
		return baton.ErrClosed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if strings.Contains(err.Error(), "closed pool") {
		return &baton.Error{Code: baton.EUNAVAILABLE, Message: "store closed", Err: err}
	}
	// Text PostgreSQL cannot hold (invalid UTF-8, a NUL character) is bad
	// input, not a fault of the store. The shared validation refuses it
	// before it gets here; this catches a field it does not cover.
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "22021" || pe.Code == "22P05") {
		return &baton.Error{Code: baton.EINVALID, Message: what + ": text PostgreSQL cannot store (invalid UTF-8 or a NUL character)", Err: err}
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// isUnique reports whether err is a unique violation, and of which constraint.
func isUnique(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return pe.ConstraintName, true
	}
	return "", false
}

func (s *Store) check() error {
	if s.closed.Load() {
		return baton.ErrClosed
	}
	return nil
}

// Stats counts the batcher's work since Open.
type Stats struct {
	Commits int64 // group commits
	Appends int64 // appends they carried; Appends/Commits is the mean batch
}

// Stats returns the batcher's counters.
func (s *Store) Stats() Stats { return Stats{Commits: s.commits.Load(), Appends: s.appends.Load()} }
