package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/groupcommit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultMaxBatch is the most appends one group commit carries.
const DefaultMaxBatch = 512

// appendReq is one single-statement append waiting for the batcher.
type appendReq struct {
	chatID string
	args   []any
	plain  *plainAppend   // set when the append changes nothing but the events: it can be merged
	done   chan appendRes // buffered 1
}

// plainAppend is an append's scope and event columns, for mergedSQL.
type plainAppend struct {
	app, user                                    string
	ids, types, agentIDs, agentNames, envs, srcs []string
	ts                                           []int64
	extras, payloads                             []*string
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
func (s *Store) groupAppend(ctx context.Context, chatID string, args []any, plain *plainAppend) ([]int64, error) {
	r := &appendReq{chatID: chatID, args: args, plain: plain, done: make(chan appendRes, 1)}
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
		var ok bool
		if batch, ok = groupcommit.Gather(s.reqs, s.closing, batch, s.maxBatch); !ok {
			return
		}
		// One lock order for every batch: two processes' batchers never
		// deadlock on each other's chat rows. The sort is stable, so the
		// appends of one chat keep their order.
		slices.SortStableFunc(batch, func(a, b *appendReq) int { return strings.Compare(a.chatID, b.chatID) })
		if len(batch) > 1 && s.tryMerged(batch) {
			continue
		}
		s.commitBatch(batch)
	}
}

// lockChatsSQL locks the chats' rows ($1) in the order every batch takes
// them (byte order, as Go sorts the batch): the merged statement alone
// would lock them in whatever order its plan reads the table, and could
// deadlock with another process's batch of the same chats.
const lockChatsSQL = `SELECT 1 FROM chats WHERE id = ANY($1::text[]) ORDER BY id COLLATE "C" FOR UPDATE`

// mergedSQL appends the events of many chats in one statement: $1..$3 list
// each chat once with its scope, $4 its number of events; $6.. are the
// events, each with its chat and its place (ord, from 1) among the chat's.
const mergedSQL = `WITH r AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS r(chat_id, app, user_id, n)
), c AS (
	UPDATE chats SET last_sequence = chats.last_sequence + r.n, updated_at = $5
	FROM r WHERE chats.id = r.chat_id AND (chats.app, chats.user_id) IS NOT DISTINCT FROM (r.app, r.user_id) AND NOT chats.deleted
	RETURNING chats.id, chats.last_sequence - r.n AS base
)
INSERT INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload)
SELECT e.chat_id, c.base + e.ord, e.id, e.type, e.ts, e.agent_id, e.agent_name, e.env_name, e.source, e.extra, e.payload
FROM c JOIN unnest($6::text[], $7::bigint[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
	AS e(chat_id, ord, id, type, ts, agent_id, agent_name, env_name, source, extra, payload) ON e.chat_id = c.id
RETURNING chat_id, sequence`

// tryMerged commits a batch of plain appends as one statement, after
// lockChatsSQL, in one implicit transaction (a pipeline of the two with one
// sync): one round trip for the whole batch. It reports false, having
// written nothing, when the batch cannot be merged or the statement fails
// (a duplicate event id); the caller then commits the batch statement by
// statement.
func (s *Store) tryMerged(batch []*appendReq) bool {
	type chatAcc struct {
		app, user string
		n         int64
	}
	chats := map[string]*chatAcc{}
	var chatIDs, apps, users []string
	var counts []int64
	offsets := make([]int64, len(batch))
	var eChat, eIDs, eTypes, eAgentIDs, eAgentNames, eEnvs, eSrcs []string
	var eOrd, eTS []int64
	var eExtras, ePayloads []*string
	for k, r := range batch {
		p := r.plain
		if p == nil {
			return false
		}
		acc, ok := chats[r.chatID]
		if !ok {
			acc = &chatAcc{app: p.app, user: p.user}
			chats[r.chatID] = acc
			chatIDs, apps, users = append(chatIDs, r.chatID), append(apps, p.app), append(users, p.user)
		} else if acc.app != p.app || acc.user != p.user {
			return false // one chat id asked for in two scopes: let each be judged alone
		}
		offsets[k] = acc.n
		for j := range p.ids {
			eChat = append(eChat, r.chatID)
			eOrd = append(eOrd, acc.n+int64(j)+1)
		}
		acc.n += int64(len(p.ids))
		eIDs, eTypes, eTS = append(eIDs, p.ids...), append(eTypes, p.types...), append(eTS, p.ts...)
		eAgentIDs, eAgentNames, eEnvs, eSrcs = append(eAgentIDs, p.agentIDs...), append(eAgentNames, p.agentNames...), append(eEnvs, p.envs...), append(eSrcs, p.srcs...)
		eExtras, ePayloads = append(eExtras, p.extras...), append(ePayloads, p.payloads...)
	}
	for _, id := range chatIDs {
		counts = append(counts, chats[id].n)
	}
	ctx := context.Background()
	b := &pgx.Batch{}
	b.Queue(lockChatsSQL, chatIDs)
	b.Queue(mergedSQL, chatIDs, apps, users, counts, time.Now(),
		eChat, eOrd, eIDs, eTypes, eTS, eAgentIDs, eAgentNames, eEnvs, eSrcs, eExtras, ePayloads)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return false
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return false
	}
	base := map[string]int64{}
	for rows.Next() {
		var chat string
		var seq int64
		if err := rows.Scan(&chat, &seq); err != nil {
			rows.Close()
			br.Close()
			return false
		}
		if b, ok := base[chat]; !ok || seq-1 < b {
			base[chat] = seq - 1
		}
	}
	rows.Close()
	if rows.Err() != nil || br.Close() != nil {
		return false
	}
	s.commits.Add(1)
	s.appends.Add(int64(len(batch)))
	for k, r := range batch {
		b, ok := base[r.chatID]
		if !ok {
			r.done <- appendRes{} // no sequences: the chat is not in scope
			continue
		}
		seqs := make([]int64, len(r.plain.ids))
		for j := range seqs {
			seqs[j] = b + offsets[k] + int64(j) + 1
		}
		r.done <- appendRes{seqs: seqs}
	}
	return true
}

// commitBatch commits batch in as few transactions as possible: when append
// i fails, the transaction is rolled back, the appends before i are
// committed again without it, i gets its error, and the rest go on. A
// transaction PostgreSQL rolled back to break a deadlock or a
// serialization conflict wrote nothing and blames no append: it is run
// again, a few times.
func (s *Store) commitBatch(batch []*appendReq) {
	for retries := 0; len(batch) > 0; {
		results, failed, opErr, err := s.tryBatch(batch)
		if (retryable(opErr) || retryable(err)) && retries < maxBatchRetries {
			retries++
			s.log.Debug("postgres: group commit rolled back by the database; running it again", "batch", len(batch), "err", cmp.Or(opErr, err))
			continue
		}
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

// maxBatchRetries bounds how many times commitBatch runs a batch again
// after the database rolled it back (retryable).
const maxBatchRetries = 5

// retryable reports whether err is a transaction PostgreSQL rolled back on
// its own, to break a deadlock (40P01) or a serialization conflict
// (40001): it wrote nothing, and running it again may well succeed.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}
