package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

const defaultListLimit = 100

func notFound(id string) error { return baton.Errorf(baton.ENOTFOUND, "chat %q not found", id) }

// chatSeq returns the chat's last sequence, or ENOTFOUND when the chat is
// not in scope or deleted. This is where every write enforces the scope.
func chatSeq(ctx context.Context, w *wconn, scope baton.Scope, id string) (int64, error) {
	var seq int64
	err := w.queryRow(ctx, `SELECT last_sequence FROM chats WHERE id = ? AND app = ? AND user_id = ? AND deleted = 0`,
		id, scope.App, scope.User).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return 0, storeErr("chat", err)
	}
	return seq, nil
}

// CreateChat creates c in scope; see baton.ChatStore.
func (s *Store) CreateChat(ctx context.Context, scope baton.Scope, c baton.Chat) (baton.Chat, error) {
	if err := c.PrepareCreate(scope); err != nil {
		return baton.Chat{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	c.CreatedAt, c.UpdatedAt = now, now
	pending := c.Pending
	c.Pending = nil
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		return insertChat(ctx, w, c, pending, now)
	})
	if err != nil {
		return baton.Chat{}, err
	}
	return withPending(c, pending, now), nil
}

// CreateChatWithInput creates c and keeps ev in its inbox in one commit;
// see baton.InboxStore. A new chat's first message then costs one commit
// (and one fsync) where CreateChat and AddInput cost two.
func (s *Store) CreateChatWithInput(ctx context.Context, scope baton.Scope, c baton.Chat, ev baton.Event) (baton.Chat, baton.Input, error) {
	ev, err := baton.PrepareCreateWithInput(scope, &c, ev)
	if err != nil {
		return baton.Chat{}, baton.Input{}, err
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		return baton.Chat{}, baton.Input{}, baton.Errorf(baton.EINVALID, "input: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	c.CreatedAt, c.UpdatedAt = now, now
	pending := c.Pending
	c.Pending = nil
	in := baton.Input{Event: ev, AcceptedAt: now}
	err = s.write(ctx, func(ctx context.Context, w *wconn) error {
		if err := insertChat(ctx, w, c, pending, now); err != nil {
			return err
		}
		res, err := w.exec(ctx, `INSERT INTO inputs (chat_id, id, type, event, accepted_at) VALUES (?, ?, ?, ?, ?)`,
			c.ID, ev.ID, ev.Type, string(raw), micros(now))
		if err != nil {
			return storeErr("add input", err)
		}
		in.Seq, err = res.LastInsertId()
		return storeErr("add input", err)
	})
	if err != nil {
		return baton.Chat{}, baton.Input{}, err
	}
	return withPending(c, pending, now), in, nil
}

// insertChat writes c, prepared, and its pending requests, within the
// writer's transaction.
func insertChat(ctx context.Context, w *wconn, c baton.Chat, pending []baton.PendingRequest, now time.Time) error {
	_, err := w.exec(ctx, `INSERT INTO chats (id, app, user_id, workflow, status, context, turn_agent, cache_seed, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.App, c.User, c.Workflow, string(c.Status), string(c.Context), c.TurnAgent, c.CacheSeed, micros(now), micros(now))
	if isUnique(err) {
		return baton.Errorf(baton.ECONFLICT, "chat %q already exists", c.ID)
	}
	if err != nil {
		return storeErr("create chat", err)
	}
	return addPending(ctx, w, c.ID, pending, now)
}

// withPending returns c with its pending requests as created at now.
func withPending(c baton.Chat, pending []baton.PendingRequest, now time.Time) baton.Chat {
	for _, p := range pending {
		if p.CreatedAt.IsZero() {
			p.CreatedAt = now
		}
		c.Pending = append(c.Pending, p)
	}
	return c
}

const chatCols = `id, app, user_id, workflow, status, last_sequence, context, turn_agent, cache_seed, created_at, updated_at`

func scanChat(row interface{ Scan(...any) error }) (baton.Chat, error) {
	var c baton.Chat
	var status, ctxJSON string
	var created, updated int64
	err := row.Scan(&c.ID, &c.App, &c.User, &c.Workflow, &status, &c.LastSequence, &ctxJSON, &c.TurnAgent, &c.CacheSeed, &created, &updated)
	c.Status, c.Context = baton.ChatStatus(status), json.RawMessage(ctxJSON)
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	return c, err
}

// GetChat returns the chat and its pending requests; see baton.ChatStore.
// One prepared query reads both (getChatSQL): the chat's columns come again
// on each row after the first, which is cheaper than a second query for
// the rare chat with more than one request pending.
func (s *Store) GetChat(ctx context.Context, scope baton.Scope, id string) (baton.Chat, error) {
	if s.closed.Load() {
		return baton.Chat{}, baton.ErrClosed
	}
	s.reads.Add(1)
	st, release := s.pointRead(ctx, s.r.getChat, getChatSQL)
	defer release()
	rows, err := st.QueryContext(ctx, id, scope.App, scope.User)
	if err != nil {
		return baton.Chat{}, s.readErr("get chat", err)
	}
	c, err := scanChatRows(rows, id)
	if err != nil {
		return baton.Chat{}, s.readErr("get chat", err)
	}
	return c, nil
}

// scanChatRows reads getChatSQL's rows, closing them.
func scanChatRows(rows *sql.Rows, id string) (baton.Chat, error) {
	defer rows.Close()
	var c baton.Chat
	var chat string // the driver's copy of the row, which the chat keeps
	var pending sql.NullString
	found := false
	for rows.Next() {
		if err := rows.Scan(&chat, &pending); err != nil {
			return baton.Chat{}, err
		}
		if !found {
			if err := unpackChat(chat, &c); err != nil {
				return baton.Chat{}, err
			}
			found = true
		}
		if pending.Valid {
			p, err := unpackPending(pending.String)
			if err != nil {
				return baton.Chat{}, err
			}
			c.Pending = append(c.Pending, p)
		}
	}
	if err := rows.Err(); err != nil {
		return baton.Chat{}, err
	}
	if !found {
		return baton.Chat{}, notFound(id)
	}
	if len(c.Pending) > 1 {
		slices.SortFunc(c.Pending, func(a, b baton.PendingRequest) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.UIEventID, b.UIEventID))
		})
	}
	return c, nil
}

// ListChats lists the scope's chats, newest first; see baton.ChatStore.
func (s *Store) ListChats(ctx context.Context, scope baton.Scope, opts baton.ListOptions) ([]baton.Chat, error) {
	q := `SELECT ` + chatCols + ` FROM chats WHERE app = ? AND user_id = ? AND deleted = 0`
	args := []any{scope.App, scope.User}
	if opts.Workflow != "" {
		q += ` AND workflow = ?`
		args = append(args, opts.Workflow)
	}
	if opts.Status != "" {
		q += ` AND status = ?`
		args = append(args, string(opts.Status))
	}
	if opts.Limit <= 0 {
		opts.Limit = defaultListLimit
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, opts.Limit)
	return s.listChats(ctx, q, args...)
}

// ChatsByStatus lists chats of every scope with status, oldest first; see
// baton.ChatStore.
func (s *Store) ChatsByStatus(ctx context.Context, status baton.ChatStatus, limit int) ([]baton.Chat, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	return s.listChats(ctx, `SELECT `+chatCols+` FROM chats WHERE status = ? AND deleted = 0 ORDER BY created_at, id LIMIT ?`, string(status), limit)
}

func (s *Store) listChats(ctx context.Context, q string, args ...any) ([]baton.Chat, error) {
	if s.closed.Load() {
		return nil, baton.ErrClosed
	}
	s.reads.Add(1)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.readErr("list chats", err)
	}
	defer rows.Close()
	var out []baton.Chat
	for rows.Next() {
		c, err := scanChat(rows)
		if err != nil {
			return nil, s.readErr("list chats", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("list chats", err)
	}
	return out, nil
}

// DeleteChat soft-deletes the chat; see baton.ChatStore.
func (s *Store) DeleteChat(ctx context.Context, scope baton.Scope, id string) error {
	now := micros(time.Now())
	return s.write(ctx, func(ctx context.Context, w *wconn) error {
		res, err := w.exec(ctx, `UPDATE chats SET deleted = 1, updated_at = ? WHERE id = ? AND app = ? AND user_id = ? AND deleted = 0`,
			now, id, scope.App, scope.User)
		if err != nil {
			return storeErr("delete chat", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound(id)
		}
		return nil
	})
}

// UpdateChat applies u and returns the chat as the same transaction left
// it; see baton.ChatStore. The chat is read inside the write: a read after
// the commit could fail (the caller's context ending) for a write that was
// made, or see a later writer's change.
func (s *Store) UpdateChat(ctx context.Context, scope baton.Scope, id string, u baton.ChatUpdate) (baton.Chat, error) {
	if err := u.Validate(); err != nil {
		return baton.Chat{}, err
	}
	now := time.Now()
	var c baton.Chat
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := chatSeq(ctx, w, scope, id); err != nil {
			return err
		}
		if err := applyUpdate(ctx, w, id, &u, now, true); err != nil {
			return err
		}
		if err := updateUsage(ctx, w, scope, id, &u, now); err != nil {
			return err
		}
		st, err := w.stmt(ctx, getChatSQL)
		if err != nil {
			return storeErr("update chat", err)
		}
		rows, err := st.QueryContext(ctx, id, scope.App, scope.User)
		if err != nil {
			return storeErr("update chat", err)
		}
		if c, err = scanChatRows(rows, id); err != nil {
			return storeErr("update chat", err)
		}
		return nil
	})
	if err != nil {
		return baton.Chat{}, err
	}
	return c, nil
}

// bumpSeq moves the chat's counter by n and its updated time to now, and
// returns the new last sequence; ENOTFOUND when the chat is not in scope.
func bumpSeq(ctx context.Context, w *wconn, scope baton.Scope, id string, n int, now time.Time) (int64, error) {
	var last int64
	err := w.queryRow(ctx, `UPDATE chats SET last_sequence = last_sequence + ?, updated_at = ?
		WHERE id = ? AND app = ? AND user_id = ? AND deleted = 0 RETURNING last_sequence`,
		n, micros(now), id, scope.App, scope.User).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return 0, storeErr("append", err)
	}
	return last, nil
}

// applyUpdate writes u (and, with touch, the chat's updated time). The chat
// must have been checked to be in scope. A failing check returns an error
// and the caller's transaction is rolled back, so nothing is written.
func applyUpdate(ctx context.Context, w *wconn, id string, u *baton.ChatUpdate, now time.Time, touch bool) error {
	var status, turnAgent, ctxJSON any
	if u != nil {
		if u.Fence > 0 {
			var token int64
			err := w.queryRow(ctx, `SELECT token FROM leases WHERE chat_id = ?`, id).Scan(&token)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return storeErr("fence", err)
			}
			if token != u.Fence {
				return baton.Errorf(baton.ECONFLICT, "chat %q: lease token %d is stale (current %d): %w", id, u.Fence, token, baton.ErrFenced)
			}
		}
		for _, ev := range u.ResolvePending {
			var chat string
			var resolved sql.NullInt64
			err := w.queryRow(ctx, `SELECT chat_id, resolved_at FROM pending WHERE ui_event_id = ?`, ev).Scan(&chat, &resolved)
			if errors.Is(err, sql.ErrNoRows) || err == nil && chat != id {
				return baton.Errorf(baton.ENOTFOUND, "ui_event_id %q: no such request in chat %q", ev, id)
			}
			if err != nil {
				return storeErr("resolve pending", err)
			}
			if resolved.Valid {
				return baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already answered", ev)
			}
			if _, err := w.exec(ctx, `UPDATE pending SET resolved_at = ? WHERE ui_event_id = ?`, micros(now), ev); err != nil {
				return storeErr("resolve pending", err)
			}
		}
		if err := addPending(ctx, w, id, u.AddPending, now); err != nil {
			return err
		}
		if err := consumeInputs(ctx, w, id, u.ConsumeInputs, now); err != nil {
			return err
		}
		if u.Status != nil {
			status = string(*u.Status)
		}
		if u.TurnAgent != nil {
			turnAgent = *u.TurnAgent
		}
		if len(u.Context) > 0 {
			var cur string
			if err := w.queryRow(ctx, `SELECT context FROM chats WHERE id = ?`, id).Scan(&cur); err != nil {
				return storeErr("context", err)
			}
			next, err := baton.PatchContext(json.RawMessage(cur), u.Context)
			if err != nil {
				return err
			}
			ctxJSON = string(next)
		}
	}
	if !touch && status == nil && turnAgent == nil && ctxJSON == nil {
		return nil
	}
	// Only the columns that change are set, so an append does not touch the
	// status index.
	q, args := `UPDATE chats SET updated_at = ?`, []any{micros(now)}
	if status != nil {
		q, args = q+`, status = ?`, append(args, status)
	}
	if turnAgent != nil {
		q, args = q+`, turn_agent = ?`, append(args, turnAgent)
	}
	if ctxJSON != nil {
		q, args = q+`, context = ?`, append(args, ctxJSON)
	}
	if _, err := w.exec(ctx, q+` WHERE id = ?`, append(args, id)...); err != nil {
		return storeErr("update chat", err)
	}
	return nil
}

func addPending(ctx context.Context, w *wconn, chatID string, ps []baton.PendingRequest, now time.Time) error {
	for _, p := range ps {
		at := p.CreatedAt
		if at.IsZero() {
			at = now
		}
		_, err := w.exec(ctx, `INSERT INTO pending (ui_event_id, chat_id, kind, tool_call_id, tool_name, agent, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			p.UIEventID, chatID, p.Kind, p.ToolCallID, p.ToolName, p.Agent, micros(at))
		if isUnique(err) {
			return baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already used", p.UIEventID)
		}
		if err != nil {
			return storeErr("add pending", err)
		}
	}
	return nil
}

// renameSQL returns the SQL expression of col with renames applied
// (nested replace calls) and its arguments, in a stable order.
func renameSQL(col string, rename map[string]string) (string, []any) {
	keys := slices.Sorted(maps.Keys(rename))
	expr := col
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		expr = "replace(" + expr + ", ?, ?)"
		args = append(args, k, rename[k])
	}
	return expr, args
}

// ForkChat creates f.Chat with copies of the first f.At events of f.From,
// in one transaction; see baton.ForkStore.
func (s *Store) ForkChat(ctx context.Context, scope baton.Scope, f baton.Fork) (baton.Chat, error) {
	if err := baton.ValidateFork(&f); err != nil {
		return baton.Chat{}, err
	}
	c := f.Chat
	if err := c.PrepareCreate(scope); err != nil {
		return baton.Chat{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	c.CreatedAt, c.UpdatedAt = now, now
	pending := c.Pending
	c.Pending = nil
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		last, err := chatSeq(ctx, w, scope, f.From)
		if err != nil {
			return err
		}
		if f.At > last {
			return baton.ForkBeyond(f.At, last)
		}
		_, err = w.exec(ctx, `INSERT INTO chats (id, app, user_id, workflow, status, last_sequence, context, turn_agent, cache_seed, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.App, c.User, c.Workflow, string(c.Status), f.At, string(c.Context), c.TurnAgent, c.CacheSeed, micros(now), micros(now))
		if isUnique(err) {
			return baton.Errorf(baton.ECONFLICT, "chat %q already exists", c.ID)
		}
		if err != nil {
			return storeErr("fork chat", err)
		}
		payload, args := renameSQL("payload", f.Rename)
		args = append([]any{c.ID}, args...)
		args = append(args, f.From, f.At)
		// One statement copies the prefix, in sequence order: the rows of
		// the new chat are written together (see the events table's note).
		if _, err := w.exec(ctx, `INSERT INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload)
			SELECT ?, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, `+payload+`
			FROM events WHERE chat_id = ? AND sequence <= ? ORDER BY sequence`, args...); err != nil {
			return storeErr("fork chat", err)
		}
		return addPending(ctx, w, c.ID, pending, now)
	})
	if err != nil {
		return baton.Chat{}, err
	}
	c.LastSequence = f.At
	for _, p := range pending {
		if p.CreatedAt.IsZero() {
			p.CreatedAt = now
		}
		c.Pending = append(c.Pending, p)
	}
	return c, nil
}
