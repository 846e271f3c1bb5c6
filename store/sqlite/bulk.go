package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// appendReq is an Append waiting for the writer. The writer runs the appends
// of a batch together (bulkAppend); the request's fn runs it alone when they
// cannot be.
type appendReq struct {
	scope  baton.Scope
	chatID string
	evs    []baton.Event // sequences are set by the writer
	extras []any         // each event's extra metadata, a string or nil
	u      *baton.ChatUpdate
	now    time.Time
	err    error // set by bulkAppend when this append alone failed
}

// bulkChunks are the row counts of the multi-row statements bulkAppend
// prepares: n rows go as a greedy sum of these, so a batch of any size runs a
// handful of statements, each prepared once. modernc.org/sqlite is SQLite
// compiled to Go, so the fixed cost of a statement (database/sql, the
// driver, the VDBE program's start and reset) is several microseconds: at
// 1,000 chats, a statement per event and one per chat took the writer 12 µs
// of SQL per event, the bulk statements 8. Chunks of 64 measured a little
// cheaper than 128 or 512.
var bulkChunks = [...]int{64, 16, 4, 1}

// bulkChat is what one batch does to one chat.
type bulkChat struct {
	scope baton.Scope
	n     int   // events appended to it in the batch
	now   int64 // the latest append's time, Unix microseconds
	next  int64 // its next sequence, once known; 0 when it is not in scope
}

// bulkAppend runs the appends reqs in the open transaction as a few
// multi-row statements: one UPDATE … RETURNING per chunk of chats moves each
// chat's counter once for all its appends of the batch, and one INSERT per
// chunk of events writes them. The result is the one the appends run one at
// a time in this order give: an append to a chat that is not in its scope
// gets ENOTFOUND in its err and writes nothing; the others get their
// sequences. When anything else fails (a duplicate event id, a chat update
// that fails, one chat id appended to under two scopes), it returns an
// error, the caller rolls back and runs the appends one at a time, which
// attributes the failure to the append it belongs to.
func bulkAppend(ctx context.Context, w *wconn, reqs []*request) error {
	chats := make(map[string]*bulkChat, len(reqs))
	order := make([]string, 0, len(reqs)) // chats in order of first append
	for _, r := range reqs {
		a := r.app
		a.err = nil
		c := chats[a.chatID]
		if c == nil {
			c = &bulkChat{scope: a.scope}
			chats[a.chatID] = c
			order = append(order, a.chatID)
		} else if c.scope != a.scope {
			return errBulk
		}
		c.n += len(a.evs)
		c.now = max(c.now, micros(a.now))
	}

	// One counter move per chat. RETURNING gives each chat's new last
	// sequence; a chat out of scope (or deleted) returns no row.
	for rest := order; len(rest) > 0; {
		k := chunk(len(rest))
		args := w.args[:0]
		for _, id := range rest[:k] {
			c := chats[id]
			args = append(args, id, c.scope.App, c.scope.User, c.n, c.now)
		}
		w.args = args
		st, err := w.stmt(ctx, bumpSQLs[k])
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var last int64
			if err := rows.Scan(&id, &last); err != nil {
				rows.Close()
				return err
			}
			if c := chats[id]; c != nil {
				c.next = last - int64(c.n) + 1
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rest = rest[k:]
	}

	// Sequences in batch order, then the events in chunks.
	total := 0
	for _, r := range reqs {
		a := r.app
		c := chats[a.chatID]
		if c.next == 0 {
			a.err = notFound(a.chatID)
			continue
		}
		if a.u != nil && a.u.ExpectNext > 0 && c.next != a.u.ExpectNext {
			return errBulk // the one-at-a-time path refuses it as stale
		}
		for i := range a.evs {
			a.evs[i].Sequence = c.next
			c.next++
		}
		total += len(a.evs)
	}
	ri, ei := 0, 0 // the next event to insert: reqs[ri].app.evs[ei]
	for total > 0 {
		k := chunk(total)
		args := w.args[:0]
		for n := 0; n < k; {
			a := reqs[ri].app
			if a.err != nil || ei == len(a.evs) {
				ri, ei = ri+1, 0
				continue
			}
			e := &a.evs[ei]
			md := &e.Metadata
			var payload any
			if len(e.Payload) > 0 {
				payload = string(e.Payload)
			}
			args = append(args, a.chatID, e.Sequence, e.ID, e.Type, e.Timestamp, md.TriggerAgentID, md.TriggerAgentName, md.EnvName, md.Source, a.extras[ei], payload)
			ei++
			n++
		}
		w.args = args
		st, err := w.stmt(ctx, insertSQLs[k])
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return err
		}
		total -= k
	}
	clear(w.args) // drop the references to the batch's strings

	// Chat updates in batch order, after the counters (which also set
	// updated_at, so they need not touch it); then the updates' usage rows,
	// together.
	var use []usageRow
	for _, r := range reqs {
		if a := r.app; a.err == nil && a.u != nil {
			if err := applyUpdate(ctx, w, a.chatID, a.u, a.now, false); err != nil {
				return err
			}
			use = usageRowsOf(use, a.scope, a.chatID, a.u, a.now)
		}
	}
	return insertUsage(ctx, w, use)
}

// usageReq is a RecordUsage waiting for the writer, which inserts the usage
// rows of a batch together (insertUsage).
type usageReq struct {
	scope baton.Scope
	rec   baton.UsageRecord
}

// usageRow is a usage row to insert: a RecordUsage's, or one of an Append's
// ChatUpdate.Usage.
type usageRow struct {
	scope  baton.Scope
	chatID string
	rec    *baton.UsageRecord
	at     int64 // Unix microseconds: rec.At, or the write's time when that is zero
}

// usageRowsOf returns u's usage rows for the chat id of scope, stamped now
// when they carry no time.
func usageRowsOf(dst []usageRow, scope baton.Scope, id string, u *baton.ChatUpdate, now time.Time) []usageRow {
	if u == nil {
		return dst
	}
	for i := range u.Usage {
		rec := &u.Usage[i]
		at := now
		if !rec.At.IsZero() {
			at = rec.At
		}
		dst = append(dst, usageRow{scope: scope, chatID: id, rec: rec, at: micros(at)})
	}
	return dst
}

// insertUsage inserts rows in the open transaction as a few multi-row
// INSERT … SELECT statements. Each row is joined to its chat in its scope,
// so a row whose chat is out of scope is not inserted; then the statement
// inserts fewer rows than it was given, and insertUsage returns errBulk.
// For a batch of RecordUsage calls the caller then rolls back and runs them
// one at a time, which gives that row its ENOTFOUND. At 1,000 chats a
// row per statement cost the writer a statement for each model call; in
// bulk, a few per batch.
func insertUsage(ctx context.Context, w *wconn, rows []usageRow) error {
	for rest := rows; len(rest) > 0; {
		k := chunk(len(rest))
		args := w.args[:0]
		for _, r := range rest[:k] {
			u := r.rec
			args = append(args, r.chatID, r.scope.App, r.scope.User, u.Workflow, u.Agent, u.Model,
				u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.ReasoningTokens, u.Cost, r.at)
		}
		w.args = args
		st, err := w.stmt(ctx, usageSQLs[k])
		if err != nil {
			return err
		}
		res, err := st.ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(k) {
			return errBulk
		}
		rest = rest[k:]
	}
	clear(w.args)
	return nil
}

// updateUsage inserts u's usage rows, for the chat id of scope, in the open
// transaction of an append or update that runs alone and has already
// checked the chat's scope.
func updateUsage(ctx context.Context, w *wconn, scope baton.Scope, id string, u *baton.ChatUpdate, now time.Time) error {
	if u == nil || len(u.Usage) == 0 {
		return nil
	}
	err := insertUsage(ctx, w, usageRowsOf(nil, scope, id, u, now))
	if err == errBulk {
		return notFound(id)
	}
	if err != nil {
		return storeErr("record usage", err)
	}
	return nil
}

// bulkUsage inserts the usage rows of the RecordUsage requests reqs
// (insertUsage).
func bulkUsage(ctx context.Context, w *wconn, reqs []*request) error {
	rows := make([]usageRow, len(reqs))
	for i, r := range reqs {
		rows[i] = usageRow{scope: r.use.scope, chatID: r.use.rec.ChatID, rec: &r.use.rec, at: micros(r.use.rec.At)}
	}
	return insertUsage(ctx, w, rows)
}

// chunk returns the largest of bulkChunks not above n.
func chunk(n int) int {
	for _, k := range bulkChunks {
		if k <= n {
			return k
		}
	}
	return 1
}

// The multi-row statements, one per chunk size, built once. They are OR
// ROLLBACK because a failure rolls the whole transaction back anyway (see
// bulkAppend): the default, ABORT, undoes only the failing statement, for
// which SQLite keeps a statement journal, a copy of every page the statement
// changes — a third of the writer's time when it spilled to a temporary file.
var bumpSQLs, insertSQLs, usageSQLs = func() (b, ins, use map[int]string) {
	b, ins, use = map[int]string{}, map[int]string{}, map[int]string{}
	for _, k := range bulkChunks {
		// A (id, app, user, n, now) row whose chat is not in its scope
		// matches nothing, so RETURNING leaves that chat out.
		b[k] = `UPDATE OR ROLLBACK chats SET last_sequence = last_sequence + v.column4, updated_at = v.column5
		FROM (VALUES ` + placeholders(k, 5) + `) AS v
		WHERE chats.id = v.column1 AND chats.app = v.column2 AND chats.user_id = v.column3 AND chats.deleted = 0
		RETURNING chats.id, chats.last_sequence`
		ins[k] = `INSERT OR ROLLBACK INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload) VALUES ` +
			placeholders(k, 11)
		// A row whose chat is not in its scope joins nothing.
		use[k] = `INSERT OR ROLLBACK INTO usage (chat_id, app, workflow, agent, model, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, at)
		SELECT c.id, c.app, v.column4, v.column5, v.column6, v.column7, v.column8, v.column9, v.column10, v.column11, v.column12
		FROM (VALUES ` + placeholders(k, 12) + `) AS v
		JOIN chats c ON c.id = v.column1 AND c.app = v.column2 AND c.user_id = v.column3 AND c.deleted = 0`
	}
	return b, ins, use
}()

// placeholders returns k rows of n parameters: (?, ?), (?, ?), ….
func placeholders(k, n int) string {
	row := "(" + strings.Repeat("?, ", n-1) + "?)"
	var b strings.Builder
	for i := range k {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}
