package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/batonhq/baton"
)

// AddInput stores an accepted input in its chat's inbox; see
// baton.InboxStore. It returns once the input is committed.
func (s *Store) AddInput(ctx context.Context, scope baton.Scope, ev baton.Event) (baton.Input, bool, error) {
	ev, err := baton.PrepareInput(ev)
	if err != nil {
		return baton.Input{}, false, err
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		return baton.Input{}, false, baton.Errorf(baton.EINVALID, "input: %v", err)
	}
	chatID := ev.Metadata.TriggerSessionID
	now := time.Now()
	var in baton.Input
	added := false
	err = s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := chatSeq(ctx, w, scope, chatID); err != nil {
			return err
		}
		res, err := w.exec(ctx, `INSERT INTO inputs (chat_id, id, type, event, accepted_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			chatID, ev.ID, ev.Type, string(raw), micros(now))
		if err != nil {
			return storeErr("add input", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			seq, _ := res.LastInsertId()
			in, added = baton.Input{Event: ev, Seq: seq, AcceptedAt: fromMicros(micros(now))}, true
			return nil
		}
		row := w.queryRow(ctx, `SELECT seq, event, accepted_at, consumed_at FROM inputs WHERE chat_id = ? AND id = ?`, chatID, ev.ID)
		in, err = scanInput(row)
		return err
	})
	return in, added, err
}

// Inputs returns the chat's inputs not taken yet, oldest first; see
// baton.InboxStore.
func (s *Store) Inputs(ctx context.Context, scope baton.Scope, chatID string) ([]baton.Input, error) {
	if s.closed.Load() {
		return nil, baton.ErrClosed
	}
	// One prepared query checks the scope and reads the waiting inputs: a
	// run reads the inbox at every pause.
	s.reads.Add(1)
	found, out, raws, err := s.readInputs(ctx, scope, chatID)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, notFound(chatID)
	}
	// Decoded once the connection is given back (pointRead).
	for i := range out {
		if err := json.Unmarshal([]byte(raws[i]), &out[i].Event); err != nil {
			return nil, storeErr("input event", err)
		}
	}
	return out, nil
}

// readInputs reads the chat's waiting inputs, their events still encoded
// (raws), and whether the chat is in scope.
func (s *Store) readInputs(ctx context.Context, scope baton.Scope, chatID string) (found bool, out []baton.Input, raws []string, err error) {
	st, release := s.pointRead(ctx, s.r.inputs, inputsSQL)
	defer release()
	rows, err := st.QueryContext(ctx, chatID, scope.App, scope.User)
	if err != nil {
		return false, nil, nil, s.readErr("inputs", err)
	}
	defer rows.Close()
	for rows.Next() {
		found = true
		var seq, accepted sql.NullInt64
		var raw sql.NullString
		if err := rows.Scan(&seq, &raw, &accepted); err != nil {
			return false, nil, nil, s.readErr("inputs", err)
		}
		if !seq.Valid {
			continue // the chat, with no input waiting
		}
		out = append(out, baton.Input{Seq: seq.Int64, AcceptedAt: fromMicros(accepted.Int64)})
		raws = append(raws, raw.String)
	}
	if err := rows.Err(); err != nil {
		return false, nil, nil, s.readErr("inputs", err)
	}
	return found, out, raws, nil
}

// ChatsWithInputs lists the chats with inputs not taken yet; see
// baton.InboxStore.
func (s *Store) ChatsWithInputs(ctx context.Context, limit int) ([]baton.Chat, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	return s.listChats(ctx, `SELECT `+chatCols+` FROM chats WHERE deleted = 0 AND id IN (SELECT chat_id FROM inputs WHERE consumed_at IS NULL)
		ORDER BY (SELECT min(seq) FROM inputs WHERE chat_id = chats.id AND consumed_at IS NULL) LIMIT ?`, limit)
}

func scanInput(row interface{ Scan(...any) error }) (baton.Input, error) {
	var in baton.Input
	var raw string
	var accepted int64
	var consumed sql.NullInt64
	if err := row.Scan(&in.Seq, &raw, &accepted, &consumed); err != nil {
		return in, storeErr("input", err)
	}
	if err := json.Unmarshal([]byte(raw), &in.Event); err != nil {
		return in, storeErr("input event", err)
	}
	in.AcceptedAt = fromMicros(accepted)
	if consumed.Valid {
		in.ConsumedAt = fromMicros(consumed.Int64)
	}
	return in, nil
}

// consumeInputs marks the chat's inputs ids taken, within the writer's
// transaction (ChatUpdate.ConsumeInputs).
func consumeInputs(ctx context.Context, w *wconn, chatID string, ids []string, now time.Time) error {
	for _, id := range ids {
		res, err := w.exec(ctx, `UPDATE inputs SET consumed_at = ? WHERE chat_id = ? AND id = ? AND consumed_at IS NULL`, micros(now), chatID, id)
		if err != nil {
			return storeErr("consume input", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			continue
		}
		var one int
		err = w.queryRow(ctx, `SELECT 1 FROM inputs WHERE chat_id = ? AND id = ?`, chatID, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return baton.Errorf(baton.ENOTFOUND, "input %q: not in chat %q's inbox", id, chatID)
		}
		if err != nil {
			return storeErr("consume input", err)
		}
		return baton.Errorf(baton.ECONFLICT, "input %q: already taken", id)
	}
	return nil
}
