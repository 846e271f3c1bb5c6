package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/batonhq/baton"
)

// op is one write, run by the writer goroutine inside a batch transaction.
// An op must have no effect outside the transaction: when a later op of its
// batch fails, the batch is rolled back and the op is run again.
type op func(ctx context.Context, w *wconn) error

// Request states: a request is taken by the writer or cancelled by its
// caller, whichever comes first.
const (
	reqWaiting int32 = iota
	reqTaken
	reqCancelled
)

type request struct {
	ctx   context.Context
	fn    op
	state atomic.Int32
	done  chan error // buffered 1
}

// wconn is the writer's connection with its prepared statements.
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

// exec runs a statement prepared once per query text on the writer connection.
func (w *wconn) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	w.stmts[query] = st
	return st, nil
}

func (w *wconn) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (w *wconn) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := w.stmt(ctx, query)
	if err != nil {
		// Surface the prepare error through the row's Scan.
		return w.conn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// write hands fn to the writer and waits for its batch to commit. On a nil
// error fn's writes are committed (durable per the store's synchronous
// setting); on an error none of them are. A caller whose ctx ends while the
// request still waits in line gets ctx's error and the write never happens;
// once the writer has taken it, the caller waits for the outcome, so an
// error always means "not written".
func (s *Store) write(ctx context.Context, fn op) error {
	if s.closed.Load() {
		return baton.ErrClosed
	}
	r := &request{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.reqs <- r:
	case <-s.closing:
		return baton.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqCancelled) {
			return ctx.Err()
		}
		return <-r.done
	}
}

// run is the writer goroutine: it takes the requests waiting at the moment
// (up to maxBatch) and commits them in one transaction — group commit. One
// fsync then covers every append of the batch, from any number of chats.
func (s *Store) run() {
	defer close(s.writerDone)
	batch := make([]*request, 0, s.maxBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		case <-s.closing:
			return
		}
	drain:
		for len(batch) < s.maxBatch {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		live := batch[:0]
		for _, r := range batch {
			if r.state.CompareAndSwap(reqWaiting, reqTaken) {
				live = append(live, r)
			}
		}
		s.commit(live)
	}
}

// commit runs batch in as few transactions as possible. When op i fails, the
// transaction is rolled back, the ops before i are committed again without
// it (they succeeded, and their inputs are unchanged), op i gets its error,
// and the rest continue in a new transaction.
func (s *Store) commit(batch []*request) {
	for len(batch) > 0 {
		failed, opErr, err := s.apply(batch)
		if opErr == nil {
			for _, r := range batch {
				r.done <- err
			}
			s.commits.Add(1)
			s.ops.Add(int64(len(batch)))
			return
		}
		if failed > 0 {
			s.commit(batch[:failed])
		}
		batch[failed].done <- opErr
		batch = batch[failed+1:]
	}
}

// apply runs batch in one transaction. If op i fails it rolls back and
// returns (i, its error, nil); otherwise it commits and returns the commit's
// error as err, which then applies to every op.
func (s *Store) apply(batch []*request) (failed int, opErr, err error) {
	ctx := context.Background() // requests' contexts only gate entry; see write
	if _, err := s.w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, nil, storeErr("begin", err)
	}
	for i, r := range batch {
		if err := r.fn(ctx, s.w); err != nil {
			if _, rbErr := s.w.conn.ExecContext(ctx, "ROLLBACK"); rbErr != nil {
				s.log.Error("sqlite: rollback failed", "err", rbErr)
			}
			return i, err, nil
		}
	}
	if _, err := s.w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		if _, rbErr := s.w.conn.ExecContext(ctx, "ROLLBACK"); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			s.log.Debug("sqlite: rollback after failed commit", "err", rbErr)
		}
		return len(batch), nil, storeErr("commit", err)
	}
	return len(batch), nil, nil
}
