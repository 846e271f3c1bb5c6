package mem

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// sortBy sorts s by key, ascending, keeping equal keys in their order.
func sortBy[T any, K cmp.Ordered](s []T, key func(T) K) {
	slices.SortStableFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}

// ClaimEffect claims key for the chat; see baton.EffectLedger. Claims of a
// chat's keys are serialised by the chat's lock, so exactly one of
// concurrent claims finds the key new.
func (s *Store) ClaimEffect(ctx context.Context, scope baton.Scope, chatID, key string, holder baton.EffectHolder) (baton.Effect, error) {
	if err := baton.ValidateEffect(key, nil); err != nil {
		return baton.Effect{}, err
	}
	if err := holder.Validate(); err != nil {
		return baton.Effect{}, err
	}
	var out baton.Effect
	err := s.write(ctx, scope, chatID, func(c *chat) error {
		e := c.effects[key]
		if e == nil {
			e = &effect{claimedAt: now(), holder: holder}
			c.effects[key] = e
			out = baton.Effect{Key: key, State: baton.EffectNew, ClaimedAt: e.claimedAt, Holder: holder}
			return nil
		}
		out = baton.Effect{Key: key, State: baton.EffectPending, ClaimedAt: e.claimedAt, Holder: e.holder}
		if e.done {
			out.State, out.Result = baton.EffectDone, bytes.Clone(e.result)
		}
		return nil
	})
	return out, err
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
	err := s.write(ctx, scope, chatID, func(c *chat) error {
		e := c.effects[prev.Key]
		if e == nil {
			return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", prev.Key)
		}
		// The claim is prev's only while its holder and claim time are: a
		// take-over changes both, so one of several concurrent ones wins.
		if e.done || !e.claimedAt.Equal(prev.ClaimedAt) || e.holder != prev.Holder {
			return nil
		}
		e.claimedAt, e.holder, taken = now(), holder, true
		return nil
	})
	return taken, err
}

// RecordEffect stores the result of a claimed effect; see
// baton.EffectLedger. An unclaimed key is ENOTFOUND and a key whose result
// is already recorded is ECONFLICT.
func (s *Store) RecordEffect(ctx context.Context, scope baton.Scope, chatID, key string, result json.RawMessage) error {
	if err := baton.ValidateEffect(key, result); err != nil {
		return err
	}
	return s.write(ctx, scope, chatID, func(c *chat) error {
		e := c.effects[key]
		switch {
		case e == nil:
			return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", key)
		case e.done:
			return baton.Errorf(baton.ECONFLICT, "effect %q: result already recorded", key)
		}
		e.done = true
		if len(result) > 0 {
			e.result = bytes.Clone(result)
		}
		return nil
	})
}

// RecordUsage stores one model call's usage; see baton.UsageStore.
func (s *Store) RecordUsage(ctx context.Context, scope baton.Scope, u baton.UsageRecord) error {
	if err := u.Validate(); err != nil {
		return err
	}
	return s.write(ctx, scope, u.ChatID, func(c *chat) error {
		c.addUsage(u)
		return nil
	})
}

// addUsage adds one usage row to the chat's totals per agent. The store
// keeps the sums, not the rows: every read of usage is a sum. The caller
// holds c.mu for writing.
func (c *chat) addUsage(u baton.UsageRecord) {
	t := c.usage[u.Agent]
	if t == nil {
		t = &baton.UsageTotal{Agent: u.Agent}
		c.usage[u.Agent] = t
	}
	t.Calls++
	t.Usage = t.Usage.Add(u.Usage)
	t.Cost += u.Cost
}

// ChatUsage sums the chat's usage in total and per agent (by agent name);
// see baton.UsageStore.
func (s *Store) ChatUsage(ctx context.Context, scope baton.Scope, chatID string) (baton.UsageTotal, []baton.UsageTotal, error) {
	var per []baton.UsageTotal
	err := s.read(ctx, scope, chatID, func(c *chat) error {
		for _, t := range c.usage {
			per = append(per, *t)
		}
		return nil
	})
	if err != nil {
		return baton.UsageTotal{}, nil, err
	}
	sortBy(per, func(t baton.UsageTotal) string { return t.Agent })
	return baton.SumUsage(per), per, nil
}

// AppUsage sums the usage of a tenant's chats, of an app's (scope.User
// empty) or of every app's (scope empty), deleted chats included; see
// baton.UsageStore. The store keeps each chat's sums per agent, so it
// reads a chat, not a row, at a time: a tenant's chats through its own
// list, an app's or every app's through the list of all chats.
func (s *Store) AppUsage(ctx context.Context, scope baton.Scope) (baton.UsageTotal, error) {
	if err := s.check(ctx); err != nil {
		return baton.UsageTotal{}, err
	}
	s.mu.RLock()
	list := s.order // append-only: the elements this header sees never change
	if scope.User != "" {
		list = s.byScope[scope]
	}
	s.mu.RUnlock()
	var total baton.UsageTotal
	for _, c := range list {
		// App and User never change: they are read without the chat's lock.
		if scope.App != "" && c.c.App != scope.App {
			continue
		}
		c.mu.RLock()
		for _, t := range c.usage {
			total.Calls += t.Calls
			total.Usage = total.Usage.Add(t.Usage)
			total.Cost += t.Cost
		}
		c.mu.RUnlock()
	}
	return total, nil
}

// copyTask returns a copy of t that shares no memory with it.
func copyTask(t *baton.Task) baton.Task {
	out := *t
	out.Input, out.Result = bytes.Clone(t.Input), bytes.Clone(t.Result)
	return out
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
	var out baton.Task
	// The chat is read-locked while the task is added, so that it cannot
	// be deleted in between (lock order: a chat, then the tasks).
	err := s.read(ctx, scope, t.ChatID, func(c *chat) error {
		at := now()
		t.App, t.User, t.CreatedAt, t.UpdatedAt = scope.App, scope.User, at, at
		kept := copyTask(&t)
		s.tasksMu.Lock()
		defer s.tasksMu.Unlock()
		if _, dup := s.tasks[t.ID]; dup {
			return baton.Errorf(baton.ECONFLICT, "task %q already exists", t.ID)
		}
		s.tasks[t.ID] = &kept
		out = copyTask(&kept)
		return nil
	})
	return out, err
}

// task calls fn with the task id, when its chat is live in scope, with the
// chat read-locked and the tasks locked (for writing when write).
func (s *Store) task(ctx context.Context, scope baton.Scope, id string, write bool, fn func(t *baton.Task) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.tasksMu.RLock()
	t := s.tasks[id]
	var chatID string
	if t != nil {
		chatID = t.ChatID
	}
	s.tasksMu.RUnlock()
	missing := baton.Errorf(baton.ENOTFOUND, "task %q not found", id)
	if t == nil {
		return missing
	}
	err := s.read(ctx, scope, chatID, func(*chat) error {
		if write {
			s.tasksMu.Lock()
			defer s.tasksMu.Unlock()
		} else {
			s.tasksMu.RLock()
			defer s.tasksMu.RUnlock()
		}
		return fn(t)
	})
	if baton.ErrorCode(err) == baton.ENOTFOUND {
		return missing
	}
	return err
}

// GetTask returns a task of a chat in scope; see baton.TaskStore.
func (s *Store) GetTask(ctx context.Context, scope baton.Scope, id string) (baton.Task, error) {
	var out baton.Task
	err := s.task(ctx, scope, id, false, func(t *baton.Task) error {
		out = copyTask(t)
		return nil
	})
	return out, err
}

// UpdateTask sets a task's status, result and error; see baton.TaskStore.
func (s *Store) UpdateTask(ctx context.Context, scope baton.Scope, id string, status baton.TaskStatus, result json.RawMessage, errMsg string) (baton.Task, error) {
	if err := baton.ValidateTaskUpdate(status, result, errMsg); err != nil {
		return baton.Task{}, err
	}
	var out baton.Task
	err := s.task(ctx, scope, id, true, func(t *baton.Task) error {
		if t.Status != baton.TaskQueued && t.Status != baton.TaskRunning {
			return baton.Errorf(baton.ECONFLICT, "task %q has ended (%s)", id, t.Status)
		}
		t.Status, t.Result, t.Error, t.UpdatedAt = status, bytes.Clone(result), errMsg, now()
		out = copyTask(t)
		return nil
	})
	return out, err
}

// TasksByStatus lists tasks of every scope with status, oldest first, those
// of deleted chats left out; see baton.TaskStore. It reads every task the
// store holds: it is for recovery after a restart.
func (s *Store) TasksByStatus(ctx context.Context, status baton.TaskStatus, limit int) ([]baton.Task, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	var out []baton.Task
	s.tasksMu.RLock()
	for _, t := range s.tasks {
		if t.Status == status {
			out = append(out, copyTask(t))
		}
	}
	s.tasksMu.RUnlock()
	// The chats are looked at after the tasks' lock is let go (lock order:
	// a chat, then the tasks).
	out = slices.DeleteFunc(out, func(t baton.Task) bool {
		c := s.lookup(t.ChatID)
		if c == nil {
			return true
		}
		c.mu.RLock()
		defer c.mu.RUnlock()
		return c.c.Deleted
	})
	slices.SortFunc(out, func(a, b baton.Task) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out[:min(limit, len(out))], nil
}

// TouchTasks renews owner's unfinished tasks; see baton.TaskStore.
func (s *Store) TouchTasks(ctx context.Context, owner string, ttl time.Duration) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if owner == "" || ttl <= 0 {
		return 0, baton.Errorf(baton.EINVALID, "touch tasks: owner and a positive ttl are required")
	}
	exp := now().Add(ttl)
	n := 0
	s.tasksMu.Lock()
	defer s.tasksMu.Unlock()
	for _, t := range s.tasks {
		if t.Owner == owner && (t.Status == baton.TaskQueued || t.Status == baton.TaskRunning) {
			t.Expires = exp
			n++
		}
	}
	return n, nil
}

// GetLease returns the chat's lease as stored; see baton.LeaseStore.
func (s *Store) GetLease(ctx context.Context, chatID string) (baton.Lease, error) {
	if err := s.check(ctx); err != nil {
		return baton.Lease{}, err
	}
	s.leasesMu.Lock()
	defer s.leasesMu.Unlock()
	if l := s.leases[chatID]; l != nil {
		return *l, nil
	}
	return baton.Lease{}, nil
}

// AcquireLease takes or extends the chat's run lease; see baton.LeaseStore.
func (s *Store) AcquireLease(ctx context.Context, chatID, instanceID string, ttl time.Duration) (baton.Lease, error) {
	if err := s.check(ctx); err != nil {
		return baton.Lease{}, err
	}
	if chatID == "" || instanceID == "" || ttl <= 0 {
		return baton.Lease{}, baton.Errorf(baton.EINVALID, "lease: chat, instance and a positive ttl are required")
	}
	s.leasesMu.Lock()
	defer s.leasesMu.Unlock()
	t := now()
	l := s.leases[chatID]
	switch {
	case l == nil:
		l = &baton.Lease{Token: 1}
		s.leases[chatID] = l
	case l.Owner == instanceID && l.Expires.After(t):
		// The owner's own live lease: extended, same token.
	case l.Owner == "" || !l.Expires.After(t):
		l.Token++
	default:
		return baton.Lease{}, baton.Errorf(baton.ECONFLICT, "chat %q: run lease held by %q", chatID, l.Owner)
	}
	l.Owner, l.Expires = instanceID, t.Add(ttl)
	return *l, nil
}

// RenewLease extends a lease still held with token; see baton.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, chatID, instanceID string, token int64, ttl time.Duration) (baton.Lease, error) {
	if err := s.check(ctx); err != nil {
		return baton.Lease{}, err
	}
	if ttl <= 0 {
		return baton.Lease{}, baton.Errorf(baton.EINVALID, "lease: ttl must be positive")
	}
	s.leasesMu.Lock()
	defer s.leasesMu.Unlock()
	l := s.leases[chatID]
	if l == nil || l.Owner != instanceID || l.Token != token {
		return baton.Lease{}, baton.Errorf(baton.ECONFLICT, "chat %q: lease %d is no longer held by %q", chatID, token, instanceID)
	}
	l.Expires = now().Add(ttl)
	return *l, nil
}

// ReleaseLease frees a lease held with token; see baton.LeaseStore. The
// lease keeps its token, so that the next owner's is higher.
func (s *Store) ReleaseLease(ctx context.Context, chatID, instanceID string, token int64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.leasesMu.Lock()
	defer s.leasesMu.Unlock()
	l := s.leases[chatID]
	if l == nil || l.Owner != instanceID || l.Token != token {
		return baton.Errorf(baton.ECONFLICT, "chat %q: lease %d is no longer held by %q", chatID, token, instanceID)
	}
	l.Owner, l.Expires = "", time.Time{}
	return nil
}
