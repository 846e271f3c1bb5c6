package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/batonhq/baton"
)

// ClaimEffect claims key for the chat; see baton.EffectLedger. Claims are
// serialised by the writer, so exactly one of concurrent claims inserts the
// row and gets EffectNew.
func (s *Store) ClaimEffect(ctx context.Context, scope baton.Scope, chatID, key string, holder baton.EffectHolder) (baton.Effect, error) {
	if err := baton.ValidateEffect(key, nil); err != nil {
		return baton.Effect{}, err
	}
	if err := holder.Validate(); err != nil {
		return baton.Effect{}, err
	}
	var eff baton.Effect
	now := time.Now()
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := chatSeq(ctx, w, scope, chatID); err != nil {
			return err
		}
		res, err := w.exec(ctx, `INSERT INTO effects (chat_id, key, claimed_at, holder_instance, holder_boot) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			chatID, key, micros(now), holder.Instance, holder.Boot)
		if err != nil {
			return storeErr("claim effect", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			eff = baton.Effect{Key: key, State: baton.EffectNew, ClaimedAt: fromMicros(micros(now)), Holder: holder}
			return nil
		}
		var done bool
		var result sql.NullString
		var at int64
		var h baton.EffectHolder
		if err := w.queryRow(ctx, `SELECT done, result, claimed_at, holder_instance, holder_boot FROM effects WHERE chat_id = ? AND key = ?`, chatID, key).Scan(&done, &result, &at, &h.Instance, &h.Boot); err != nil {
			return storeErr("claim effect", err)
		}
		eff = baton.Effect{Key: key, State: baton.EffectPending, ClaimedAt: fromMicros(at), Holder: h}
		if done {
			eff.State = baton.EffectDone
			if result.Valid {
				eff.Result = json.RawMessage(result.String)
			}
		}
		return nil
	})
	return eff, err
}

// TakeOverEffect moves a pending claim to holder; see baton.EffectLedger.
// A key never claimed is ENOTFOUND.
func (s *Store) TakeOverEffect(ctx context.Context, scope baton.Scope, chatID string, prev baton.Effect, holder baton.EffectHolder) (bool, error) {
	if err := baton.ValidateEffect(prev.Key, nil); err != nil {
		return false, err
	}
	if err := holder.Validate(); err != nil {
		return false, err
	}
	taken := false
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := chatSeq(ctx, w, scope, chatID); err != nil {
			return err
		}
		// The claim is prev's only while its holder and claim time are:
		// a take-over changes both, so one of several concurrent ones wins.
		res, err := w.exec(ctx, `UPDATE effects SET claimed_at = ?, holder_instance = ?, holder_boot = ?
			WHERE chat_id = ? AND key = ? AND NOT done AND claimed_at = ? AND holder_instance = ? AND holder_boot = ?`,
			micros(time.Now()), holder.Instance, holder.Boot, chatID, prev.Key, micros(prev.ClaimedAt), prev.Holder.Instance, prev.Holder.Boot)
		if err != nil {
			return storeErr("take over effect", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			taken = true
			return nil
		}
		var n int
		if err := w.queryRow(ctx, `SELECT count(*) FROM effects WHERE chat_id = ? AND key = ?`, chatID, prev.Key).Scan(&n); err != nil {
			return storeErr("take over effect", err)
		}
		if n == 0 {
			return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", prev.Key)
		}
		return nil
	})
	return taken, err
}

// RecordEffect stores the result of a claimed effect; see baton.EffectLedger.
// An unclaimed key is ENOTFOUND and a key whose result is already recorded
// is ECONFLICT.
func (s *Store) RecordEffect(ctx context.Context, scope baton.Scope, chatID, key string, result json.RawMessage) error {
	if err := baton.ValidateEffect(key, result); err != nil {
		return err
	}
	var res any
	if len(result) > 0 {
		res = string(result)
	}
	return s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := chatSeq(ctx, w, scope, chatID); err != nil {
			return err
		}
		var done bool
		err := w.queryRow(ctx, `SELECT done FROM effects WHERE chat_id = ? AND key = ?`, chatID, key).Scan(&done)
		if errors.Is(err, sql.ErrNoRows) {
			return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", key)
		}
		if err != nil {
			return storeErr("record effect", err)
		}
		if done {
			return baton.Errorf(baton.ECONFLICT, "effect %q: result already recorded", key)
		}
		if _, err := w.exec(ctx, `UPDATE effects SET done = 1, result = ? WHERE chat_id = ? AND key = ?`, res, chatID, key); err != nil {
			return storeErr("record effect", err)
		}
		return nil
	})
}

// RecordUsage stores one model call's usage; see baton.UsageStore.
func (s *Store) RecordUsage(ctx context.Context, scope baton.Scope, u baton.UsageRecord) error {
	if err := u.Validate(); err != nil {
		return err
	}
	if u.At.IsZero() {
		u.At = time.Now()
	}
	// The writer inserts the usage rows of a batch together (bulkUsage);
	// fn inserts this one alone when they cannot be. One statement checks
	// the scope and inserts: the row is selected from the chat's, so a chat
	// out of scope inserts nothing.
	fn := func(ctx context.Context, w *wconn) error {
		res, err := w.exec(ctx, `INSERT INTO usage (chat_id, app, workflow, agent, model, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, at)
			SELECT id, app, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM chats WHERE id = ? AND app = ? AND user_id = ? AND deleted = 0`,
			u.Workflow, u.Agent, u.Model, u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.ReasoningTokens, u.Cost, micros(u.At),
			u.ChatID, scope.App, scope.User)
		if err != nil {
			return storeErr("record usage", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound(u.ChatID)
		}
		return nil
	}
	return s.submit(ctx, &request{ctx: ctx, fn: fn, use: &usageReq{scope: scope, rec: u}, done: make(chan error, 1)})
}

// ChatUsage sums the chat's usage in total and per agent; see baton.UsageStore.
func (s *Store) ChatUsage(ctx context.Context, scope baton.Scope, chatID string) (baton.UsageTotal, []baton.UsageTotal, error) {
	if s.closed.Load() {
		return baton.UsageTotal{}, nil, baton.ErrClosed
	}
	// The chat row tells an unknown chat from one with no usage.
	var last int64
	s.reads.Add(1)
	err := s.r.chatSeq.QueryRowContext(ctx, chatID, scope.App, scope.User).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return baton.UsageTotal{}, nil, notFound(chatID)
	}
	if err != nil {
		return baton.UsageTotal{}, nil, s.readErr("chat usage", err)
	}
	s.reads.Add(1)
	rows, err := s.r.chatUsage.QueryContext(ctx, chatID, scope.App, scope.User)
	if err != nil {
		return baton.UsageTotal{}, nil, s.readErr("chat usage", err)
	}
	defer rows.Close()
	var per []baton.UsageTotal
	for rows.Next() {
		var t baton.UsageTotal
		if err := rows.Scan(&t.Agent, &t.Calls, &t.PromptTokens, &t.CompletionTokens, &t.CachedTokens, &t.ReasoningTokens, &t.Cost); err != nil {
			return baton.UsageTotal{}, nil, s.readErr("chat usage", err)
		}
		per = append(per, t)
	}
	return baton.SumUsage(per), per, s.readErr("chat usage", rows.Err())
}

// AppUsage sums the usage rows of a tenant, an app or every app; see
// baton.UsageStore.
func (s *Store) AppUsage(ctx context.Context, scope baton.Scope) (baton.UsageTotal, error) {
	if s.closed.Load() {
		return baton.UsageTotal{}, baton.ErrClosed
	}
	q := `SELECT count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cached_tokens), 0),
		coalesce(sum(reasoning_tokens), 0), coalesce(sum(cost), 0) FROM usage`
	var args []any
	switch {
	case scope.User != "":
		q += ` WHERE app = ? AND chat_id IN (SELECT id FROM chats WHERE app = ? AND user_id = ?)`
		args = append(args, scope.App, scope.App, scope.User)
	case scope.App != "":
		q += ` WHERE app = ?`
		args = append(args, scope.App)
	}
	var t baton.UsageTotal
	s.reads.Add(1)
	err := s.rdb.QueryRowContext(ctx, q, args...).Scan(&t.Calls, &t.PromptTokens, &t.CompletionTokens, &t.CachedTokens, &t.ReasoningTokens, &t.Cost)
	if err != nil {
		return baton.UsageTotal{}, s.readErr("app usage", err)
	}
	return t, nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// CreateTask stores a background task; see baton.TaskStore.
func (s *Store) CreateTask(ctx context.Context, scope baton.Scope, t baton.Task) (baton.Task, error) {
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
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := chatSeq(ctx, w, scope, t.ChatID); err != nil {
			return err
		}
		_, err := w.exec(ctx, `INSERT INTO tasks (id, chat_id, kind, status, input, result, error, owner, expires, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.ChatID, t.Kind, string(t.Status), nullJSON(t.Input), nullJSON(t.Result), t.Error, t.Owner, taskExpiry(t), micros(now), micros(now))
		if isUnique(err) {
			return baton.Errorf(baton.ECONFLICT, "task %q already exists", t.ID)
		}
		return storeErr("create task", err)
	})
	if err != nil {
		return baton.Task{}, err
	}
	return t, nil
}

// taskExpiry is a task's Expires as stored: 0 for none.
func taskExpiry(t baton.Task) int64 {
	if t.Expires.IsZero() {
		return 0
	}
	return micros(t.Expires)
}

const taskCols = `t.id, t.chat_id, c.app, c.user_id, t.kind, t.status, t.input, t.result, t.error, t.owner, t.expires, t.created_at, t.updated_at`

func scanTask(row interface{ Scan(...any) error }) (baton.Task, error) {
	var t baton.Task
	var status string
	var input, result sql.NullString
	var expires, created, updated int64
	err := row.Scan(&t.ID, &t.ChatID, &t.App, &t.User, &t.Kind, &status, &input, &result, &t.Error, &t.Owner, &expires, &created, &updated)
	if expires != 0 {
		t.Expires = fromMicros(expires)
	}
	t.Status = baton.TaskStatus(status)
	if input.Valid {
		t.Input = json.RawMessage(input.String)
	}
	if result.Valid {
		t.Result = json.RawMessage(result.String)
	}
	t.CreatedAt, t.UpdatedAt = fromMicros(created), fromMicros(updated)
	return t, err
}

// GetTask returns a task of a chat in scope; see baton.TaskStore.
func (s *Store) GetTask(ctx context.Context, scope baton.Scope, id string) (baton.Task, error) {
	if s.closed.Load() {
		return baton.Task{}, baton.ErrClosed
	}
	s.reads.Add(1)
	t, err := scanTask(s.r.getTask.QueryRowContext(ctx, id, scope.App, scope.User))
	if errors.Is(err, sql.ErrNoRows) {
		return baton.Task{}, baton.Errorf(baton.ENOTFOUND, "task %q not found", id)
	}
	if err != nil {
		return baton.Task{}, s.readErr("get task", err)
	}
	return t, nil
}

// UpdateTask sets a task's status, result and error; see baton.TaskStore.
func (s *Store) UpdateTask(ctx context.Context, scope baton.Scope, id string, status baton.TaskStatus, result json.RawMessage, errMsg string) (baton.Task, error) {
	if err := baton.ValidateTaskUpdate(status, result, errMsg); err != nil {
		return baton.Task{}, err
	}
	now := time.Now()
	// The task is read inside the write: a read after the commit could
	// fail (the caller's context ending) for a write that was made, or see
	// a later change.
	var t baton.Task
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		res, err := w.exec(ctx, `UPDATE tasks SET status = ?, result = ?, error = ?, updated_at = ?
			WHERE id = ? AND status IN ('queued', 'running') AND chat_id IN (SELECT id FROM chats WHERE app = ? AND user_id = ? AND deleted = 0)`,
			string(status), nullJSON(result), errMsg, micros(now), id, scope.App, scope.User)
		if err != nil {
			return storeErr("update task", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			if t, err = scanTask(w.queryRow(ctx, getTaskSQL, id, scope.App, scope.User)); err != nil {
				return storeErr("update task", err)
			}
			return nil
		}
		var ended string
		err = w.queryRow(ctx, `SELECT t.status FROM tasks t JOIN chats c ON c.id = t.chat_id
			WHERE t.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0`, id, scope.App, scope.User).Scan(&ended)
		if err != nil {
			return baton.Errorf(baton.ENOTFOUND, "task %q not found", id)
		}
		return baton.Errorf(baton.ECONFLICT, "task %q has ended (%s)", id, ended)
	})
	if err != nil {
		return baton.Task{}, err
	}
	return t, nil
}

// TasksByStatus lists tasks of every scope with status, oldest first; see
// baton.TaskStore.
func (s *Store) TasksByStatus(ctx context.Context, status baton.TaskStatus, limit int) ([]baton.Task, error) {
	if s.closed.Load() {
		return nil, baton.ErrClosed
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	// A deleted chat's tasks are left out: nothing may act on them (every
	// scoped method says ENOTFOUND), so recovery would find them again and
	// again and fail to report them each time.
	s.reads.Add(1)
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+taskCols+` FROM tasks t JOIN chats c ON c.id = t.chat_id
		WHERE t.status = ? AND c.deleted = 0 ORDER BY t.created_at, t.id LIMIT ?`, string(status), limit)
	if err != nil {
		return nil, s.readErr("tasks by status", err)
	}
	defer rows.Close()
	var out []baton.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, s.readErr("tasks by status", err)
		}
		out = append(out, t)
	}
	return out, s.readErr("tasks by status", rows.Err())
}

// TouchTasks renews owner's unfinished tasks; see baton.TaskStore.
func (s *Store) TouchTasks(ctx context.Context, owner string, ttl time.Duration) (int, error) {
	if owner == "" || ttl <= 0 {
		return 0, baton.Errorf(baton.EINVALID, "touch tasks: owner and a positive ttl are required")
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		res, err := w.exec(ctx, `UPDATE tasks SET expires = ? WHERE owner = ? AND status IN ('queued', 'running')`, micros(time.Now().Add(ttl)), owner)
		if err != nil {
			return storeErr("touch tasks", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}

// GetLease returns the chat's lease as stored; see baton.LeaseStore.
func (s *Store) GetLease(ctx context.Context, chatID string) (baton.Lease, error) {
	if s.closed.Load() {
		return baton.Lease{}, baton.ErrClosed
	}
	var l baton.Lease
	var expires int64
	s.reads.Add(1)
	err := s.r.getLease.QueryRowContext(ctx, chatID).Scan(&l.Owner, &l.Token, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return baton.Lease{}, nil
	}
	if err != nil {
		return baton.Lease{}, s.readErr("get lease", err)
	}
	if expires != 0 {
		l.Expires = fromMicros(expires)
	}
	return l, nil
}

// AcquireLease takes or extends the chat's run lease; see baton.LeaseStore.
func (s *Store) AcquireLease(ctx context.Context, chatID, instanceID string, ttl time.Duration) (baton.Lease, error) {
	if chatID == "" || instanceID == "" || ttl <= 0 {
		return baton.Lease{}, baton.Errorf(baton.EINVALID, "lease: chat, instance and a positive ttl are required")
	}
	var l baton.Lease
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		now := time.Now()
		exp := micros(now.Add(ttl))
		var owner string
		var token, expires int64
		err := w.queryRow(ctx, `SELECT owner, token, expires FROM leases WHERE chat_id = ?`, chatID).Scan(&owner, &token, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			token = 1
			_, err = w.exec(ctx, `INSERT INTO leases (chat_id, owner, token, expires) VALUES (?, ?, ?, ?)`, chatID, instanceID, token, exp)
		case err != nil:
		case owner == instanceID && expires > micros(now):
			_, err = w.exec(ctx, `UPDATE leases SET expires = ? WHERE chat_id = ?`, exp, chatID)
		case owner == "" || expires <= micros(now):
			token++
			_, err = w.exec(ctx, `UPDATE leases SET owner = ?, token = ?, expires = ? WHERE chat_id = ?`, instanceID, token, exp, chatID)
		default:
			return baton.Errorf(baton.ECONFLICT, "chat %q: run lease held by %q", chatID, owner)
		}
		if err != nil {
			return storeErr("acquire lease", err)
		}
		l = baton.Lease{Token: token, Owner: instanceID, Expires: fromMicros(exp)}
		return nil
	})
	return l, err
}

// RenewLease extends a lease still held with token; see baton.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, chatID, instanceID string, token int64, ttl time.Duration) (baton.Lease, error) {
	if ttl <= 0 {
		return baton.Lease{}, baton.Errorf(baton.EINVALID, "lease: ttl must be positive")
	}
	var l baton.Lease
	err := s.write(ctx, func(ctx context.Context, w *wconn) error {
		exp := micros(time.Now().Add(ttl))
		res, err := w.exec(ctx, `UPDATE leases SET expires = ? WHERE chat_id = ? AND owner = ? AND token = ?`, exp, chatID, instanceID, token)
		if err != nil {
			return storeErr("renew lease", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return baton.Errorf(baton.ECONFLICT, "chat %q: lease %d is no longer held by %q", chatID, token, instanceID)
		}
		l = baton.Lease{Token: token, Owner: instanceID, Expires: fromMicros(exp)}
		return nil
	})
	return l, err
}

// ReleaseLease frees a lease held with token; see baton.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, chatID, instanceID string, token int64) error {
	return s.write(ctx, func(ctx context.Context, w *wconn) error {
		res, err := w.exec(ctx, `UPDATE leases SET owner = '', expires = 0 WHERE chat_id = ? AND owner = ? AND token = ?`, chatID, instanceID, token)
		if err != nil {
			return storeErr("release lease", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return baton.Errorf(baton.ECONFLICT, "chat %q: lease %d is no longer held by %q", chatID, token, instanceID)
		}
		return nil
	})
}
