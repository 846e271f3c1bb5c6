// Package sqlite is baton's default store: one SQLite file (modernc.org/sqlite,
// no cgo) in WAL mode.
//
// All writes go through one writer goroutine on one connection, which takes
// every write waiting at that moment and commits them in one transaction
// (group commit): appends from many chats share one fsync, and the appends
// and usage rows of a batch run as a few multi-row statements (bulk.go)
// rather than a few statements each. Reads use a separate pool of read-only
// connections, which WAL lets run while the writer writes; the reads with a
// fixed text are prepared once, at Open (reads.go). A point read (a chat, its
// inbox, a key) runs on the writer's connection instead when the writer is
// idle, as its page cache is current (pointRead). A goroutine with a
// connection of its own copies the WAL into the database file in the
// background, so that no commit waits for a checkpoint (checkpoint.go). The
// schema is created and upgraded on Open by versioned migrations embedded in
// the binary.
//
// Durability: the database runs with synchronous=FULL unless Open is given
// WithSynchronous("NORMAL"), so when a write method returns nil its
// transaction is in the WAL on disk and survives a crash of the process or
// of the machine (with NORMAL: of the process only). A write that returns an
// error was not written at all: a caller's context ends only the wait for
// the writer, never a write the writer has taken (see write).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultPath is where the store lives when no path is given.
const DefaultPath = ".baton/baton.db"

// DefaultMaxBatch is the most writes committed in one transaction.
const DefaultMaxBatch = 512

// Store is a baton.Store on one SQLite file. It is safe for concurrent use.
type Store struct {
	path     string
	log      *slog.Logger
	maxBatch int
	sync     string
	// commitDelay bounds the writer's wait for more writes under load.
	commitDelay time.Duration

	rdb *sql.DB // read-only pool
	wdb *sql.DB // the writer's single connection
	cdb *sql.DB // the checkpointer's single connection
	w   *wconn
	// wmu is held by the writer for each batch (and checkpoint) it runs
	// on w, and by a point read that borrows w meanwhile (pointRead).
	// writerWaits is set while the writer waits for wmu: no new read
	// borrows w then, or reads one after another could keep it out
	// (TryLock may take a mutex ahead of a goroutine waiting in Lock).
	wmu         sync.Mutex
	writerWaits atomic.Bool
	r           readStmts // prepared on rdb

	reqs       chan *request
	apps       []*request // the writer's scratch: a batch's appends
	uses       []*request // the writer's scratch: a batch's usage rows
	acks       []ack      // the writer's: outcomes of the batch to deliver
	closing    chan struct{}
	writerDone chan struct{}
	ckptKick   chan struct{} // buffered 1: something was committed
	ckptDone   chan struct{}
	ckptAsk    atomic.Bool // the checkpointer asks the writer to finish a checkpoint
	closed     atomic.Bool
	closeOnce  sync.Once

	commits, ops atomic.Int64
	reads        atomic.Int64 // read queries (Stats.Reads)
	writerReads  atomic.Int64 // read queries run on the writer's connection (Stats.WriterReads)
}

var _ baton.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithMaxBatch sets the most writes one transaction commits (default
// DefaultMaxBatch). 1 turns group commit off: every write is its own
// transaction and its own fsync.
func WithMaxBatch(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxBatch = n
		}
	}
}

// DefaultCommitDelay is the longest the writer waits for more writes
// before it commits a batch under load (see WithCommitDelay).
const DefaultCommitDelay = time.Millisecond

// WithCommitDelay sets the longest the writer waits for more writes before
// it commits a batch under load (default DefaultCommitDelay; 0 turns the
// wait off). It waits only when the batch at hand and the one before each
// hold two writes or more, the one at hand fewer than 16, and never longer
// than the previous commit took. A lone write is committed at once; under
// load a write waits up to one more commit's time, and the larger batches
// take longer to commit (at 10,000 appends a second the median append took
// 1.9–2.0 ms instead of 0.7), in return for several times fewer commits and
// fsyncs, about half of the writer's CPU when its batches are small. When
// every writer is already in the batch (a few chats in lockstep), nobody
// else comes and the batch waits the whole time; at 2 to 8 chats in flight
// that measured no slower. Turn it off where the latency of each write
// matters more than the CPU. What a returned write means is unchanged: it
// is committed, durable as WithSynchronous says.
func WithCommitDelay(d time.Duration) Option {
	return func(s *Store) { s.commitDelay = max(d, 0) }
}

// WithSynchronous sets PRAGMA synchronous: "FULL" (the default; a returned
// write survives power loss) or "NORMAL" (a returned write survives a crash
// of the process but the last commits may be lost on power loss).
func WithSynchronous(mode string) Option { return func(s *Store) { s.sync = mode } }

// Open opens (creating when needed) the store at path, creating its
// directory, and applies pending migrations. An empty path is DefaultPath.
// It starts the writer goroutine, which Close stops.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	if path == "" {
		path = DefaultPath
	}
	s := &Store{path: path, log: slog.Default(), maxBatch: DefaultMaxBatch, sync: "FULL", commitDelay: DefaultCommitDelay}
	for _, o := range opts {
		o(s)
	}
	switch s.sync {
	case "FULL", "NORMAL":
	default:
		return nil, baton.Errorf(baton.EINVALID, "sqlite: synchronous %q is not FULL or NORMAL", s.sync)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("sqlite: create directory %s: %w", dir, err)
		}
	}
	dsn := func(extra ...string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+s.sync+")")
		q.Add("_pragma", "cache_size(-65536)") // 64 MiB of page cache per connection
		for _, e := range extra {
			q.Add("_pragma", e)
		}
		return "file:" + path + "?" + q.Encode()
	}
	var err error
	// The writer leaves checkpoints to the checkpointer (see checkpoint.go).
	if s.wdb, err = sql.Open("sqlite", dsn("wal_autocheckpoint(0)")); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.w = &wconn{conn: conn, stmts: map[string]*sql.Stmt{}}
	if err := s.migrate(ctx); err != nil {
		conn.Close()
		s.wdb.Close()
		return nil, err
	}
	if s.rdb, err = sql.Open("sqlite", dsn("query_only(1)")); err != nil {
		conn.Close()
		s.wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.rdb.SetMaxOpenConns(8)
	s.rdb.SetMaxIdleConns(8)
	if s.cdb, err = sql.Open("sqlite", dsn("cache_size(-2048)")); err != nil {
		conn.Close()
		s.wdb.Close()
		s.rdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.cdb.SetMaxOpenConns(1)
	s.cdb.SetMaxIdleConns(1)
	s.cdb.SetConnMaxLifetime(0)
	if err := s.prepareReads(ctx); err != nil {
		conn.Close()
		s.wdb.Close()
		s.rdb.Close()
		s.cdb.Close()
		return nil, err
	}
	// Buffered, so that handing a request to the writer costs no
	// goroutine switch when the writer is busy.
	s.reqs = make(chan *request, 4*s.maxBatch)
	s.closing = make(chan struct{})
	s.writerDone = make(chan struct{})
	s.ckptKick = make(chan struct{}, 1)
	s.ckptDone = make(chan struct{})
	go s.run()
	go s.checkpointer()
	return s, nil
}

// migrate applies the embedded migrations not yet recorded in
// schema_migrations, each in its own transaction, in version order.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("sqlite: migrations: %w", err)
	}
	sort.Strings(names)
	c := s.w.conn
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return storeErr("migrate", err)
	}
	for _, name := range names {
		base := filepath.Base(name)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: no version number", base)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", base, err)
		}
		if err := func() error {
			if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				return err
			}
			var n int
			if err := c.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
				c.ExecContext(ctx, "ROLLBACK")
				return err
			}
			if n > 0 {
				_, err := c.ExecContext(ctx, "COMMIT")
				return err
			}
			if _, err := c.ExecContext(ctx, string(body)); err != nil {
				c.ExecContext(ctx, "ROLLBACK")
				return err
			}
			if _, err := c.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, time.Now().UnixMicro()); err != nil {
				c.ExecContext(ctx, "ROLLBACK")
				return err
			}
			_, err := c.ExecContext(ctx, "COMMIT")
			return err
		}(); err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", base, err)
		}
	}
	return nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Stats counts the store's work since Open.
type Stats struct {
	Commits int64 // transactions committed
	Writes  int64 // writes committed; Writes/Commits is the mean batch
	// Reads counts the read queries (one Events call may run several).
	// A read on a read connection pays for its page cache again whenever
	// a commit came between, so reads a turn is a cost tracked like
	// commits a turn.
	Reads int64
	// WriterReads counts the reads among them that ran on the writer's
	// connection, whose cache the commits keep (see pointRead).
	WriterReads int64
}

// CommitDelay returns the longest the writer waits for more writes under
// load (WithCommitDelay).
func (s *Store) CommitDelay() time.Duration { return s.commitDelay }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Writes: s.ops.Load(), Reads: s.reads.Load(), WriterReads: s.writerReads.Load()}
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return baton.ErrClosed
	}
	if err := s.rdb.PingContext(ctx); err != nil {
		return storeErr("ping", err)
	}
	return nil
}

// Close stops the writer after the batch in progress and closes the
// database. Writes accepted before Close are committed; later calls fail
// with baton.ErrClosed.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		<-s.writerDone
		<-s.ckptDone
		s.wmu.Lock() // after a borrowed read, and for good: none borrows a closed connection
		for _, st := range s.w.stmts {
			st.Close()
		}
		err = errors.Join(s.r.close(), s.cdb.Close(), s.rdb.Close(), s.w.conn.Close(), s.wdb.Close())
	})
	return err
}

// storeErr wraps a database error: EUNAVAILABLE for a closed database or a
// busy one, EINTERNAL (no code) otherwise.
func storeErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var be *baton.Error
	if errors.As(err, &be) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "database is closed") {
		return &baton.Error{Code: baton.EUNAVAILABLE, Message: "store closed", Err: err}
	}
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_BUSY || se.Code()&0xff == sqlite3.SQLITE_LOCKED) {
		return &baton.Error{Code: baton.EUNAVAILABLE, Message: "store busy", Err: err}
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

func (s *Store) readErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return baton.ErrClosed
	}
	return storeErr(what, err)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
