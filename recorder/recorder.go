// Package recorder is the one door through which chat.* events leave the
// engine: it persists them, and only then publishes them (invariant 1,
// persist before send).
package recorder

import (
	"context"
	"fmt"

	"github.com/batonhq/baton"
)

// Publisher sends recorded events to a chat's subscribers (the hub). It
// must not block on a slow subscriber.
type Publisher interface {
	Publish(scope baton.Scope, chatID string, events []baton.Event)
}

// Recorder appends events through the store and then publishes them.
type Recorder struct {
	store baton.EventStore
	pub   Publisher
}

// New returns a recorder that appends to store and publishes to pub.
func New(store baton.EventStore, pub Publisher) *Recorder {
	return &Recorder{store: store, pub: pub}
}

// Record persists events for the chat together with update, then publishes
// them, and returns them with their sequences.
//
// What is durable when Record returns nil: every event, with the sequence it
// returns, and update (context snapshot, status, speaker, pending requests),
// committed in one transaction. How durable is the store's setting:
//
//   - SQLite (store/sqlite): the WAL is fsynced at commit with
//     synchronous=FULL, the default, so the commit survives a crash of the
//     process or of the machine. A store opened with
//     sqlite.WithSynchronous("NORMAL") survives a crash of the process, but
//     the last commits may be lost when the machine loses power.
//   - PostgreSQL (store/postgres): the commit is flushed to the server's WAL
//     on disk, since the store sets synchronous_commit=on on its
//     connections (unless the connection string sets it otherwise).
//
// The events were handed to the publisher only after that commit, so no
// subscriber can have seen an event the store does not hold. If the process
// dies after the commit and before or during Publish, the events are in the
// store and a reconnecting client receives them by replay from its last
// sequence.
//
// When Record returns an error, nothing was written and nothing was
// published: the stores let ctx end only the wait before a write starts, so
// a ctx that ends during the commit does not turn a committed write into an
// error. (A database that stops answering in the middle of a commit is the
// one case whose outcome no client can know.) Only chat.* events are
// accepted (EINVALID otherwise): stream.* deltas are transient and go
// around the recorder, never into the store.
func (r *Recorder) Record(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, update *baton.ChatUpdate) ([]baton.Event, error) {
	for i, e := range events {
		if !baton.IsChatType(e.Type) {
			return nil, baton.Errorf(baton.EINVALID, "events[%d]: type %q is not a chat.* event; only chat.* events are recorded", i, e.Type)
		}
	}
	recorded, err := r.store.Append(ctx, scope, chatID, events, update)
	if err != nil {
		return nil, fmt.Errorf("record %d events for chat %s: %w", len(events), chatID, err)
	}
	// Durable from here on; only now may anyone see them.
	if len(recorded) > 0 {
		r.pub.Publish(scope, chatID, recorded)
	}
	return recorded, nil
}

var _ baton.ChatCreator = (*Recorder)(nil)

// CanCreate reports whether the recorder's store creates a chat with its
// first events in one commit (baton.CreateAppender).
func (r *Recorder) CanCreate() bool {
	_, ok := r.store.(baton.CreateAppender)
	return ok
}

// Create creates c with keep kept and events appended in one commit
// (baton.CreateAppender), calls created with the chat, and only then
// publishes the events; see baton.ChatCreator. Its durability is Record's.
func (r *Recorder) Create(ctx context.Context, scope baton.Scope, c baton.Chat, keep *baton.Event, events []baton.Event, u *baton.ChatUpdate, created func(baton.Chat)) (baton.Chat, []baton.Event, error) {
	ca, ok := r.store.(baton.CreateAppender)
	if !ok {
		return baton.Chat{}, nil, fmt.Errorf("create chat %s: the store cannot create a chat with its first events", c.ID)
	}
	for i, e := range events {
		if !baton.IsChatType(e.Type) {
			return baton.Chat{}, nil, baton.Errorf(baton.EINVALID, "events[%d]: type %q is not a chat.* event; only chat.* events are recorded", i, e.Type)
		}
	}
	chat, recorded, err := ca.CreateChatAndAppend(ctx, scope, c, keep, events, u)
	if err != nil {
		return baton.Chat{}, nil, fmt.Errorf("create chat %s with %d events: %w", c.ID, len(events), err)
	}
	if created != nil {
		created(chat)
	}
	if len(recorded) > 0 {
		r.pub.Publish(scope, chat.ID, recorded)
	}
	return chat, recorded, nil
}
