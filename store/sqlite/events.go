package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/batonhq/baton"
)

// Append assigns the chat's next sequences to events and applies u in the
// same transaction; see baton.EventStore. The writer is the only goroutine
// that writes and it reads last_sequence inside the transaction, so two
// appends can neither repeat nor skip a sequence; another process that
// opens the same file serialises on BEGIN IMMEDIATE.
func (s *Store) Append(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	evs, err := baton.PrepareEvents(chatID, events)
	if err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	extras := make([]any, len(evs))
	for i, e := range evs {
		x, err := encodeExtra(e.Metadata.Extra)
		if err != nil {
			return nil, baton.Errorf(baton.EINVALID, "events[%d].metadata: %w", i, err)
		}
		if x != nil {
			extras[i] = string(x)
		}
	}
	now := time.Now()
	err = s.write(ctx, func(ctx context.Context, w *wconn) error {
		last, err := bumpSeq(ctx, w, scope, chatID, len(evs), now)
		if err != nil {
			return err
		}
		seq := last - int64(len(evs))
		for i := range evs {
			seq++
			e := &evs[i]
			var payload any
			if len(e.Payload) > 0 {
				payload = string(e.Payload)
			}
			md := &e.Metadata
			_, err := w.exec(ctx, `INSERT INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				chatID, seq, e.ID, e.Type, e.Timestamp, md.TriggerAgentID, md.TriggerAgentName, md.EnvName, md.Source, extras[i], payload)
			if isUnique(err) {
				return baton.Errorf(baton.ECONFLICT, "event %q: already recorded in chat %q", e.ID, chatID)
			}
			if err != nil {
				return storeErr("append", err)
			}
			e.Sequence = seq
		}
		if u == nil {
			return nil
		}
		return applyUpdate(ctx, w, chatID, u, now, len(evs) == 0)
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// Events returns the chat's events after the given sequence; see
// baton.EventStore.
func (s *Store) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	if s.closed.Load() {
		return nil, baton.ErrClosed
	}
	// The chat's last sequence checks the scope and sizes the result.
	var last int64
	err := s.rdb.QueryRowContext(ctx, `SELECT last_sequence FROM chats WHERE id = ? AND app = ? AND user_id = ? AND deleted = 0`,
		chatID, scope.App, scope.User).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(chatID)
	}
	if err != nil {
		return nil, s.readErr("events", err)
	}
	n := max(0, last-after)
	if limit > 0 {
		n = min(n, int64(limit))
	} else {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT e.sequence, e.id, e.type, e.ts, e.agent_id, e.agent_name, e.env_name, e.source, e.extra, e.payload
		FROM chats c JOIN events e ON e.chat_id = c.id
		WHERE c.id = ? AND c.app = ? AND c.user_id = ? AND c.deleted = 0 AND e.sequence > ?
		ORDER BY e.sequence LIMIT ?`, chatID, scope.App, scope.User, after, limit)
	if err != nil {
		return nil, s.readErr("events", err)
	}
	defer rows.Close()
	out := make([]baton.Event, 0, n)
	for rows.Next() {
		var e baton.Event
		var extra, payload sql.RawBytes // copied below; RawBytes saves database/sql's copy
		md := &e.Metadata
		if err := rows.Scan(&e.Sequence, &e.ID, &e.Type, &e.Timestamp, &md.TriggerAgentID, &md.TriggerAgentName, &md.EnvName, &md.Source, &extra, &payload); err != nil {
			return nil, s.readErr("events", err)
		}
		if len(extra) > 0 {
			if err := json.Unmarshal(extra, &md.Extra); err != nil {
				return nil, storeErr("events metadata", err)
			}
		}
		e.Metadata.TriggerSessionID = chatID
		if len(payload) > 0 {
			e.Payload = json.RawMessage(bytes.Clone(payload))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("events", err)
	}
	return out, nil
}

// encodeExtra returns the metadata keys beyond the named ones as a JSON
// object, or nil when there are none.
func encodeExtra(extra map[string]json.RawMessage) ([]byte, error) {
	n := 0
	for k := range extra {
		if !namedMetadataKey(k) {
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	m := make(map[string]json.RawMessage, n)
	for k, v := range extra {
		if namedMetadataKey(k) {
			continue
		}
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		m[k] = v
	}
	return json.Marshal(m)
}

func namedMetadataKey(k string) bool {
	switch k {
	case "trigger_session_id", "trigger_agent_id", "trigger_agent_name", "env_name", "source":
		return true
	}
	return false
}
