package postgres

import (
	"context"

	"github.com/batonhq/baton"
	"github.com/jackc/pgx/v5"
)

// DefaultMaxBatch is the most appends one group commit carries.
const DefaultMaxBatch = 512

// appendReq is one single-statement append waiting for the batcher.
type appendReq struct {
	chatID string
	args   []any
	done   chan appendRes // buffered 1
}

type appendRes struct {
	seqs []int64
	err  error
}

// groupAppend hands an append statement to the batcher and waits for its
// commit. The batcher sends every append waiting at that moment, from any
// chats, in one transaction as one pipelined batch: one round trip and one
// WAL flush for all of them (group commit). A caller whose ctx ends before
// the batcher takes its request gets ctx's error and nothing is written;
// once taken, the caller waits for the outcome, so an error always means
// "not written".
func (s *Store) groupAppend(ctx context.Context, chatID string, args []any) ([]int64, error) {
	r := &appendReq{chatID: chatID, args: args, done: make(chan appendRes, 1)}
	select {
	case s.reqs <- r:
	case <-s.closing:
		return nil, baton.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-r.done
	return res.seqs, res.err
}

// runBatcher is the batcher goroutine; Close stops it.
func (s *Store) runBatcher() {
	defer close(s.batcherDone)
	batch := make([]*appendReq, 0, s.maxBatch)
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
		s.commitBatch(batch)
	}
}

// commitBatch commits batch in as few transactions as possible: when append
// i fails, the transaction is rolled back, the appends before i are
// committed again without it, i gets its error, and the rest go on.
func (s *Store) commitBatch(batch []*appendReq) {
	for len(batch) > 0 {
		results, failed, opErr, err := s.tryBatch(batch)
		if opErr == nil {
			if err == nil {
				s.commits.Add(1)
				s.appends.Add(int64(len(batch)))
			}
			for i, r := range batch {
				if err != nil {
					r.done <- appendRes{err: err}
				} else {
					r.done <- results[i]
				}
			}
			return
		}
		s.log.Debug("postgres: append failed in a group commit", "index", failed, "batch", len(batch), "err", opErr)
		if failed > 0 {
			s.commitBatch(batch[:failed])
		}
		batch[failed].done <- appendRes{err: opErr}
		batch = batch[failed+1:]
	}
}

// tryBatch runs batch in one transaction (a batch of one runs alone, as its
// own implicit transaction). If append i fails it rolls back and returns
// (i, its error); otherwise err is the commit's outcome for every append.
func (s *Store) tryBatch(batch []*appendReq) (results []appendRes, failed int, opErr, err error) {
	ctx := context.Background() // callers' contexts only gate entry; see groupAppend
	results = make([]appendRes, len(batch))
	if len(batch) == 1 {
		seqs, err := readSeqs(s.pool.Query(ctx, appendSQL, batch[0].args...))
		if err != nil {
			return nil, 0, appendErr(batch[0].chatID, err), nil
		}
		results[0].seqs = seqs
		return results, 0, nil, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	defer tx.Rollback(ctx) // no-op after Commit
	b := &pgx.Batch{}
	for _, r := range batch {
		b.Queue(appendSQL, r.args...)
	}
	br := tx.SendBatch(ctx, b)
	for i, r := range batch {
		seqs, err := readSeqs(br.Query())
		if err != nil {
			br.Close()
			return nil, i, appendErr(r.chatID, err), nil
		}
		results[i].seqs = seqs
	}
	if err := br.Close(); err != nil {
		return nil, 0, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, 0, nil, err
	}
	return results, 0, nil, nil
}

func readSeqs(rows pgx.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	return seqs, rows.Err()
}

// appendErr turns a failed append statement into the caller's error.
func appendErr(chatID string, err error) error {
	if c, ok := isUnique(err); ok && c == "events_id_chat" {
		return baton.Errorf(baton.ECONFLICT, "chat %q: an event id is already recorded", chatID)
	}
	return err
}
