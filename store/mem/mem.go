// Package mem is a baton.Store kept in the process's memory, for embedders
// and fast tests: no file, no fsync, no server. It passes store/storetest
// like store/sqlite and store/postgres, but it is not durable: everything it
// holds — chats, events, inboxes, usage, tasks, leases, API keys — is lost
// when the process exits (or the Store is dropped). A write that returns nil
// is durable only for as long as the process lives, and two processes never
// share one. Use store/sqlite or store/postgres for anything a restart must
// find again.
//
// It is safe for concurrent use. Each chat has a mutex of its own: a chat's
// events, snapshot, pending requests, inbox, effects and usage change under
// it, so writes to one chat are ordered (gapless sequences, atomic appends)
// while writes to different chats do not wait for each other. The map of
// chats is read without a lock (a chat is added once and never removed);
// adding one, the index of chats by status, tasks, leases, API keys and
// stats rollups have a lock each. No lock is held across anything slow,
// and nothing blocks but those locks. The runtime's sweeps (chats by
// status, every second) read only the chats in that status.
//
// Everything it returns is a copy (events' payloads and metadata, contexts,
// pending requests, task inputs and results): a caller that changes what it
// got changes nothing in the store, nor does one that changes what it gave.
//
// Its memory grows with what it holds: every chat's events until the
// chat is deleted (DeleteChat frees them; the chat's row, usage and tasks
// stay, as in the other stores).
//
// Open it with New, or with store.Open("mem:").
package mem

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
)

// defaultListLimit is the number of chats a list returns when no limit is given.
const defaultListLimit = 100

var (
	_ baton.Store      = (*Store)(nil)
	_ baton.StatsStore = (*Store)(nil)
)

// Store is an in-memory baton.Store (and baton.StatsStore). The zero value
// is not usable; call New.
type Store struct {
	closed atomic.Bool

	chats sync.Map // id → *chat, deleted ones included (an id is never reused)

	mu      sync.RWMutex            // guards order and byScope, and the adding of a chat
	order   []*chat                 // in creation order, for the runtime's lists
	byScope map[baton.Scope][]*chat // in creation order, for ListChats

	statusMu sync.Mutex
	byStatus map[baton.ChatStatus]map[*chat]struct{} // live chats by status (ChatsByStatus)

	inputSeq atomic.Int64 // orders inputs across chats (ChatsWithInputs: oldest first)

	tasksMu sync.RWMutex
	tasks   map[string]*baton.Task // by id; App and User are the chat's

	leasesMu sync.Mutex
	leases   map[string]*baton.Lease // by chat id; a released lease keeps its token

	keysMu sync.RWMutex
	keys   map[string]baton.APIKey // by hash

	statsMu sync.Mutex
	stats   map[string]map[statsKey]*rollup // by app
}

// New returns an empty store.
func New() *Store {
	return &Store{
		byScope:  map[baton.Scope][]*chat{},
		byStatus: map[baton.ChatStatus]map[*chat]struct{}{},
		tasks:    map[string]*baton.Task{},
		leases:   map[string]*baton.Lease{},
		keys:     map[string]baton.APIKey{},
		stats:    map[string]map[statsKey]*rollup{},
	}
}

// Ping reports whether the store is open.
func (s *Store) Ping(ctx context.Context) error { return s.check(ctx) }

// Close closes the store: every later call fails with baton.ErrClosed (a
// call already under way finishes). What it held is freed once the Store
// itself is no longer referenced. Closing twice is not an error.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// check returns baton.ErrClosed after Close, or ctx's error when it has
// ended: a call may be stopped by its context only before it starts.
func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return baton.ErrClosed
	}
	return ctx.Err()
}

// now is the store's clock: UTC, without the monotonic reading, so that
// times compare and print the same once copied.
func now() time.Time { return time.Now().UTC() }

func notFound(id string) error { return baton.Errorf(baton.ENOTFOUND, "chat %q not found", id) }

// chat is one chat and everything that belongs to it, guarded by mu.
type chat struct {
	n       int // creation order, 0 for the first chat
	mu      sync.RWMutex
	c       baton.Chat // Pending is kept in pending; LastSequence is len(events)
	events  []baton.Event
	ids     map[string]struct{}          // event ids, unique within the chat
	pending []baton.PendingRequest       // waiting, oldest first
	used    map[string]struct{}          // every ui_event_id the chat ever had, answered ones too
	inputs  []*baton.Input               // in the order accepted
	inputID map[string]*baton.Input      // by event id
	waiting int                          // inputs not taken yet
	effects map[string]*effect           // by key
	usage   map[string]*baton.UsageTotal // by agent
}

// effect is an entry of the chat's effect ledger.
type effect struct {
	claimedAt time.Time
	holder    baton.EffectHolder
	done      bool
	result    json.RawMessage
}

// in reports whether the chat is live in scope. The caller holds c.mu.
func (c *chat) in(scope baton.Scope) bool {
	return !c.c.Deleted && c.c.App == scope.App && c.c.User == scope.User
}

// lookup returns the chat with id, deleted or not, or nil.
func (s *Store) lookup(id string) *chat {
	c, _ := s.chats.Load(id)
	ch, _ := c.(*chat)
	return ch
}

// read calls fn with the chat read-locked, when it is live in scope.
func (s *Store) read(ctx context.Context, scope baton.Scope, id string, fn func(c *chat) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	c := s.lookup(id)
	if c == nil {
		return notFound(id)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.in(scope) {
		return notFound(id)
	}
	return fn(c)
}

// write calls fn with the chat locked, when it is live in scope. fn checks
// everything before it changes anything: an error leaves the chat as it was.
func (s *Store) write(ctx context.Context, scope baton.Scope, id string, fn func(c *chat) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	c := s.lookup(id)
	if c == nil {
		return notFound(id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.in(scope) {
		return notFound(id)
	}
	return fn(c)
}

// CreateChat creates c in scope; see baton.ChatStore.
func (s *Store) CreateChat(ctx context.Context, scope baton.Scope, c baton.Chat) (baton.Chat, error) {
	if err := s.check(ctx); err != nil {
		return baton.Chat{}, err
	}
	if err := c.PrepareCreate(scope); err != nil {
		return baton.Chat{}, err
	}
	return s.create(scope, c, nil, nil)
}

// CreateChatWithInput creates c with ev in its inbox, both at once; see
// baton.InboxStore.
func (s *Store) CreateChatWithInput(ctx context.Context, scope baton.Scope, c baton.Chat, ev baton.Event) (baton.Chat, baton.Input, error) {
	if err := s.check(ctx); err != nil {
		return baton.Chat{}, baton.Input{}, err
	}
	ev, err := baton.PrepareCreateWithInput(scope, &c, ev)
	if err != nil {
		return baton.Chat{}, baton.Input{}, err
	}
	var in baton.Input
	chat, err := s.create(scope, c, nil, func(ch *chat, t time.Time) error {
		x := &baton.Input{Event: cloneEvent(ev), Seq: s.inputSeq.Add(1), AcceptedAt: t}
		ch.inputs = append(ch.inputs, x)
		ch.inputID[ev.ID] = x
		ch.waiting++
		in = copyInput(x)
		return nil
	})
	if err != nil {
		return baton.Chat{}, baton.Input{}, err
	}
	return chat, in, nil
}

// CreateChatAndAppend creates c, keeps keep and makes the chat's first
// append at once; see baton.CreateAppender.
func (s *Store) CreateChatAndAppend(ctx context.Context, scope baton.Scope, c baton.Chat, keep *baton.Event, events []baton.Event, u *baton.ChatUpdate) (baton.Chat, []baton.Event, error) {
	if err := s.check(ctx); err != nil {
		return baton.Chat{}, nil, err
	}
	var in baton.Event
	var err error
	if keep != nil {
		in, err = baton.PrepareCreateWithInput(scope, &c, *keep)
	} else {
		err = c.PrepareCreate(scope)
	}
	if err != nil {
		return baton.Chat{}, nil, err
	}
	evs, err := baton.PrepareEvents(c.ID, events)
	if err != nil {
		return baton.Chat{}, nil, err
	}
	if err := u.Validate(); err != nil {
		return baton.Chat{}, nil, err
	}
	kept := make([]baton.Event, len(evs))
	for i := range evs {
		if containsID(evs[:i], evs[i].ID) {
			return baton.Chat{}, nil, baton.Errorf(baton.ECONFLICT, "event %q: already recorded in chat %q", evs[i].ID, c.ID)
		}
		evs[i].Sequence = int64(i + 1)
		kept[i] = cloneEvent(evs[i])
	}
	chat, err := s.create(scope, c, kept, func(ch *chat, t time.Time) error {
		if keep != nil {
			x := &baton.Input{Event: cloneEvent(in), Seq: s.inputSeq.Add(1), AcceptedAt: t}
			ch.inputs = append(ch.inputs, x)
			ch.inputID[in.ID] = x
			ch.waiting++
		}
		ap, err := s.prepare(ch, u)
		if err != nil {
			return err
		}
		ap.apply(s, ch, t)
		return nil
	})
	if err != nil {
		return baton.Chat{}, nil, err
	}
	return chat, evs, nil
}

// create adds c, prepared, with its first events (already numbered 1 …).
// fill, when not nil, adds to the new chat before any other goroutine can
// see it (its first input).
func (s *Store) create(scope baton.Scope, c baton.Chat, events []baton.Event, fill func(ch *chat, t time.Time) error) (baton.Chat, error) {
	ch := &chat{
		ids: map[string]struct{}{}, used: map[string]struct{}{}, inputID: map[string]*baton.Input{},
		effects: map[string]*effect{}, usage: map[string]*baton.UsageTotal{},
	}
	for _, p := range c.Pending {
		if _, dup := ch.used[p.UIEventID]; dup {
			return baton.Chat{}, baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already used", p.UIEventID)
		}
		ch.used[p.UIEventID] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.chats.Load(c.ID); dup {
		return baton.Chat{}, baton.Errorf(baton.ECONFLICT, "chat %q already exists", c.ID)
	}
	// The time is taken under the lock, so that creation order and
	// CreatedAt agree (ListChats: newest first).
	t := now()
	c.CreatedAt, c.UpdatedAt = t, t
	ch.pending = addPending(nil, c.Pending, t)
	c.Pending = nil
	ch.events = events
	for i := range events {
		ch.ids[events[i].ID] = struct{}{}
	}
	c.LastSequence = int64(len(events))
	ch.c, ch.n = c, len(s.order)
	if fill != nil {
		if err := fill(ch, t); err != nil {
			return baton.Chat{}, err
		}
	}
	s.setStatus(ch, "", ch.c.Status)
	s.chats.Store(c.ID, ch)
	s.order = append(s.order, ch)
	s.byScope[scope] = append(s.byScope[scope], ch)
	return ch.snapshot(true), nil
}

// snapshot returns a copy of the chat, with its pending requests when
// withPending. The caller holds c.mu.
func (c *chat) snapshot(withPending bool) baton.Chat {
	out := c.c
	out.Context = bytes.Clone(c.c.Context)
	out.Pending = nil
	if withPending && len(c.pending) > 0 {
		out.Pending = slices.Clone(c.pending)
	}
	return out
}

// GetChat returns the chat with its pending requests; see baton.ChatStore.
func (s *Store) GetChat(ctx context.Context, scope baton.Scope, id string) (baton.Chat, error) {
	var out baton.Chat
	err := s.read(ctx, scope, id, func(c *chat) error {
		out = c.snapshot(true)
		return nil
	})
	return out, err
}

// ListChats returns the scope's chats, newest first; see baton.ChatStore.
func (s *Store) ListChats(ctx context.Context, scope baton.Scope, opts baton.ListOptions) ([]baton.Chat, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if opts.Limit <= 0 {
		opts.Limit = defaultListLimit
	}
	s.mu.RLock()
	list := s.byScope[scope] // append-only: the elements this header sees never change
	s.mu.RUnlock()
	var out []baton.Chat
	for i := len(list) - 1; i >= 0 && len(out) < opts.Limit; i-- {
		c := list[i]
		c.mu.RLock()
		if !c.c.Deleted && (opts.Workflow == "" || c.c.Workflow == opts.Workflow) && (opts.Status == "" || c.c.Status == opts.Status) {
			out = append(out, c.snapshot(false))
		}
		c.mu.RUnlock()
	}
	return out, nil
}

// ChatsByStatus lists chats of every scope with status, oldest first; see
// baton.ChatStore. It reads the chats in that status only (an index kept
// with every change of status): the runtime sweeps the chats that wait for
// a UI tool every second.
func (s *Store) ChatsByStatus(ctx context.Context, status baton.ChatStatus, limit int) ([]baton.Chat, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	s.statusMu.Lock()
	found := make([]*chat, 0, len(s.byStatus[status]))
	for c := range s.byStatus[status] {
		found = append(found, c)
	}
	s.statusMu.Unlock()
	sortBy(found, func(c *chat) int { return c.n })
	var out []baton.Chat
	for _, c := range found {
		if len(out) >= limit {
			break
		}
		c.mu.RLock()
		// It may have changed since the index was read.
		if !c.c.Deleted && c.c.Status == status {
			out = append(out, c.snapshot(false))
		}
		c.mu.RUnlock()
	}
	return out, nil
}

// setStatus moves c from the index of status from to that of to ("" for
// none). The caller holds c.mu for writing, or is adding c (lock order: a
// chat, or the store's mu, then statusMu).
func (s *Store) setStatus(c *chat, from, to baton.ChatStatus) {
	if from == to {
		return
	}
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if from != "" {
		delete(s.byStatus[from], c)
	}
	if to != "" {
		m := s.byStatus[to]
		if m == nil {
			m = map[*chat]struct{}{}
			s.byStatus[to] = m
		}
		m[c] = struct{}{}
	}
}

// scan returns copies of the live chats that match, oldest first, at most
// limit. match runs with the chat read-locked.
func (s *Store) scan(ctx context.Context, limit int, match func(c *chat) bool) ([]baton.Chat, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	all := s.order
	s.mu.RUnlock()
	var out []baton.Chat
	for _, c := range all {
		if len(out) >= limit {
			break
		}
		c.mu.RLock()
		if !c.c.Deleted && match(c) {
			out = append(out, c.snapshot(false))
		}
		c.mu.RUnlock()
	}
	return out, nil
}

// DeleteChat soft-deletes the chat and frees what no method reads again;
// see baton.ChatStore.
func (s *Store) DeleteChat(ctx context.Context, scope baton.Scope, id string) error {
	return s.write(ctx, scope, id, func(c *chat) error {
		c.c.Deleted = true
		c.c.UpdatedAt = now()
		s.setStatus(c, c.c.Status, "") // a deleted chat is in no list
		// No method reads a deleted chat's events, requests, inbox or
		// effects again: they are let go, so that deleting chats frees
		// memory. What stays is what outlives a chat: its row (its id is
		// never reused), its usage (AppUsage counts it) and its tasks.
		c.events, c.ids, c.pending, c.used = nil, nil, nil, nil
		c.inputs, c.inputID, c.waiting, c.effects = nil, nil, 0, nil
		return nil
	})
}

// UpdateChat applies u and returns the chat as it left it; see
// baton.ChatStore.
func (s *Store) UpdateChat(ctx context.Context, scope baton.Scope, id string, u baton.ChatUpdate) (baton.Chat, error) {
	if err := u.Validate(); err != nil {
		return baton.Chat{}, err
	}
	var out baton.Chat
	err := s.write(ctx, scope, id, func(c *chat) error {
		ap, err := s.prepare(c, &u)
		if err != nil {
			return err
		}
		ap.apply(s, c, now())
		out = c.snapshot(true)
		return nil
	})
	return out, err
}

// applier is a checked ChatUpdate, ready to apply: nothing in it can fail.
type applier struct {
	u       *baton.ChatUpdate
	context json.RawMessage // the patched snapshot; nil when unchanged
}

// prepare checks u against the chat (fence, pending requests, inputs,
// context patch) without changing it. The caller holds c.mu for writing.
func (s *Store) prepare(c *chat, u *baton.ChatUpdate) (applier, error) {
	ap := applier{u: u}
	if u == nil {
		return ap, nil
	}
	id := c.c.ID
	if u.Fence > 0 {
		// Lock order: a chat, then the leases; never the other way.
		s.leasesMu.Lock()
		var token int64
		if l := s.leases[id]; l != nil {
			token = l.Token
		}
		s.leasesMu.Unlock()
		if token != u.Fence {
			return ap, baton.Errorf(baton.ECONFLICT, "chat %q: lease token %d is stale (current %d): %w", id, u.Fence, token, baton.ErrFenced)
		}
	}
	for i, ev := range u.ResolvePending {
		if !slices.ContainsFunc(c.pending, func(p baton.PendingRequest) bool { return p.UIEventID == ev }) {
			if _, ok := c.used[ev]; ok {
				return ap, baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already answered", ev)
			}
			return ap, baton.Errorf(baton.ENOTFOUND, "ui_event_id %q: no such request in chat %q", ev, id)
		}
		if slices.Contains(u.ResolvePending[:i], ev) {
			return ap, baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already answered", ev)
		}
	}
	for i, p := range u.AddPending {
		_, used := c.used[p.UIEventID]
		if used || slices.ContainsFunc(u.AddPending[:i], func(q baton.PendingRequest) bool { return q.UIEventID == p.UIEventID }) {
			return ap, baton.Errorf(baton.ECONFLICT, "ui_event_id %q: already used", p.UIEventID)
		}
	}
	for i, in := range u.ConsumeInputs {
		x := c.inputID[in]
		if x == nil {
			return ap, baton.Errorf(baton.ENOTFOUND, "input %q: not in chat %q's inbox", in, id)
		}
		if !x.ConsumedAt.IsZero() || slices.Contains(u.ConsumeInputs[:i], in) {
			return ap, baton.Errorf(baton.ECONFLICT, "input %q: already taken", in)
		}
	}
	if len(u.Context) > 0 {
		next, err := baton.PatchContext(c.c.Context, u.Context)
		if err != nil {
			return ap, err
		}
		ap.context = next
	}
	return ap, nil
}

// apply writes the checked update and the chat's updated time. The caller
// holds c.mu for writing.
func (ap applier) apply(s *Store, c *chat, t time.Time) {
	c.c.UpdatedAt = t
	u := ap.u
	if u == nil {
		return
	}
	for _, ev := range u.ResolvePending {
		c.pending = slices.DeleteFunc(c.pending, func(p baton.PendingRequest) bool { return p.UIEventID == ev })
	}
	for _, p := range u.AddPending {
		c.used[p.UIEventID] = struct{}{}
	}
	c.pending = addPending(c.pending, u.AddPending, t)
	for _, in := range u.ConsumeInputs {
		c.inputID[in].ConsumedAt = t
		c.waiting--
	}
	if u.Status != nil {
		s.setStatus(c, c.c.Status, *u.Status)
		c.c.Status = *u.Status
	}
	if u.TurnAgent != nil {
		c.c.TurnAgent = *u.TurnAgent
	}
	if ap.context != nil {
		c.c.Context = ap.context
	}
	for _, r := range u.Usage {
		c.addUsage(r)
	}
}

// addPending returns pending with ps added (a zero CreatedAt is t), ordered
// as GetChat returns them: by creation time, then by ui_event_id.
func addPending(pending, ps []baton.PendingRequest, t time.Time) []baton.PendingRequest {
	if len(ps) == 0 {
		return pending
	}
	for _, p := range ps {
		if p.CreatedAt.IsZero() {
			p.CreatedAt = t
		}
		pending = append(pending, p)
	}
	slices.SortStableFunc(pending, func(a, b baton.PendingRequest) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.UIEventID, b.UIEventID))
	})
	return pending
}
