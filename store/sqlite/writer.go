package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/groupcommit"
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
	app   *appendReq // an Append, which the writer may run in bulk; fn runs it alone
	use   *usageReq  // a RecordUsage, which the writer may run in bulk; fn runs it alone
	state atomic.Int32
	done  chan error // buffered 1
}

// wconn is the writer's connection with its prepared statements.
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	args  []any // reused by bulkAppend for its statements' arguments
	// inTx: a transaction of the writer's is open, from its BEGIN until
	// its COMMIT or ROLLBACK succeeds; a point read never borrows the
	// connection then, where it would see writes not committed.
	inTx bool
}

// stmt returns the statement for query, prepared once on the writer
// connection.
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

// exec runs a statement prepared once per query text on the writer connection.
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
	return s.submit(ctx, &request{ctx: ctx, fn: fn, done: make(chan error, 1)})
}

func (s *Store) submit(ctx context.Context, r *request) error {
	if s.closed.Load() {
		return baton.ErrClosed
	}
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
	case <-s.writerDone:
		// The writer stopped with r still in the queue, or took it and
		// its outcome is on the way.
		if r.state.CompareAndSwap(reqWaiting, reqCancelled) {
			return baton.ErrClosed
		}
		return <-r.done
	}
}

// ack is a request's outcome, to be delivered once its batch is over.
type ack struct {
	r   *request
	err error
}

// deliverAcks hands the outcomes of a batch to their callers. For a large
// batch that is hundreds of goroutines to wake, each wake-up a trip through
// the scheduler and often a futex call; another goroutine does it, on the
// other core, while the writer starts the next batch.
func (s *Store) deliverAcks() {
	acks := s.acks
	if len(acks) <= 8 {
		for i, a := range acks {
			a.r.done <- a.err
			acks[i] = ack{}
		}
		s.acks = acks[:0]
		return
	}
	s.acks = make([]ack, 0, cap(acks))
	go func() {
		for _, a := range acks {
			a.r.done <- a.err
		}
	}()
}

// run is the writer goroutine: it takes the requests waiting at the moment
// (up to maxBatch) and commits them in one transaction — group commit. One
// fsync then covers every append of the batch, from any number of chats.
// A lone write never waits for company: as soon as the writer is idle it
// commits what has arrived, so one chat at a time pays one commit per write
// and no more, and under load the batch grows by itself to what arrived
// during the previous commit.
//
// Under load it also waits a little for more (the commit delay, lingerFor)
// before it begins. A commit has a fixed cost: its fsync, and two pwrites
// for each WAL frame of a page any write touched; with batches of three or
// four writes (1,000 chats appending 10,000 events a second, or 50
// production turns in flight) that was about half of the writer's CPU.
// Waiting makes the batches several times larger, for about half the
// writer's CPU per event at that rate and about 15 % more of issue 25's
// turns a second; the price is latency (docs/performance.md, "The commit
// delay", has the figures).
func (s *Store) run() {
	defer close(s.writerDone)
	batch := make([]*request, 0, s.maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var prevBatch int            // requests in the previous batch
	var prevCommit time.Duration // how long its commit took
	for {
		var ok bool
		if batch, ok = groupcommit.Gather(s.reqs, s.closing, batch, s.maxBatch); !ok {
			return
		}
		if d := lingerFor(len(batch), prevBatch, prevCommit, s.commitDelay); d > 0 {
			batch = groupcommit.Linger(s.reqs, s.closing, linger, d, batch, s.maxBatch)
		}
		prevBatch = len(batch)
		// Usage rows, then appends, go last, where apply runs them in
		// bulk; any order is correct because every request of a batch was
		// waiting at once, none of them having returned to its caller
		// (they are concurrent).
		live, uses, apps := batch[:0], s.uses[:0], s.apps[:0]
		for _, r := range batch {
			if !r.state.CompareAndSwap(reqWaiting, reqTaken) {
				continue
			}
			switch {
			case r.app != nil:
				apps = append(apps, r)
			case r.use != nil:
				uses = append(uses, r)
			default:
				live = append(live, r)
			}
		}
		live = append(append(live, uses...), apps...)
		s.lockConn() // after a point read that borrowed the connection, if one did
		start := time.Now()
		s.commit(live, len(uses)+len(apps))
		prevCommit = time.Since(start)
		s.wmu.Unlock()
		s.deliverAcks()
		clear(batch)
		clear(uses)
		clear(apps)
		s.uses, s.apps = uses[:0], apps[:0]
		s.checkpointIfAsked()
	}
}

// lockConn takes the writer's connection back from a point read that
// borrowed it (pointRead), keeping further reads from borrowing it while it
// waits.
func (s *Store) lockConn() {
	if s.wmu.TryLock() {
		return
	}
	s.writerWaits.Store(true)
	s.wmu.Lock()
	s.writerWaits.Store(false)
}

// lingerBelow is the batch size from which the writer no longer waits for
// more writes (see lingerFor).
const lingerBelow = 16

// lingerFor is how long the writer waits for more writes before it commits
// a batch of n, when the previous batch held prevN and its commit took
// prevCommit, with the commit delay set to delay (0: none).
//
// It waits only when both batches held two writes or more: one chat at a
// time never waits, and two batches in a row say that writers keep
// coming. It does not wait for a batch of lingerBelow or more, which
// already spreads a commit's fixed cost thin: waiting then only let the
// batches snowball (at 25,000 events a second to over 100 writes, with
// three times the median latency). And it waits no longer than the
// previous commit took, so a write spends at most about one more commit's
// time in the store, and a fast disk waits less.
func lingerFor(n, prevN int, prevCommit, delay time.Duration) time.Duration {
	if n < 2 || prevN < 2 || n >= lingerBelow {
		return 0
	}
	return max(min(delay, prevCommit), 0)
}

// errBulk makes commit run the usage rows and appends of a batch one at a
// time: bulkAppend met a case it cannot attribute to one append (a
// duplicate event id, a failed chat update, one chat id under two scopes),
// or bulkUsage a row out of its chat's scope.
var errBulk = errors.New("sqlite: bulk append needs the one-at-a-time path")

// commit runs batch, whose last nbulk requests are usage rows and appends
// (in that order) it may run in bulk, in as few transactions as possible. When op i fails, the
// transaction is rolled back, the ops before i are committed again without
// it (they succeeded, and their inputs are unchanged), op i gets its error,
// and the rest continue in a new transaction. When the bulk appends fail,
// they are run again one at a time, which attributes the failure.
func (s *Store) commit(batch []*request, nbulk int) {
	for len(batch) > 0 {
		failed, opErr, err := s.apply(batch, nbulk)
		if opErr == nil {
			written := 0
			for i, r := range batch {
				if err == nil && i >= len(batch)-nbulk && r.app != nil && r.app.err != nil {
					s.acks = append(s.acks, ack{r, r.app.err}) // this append alone failed; bulkAppend wrote nothing of it
					continue
				}
				s.acks = append(s.acks, ack{r, err})
				written++
			}
			// Only what was written counts: an append bulkAppend refused
			// (its chat out of scope or deleted) is no write, and a batch of
			// nothing else commits an empty transaction, which is no commit
			// either (no WAL frame, no fsync), as on the one-at-a-time path.
			if err == nil && written > 0 {
				s.commits.Add(1)
				s.ops.Add(int64(written))
			}
			s.kickCheckpointer()
			return
		}
		if opErr == errBulk {
			nbulk = 0
			continue
		}
		if failed > 0 {
			// batch[failed] is not run in bulk (those fail as errBulk),
			// so no op before it is either: they come last.
			s.commit(batch[:failed], 0)
		}
		s.acks = append(s.acks, ack{batch[failed], opErr})
		batch = batch[failed+1:]
		nbulk = min(nbulk, len(batch))
	}
}

// apply runs batch in one transaction, the last nbulk requests (usage rows,
// then appends) through bulkUsage and bulkAppend. If op i fails it rolls
// back and returns (i, its error, nil), and if the bulk part fails it
// returns (the first of it, errBulk, nil); otherwise it commits and returns the commit's error as err, which
// then applies to every op.
func (s *Store) apply(batch []*request, nbulk int) (failed int, opErr, err error) {
	ctx := context.Background() // requests' contexts only gate entry; see write
	w := s.w
	if _, err := w.exec(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, nil, storeErr("begin", err)
	}
	w.inTx = true
	rollback := func() {
		// A failed OR ROLLBACK statement of bulkAppend has already ended
		// the transaction.
		if _, rbErr := w.exec(ctx, "ROLLBACK"); rbErr != nil && !strings.Contains(rbErr.Error(), "no transaction is active") {
			s.log.Error("sqlite: rollback failed", "err", rbErr)
			return
		}
		w.inTx = false
	}
	one := batch[:len(batch)-nbulk]
	for i, r := range one {
		if err := r.fn(ctx, w); err != nil {
			rollback()
			return i, err, nil
		}
	}
	if nbulk > 0 {
		bulk := batch[len(one):]
		nuse := 0
		for nuse < len(bulk) && bulk[nuse].use != nil {
			nuse++
		}
		err := bulkUsage(ctx, w, bulk[:nuse])
		if err == nil && nuse < len(bulk) {
			err = bulkAppend(ctx, w, bulk[nuse:])
		}
		if err != nil {
			rollback()
			if err != errBulk {
				s.log.Debug("sqlite: bulk write failed, running the writes one at a time", "err", err)
			}
			return len(one), errBulk, nil
		}
	}
	if _, err := w.exec(ctx, "COMMIT"); err != nil {
		if _, rbErr := w.conn.ExecContext(ctx, "ROLLBACK"); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			s.log.Debug("sqlite: rollback after failed commit", "err", rbErr)
			if strings.Contains(rbErr.Error(), "no transaction is active") {
				w.inTx = false // the failed COMMIT ended it
			}
		} else {
			w.inTx = false
		}
		return len(batch), nil, storeErr("commit", err)
	}
	w.inTx = false
	return len(batch), nil, nil
}
