package baton

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ChatStatus is where a chat stands. A chat in a waiting status holds no
// goroutine: the next input resumes it from the store.
type ChatStatus string

// Chat statuses.
const (
	ChatRunning       ChatStatus = "running"
	ChatWaitingInput  ChatStatus = "waiting_input"
	ChatWaitingUITool ChatStatus = "waiting_ui_tool"
	ChatWaitingSecret ChatStatus = "waiting_secret"
	ChatCompleted     ChatStatus = "completed"
	ChatFailed        ChatStatus = "failed"
	// ChatCancelled: the person stopped the run (POST …/cancel or the
	// WebSocket's run.cancel). Like failed, the turn stays open and a
	// resume or the person's next message goes on from it.
	ChatCancelled ChatStatus = "cancelled"
)

// Valid reports whether s is one of the chat statuses.
func (s ChatStatus) Valid() bool {
	switch s {
	case ChatRunning, ChatWaitingInput, ChatWaitingUITool, ChatWaitingSecret, ChatCompleted, ChatFailed, ChatCancelled:
		return true
	}
	return false
}

// Kinds of a PendingRequest.
const (
	PendingUITool = "ui_tool"
	PendingInput  = "input"
	PendingSecret = "secret"
	// PendingClientTool is a call of a tool the client application offered
	// (ClientTool): the client runs it and answers with its result, as it
	// answers a UI tool (the chat's status is ChatWaitingUITool).
	PendingClientTool = "client_tool"
	// PendingToolInput is a tool call waiting for the person's answer to
	// its question (ToolStatusInputRequired): the person's next message
	// answers it.
	PendingToolInput = "tool_input"
)

// Chat is one conversation of one workflow, owned by an app and a user. Its
// state is everything a resume needs besides its events (invariant 4).
type Chat struct {
	ID, App, User, Workflow string
	Status                  ChatStatus
	// LastSequence is the sequence of the chat's latest event; 0 for none.
	LastSequence int64
	// Context is the context_snapshot: a JSON object of the chat's variables.
	// Compare its values, not its bytes: PostgreSQL keeps it as jsonb and
	// returns it normalised (keys reordered, spaces added, numbers such as
	// 1e2 as 100, escapes such as \u00e9 decoded), while SQLite returns each
	// value's text as it was given, compacted by encoding/json (which also
	// escapes <, > and &). Both refuse the same values (see ValidateJSONB).
	Context json.RawMessage
	// TurnAgent is the current speaker (spec/synthetic-events.md).
	TurnAgent string
	// CacheSeed is one per chat, reused on resume and as the model's seed.
	CacheSeed int64
	// Pending holds the UI tool, input and secret requests the chat waits
	// for, oldest first.
	Pending []PendingRequest
	// CreatedAt is when the chat was created; UpdatedAt is last_updated_at.
	CreatedAt, UpdatedAt time.Time
	// Deleted is true for a soft-deleted chat; the store never returns one.
	Deleted bool
}

// PendingRequest is a request the chat waits for a person to answer.
type PendingRequest struct {
	UIEventID  string
	Kind       string // PendingUITool, PendingInput, PendingSecret, PendingClientTool or PendingToolInput
	ToolCallID string
	ToolName   string
	Agent      string
	CreatedAt  time.Time
}

// ChatUpdate changes a chat. Given to Append, it is applied in the same
// transaction as the appended events: both are written or neither is.
type ChatUpdate struct {
	Status    *ChatStatus
	TurnAgent *string
	// Context patches top-level keys of the context snapshot; a JSON null
	// value deletes the key. A value must be JSON that PostgreSQL's jsonb
	// can hold (ValidateJSONB): no \u0000 escape, no invalid UTF-8.
	Context map[string]json.RawMessage
	// AddPending adds requests the chat now waits for.
	AddPending []PendingRequest
	// ResolvePending removes answered requests by ui_event_id. Each must be
	// pending in this chat, else the whole call fails with ECONFLICT (already
	// answered) or ENOTFOUND (unknown, or another chat's) and nothing is
	// written.
	ResolvePending []string
	// Fence, when > 0, must equal the chat's current lease token, else the
	// call fails with ECONFLICT and nothing is written.
	Fence int64
	// ExpectNext, when > 0, is the sequence the append's first event must
	// get: the chat's last sequence must be ExpectNext-1 (for an append of
	// no events too), else the call fails with ErrStale (ECONFLICT) and
	// nothing is written. A writer that trusts what it holds in memory —
	// the engine's cached state of a chat it alone runs — sets it, so that
	// an append written on a state the store has moved past is refused
	// instead of recorded. UpdateChat ignores it.
	ExpectNext int64
	// ConsumeInputs marks inputs of the chat's inbox (InboxStore) as taken,
	// by id, in the same transaction as the events that record them: an
	// input is then taken exactly once, whatever crashes, redeliveries or
	// instances come between. Each must be in the chat's inbox and not
	// taken yet, else the whole call fails with ECONFLICT (taken already)
	// or ENOTFOUND and nothing is written.
	ConsumeInputs []string
	// Usage records model calls' token use and cost in the same
	// transaction, as RecordUsage would one by one: a usage row is then
	// durable exactly when the events that report it are, in one commit
	// with them. Each record's ChatID and App are the chat's, whatever they
	// say. (When the append fails, no row is written; the engine then
	// records them alone, as the calls were billed all the same.)
	Usage []UsageRecord
}

// ListOptions filters ListChats. Zero values mean no filter; Limit 0 means a
// store default (100).
type ListOptions struct {
	Workflow string
	Status   ChatStatus
	Limit    int
}

// ChatStore keeps chats. Every method acts within scope: a chat of another
// scope, or a deleted one, is ENOTFOUND.
type ChatStore interface {
	// CreateChat creates c in scope (c.App and c.User are taken from scope).
	// c.ID is the caller's (baton.NewID()) or generated when empty; an ID in
	// use is ECONFLICT. An empty Status is running, an empty Context is {},
	// a zero CacheSeed is drawn at random.
	CreateChat(ctx context.Context, scope Scope, c Chat) (Chat, error)
	// GetChat returns the chat with its pending requests.
	GetChat(ctx context.Context, scope Scope, id string) (Chat, error)
	// ListChats returns the scope's chats, newest first. Pending is not filled.
	ListChats(ctx context.Context, scope Scope, opts ListOptions) ([]Chat, error)
	// DeleteChat soft-deletes the chat; afterwards every method says ENOTFOUND.
	DeleteChat(ctx context.Context, scope Scope, id string) error
	// UpdateChat applies u without appending events and returns the chat
	// as the update left it (read in the same transaction).
	UpdateChat(ctx context.Context, scope Scope, id string, u ChatUpdate) (Chat, error)
	// ChatsByStatus lists chats of every scope with the given status, oldest
	// first, for recovery after a restart (e.g. resume the running ones). It
	// is for the runtime itself and must never answer a client.
	ChatsByStatus(ctx context.Context, status ChatStatus, limit int) ([]Chat, error)
}

// EventStore keeps each chat's chat.* events, append-only, numbered 1, 2, 3, …
// without gap or repeat (invariant 2).
//
// Message fields: the store keeps each event as it is (id, type, timestamp,
// metadata and payload verbatim); the message fields of
// spec/runtime-lifecycle.md Phase 4 are read from an event with [MessageOf].
type EventStore interface {
	// Append assigns the chat's next sequences to events (chat.* only; an
	// event's ID must be unique within the chat, else ECONFLICT), applies u
	// when non-nil, and commits both atomically. It returns the events with
	// Sequence (and metadata.trigger_session_id) set. On a nil error the
	// events and the update are durable; on an error nothing was written.
	Append(ctx context.Context, scope Scope, chatID string, events []Event, u *ChatUpdate) ([]Event, error)
	// Events returns up to limit events with sequence > after, ascending.
	// limit <= 0 means all. A chat that is not in scope, or was deleted,
	// is ENOTFOUND whatever after is, never an empty result: a stream's
	// replay is its check that the chat is still there.
	Events(ctx context.Context, scope Scope, chatID string, after int64, limit int) ([]Event, error)
}

// UsageRecord is one model call's token use and cost.
type UsageRecord struct {
	ChatID   string
	App      string // set from the scope by RecordUsage
	Workflow string
	Agent    string
	Model    string
	Usage
	Cost float64
	At   time.Time // zero means now
}

// UsageTotal sums usage records. Agent is "" for a chat's total.
type UsageTotal struct {
	Agent string
	Calls int64
	Usage
	Cost float64
}

// SumUsage returns the total of per-agent totals (Agent left empty): what
// ChatUsage returns next to them.
func SumUsage(per []UsageTotal) UsageTotal {
	var total UsageTotal
	for _, t := range per {
		total.Calls += t.Calls
		total.Usage = total.Usage.Add(t.Usage)
		total.Cost += t.Cost
	}
	return total
}

// UsageStore records one row per model call.
type UsageStore interface {
	// RecordUsage stores u for u.ChatID, which must be in scope.
	RecordUsage(ctx context.Context, scope Scope, u UsageRecord) error
	// ChatUsage returns the chat's total and its totals per agent (by agent name).
	ChatUsage(ctx context.Context, scope Scope, chatID string) (total UsageTotal, perAgent []UsageTotal, err error)
	// AppUsage returns the total of every usage row of the chats of
	// scope's tenant, deleted ones included (their calls were billed); of
	// every user of scope.App when scope.User is "", and of every app when
	// scope.App is "" too. It reads every row it sums: callers poll it,
	// they do not call it per event.
	AppUsage(ctx context.Context, scope Scope) (UsageTotal, error)
}

// TaskStatus is where a background task stands.
type TaskStatus string

// Task statuses.
const (
	TaskQueued    TaskStatus = "queued"
	TaskRunning   TaskStatus = "running"
	TaskCompleted TaskStatus = "completed"
	TaskFailed    TaskStatus = "failed"
)

// Valid reports whether s is one of the task statuses.
func (s TaskStatus) Valid() bool {
	switch s {
	case TaskQueued, TaskRunning, TaskCompleted, TaskFailed:
		return true
	}
	return false
}

// Task is a background task of a chat.
type Task struct {
	ID        string
	ChatID    string
	App, User string // the chat's scope, set by the store
	Kind      string
	Status    TaskStatus
	Input     json.RawMessage
	Result    json.RawMessage
	Error     string
	// Owner is the instance running the task when several instances share
	// the store (engine.Config.InstanceID); empty for a single process.
	// Expires is when the task counts as orphaned unless its owner renews it
	// (TouchTasks): another instance then reports it interrupted.
	Owner     string
	Expires   time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// TaskStore keeps background tasks.
type TaskStore interface {
	// CreateTask stores t for t.ChatID, which must be in scope. An empty ID is
	// generated, an empty Status is queued.
	CreateTask(ctx context.Context, scope Scope, t Task) (Task, error)
	// GetTask returns a task whose chat is in scope.
	GetTask(ctx context.Context, scope Scope, id string) (Task, error)
	// UpdateTask sets the task's status, result and error. A task that has
	// ended (completed or failed) does not change: ECONFLICT, so that an
	// outcome is recorded — and reported — once.
	UpdateTask(ctx context.Context, scope Scope, id string, status TaskStatus, result json.RawMessage, errMsg string) (Task, error)
	// TasksByStatus lists tasks of every scope with the given status, oldest
	// first, so a restart can mark the running ones failed. Tasks of a
	// deleted chat are left out: no method may change them. Runtime use only.
	TasksByStatus(ctx context.Context, status TaskStatus, limit int) ([]Task, error)
	// TouchTasks sets Expires to now+ttl on every queued or running task of
	// owner and returns how many it renewed. Runtime use only.
	TouchTasks(ctx context.Context, owner string, ttl time.Duration) (int, error)
}

// Lease is the right to run a chat, held by one instance until Expires.
// Token increases on every takeover and fences writes (ChatUpdate.Fence).
type Lease struct {
	Token   int64
	Owner   string
	Expires time.Time
}

// LeaseStore hands out one run-owner lease per chat. Expiry is judged by the
// clock of the process that calls.
type LeaseStore interface {
	// AcquireLease takes the chat's lease for instanceID for ttl. A free or
	// expired lease is taken over with a new, higher token; the owner's own
	// live lease is extended with its token unchanged; a lease held by another
	// live owner is ECONFLICT.
	AcquireLease(ctx context.Context, chatID, instanceID string, ttl time.Duration) (Lease, error)
	// RenewLease extends a lease still held with token; ECONFLICT if it was
	// taken over or released.
	RenewLease(ctx context.Context, chatID, instanceID string, token int64, ttl time.Duration) (Lease, error)
	// ReleaseLease frees a lease held with token; ECONFLICT if it was taken over.
	ReleaseLease(ctx context.Context, chatID, instanceID string, token int64) error
	// GetLease returns the chat's lease as stored: Owner is empty when it
	// was released or never taken, and a lease whose Expires has passed is
	// held by no one. Runtime use only (input routing): it reveals no
	// chat data, and the chat id is not checked against a scope.
	GetLease(ctx context.Context, chatID string) (Lease, error)
}

// Input is a client's input a chat accepted — a person's message
// (user_query), a UI tool's response (ui.tool.response) — kept in the chat's
// inbox from before the acknowledgement until the run takes it.
type Input struct {
	// Event is the input event as it was accepted (its id is the input's
	// id, unique within the chat: an idempotency key's retry names it).
	Event Event
	// Seq orders a chat's inputs as they were accepted.
	Seq int64
	// AcceptedAt is when the store took it; ConsumedAt when a run took it
	// (zero while it waits).
	AcceptedAt, ConsumedAt time.Time
}

// AnswersToolInput reports whether in, a person's message in the inbox of
// a chat whose tool asked the person (q, its pending request of kind
// PendingToolInput), answers that question: only a message the store
// accepted after it recorded the question does. One typed before — while
// the tool ran, or while the question was being recorded — was not written
// for a question the person could not yet see; the engine keeps it for the
// model, after the call. The engine and every client protocol (an AG-UI
// reconnect deciding whether the run goes on) use this one rule. Both
// times are set by the store (q.CreatedAt by the append that records the
// question, in.AcceptedAt by AddInput), so one clock decides within one
// process; a message accepted in the same instant counts as before.
func AnswersToolInput(q PendingRequest, in Input) bool {
	return in.Event.Type == TypeUserQuery && in.AcceptedAt.After(q.CreatedAt)
}

// InboxStore keeps each chat's accepted inputs until its run takes them:
// an input is durable before it is acknowledged (invariant 11), and the
// append that records it marks it taken (ChatUpdate.ConsumeInputs).
type InboxStore interface {
	// AddInput stores ev, an input of chat ev.ChatID() in scope, at the end
	// of the chat's inbox. An id the chat's inbox already holds (waiting or
	// taken) stores nothing: it returns that input and false, so that a
	// retried input is kept once. An error of code ENOTFOUND (no such chat
	// in scope) or EINVALID (a bad input) means nothing was stored: the
	// engine relies on it (an input it knows was not kept does not make
	// the chat's run read its inbox).
	AddInput(ctx context.Context, scope Scope, ev Event) (Input, bool, error)
	// CreateChatWithInput creates c as CreateChat does and keeps ev, the
	// chat's first input, in its inbox as AddInput does, in one commit:
	// after a crash both are there or neither is. ev names c's chat (its
	// trigger_session_id is c.ID, or empty and then set to c.ID, the one
	// generated when c.ID is empty). An id in use is ECONFLICT and nothing
	// is written: the existing chat's inbox is left as it was.
	CreateChatWithInput(ctx context.Context, scope Scope, c Chat, ev Event) (Chat, Input, error)
	// Inputs returns the chat's inputs not taken yet, in the order they
	// were accepted.
	Inputs(ctx context.Context, scope Scope, chatID string) ([]Input, error)
	// ChatsWithInputs lists chats (of every scope, not deleted) whose inbox
	// holds inputs not taken yet, oldest input first, for recovery after a
	// restart. Runtime use only.
	ChatsWithInputs(ctx context.Context, limit int) ([]Chat, error)
}

// CreateAppender is an optional part of a Store: a new chat and its first
// append in one commit. The engine uses it, where it runs its chats alone
// (no leases), to make the chat that Start creates durable together with
// the run's first events — a new chat's first turn then commits once fewer
// — and falls back to CreateChat (or CreateChatWithInput) and Append when
// the store lacks it.
type CreateAppender interface {
	// CreateChatAndAppend creates c in scope as CreateChat does, keeps
	// keep (when not nil) in its inbox as CreateChatWithInput does, and
	// appends events with u as Append does, all in one transaction: after
	// a crash all of it is there or none. When u.ConsumeInputs names keep,
	// keep is kept as taken (it never waits in the inbox). An id in use is
	// ECONFLICT and nothing is written. It returns the chat as the append
	// left it and the events with their sequences (1, 2, …).
	CreateChatAndAppend(ctx context.Context, scope Scope, c Chat, keep *Event, events []Event, u *ChatUpdate) (Chat, []Event, error)
}

// Fork asks ForkStore.ForkChat for a new chat whose history is the start
// of another's.
type Fork struct {
	// From is the chat whose events are copied, and At the sequence of the
	// last one copied: events 1 … At (1 <= At <= From's last sequence).
	From string
	At   int64
	// Chat is the new chat as CreateChat takes it — its ID (empty for a
	// fresh one), workflow, status, context, turn agent, cache seed and
	// pending requests — as they were at At. The caller computes them
	// (the engine folds the copied events); the store copies, it does not
	// interpret.
	Chat Chat
	// Rename replaces, in the copied payloads, every occurrence of a key's
	// text by its value. Ids that must be unique across chats (a pending
	// request's ui_event_id) are given new ones this way. At most
	// MaxForkRenames; keys must not be empty.
	Rename map[string]string
}

// MaxForkRenames bounds Fork.Rename: a chat waits for few requests at once.
const MaxForkRenames = 64

// ValidateFork checks f for ForkChat: a source chat id, a sequence >= 1
// (named at_sequence, the API's field), a valid new chat (Validate) and
// renames within bounds. Stores call it first; the upper bound of At is
// checked against the source chat in the store's transaction.
func ValidateFork(f *Fork) error {
	if err := validateID("from", f.From); err != nil {
		return err
	}
	if f.At < 1 {
		return Errorf(EINVALID, "at_sequence: must be a sequence of the chat (1 or more), got %d", f.At)
	}
	if len(f.Rename) > MaxForkRenames {
		return Errorf(EINVALID, "rename: %d ids, at most %d", len(f.Rename), MaxForkRenames)
	}
	for k, v := range f.Rename {
		if k == "" {
			return Errorf(EINVALID, "rename: an empty id")
		}
		if err := validateTexts("rename", k, "rename", v); err != nil {
			return err
		}
	}
	return nil
}

// ForkBeyond is the error of a fork past the source chat's end.
func ForkBeyond(at, last int64) error {
	return Errorf(EINVALID, "at_sequence: %d is beyond the chat's last event (%d)", at, last)
}

// RenameIn applies renames to a payload as ForkChat does (for stores that
// copy in Go rather than in SQL).
func RenameIn(payload []byte, rename map[string]string) []byte {
	for k, v := range rename {
		if bytes.Contains(payload, []byte(k)) {
			payload = bytes.ReplaceAll(payload, []byte(k), []byte(v))
		}
	}
	return payload
}

// ForkedFromVar is the reserved context variable of a forked chat:
// {"chat_id": the chat it was forked from, "sequence": the last event
// copied}. Reserved ("__"): models, conditions and the context a client
// reads never see it; the API shows it as the chat's forked_from. Set by
// engine.Fork.
const ForkedFromVar = "__forked_from"

// ForkedFrom is where a chat was forked from.
type ForkedFrom struct {
	ChatID   string `json:"chat_id"`
	Sequence int64  `json:"sequence"`
}

// ForkedFromOf reads a chat's ForkedFromVar from its context snapshot; nil
// for a chat that is no fork.
func ForkedFromOf(c Chat) *ForkedFrom {
	var snap map[string]json.RawMessage
	if json.Unmarshal(c.Context, &snap) != nil || snap[ForkedFromVar] == nil {
		return nil
	}
	var f ForkedFrom
	if json.Unmarshal(snap[ForkedFromVar], &f) != nil || f.ChatID == "" {
		return nil
	}
	return &f
}

// ForkStore copies the start of a chat's history into a new chat.
type ForkStore interface {
	// ForkChat creates f.Chat in scope, in one transaction with copies of
	// events 1 … f.At of chat f.From, which must be in scope: the same
	// sequences, ids, types, timestamps, metadata (trigger_session_id the
	// new chat's) and payloads (f.Rename applied). The new chat's
	// LastSequence is f.At; nothing else of f.From (its inbox, effects,
	// usage, leases) is copied, and f.From is not changed. A source chat
	// not in scope (or deleted) is ENOTFOUND; f.At beyond its last
	// sequence is EINVALID naming at_sequence; a new chat id in use, or a
	// pending ui_event_id in use, is ECONFLICT. It returns the new chat as
	// GetChat would.
	ForkChat(ctx context.Context, scope Scope, f Fork) (Chat, error)
}

// Store is the durable state of baton: chats, their events, the effect
// ledger, usage, background tasks and run leases. Implementations live in
// store/sqlite and store/postgres and pass store/storetest. Every method
// that involves a chat enforces the scope in its query (invariant 8).
//
// A write method that returns an error wrote nothing. Its ctx may stop it
// only before it starts (while it waits for a connection or its turn);
// once started, it runs to its end, so that the end of ctx never turns a
// committed write into an error. Lease renewals and releases may be the
// exception: a store may run them on ctx (store/postgres does), and then
// an error after ctx ended may leave the lease renewed or released.
type Store interface {
	ChatStore
	EventStore
	EffectLedger
	UsageStore
	TaskStore
	LeaseStore
	KeyStore
	InboxStore
	ForkStore
	// Ping checks that the store can be reached.
	Ping(ctx context.Context) error
	// Close releases the store; later calls fail with an EUNAVAILABLE error.
	Close() error
}

// MessageRecord is the message view of a recorded event
// (spec/runtime-lifecycle.md Phase 4): what the seeds kept in a chat's
// messages array.
type MessageRecord struct {
	Role           string // "user", "assistant", "tool" or "system"
	Name           string // the agent, or "user"
	Content        string
	Timestamp      time.Time
	Sequence       int64
	EventType      string // the event's type, e.g. chat.text
	AgentMessageID string
	Tokens         int64
	Cost           float64
}

// MessageOf reads the message fields of a recorded event from its type,
// timestamp, sequence and payload keys: "agent" (or "name", else the
// metadata's agent name) gives Name; "role" if present, else "user" when the
// agent is "user", "tool" for a tool response, "system" for the agent
// "system", else "assistant"; "content" (a string, or any JSON as its text);
// "agent_message_id" (or "message_id"); "tokens" (or "total_tokens"); "cost".
func MessageOf(e Event) MessageRecord {
	var p struct {
		Role           string          `json:"role"`
		Agent          string          `json:"agent"`
		Name           string          `json:"name"`
		Content        json.RawMessage `json:"content"`
		AgentMessageID string          `json:"agent_message_id"`
		MessageID      string          `json:"message_id"`
		Tokens         int64           `json:"tokens"`
		TotalTokens    int64           `json:"total_tokens"`
		Cost           float64         `json:"cost"`
	}
	if len(e.Payload) > 0 {
		_ = json.Unmarshal(e.Payload, &p) // a payload of another shape yields empty fields
	}
	m := MessageRecord{
		Name:           firstNonEmpty(p.Agent, p.Name, e.Metadata.TriggerAgentName),
		Timestamp:      time.UnixMilli(e.Timestamp).UTC(),
		Sequence:       e.Sequence,
		EventType:      e.Type,
		AgentMessageID: firstNonEmpty(p.AgentMessageID, p.MessageID),
		Tokens:         p.Tokens,
		Cost:           p.Cost,
	}
	if m.Tokens == 0 {
		m.Tokens = p.TotalTokens
	}
	if c := bytes.TrimSpace(p.Content); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		var s string
		if json.Unmarshal(c, &s) == nil {
			m.Content = s
		} else {
			m.Content = string(c)
		}
	}
	switch {
	case p.Role != "":
		m.Role = p.Role
	case m.Name == "user":
		m.Role = "user"
	case e.Type == TypeChatToolResponse:
		m.Role = "tool"
	case m.Name == "system":
		m.Role = "system"
	default:
		m.Role = "assistant"
	}
	return m
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Validate checks u's fields: a known status, JSON values in the context
// patch, and complete pending requests.
func (u *ChatUpdate) Validate() error {
	if u == nil {
		return nil
	}
	if u.Status != nil && !u.Status.Valid() {
		return Errorf(EINVALID, "status: %q is not a chat status", *u.Status)
	}
	if u.ExpectNext < 0 {
		return Errorf(EINVALID, "expect_next: %d is not a sequence", u.ExpectNext)
	}
	if u.TurnAgent != nil {
		if err := ValidateText("turn_agent", *u.TurnAgent); err != nil {
			return err
		}
	}
	for k, v := range u.Context {
		if k == "" {
			return Errorf(EINVALID, "context: empty key")
		}
		if err := ValidateText("context key "+strconv.Quote(k), k); err != nil {
			return err
		}
		if len(v) > 0 && !json.Valid(v) {
			return Errorf(EINVALID, "context.%s: not valid JSON", k)
		}
		if err := ValidateJSONB("context."+k, v); err != nil {
			return err
		}
	}
	for _, p := range u.AddPending {
		if err := p.validate(); err != nil {
			return err
		}
	}
	for _, id := range u.ResolvePending {
		if err := validateID("resolve_pending", id); err != nil {
			return err
		}
	}
	for _, id := range u.ConsumeInputs {
		if err := validateID("consume_inputs", id); err != nil {
			return err
		}
	}
	if u.Fence < 0 {
		return Errorf(EINVALID, "fence: must not be negative")
	}
	for i := range u.Usage {
		if err := u.Usage[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// validate checks a request to add: an id, a known kind, and text fields
// both stores can keep.
func (p *PendingRequest) validate() error {
	if err := validateID("pending.ui_event_id", p.UIEventID); err != nil {
		return err
	}
	switch p.Kind {
	case PendingUITool, PendingInput, PendingSecret, PendingClientTool, PendingToolInput:
	default:
		return Errorf(EINVALID, "pending.kind: %q is not ui_tool, input, secret, client_tool or tool_input", p.Kind)
	}
	return validateTexts("pending.tool_call_id", p.ToolCallID, "pending.tool_name", p.ToolName, "pending.agent", p.Agent)
}

// Validate checks a chat to create: an id (when set) like an event's, a
// known status (when set), text fields both stores can keep, JSON context
// that PostgreSQL's jsonb can hold (PatchContext checks that it is an
// object), and complete pending requests. Stores call it in CreateChat.
func (c *Chat) Validate() error {
	if c.ID != "" {
		if err := validateID("chat_id", c.ID); err != nil {
			return err
		}
	}
	if c.Status != "" && !c.Status.Valid() {
		return Errorf(EINVALID, "status: %q is not a chat status", c.Status)
	}
	if err := ValidateText("workflow", c.Workflow); err != nil {
		return err
	}
	if err := ValidateText("turn_agent", c.TurnAgent); err != nil {
		return err
	}
	if len(c.Context) > 0 {
		if !json.Valid(c.Context) {
			return Errorf(EINVALID, "context: not valid JSON")
		}
		if err := ValidateJSONB("context", c.Context); err != nil {
			return err
		}
	}
	for i := range c.Pending {
		if err := c.Pending[i].validate(); err != nil {
			return err
		}
	}
	return nil
}

// PrepareCreate is the part of CreateChat every ChatStore shares: it fills
// in a missing id (NewID), status (ChatRunning) and cache seed (random,
// non-zero), checks scope and c (Validate), stores the context as a JSON
// object ("{}" when empty), and sets App and User from scope, LastSequence
// to 0 and Deleted to false. The store then sets the timestamps and keeps
// Pending its own way.
func (c *Chat) PrepareCreate(scope Scope) error {
	if c.ID == "" {
		c.ID = NewID()
	}
	if c.Status == "" {
		c.Status = ChatRunning
	}
	if err := scope.Validate(); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	ctxJSON, err := PatchContext(c.Context, nil)
	if err != nil {
		return err
	}
	if c.CacheSeed == 0 {
		c.CacheSeed = randomSeed()
	}
	c.App, c.User, c.Context, c.LastSequence, c.Deleted = scope.App, scope.User, ctxJSON, 0, false
	return nil
}

// randomSeed returns a random cache seed in [1, 2^32]: never 0, which
// means "not set".
func randomSeed() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.LittleEndian.Uint32(b[:])) + 1
}

// Validate checks a usage record's text fields, which both stores must be
// able to keep (ValidateText), and its cost: a finite number (SQLite would
// keep NaN as NULL, which its column refuses, and PostgreSQL would keep
// it, so that every sum over the chat, the app or the workflow is NaN).
func (u *UsageRecord) Validate() error {
	if math.IsNaN(u.Cost) || math.IsInf(u.Cost, 0) {
		return Errorf(EINVALID, "usage.cost: %v is not a finite number", u.Cost)
	}
	return validateTexts("usage.workflow", u.Workflow, "usage.agent", u.Agent, "usage.model", u.Model)
}

// Validate checks a task to create: a known status (when set), JSON input
// and result, and text fields both stores can keep (ValidateText).
func (t *Task) Validate() error {
	if t.ID != "" {
		if err := validateID("task id", t.ID); err != nil {
			return err
		}
	}
	if t.Status != "" && !t.Status.Valid() {
		return Errorf(EINVALID, "task status: %q is not queued, running, completed or failed", t.Status)
	}
	if err := validateJSONText("task input", t.Input); err != nil {
		return err
	}
	if err := validateJSONText("task result", t.Result); err != nil {
		return err
	}
	return validateTexts("task error", t.Error, "task.kind", t.Kind, "task.owner", t.Owner)
}

// ValidateTaskUpdate checks UpdateTask's arguments: a known status, a JSON
// result, and an error text both stores can keep.
func ValidateTaskUpdate(status TaskStatus, result json.RawMessage, errMsg string) error {
	if !status.Valid() {
		return Errorf(EINVALID, "task status: %q is not queued, running, completed or failed", status)
	}
	if err := validateJSONText("task result", result); err != nil {
		return err
	}
	return ValidateText("task error", errMsg)
}

// Validate checks an effect holder's ids as text every store keeps.
func (h EffectHolder) Validate() error {
	if err := ValidateText("effect holder instance", h.Instance); err != nil {
		return err
	}
	return ValidateText("effect holder boot", h.Boot)
}

// ValidateEffect checks ClaimEffect's and RecordEffect's arguments: a key
// both stores can keep and a JSON result (nil for none).
func ValidateEffect(key string, result json.RawMessage) error {
	if key == "" {
		return Errorf(EINVALID, "effect key: required")
	}
	if err := ValidateText("effect key", key); err != nil {
		return err
	}
	return validateJSONText("effect result", result)
}

// validateJSONText checks that b, when not empty, is JSON in valid UTF-8
// (a store keeps it as text).
func validateJSONText(field string, b json.RawMessage) error {
	if len(b) == 0 {
		return nil
	}
	if !json.Valid(b) {
		return Errorf(EINVALID, "%s: not valid JSON", field)
	}
	// Valid JSON holds no raw NUL byte, but encoding/json lets invalid
	// UTF-8 through.
	if !utf8.Valid(b) {
		return Errorf(EINVALID, "%s: not valid UTF-8", field)
	}
	return nil
}

// validateTexts runs ValidateText on name, value pairs.
func validateTexts(kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := ValidateText(kv[i], kv[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// PatchContext returns snapshot (a JSON object; empty means {}) with the
// top-level keys of patch set, a null (or empty) value deleting its key. The
// result is compact JSON with sorted keys.
func PatchContext(snapshot json.RawMessage, patch map[string]json.RawMessage) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(snapshot)) > 0 {
		if err := json.Unmarshal(snapshot, &m); err != nil {
			return nil, Errorf(EINVALID, "context: not a JSON object: %w", err)
		}
		if m == nil {
			m = map[string]json.RawMessage{}
		}
	}
	for k, v := range patch {
		if t := bytes.TrimSpace(v); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, Errorf(EINVALID, "context: %w", err)
	}
	return out, nil
}

// PrepareInput checks an input event for AddInput: a valid event
// (Event.Validate) that names its chat (metadata.trigger_session_id), of a
// type that is not recorded as it is (not chat.*, stream.*). It is for
// Store implementations.
func PrepareInput(ev Event) (Event, error) {
	if err := validateID("chat_id", ev.Metadata.TriggerSessionID); err != nil {
		return Event{}, err
	}
	if err := ev.Validate(); err != nil {
		return Event{}, Errorf(EINVALID, "input: %s", ErrorMessage(err))
	}
	if IsChatType(ev.Type) || strings.HasPrefix(ev.Type, "stream.") {
		return Event{}, Errorf(EINVALID, "input: type %q is a recorded or streamed event, not an input", ev.Type)
	}
	ev.Sequence = 0
	return ev, nil
}

// PrepareCreateWithInput is the part of CreateChatWithInput every store
// shares: c.PrepareCreate(scope), then ev checked as PrepareInput does,
// naming the new chat. It returns the input event to keep.
func PrepareCreateWithInput(scope Scope, c *Chat, ev Event) (Event, error) {
	if err := c.PrepareCreate(scope); err != nil {
		return Event{}, err
	}
	switch ev.Metadata.TriggerSessionID {
	case "":
		ev.Metadata.TriggerSessionID = c.ID
	case c.ID:
	default:
		return Event{}, Errorf(EINVALID, "input: chat_id %q is not the new chat's (%q)", ev.Metadata.TriggerSessionID, c.ID)
	}
	return PrepareInput(ev)
}

// FirstInput is a CreateChatAndAppend's first input as PrepareCreateAndAppend
// readied it for a store's inbox row.
type FirstInput struct {
	Event Event  // the input, checked, naming the new chat
	JSON  []byte // its encoding, the row's event
	Taken bool   // the append takes it: the row is kept as taken
}

// PrepareCreateAndAppend is the part of CreateChatAndAppend every store
// shares: c prepared as CreateChat prepares it and keep, when not nil,
// checked as CreateChatWithInput checks its input (in is nil without one).
// When u.ConsumeInputs names keep, in.Taken is true and u is returned
// without it (a copy): the append has no input of the inbox to take.
func PrepareCreateAndAppend(scope Scope, c *Chat, keep *Event, u *ChatUpdate) (in *FirstInput, _ *ChatUpdate, err error) {
	if keep == nil {
		return nil, u, c.PrepareCreate(scope)
	}
	ev, err := PrepareCreateWithInput(scope, c, *keep)
	if err != nil {
		return nil, u, err
	}
	in = &FirstInput{Event: ev}
	if in.JSON, err = json.Marshal(ev); err != nil {
		return nil, u, Errorf(EINVALID, "input: %v", err)
	}
	if u != nil && slices.Contains(u.ConsumeInputs, ev.ID) {
		cu := *u
		cu.ConsumeInputs = slices.DeleteFunc(slices.Clone(u.ConsumeInputs), func(id string) bool { return id == ev.ID })
		in.Taken, u = true, &cu
	}
	return in, u, nil
}

// CreatedWith returns c, as a store created it at at, after an append of n
// events with u made in the same commit (CreateChatAndAppend): its last
// sequence, status, speaker, context and pending requests as GetChat would
// read them.
func CreatedWith(c Chat, n int, u *ChatUpdate, at time.Time) (Chat, error) {
	c.LastSequence = int64(n)
	c.UpdatedAt = at
	if u == nil {
		return c, nil
	}
	if u.Status != nil {
		c.Status = *u.Status
	}
	if u.TurnAgent != nil {
		c.TurnAgent = *u.TurnAgent
	}
	if len(u.Context) > 0 {
		next, err := PatchContext(c.Context, u.Context)
		if err != nil {
			return Chat{}, err
		}
		c.Context = next
	}
	pending := slices.Clone(c.Pending)
	for _, p := range u.AddPending {
		if p.CreatedAt.IsZero() {
			p.CreatedAt = at
		}
		pending = append(pending, p)
	}
	c.Pending = slices.DeleteFunc(pending, func(p PendingRequest) bool { return slices.Contains(u.ResolvePending, p.UIEventID) })
	return c, nil
}

// PrepareEvents checks events for an append to chatID and returns copies
// with metadata.trigger_session_id set to chatID. Every event must be valid
// (Event.Validate), of a chat.* type, and belong to chatID or to no chat. It
// is for Store implementations.
func PrepareEvents(chatID string, events []Event) ([]Event, error) {
	if err := validateID("chat_id", chatID); err != nil {
		return nil, err
	}
	out := make([]Event, len(events))
	for i, e := range events {
		if e.Metadata.TriggerSessionID == "" {
			e.Metadata.TriggerSessionID = chatID
		} else if e.Metadata.TriggerSessionID != chatID {
			return nil, Errorf(EINVALID, "events[%d]: belongs to chat %q, not %q", i, e.Metadata.TriggerSessionID, chatID)
		}
		if err := e.Validate(); err != nil {
			return nil, Errorf(EINVALID, "events[%d]: %s", i, ErrorMessage(err))
		}
		if !IsChatType(e.Type) {
			return nil, Errorf(EINVALID, "events[%d]: type %q is not a chat.* event; only chat.* events are stored", i, e.Type)
		}
		e.Sequence = 0
		out[i] = e
	}
	return out, nil
}

// Recorder appends chat events to the store and only then publishes them
// (package recorder): the one door through which chat.* events leave the
// engine. It returns the events with their sequences.
type Recorder interface {
	Record(ctx context.Context, scope Scope, chatID string, events []Event, u *ChatUpdate) ([]Event, error)
}

// ChatCreator is the optional part of a Recorder that creates a chat with
// its first events in one commit (the store's CreateAppender) and only
// then publishes them. The engine uses it for the chats Start makes when
// it runs its chats alone (no leases).
type ChatCreator interface {
	// CanCreate reports whether Create works: the store behind the
	// recorder is a CreateAppender.
	CanCreate() bool
	// Create creates c in scope with keep kept and events appended with u
	// (CreateChatAndAppend); after the commit it calls created, when not
	// nil, with the chat as created (before the events are published: a
	// session.created goes first), then publishes the events. It returns
	// the chat as the append left it and the events with their sequences.
	Create(ctx context.Context, scope Scope, c Chat, keep *Event, events []Event, u *ChatUpdate, created func(Chat)) (Chat, []Event, error)
}

// StartOptions are the optional parts of starting a chat.
type StartOptions struct {
	// Message is the person's first message; for a UserDriven workflow it
	// is recorded as their input, for an AgentDriven one it replaces the
	// workflow's initial_message.
	Message string
	// Context sets initial context variables (by name) over their defaults:
	// only variables marked client_settable, each of its declared type.
	Context map[string]json.RawMessage
	// ChatID fixes the new chat's id; empty means a fresh one.
	ChatID string
	// ClientTools are the tools the client application offers the chat's
	// agents (those whose client_tools allow them); nil offers none.
	ClientTools []ClientTool
}
