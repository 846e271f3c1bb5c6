package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/batonhq/baton"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const defaultListLimit = 100

func notFound(id string) error { return baton.Errorf(baton.ENOTFOUND, "chat %q not found", id) }

// CreateChat creates c in scope; see baton.ChatStore.
func (s *Store) CreateChat(ctx context.Context, scope baton.Scope, c baton.Chat) (baton.Chat, error) {
	if err := s.check(); err != nil {
		return baton.Chat{}, err
	}
	if err := c.PrepareCreate(scope); err != nil {
		return baton.Chat{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	c.CreatedAt, c.UpdatedAt = now, now
	pending := c.Pending
	c.Pending = nil
	err := s.writeTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return insertChat(ctx, tx, c, pending, now)
	})
	if err != nil {
		return baton.Chat{}, s.dbErr("create chat", err)
	}
	return withPending(c, pending, now), nil
}

// CreateChatWithInput creates c and keeps ev in its inbox in one
// transaction; see baton.InboxStore.
func (s *Store) CreateChatWithInput(ctx context.Context, scope baton.Scope, c baton.Chat, ev baton.Event) (baton.Chat, baton.Input, error) {
	if err := s.check(); err != nil {
		return baton.Chat{}, baton.Input{}, err
	}
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
	err = s.writeTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertChat(ctx, tx, c, pending, now); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO inputs (chat_id, id, type, event, accepted_at) VALUES ($1, $2, $3, $4, $5) RETURNING seq`,
			c.ID, ev.ID, ev.Type, string(raw), now).Scan(&in.Seq)
	})
	if err != nil {
		return baton.Chat{}, baton.Input{}, s.dbErr("create chat with input", err)
	}
	return withPending(c, pending, now), in, nil
}

// CreateChatAndAppend creates c, keeps keep and makes the chat's first
// append in one transaction; see baton.CreateAppender.
func (s *Store) CreateChatAndAppend(ctx context.Context, scope baton.Scope, c baton.Chat, keep *baton.Event, events []baton.Event, u *baton.ChatUpdate) (baton.Chat, []baton.Event, error) {
	if err := s.check(); err != nil {
		return baton.Chat{}, nil, err
	}
	in, u, err := baton.PrepareCreateAndAppend(scope, &c, keep, u)
	if err != nil {
		return baton.Chat{}, nil, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	c.CreatedAt, c.UpdatedAt = now, now
	pending := c.Pending
	c.Pending = nil
	evs, err := s.appendWith(ctx, scope, c.ID, events, u, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertChat(ctx, tx, c, pending, now); err != nil {
			return err
		}
		if in == nil {
			return nil
		}
		var consumed *time.Time
		if in.Taken {
			consumed = &now
		}
		_, err := tx.Exec(ctx, `INSERT INTO inputs (chat_id, id, type, event, accepted_at, consumed_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			c.ID, in.Event.ID, in.Event.Type, string(in.JSON), now, consumed)
		return err
	})
	if err != nil {
		return baton.Chat{}, nil, err
	}
	out, err := baton.CreatedWith(withPending(c, pending, now), len(evs), u, now)
	return out, evs, err
}

// insertChat writes c, prepared, and its pending requests in tx.
func insertChat(ctx context.Context, tx pgx.Tx, c baton.Chat, pending []baton.PendingRequest, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO chats (id, app, user_id, workflow, status, context, turn_agent, cache_seed, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)`,
		c.ID, c.App, c.User, c.Workflow, string(c.Status), []byte(c.Context), c.TurnAgent, c.CacheSeed, now)
	if _, ok := isUnique(err); ok {
		return baton.Errorf(baton.ECONFLICT, "chat %q already exists", c.ID)
	}
	if err != nil {
		return err
	}
	return addPending(ctx, tx, c.ID, pending, now)
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

func scanChat(row pgx.Row) (baton.Chat, error) {
	var c baton.Chat
	var status string
	var ctxJSON []byte
	err := row.Scan(&c.ID, &c.App, &c.User, &c.Workflow, &status, &c.LastSequence, &ctxJSON, &c.TurnAgent, &c.CacheSeed, &c.CreatedAt, &c.UpdatedAt)
	c.Status, c.Context = baton.ChatStatus(status), json.RawMessage(ctxJSON)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c, err
}

// getChatSQL reads a chat with its pending requests: one row per request,
// or one row with NULL request columns when there is none. One statement
// sees one snapshot, so the chat's columns and its requests are of the same
// moment: two statements could straddle a commit and return, say, the
// speaker before an append with the requests after it.
const getChatSQL = `SELECT c.id, c.app, c.user_id, c.workflow, c.status, c.last_sequence, c.context, c.turn_agent, c.cache_seed, c.created_at, c.updated_at,
		p.ui_event_id, p.kind, p.tool_call_id, p.tool_name, p.agent, p.created_at
	FROM chats c LEFT JOIN pending p ON p.chat_id = c.id AND p.resolved_at IS NULL
	WHERE c.id = $1 AND (c.app, c.user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT c.deleted
	ORDER BY p.created_at, p.ui_event_id`

// GetChat returns the chat and its pending requests; see baton.ChatStore.
func (s *Store) GetChat(ctx context.Context, scope baton.Scope, id string) (baton.Chat, error) {
	if err := s.check(); err != nil {
		return baton.Chat{}, err
	}
	c, err := getChat(ctx, s.pool, scope, id)
	if err != nil {
		return baton.Chat{}, s.dbErr("get chat", err)
	}
	return c, nil
}

// getChat runs getChatSQL on q (the pool, or a transaction that wants to
// read its own writes).
func getChat(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, scope baton.Scope, id string) (baton.Chat, error) {
	rows, err := q.Query(ctx, getChatSQL, id, scope.App, scope.User)
	if err != nil {
		return baton.Chat{}, err
	}
	defer rows.Close()
	var c baton.Chat
	found := false
	for rows.Next() {
		var status string
		var ctxJSON []byte
		var ui, kind, callID, tool, agent *string
		var at *time.Time
		if err := rows.Scan(&c.ID, &c.App, &c.User, &c.Workflow, &status, &c.LastSequence, &ctxJSON, &c.TurnAgent, &c.CacheSeed, &c.CreatedAt, &c.UpdatedAt,
			&ui, &kind, &callID, &tool, &agent, &at); err != nil {
			return baton.Chat{}, err
		}
		// Every row repeats the chat's columns, scanned again into c.
		c.Status, c.Context = baton.ChatStatus(status), json.RawMessage(ctxJSON)
		c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
		found = true
		if ui != nil {
			c.Pending = append(c.Pending, baton.PendingRequest{UIEventID: *ui, Kind: *kind, ToolCallID: *callID, ToolName: *tool, Agent: *agent, CreatedAt: at.UTC()})
		}
	}
	if err := rows.Err(); err != nil {
		return baton.Chat{}, err
	}
	if !found {
		return baton.Chat{}, notFound(id)
	}
	return c, nil
}

// ListChats lists the scope's chats, newest first; see baton.ChatStore.
func (s *Store) ListChats(ctx context.Context, scope baton.Scope, opts baton.ListOptions) ([]baton.Chat, error) {
	if opts.Limit <= 0 {
		opts.Limit = defaultListLimit
	}
	return s.listChats(ctx, `SELECT `+chatCols+` FROM chats WHERE app = $1 AND user_id = $2 AND NOT deleted
		AND ($3 = '' OR workflow = $3) AND ($4 = '' OR status = $4) ORDER BY created_at DESC, id DESC LIMIT $5`,
		scope.App, scope.User, opts.Workflow, string(opts.Status), opts.Limit)
}

// ChatsByStatus lists chats of every scope with status, oldest first; see
// baton.ChatStore.
func (s *Store) ChatsByStatus(ctx context.Context, status baton.ChatStatus, limit int) ([]baton.Chat, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	return s.listChats(ctx, `SELECT `+chatCols+` FROM chats WHERE status = $1 AND NOT deleted ORDER BY created_at, id LIMIT $2`, string(status), limit)
}

func (s *Store) listChats(ctx context.Context, q string, args ...any) ([]baton.Chat, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.dbErr("list chats", err)
	}
	defer rows.Close()
	var out []baton.Chat
	for rows.Next() {
		c, err := scanChat(rows)
		if err != nil {
			return nil, s.dbErr("list chats", err)
		}
		out = append(out, c)
	}
	return out, s.dbErr("list chats", rows.Err())
}

// DeleteChat soft-deletes the chat; see baton.ChatStore.
func (s *Store) DeleteChat(ctx context.Context, scope baton.Scope, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE chats SET deleted = true, updated_at = $4 WHERE id = $1 AND (app, user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT deleted`,
			id, scope.App, scope.User, time.Now())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound(id)
		}
		return nil
	})
	return s.dbErr("delete chat", err)
}

// UpdateChat applies u and returns the chat as the same transaction left
// it; see baton.ChatStore. The chat is read inside the write: a read after
// the commit could fail (the caller's context ending) for a write that was
// made, or see a later writer's change.
func (s *Store) UpdateChat(ctx context.Context, scope baton.Scope, id string, u baton.ChatUpdate) (baton.Chat, error) {
	if err := s.check(); err != nil {
		return baton.Chat{}, err
	}
	if err := validateChatID(id); err != nil {
		return baton.Chat{}, err
	}
	if err := u.Validate(); err != nil {
		return baton.Chat{}, err
	}
	u.ExpectNext = 0 // an Append's check (baton.ChatUpdate)
	a, err := updateArgsOf(&u)
	if err != nil {
		return baton.Chat{}, err
	}
	now := time.Now()
	var c baton.Chat
	err = s.writeTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := lockChat(ctx, tx, scope, id); err != nil {
			return err
		}
		if err := checkUpdate(ctx, tx, id, &u, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, updateSQL, id, now, a.status, a.turn, a.set, a.del); err != nil {
			return err
		}
		if err := insertUsage(ctx, tx, scope, id, &u, now); err != nil {
			return err
		}
		var err error
		c, err = getChat(ctx, tx, scope, id)
		return err
	})
	if err != nil {
		return baton.Chat{}, s.dbErr("update chat", err)
	}
	return c, nil
}

// validateChatID checks id as PrepareEvents does for an append.
func validateChatID(id string) error {
	_, err := baton.PrepareEvents(id, nil)
	return err
}

// lockChat locks the chat row for the transaction, checking the scope.
func lockChat(ctx context.Context, tx pgx.Tx, scope baton.Scope, id string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM chats WHERE id = $1 AND (app, user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT deleted FOR UPDATE`,
		id, scope.App, scope.User).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(id)
	}
	return err
}

// checkUpdate runs the parts of u that need checks (fence, pending, inputs) inside
// tx, after the chat row is locked.
func checkUpdate(ctx context.Context, tx pgx.Tx, id string, u *baton.ChatUpdate, now time.Time) error {
	if u.ExpectNext > 0 {
		var last int64
		if err := tx.QueryRow(ctx, `SELECT last_sequence FROM chats WHERE id = $1`, id).Scan(&last); err != nil {
			return err
		}
		if last+1 != u.ExpectNext {
			return baton.StaleNext(id, u.ExpectNext, last)
		}
	}
	if u.Fence > 0 {
		var token int64
		err := tx.QueryRow(ctx, `SELECT token FROM leases WHERE chat_id = $1 FOR SHARE`, id).Scan(&token)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if token != u.Fence {
			return baton.Errorf(baton.ECONFLICT, "chat %q: lease token %d is stale (current %d): %w", id, u.Fence, token, baton.ErrFenced)
		}
	}
	for _, ev := range u.ResolvePending {
		var chat string
		var resolved *time.Time
		err := tx.QueryRow(ctx, `SELECT chat_id, resolved_at FROM pending WHERE ui_event_id = $1 FOR UPDATE`, ev).Scan(&chat, &resolved)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && chat != id {
			return baton.Errorf(baton.ENOTFOUND, "ui_event_id %q: no such request in chat %q", ev, id)
		}
		if err != nil {
			return err
		}
		if resolved != nil {
			return baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already answered", ev)
		}
		if _, err := tx.Exec(ctx, `UPDATE pending SET resolved_at = $2 WHERE ui_event_id = $1`, ev, now); err != nil {
			return err
		}
	}
	if err := addPending(ctx, tx, id, u.AddPending, now); err != nil {
		return err
	}
	return consumeInputs(ctx, tx, id, u.ConsumeInputs, now)
}

func addPending(ctx context.Context, tx pgx.Tx, chatID string, ps []baton.PendingRequest, now time.Time) error {
	for _, p := range ps {
		at := p.CreatedAt
		if at.IsZero() {
			at = now
		}
		_, err := tx.Exec(ctx, `INSERT INTO pending (ui_event_id, chat_id, kind, tool_call_id, tool_name, agent, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			p.UIEventID, chatID, p.Kind, p.ToolCallID, p.ToolName, p.Agent, at)
		if _, ok := isUnique(err); ok {
			return baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already used", p.UIEventID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ForkChat creates f.Chat with copies of the first f.At events of f.From,
// in one transaction; see baton.ForkStore.
func (s *Store) ForkChat(ctx context.Context, scope baton.Scope, f baton.Fork) (baton.Chat, error) {
	if err := s.check(); err != nil {
		return baton.Chat{}, err
	}
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
	err := s.writeTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		// FOR SHARE: the source may not be deleted while its events are
		// copied (appends beyond f.At do not matter, and are not held up
		// for long).
		var last int64
		err := tx.QueryRow(ctx, `SELECT last_sequence FROM chats WHERE id = $1 AND app = $2 AND user_id = $3 AND NOT deleted FOR SHARE`,
			f.From, scope.App, scope.User).Scan(&last)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(f.From)
		}
		if err != nil {
			return err
		}
		if f.At > last {
			return baton.ForkBeyond(f.At, last)
		}
		_, err = tx.Exec(ctx, `INSERT INTO chats (id, app, user_id, workflow, status, last_sequence, context, turn_agent, cache_seed, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`,
			c.ID, c.App, c.User, c.Workflow, string(c.Status), f.At, []byte(c.Context), c.TurnAgent, c.CacheSeed, now)
		if _, ok := isUnique(err); ok {
			return baton.Errorf(baton.ECONFLICT, "chat %q already exists", c.ID)
		}
		if err != nil {
			return err
		}
		keys := slices.Sorted(maps.Keys(f.Rename))
		payload := "payload"
		args := []any{c.ID, f.From, f.At}
		for _, k := range keys {
			args = append(args, k, f.Rename[k])
			payload = fmt.Sprintf("replace(%s, $%d::text, $%d::text)", payload, len(args)-1, len(args))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload)
			SELECT $1::text, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, `+payload+`
			FROM events WHERE chat_id = $2 AND sequence <= $3 ORDER BY sequence`, args...); err != nil {
			return err
		}
		return addPending(ctx, tx, c.ID, pending, now)
	})
	if err != nil {
		return baton.Chat{}, s.dbErr("fork chat", err)
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
