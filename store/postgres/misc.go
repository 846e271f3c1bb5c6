package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/batonhq/baton"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// inScope is the condition, on $1 = chat id, $2 = app, $3 = user, that every
// chat-scoped write checks in its own statement.
//
// Here and in every statement that finds one chat by its id, the scope is
// compared as (app, user_id) IS NOT DISTINCT FROM (…), which no index
// serves, rather than app = … AND user_id = …: without statistics (a new
// database) the planner rated the scope index as good as the primary key
// and went through all of the tenant's chats for each one — appends 5×
// slower at 1,000 chats of one tenant, and worse as the tenant grows. The
// columns are NOT NULL, so the two forms are equal. TestAppendPlansUseTheChatKey
// guards it.
const inScope = `EXISTS (SELECT 1 FROM chats WHERE id = $1 AND (app, user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT deleted)`

// ClaimEffect claims key for the chat; see baton.EffectLedger. The insert
// either creates the row or, for a key already claimed (also by a
// concurrent claim, which the unique key makes wait), does nothing, so
// exactly one claim gets EffectNew.
func (s *Store) ClaimEffect(ctx context.Context, scope baton.Scope, chatID, key string, holder baton.EffectHolder) (baton.Effect, error) {
	if err := s.check(); err != nil {
		return baton.Effect{}, err
	}
	if err := baton.ValidateEffect(key, nil); err != nil {
		return baton.Effect{}, err
	}
	if err := holder.Validate(); err != nil {
		return baton.Effect{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var e baton.Effect
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `INSERT INTO effects (chat_id, key, claimed_at, holder_instance, holder_boot) SELECT $1, $4, $5, $6, $7 WHERE `+inScope+` ON CONFLICT DO NOTHING`,
			chatID, scope.App, scope.User, key, now, holder.Instance, holder.Boot)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			e = baton.Effect{Key: key, State: baton.EffectNew, ClaimedAt: now, Holder: holder}
			return nil
		}
		var done bool
		var result *string
		var at time.Time
		var h baton.EffectHolder
		err = c.QueryRow(ctx, `SELECT done, result, claimed_at, holder_instance, holder_boot FROM effects WHERE chat_id = $1 AND key = $4 AND `+inScope,
			chatID, scope.App, scope.User, key).Scan(&done, &result, &at, &h.Instance, &h.Boot)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(chatID)
		}
		if err != nil {
			return err
		}
		e = baton.Effect{Key: key, State: baton.EffectPending, ClaimedAt: at.UTC(), Holder: h}
		if done {
			e.State = baton.EffectDone
			if result != nil {
				e.Result = json.RawMessage(*result)
			}
		}
		return nil
	})
	if err != nil {
		return baton.Effect{}, s.dbErr("claim effect", err)
	}
	return e, nil
}

// TakeOverEffect moves a pending claim to holder; see baton.EffectLedger.
// The update is conditional on the claim being prev's (holder and claim
// time), so of concurrent take-overs the row lock lets one win. A key never
// claimed is ENOTFOUND.
func (s *Store) TakeOverEffect(ctx context.Context, scope baton.Scope, chatID string, prev baton.Effect, holder baton.EffectHolder) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if err := baton.ValidateEffect(prev.Key, nil); err != nil {
		return false, err
	}
	if err := holder.Validate(); err != nil {
		return false, err
	}
	taken := false
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE effects SET claimed_at = $5, holder_instance = $6, holder_boot = $7
			WHERE chat_id = $1 AND key = $4 AND NOT done AND claimed_at = $8 AND holder_instance = $9 AND holder_boot = $10 AND `+inScope,
			chatID, scope.App, scope.User, prev.Key, time.Now().UTC().Truncate(time.Microsecond), holder.Instance, holder.Boot,
			prev.ClaimedAt.UTC().Truncate(time.Microsecond), prev.Holder.Instance, prev.Holder.Boot)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			taken = true
			return nil
		}
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM effects WHERE chat_id = $1 AND key = $4 AND `+inScope, chatID, scope.App, scope.User, prev.Key).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, gerr := getChat(ctx, c, scope, chatID); gerr != nil {
				return gerr
			}
			return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", prev.Key)
		}
		return nil
	})
	return taken, s.dbErr("take over effect", err)
}

// RecordEffect stores the result of a claimed effect; see baton.EffectLedger.
// An unclaimed key is ENOTFOUND and a key whose result is already recorded
// is ECONFLICT.
func (s *Store) RecordEffect(ctx context.Context, scope baton.Scope, chatID, key string, result json.RawMessage) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := baton.ValidateEffect(key, result); err != nil {
		return err
	}
	var res *string
	if len(result) > 0 {
		r := string(result)
		res = &r
	}
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE effects SET done = true, result = $5 WHERE chat_id = $1 AND key = $4 AND NOT done AND `+inScope,
			chatID, scope.App, scope.User, key, res)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var done bool
		err = c.QueryRow(ctx, `SELECT done FROM effects WHERE chat_id = $1 AND key = $4 AND `+inScope, chatID, scope.App, scope.User, key).Scan(&done)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, gerr := getChat(ctx, c, scope, chatID); gerr != nil {
				return gerr
			}
			return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", key)
		}
		if err != nil {
			return err
		}
		return baton.Errorf(baton.ECONFLICT, "effect %q: result already recorded", key)
	})
	return s.dbErr("record effect", err)
}

// RecordUsage stores one model call's usage; see baton.UsageStore.
func (s *Store) RecordUsage(ctx context.Context, scope baton.Scope, u baton.UsageRecord) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := u.Validate(); err != nil {
		return err
	}
	if u.At.IsZero() {
		u.At = time.Now()
	}
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `INSERT INTO usage (chat_id, app, workflow, agent, model, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, at)
			SELECT $1, $2, $4, $5, $6, $7, $8, $9, $10, $11, $12 WHERE `+inScope,
			u.ChatID, scope.App, scope.User, u.Workflow, u.Agent, u.Model, u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.ReasoningTokens, u.Cost, u.At)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound(u.ChatID)
		}
		return nil
	})
	return s.dbErr("record usage", err)
}

// ChatUsage sums the chat's usage in total and per agent; see baton.UsageStore.
func (s *Store) ChatUsage(ctx context.Context, scope baton.Scope, chatID string) (baton.UsageTotal, []baton.UsageTotal, error) {
	if _, err := s.GetChat(ctx, scope, chatID); err != nil {
		return baton.UsageTotal{}, nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT u.agent, count(*), sum(u.prompt_tokens)::bigint, sum(u.completion_tokens)::bigint, sum(u.cached_tokens)::bigint, sum(u.reasoning_tokens)::bigint, sum(u.cost)
		FROM chats c JOIN usage u ON u.chat_id = c.id
		WHERE c.id = $1 AND (c.app, c.user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT c.deleted GROUP BY u.agent ORDER BY u.agent`, chatID, scope.App, scope.User)
	if err != nil {
		return baton.UsageTotal{}, nil, s.dbErr("chat usage", err)
	}
	defer rows.Close()
	var per []baton.UsageTotal
	for rows.Next() {
		var t baton.UsageTotal
		if err := rows.Scan(&t.Agent, &t.Calls, &t.PromptTokens, &t.CompletionTokens, &t.CachedTokens, &t.ReasoningTokens, &t.Cost); err != nil {
			return baton.UsageTotal{}, nil, s.dbErr("chat usage", err)
		}
		per = append(per, t)
	}
	return baton.SumUsage(per), per, s.dbErr("chat usage", rows.Err())
}

// AppUsage sums the usage rows of a tenant, an app or every app; see
// baton.UsageStore.
func (s *Store) AppUsage(ctx context.Context, scope baton.Scope) (baton.UsageTotal, error) {
	if err := s.check(); err != nil {
		return baton.UsageTotal{}, err
	}
	var t baton.UsageTotal
	err := s.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(prompt_tokens), 0)::bigint, coalesce(sum(completion_tokens), 0)::bigint,
		coalesce(sum(cached_tokens), 0)::bigint, coalesce(sum(reasoning_tokens), 0)::bigint, coalesce(sum(cost), 0)::double precision
		FROM usage WHERE ($1 = '' OR app = $1) AND ($2 = '' OR chat_id IN (SELECT id FROM chats WHERE app = $1 AND user_id = $2))`, scope.App, scope.User).
		Scan(&t.Calls, &t.PromptTokens, &t.CompletionTokens, &t.CachedTokens, &t.ReasoningTokens, &t.Cost)
	if err != nil {
		return baton.UsageTotal{}, s.dbErr("app usage", err)
	}
	return t, nil
}

func nullJSON(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// CreateTask stores a background task; see baton.TaskStore.
func (s *Store) CreateTask(ctx context.Context, scope baton.Scope, t baton.Task) (baton.Task, error) {
	if err := s.check(); err != nil {
		return baton.Task{}, err
	}
	if t.ID == "" {
		t.ID = baton.NewID()
	}
	if t.Status == "" {
		t.Status = baton.TaskQueued
	}
	if err := t.Validate(); err != nil {
		return baton.Task{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	t.App, t.User, t.CreatedAt, t.UpdatedAt = scope.App, scope.User, now, now
	expires := time.Unix(0, 0).UTC()
	if !t.Expires.IsZero() {
		expires = t.Expires
	}
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `INSERT INTO tasks (id, chat_id, kind, status, input, result, error, created_at, updated_at, owner, expires)
			SELECT $4, $1, $5, $6, $7, $8, $9, $10, $10, $11, $12 WHERE `+inScope,
			t.ChatID, scope.App, scope.User, t.ID, t.Kind, string(t.Status), nullJSON(t.Input), nullJSON(t.Result), t.Error, now, t.Owner, expires)
		if _, ok := isUnique(err); ok {
			return baton.Errorf(baton.ECONFLICT, "task %q already exists", t.ID)
		}
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound(t.ChatID)
		}
		return nil
	})
	if err != nil {
		return baton.Task{}, s.dbErr("create task", err)
	}
	return t, nil
}

const taskCols = `t.id, t.chat_id, c.app, c.user_id, t.kind, t.status, t.input, t.result, t.error, t.owner, t.expires, t.created_at, t.updated_at`

// getTaskSQL reads a task of a chat in scope ($2, $3) that is not deleted.
const getTaskSQL = `SELECT ` + taskCols + ` FROM tasks t JOIN chats c ON c.id = t.chat_id
	WHERE t.id = $1 AND c.app = $2 AND c.user_id = $3 AND NOT c.deleted`

func scanTask(row pgx.Row) (baton.Task, error) {
	var t baton.Task
	var status string
	var input, result *string
	var expires time.Time
	err := row.Scan(&t.ID, &t.ChatID, &t.App, &t.User, &t.Kind, &status, &input, &result, &t.Error, &t.Owner, &expires, &t.CreatedAt, &t.UpdatedAt)
	if expires.Unix() != 0 {
		t.Expires = expires.UTC()
	}
	t.Status = baton.TaskStatus(status)
	if input != nil {
		t.Input = json.RawMessage(*input)
	}
	if result != nil {
		t.Result = json.RawMessage(*result)
	}
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	return t, err
}

// GetTask returns a task of a chat in scope; see baton.TaskStore.
func (s *Store) GetTask(ctx context.Context, scope baton.Scope, id string) (baton.Task, error) {
	if err := s.check(); err != nil {
		return baton.Task{}, err
	}
	t, err := scanTask(s.pool.QueryRow(ctx, getTaskSQL, id, scope.App, scope.User))
	if errors.Is(err, pgx.ErrNoRows) {
		return baton.Task{}, baton.Errorf(baton.ENOTFOUND, "task %q not found", id)
	}
	if err != nil {
		return baton.Task{}, s.dbErr("get task", err)
	}
	return t, nil
}

// UpdateTask sets a task's status, result and error; see baton.TaskStore.
func (s *Store) UpdateTask(ctx context.Context, scope baton.Scope, id string, status baton.TaskStatus, result json.RawMessage, errMsg string) (baton.Task, error) {
	if err := s.check(); err != nil {
		return baton.Task{}, err
	}
	if err := baton.ValidateTaskUpdate(status, result, errMsg); err != nil {
		return baton.Task{}, err
	}
	// RETURNING gives the task as this write left it: a read after the
	// commit could fail (the caller's context ending) for a write that was
	// made, or see a later change.
	var t baton.Task
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		var err error
		t, err = scanTask(c.QueryRow(ctx, `UPDATE tasks t SET status = $4, result = $5, error = $6, updated_at = $7
			FROM chats c WHERE t.id = $1 AND t.status IN ('queued', 'running') AND c.id = t.chat_id AND c.app = $2 AND c.user_id = $3 AND NOT c.deleted
			RETURNING `+taskCols, id, scope.App, scope.User, string(status), nullJSON(result), errMsg, time.Now()))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		ended, err := scanTask(c.QueryRow(ctx, getTaskSQL, id, scope.App, scope.User))
		if errors.Is(err, pgx.ErrNoRows) {
			return baton.Errorf(baton.ENOTFOUND, "task %q not found", id)
		}
		if err != nil {
			return err
		}
		return baton.Errorf(baton.ECONFLICT, "task %q has ended (%s)", id, ended.Status)
	})
	if err != nil {
		return baton.Task{}, s.dbErr("update task", err)
	}
	return t, nil
}

// TasksByStatus lists tasks of every scope with status, oldest first; see
// baton.TaskStore.
func (s *Store) TasksByStatus(ctx context.Context, status baton.TaskStatus, limit int) ([]baton.Task, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	// A deleted chat's tasks are left out: nothing may act on them (every
	// scoped method says ENOTFOUND), so recovery would find them again and
	// again and fail to report them each time.
	rows, err := s.pool.Query(ctx, `SELECT `+taskCols+` FROM tasks t JOIN chats c ON c.id = t.chat_id
		WHERE t.status = $1 AND NOT c.deleted ORDER BY t.created_at, t.id LIMIT $2`, string(status), limit)
	if err != nil {
		return nil, s.dbErr("tasks by status", err)
	}
	defer rows.Close()
	var out []baton.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, s.dbErr("tasks by status", err)
		}
		out = append(out, t)
	}
	return out, s.dbErr("tasks by status", rows.Err())
}

// TouchTasks renews owner's unfinished tasks; see baton.TaskStore.
func (s *Store) TouchTasks(ctx context.Context, owner string, ttl time.Duration) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if owner == "" || ttl <= 0 {
		return 0, baton.Errorf(baton.EINVALID, "touch tasks: owner and a positive ttl are required")
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE tasks SET expires = $2 WHERE owner = $1 AND status IN ('queued', 'running')`,
			owner, time.Now().UTC().Truncate(time.Microsecond).Add(ttl))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.dbErr("touch tasks", err)
	}
	return int(n), nil
}

// GetLease returns the chat's lease as stored; see baton.LeaseStore.
func (s *Store) GetLease(ctx context.Context, chatID string) (baton.Lease, error) {
	if err := s.check(); err != nil {
		return baton.Lease{}, err
	}
	var l baton.Lease
	err := s.pool.QueryRow(ctx, `SELECT owner, token, expires FROM leases WHERE chat_id = $1`, chatID).Scan(&l.Owner, &l.Token, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return baton.Lease{}, nil
	}
	if err != nil {
		return baton.Lease{}, s.dbErr("get lease", err)
	}
	if l.Owner == "" {
		l.Expires = time.Time{}
	}
	l.Expires = l.Expires.UTC()
	return l, nil
}

// AcquireLease takes or extends the chat's run lease in one statement; see
// baton.LeaseStore.
func (s *Store) AcquireLease(ctx context.Context, chatID, instanceID string, ttl time.Duration) (baton.Lease, error) {
	if err := s.check(); err != nil {
		return baton.Lease{}, err
	}
	if chatID == "" || instanceID == "" || ttl <= 0 {
		return baton.Lease{}, baton.Errorf(baton.EINVALID, "lease: chat, instance and a positive ttl are required")
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	exp := now.Add(ttl)
	var token int64
	err := s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(ctx, `INSERT INTO leases AS l (chat_id, owner, token, expires) VALUES ($1, $2, 1, $3)
		ON CONFLICT (chat_id) DO UPDATE SET
			token = CASE WHEN l.owner = $2 AND l.expires > $4 THEN l.token ELSE l.token + 1 END,
			owner = $2, expires = $3
		WHERE l.owner = $2 OR l.owner = '' OR l.expires <= $4
		RETURNING token`, chatID, instanceID, exp, now).Scan(&token)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return baton.Lease{}, baton.Errorf(baton.ECONFLICT, "chat %q: run lease held by another instance", chatID)
	}
	if err != nil {
		return baton.Lease{}, s.dbErr("acquire lease", err)
	}
	return baton.Lease{Token: token, Owner: instanceID, Expires: exp}, nil
}

// RenewLease extends a lease still held with token; see baton.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, chatID, instanceID string, token int64, ttl time.Duration) (baton.Lease, error) {
	if err := s.check(); err != nil {
		return baton.Lease{}, err
	}
	if ttl <= 0 {
		return baton.Lease{}, baton.Errorf(baton.EINVALID, "lease: ttl must be positive")
	}
	exp := time.Now().UTC().Truncate(time.Microsecond).Add(ttl)
	// On the caller's context, unlike other writes: a renewal whose outcome
	// is unknown is harmless (the owner renews again at its next tick, and
	// stops when the lease has run out), while one that waits out the
	// store's write timeout would hold the chat's run past its lease.
	tag, err := s.pool.Exec(ctx, `UPDATE leases SET expires = $4 WHERE chat_id = $1 AND owner = $2 AND token = $3`, chatID, instanceID, token, exp)
	if err != nil {
		return baton.Lease{}, s.dbErr("renew lease", err)
	}
	if tag.RowsAffected() == 0 {
		return baton.Lease{}, baton.Errorf(baton.ECONFLICT, "chat %q: lease %d is no longer held by %q", chatID, token, instanceID)
	}
	return baton.Lease{Token: token, Owner: instanceID, Expires: exp}, nil
}

// ReleaseLease frees a lease held with token; see baton.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, chatID, instanceID string, token int64) error {
	if err := s.check(); err != nil {
		return err
	}
	// On the caller's context, like RenewLease: a release that did not
	// happen is a lease that expires by itself.
	tag, err := s.pool.Exec(ctx, `UPDATE leases SET owner = '', expires = 'epoch' WHERE chat_id = $1 AND owner = $2 AND token = $3`, chatID, instanceID, token)
	if err != nil {
		return s.dbErr("release lease", err)
	}
	if tag.RowsAffected() == 0 {
		return baton.Errorf(baton.ECONFLICT, "chat %q: lease %d is no longer held by %q", chatID, token, instanceID)
	}
	return nil
}
