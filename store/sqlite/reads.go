package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/batonhq/baton"
)

// readStmts are the reads with a fixed text, prepared once on the read pool
// at Open. modernc.org/sqlite compiles a statement's SQL every time it is
// prepared, and database/sql prepares a query that is not a *sql.Stmt on
// every call: at 1,000 chats in flight that compiling was half of GetChat's
// cost, which the engine pays at the start of every input. A *sql.Stmt is
// safe for concurrent use and prepares itself again, lazily, on each
// connection of the pool it runs on. Queries built at run time (ListChats
// with its filters, the stats reads) are not here.
type readStmts struct {
	getChat *sql.Stmt // the chat row and its pending requests, one query
	chatSeq *sql.Stmt // the chat's last sequence, in scope
	// firstEvents is the chat's last sequence, in scope, with the first
	// block of events after a sequence: a replay that has nothing to page
	// through is one query.
	firstEvents *sql.Stmt
	events      *sql.Stmt
	bigEvents   *sql.Stmt
	chatUsage   *sql.Stmt
	lookupKey   *sql.Stmt
	getTask     *sql.Stmt
	getLease    *sql.Stmt
	inputs      *sql.Stmt // the chat's waiting inputs, in scope (a run reads them at every pause)
}

const (
	// getChatSQL returns one row per pending request of the chat, or one
	// row with NULL request columns when there is none. The scope is in
	// the WHERE clause, as in every read of a chat. GetChat orders the
	// requests: an ORDER BY here costs a sorter on every call, for the
	// one row there almost always is. Its two columns pack the chat and
	// the request (NULL when there is none: || is NULL when an operand is)
	// as unpackChat and unpackPending read them, for the reason given at
	// packedEventCols: 17 columns cost the driver about 40 allocations a
	// call that two do not.
	getChatSQL = `SELECT concat(c.last_sequence, ' ', c.cache_seed, ' ', c.created_at, ' ', c.updated_at, ' ',
			octet_length(c.id), ' ', octet_length(c.app), ' ', octet_length(c.user_id), ' ', octet_length(c.workflow), ' ',
			octet_length(c.status), ' ', octet_length(c.turn_agent), ' ', c.id, c.app, c.user_id, c.workflow, c.status, c.turn_agent, c.context),
		p.created_at || ' ' || octet_length(p.ui_event_id) || ' ' || octet_length(p.kind) || ' ' || octet_length(p.tool_call_id) || ' ' ||
			octet_length(p.tool_name) || ' ' || p.ui_event_id || p.kind || p.tool_call_id || p.tool_name || p.agent
		FROM chats c LEFT JOIN pending p ON p.chat_id = c.id AND p.resolved_at IS NULL
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0`
	chatSeqSQL = `SELECT last_sequence FROM chats WHERE id = ? AND app = ? AND user_id = ? AND deleted = 0`
	// firstEventsSQL is eventsSQL with the chat's last sequence first:
	// one row always (an aggregate), whose last sequence is NULL when the
	// chat is not in scope.
	firstEventsSQL = `SELECT c.last_sequence, group_concat(` + packedEventCols + `, '') FILTER (WHERE e.sequence IS NOT NULL AND ` + eventSize + ` <= ?), count(e.sequence)
		FROM chats c LEFT JOIN events e ON e.chat_id = c.id AND e.sequence > ? AND e.sequence <= ?
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0`
	// eventsSQL packs the small events of a range of sequences into one
	// string, and counts all the range's events (0 when the chat is gone);
	// bigEventsSQL returns the others, one row each. See Events.
	eventsSQL = `SELECT group_concat(` + packedEventCols + `, '') FILTER (WHERE ` + eventSize + ` <= ?), count(*)
		FROM chats c JOIN events e ON e.chat_id = c.id
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0 AND e.sequence > ? AND e.sequence <= ?`
	bigEventsSQL = `SELECT ` + packedEventCols + `
		FROM chats c JOIN events e ON e.chat_id = c.id
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0 AND e.sequence > ? AND e.sequence <= ? AND ` + eventSize + ` > ?`
	// eventSize is an event's payload and extra metadata in bytes, which
	// octet_length reads from the row's header, not its content.
	eventSize    = `ifnull(octet_length(e.payload), 0) + ifnull(octet_length(e.extra), 0)`
	chatUsageSQL = `SELECT u.agent, count(*), sum(u.prompt_tokens), sum(u.completion_tokens), sum(u.cached_tokens), sum(u.reasoning_tokens), sum(u.cost)
		FROM chats c JOIN usage u ON u.chat_id = c.id
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0 GROUP BY u.agent ORDER BY u.agent`
	lookupKeySQL = `SELECT app, user_id, name, created_at FROM api_keys WHERE hash = ? AND revoked = 0`
	getTaskSQL   = `SELECT ` + taskCols + ` FROM tasks t JOIN chats c ON c.id = t.chat_id
		WHERE t.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0`
	getLeaseSQL = `SELECT owner, token, expires FROM leases WHERE chat_id = ?`
	// inputsSQL returns the chat's waiting inputs, oldest first, or one row
	// of NULLs when there is none; no row when the chat is not in scope.
	inputsSQL = `SELECT i.seq, i.event, i.accepted_at FROM chats c LEFT JOIN inputs i ON i.chat_id = c.id AND i.consumed_at IS NULL
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0 ORDER BY i.seq`
)

// pointRead returns the statement a point read (one chat's row, its inbox,
// a key) runs: query prepared on the writer's connection when the writer is
// between batches, else pooled, prepared on the read pool. release ends the
// borrow; call it once the statement's rows are closed, and keep the borrow
// to reading the rows (GetChat's unpacking of its row is cheap; Inputs
// decodes its events' JSON after).
//
// A read connection drops its whole page cache at its first read after a
// commit it did not make (SQLite's WAL: any change to the WAL's header), and
// reads its pages again: a read of a chat right after a commit cost 57–70 µs
// of CPU here against 10–12 without one, and 36–49 on the writer's
// connection (BenchmarkReadAfterCommit, BenchmarkGetChat); every read of a
// served turn comes after a commit. The writer made the last commit, so its
// connection's cache is current. A read never waits for the writer: it
// borrows the connection only when it is free at once (TryLock) and the
// writer is not waiting for it (writerWaits), so the writer waits for the
// borrowed read in progress (and, rarely, one that checked writerWaits just
// before it was set) before its next batch, and never lends its connection
// while a transaction of its is open. Reads that may be long (a replay, a
// list) stay on the pool.
func (s *Store) pointRead(ctx context.Context, pooled *sql.Stmt, query string) (st *sql.Stmt, release func()) {
	if !s.writerWaits.Load() && s.wmu.TryLock() {
		if !s.w.inTx {
			if st, err := s.w.stmt(ctx, query); err == nil {
				s.writerReads.Add(1)
				return st, s.wmu.Unlock
			}
		}
		s.wmu.Unlock()
	}
	return pooled, func() {}
}

// prepareReads prepares the read statements on s.rdb; on an error it closes
// those it prepared.
func (s *Store) prepareReads(ctx context.Context) error {
	r := &s.r
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&r.getChat, getChatSQL},
		{&r.chatSeq, chatSeqSQL},
		{&r.firstEvents, firstEventsSQL},
		{&r.events, eventsSQL},
		{&r.bigEvents, bigEventsSQL},
		{&r.chatUsage, chatUsageSQL},
		{&r.lookupKey, lookupKeySQL},
		{&r.getTask, getTaskSQL},
		{&r.getLease, getLeaseSQL},
		{&r.inputs, inputsSQL},
	} {
		st, err := s.rdb.PrepareContext(ctx, p.q)
		if err != nil {
			return errors.Join(storeErr("prepare", err), r.close())
		}
		*p.st = st
	}
	return nil
}

// close closes the prepared statements.
func (r *readStmts) close() error {
	var errs []error
	for _, st := range []*sql.Stmt{r.getChat, r.chatSeq, r.firstEvents, r.events, r.bigEvents, r.chatUsage, r.lookupKey, r.getTask, r.getLease, r.inputs} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// unpackInts parses the len(n) space-terminated integers at the start of p
// into n and returns the rest of p.
func unpackInts(p string, n []int64) (string, error) {
	for i := range n {
		j := strings.IndexByte(p, ' ')
		if j < 0 {
			return "", errors.New("malformed packed row")
		}
		v, err := strconv.ParseInt(p[:j], 10, 64)
		if err != nil {
			return "", fmt.Errorf("malformed packed row: %w", err)
		}
		n[i], p = v, p[j+1:]
	}
	return p, nil
}

// unpackTexts cuts the texts of lengths n off the start of p into fs and
// returns the rest of p.
func unpackTexts(p string, n []int64, fs []*string) (string, error) {
	for i, f := range fs {
		if n[i] < 0 || n[i] > int64(len(p)) {
			return "", errors.New("malformed packed row")
		}
		*f, p = p[:n[i]], p[n[i]:]
	}
	return p, nil
}

// unpackChat fills c from getChatSQL's first column. Its strings are
// substrings of p, of a copy of their part when the context is large, so
// that they do not keep a second copy of it alive.
func unpackChat(p string, c *baton.Chat) error {
	var n [10]int64
	p, err := unpackInts(p, n[:])
	if err != nil {
		return err
	}
	texts := int64(0)
	for _, l := range n[4:] {
		texts += max(l, 0)
	}
	if texts > int64(len(p)) {
		return errors.New("malformed packed chat")
	}
	ctxJSON := p[texts:]
	if p = p[:texts]; len(ctxJSON) > 1024 {
		p = strings.Clone(p)
	}
	var status string
	if _, err := unpackTexts(p, n[4:], []*string{&c.ID, &c.App, &c.User, &c.Workflow, &status, &c.TurnAgent}); err != nil {
		return err
	}
	c.LastSequence, c.CacheSeed = n[0], n[1]
	c.CreatedAt, c.UpdatedAt = fromMicros(n[2]), fromMicros(n[3])
	c.Status, c.Context = baton.ChatStatus(status), json.RawMessage(ctxJSON)
	return nil
}

// unpackPending reads getChatSQL's second column.
func unpackPending(p string) (baton.PendingRequest, error) {
	var r baton.PendingRequest
	var n [5]int64
	p, err := unpackInts(p, n[:])
	if err != nil {
		return r, err
	}
	p, err = unpackTexts(p, n[1:], []*string{&r.UIEventID, &r.Kind, &r.ToolCallID, &r.ToolName})
	if err != nil {
		return r, err
	}
	r.Agent, r.CreatedAt = p, fromMicros(n[0])
	return r, nil
}
