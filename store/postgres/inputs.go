package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batonhq/baton"
)

// AddInput stores an accepted input in its chat's inbox; see
// baton.InboxStore. It returns once the input is committed.
func (s *Store) AddInput(ctx context.Context, scope baton.Scope, ev baton.Event) (baton.Input, bool, error) {
	if err := s.check(); err != nil {
		return baton.Input{}, false, err
	}
	ev, err := baton.PrepareInput(ev)
	if err != nil {
		return baton.Input{}, false, err
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		return baton.Input{}, false, baton.Errorf(baton.EINVALID, "input: %v", err)
	}
	chatID := ev.Metadata.TriggerSessionID
	now := time.Now().UTC().Truncate(time.Microsecond)
	var in baton.Input
	added := false
	err = s.write(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		var seq int64
		err := c.QueryRow(ctx, `INSERT INTO inputs (chat_id, id, type, event, accepted_at) SELECT $1, $4, $5, $6, $7 WHERE `+inScope+`
			ON CONFLICT DO NOTHING RETURNING seq`, chatID, scope.App, scope.User, ev.ID, ev.Type, string(raw), now).Scan(&seq)
		if err == nil {
			in, added = baton.Input{Event: ev, Seq: seq, AcceptedAt: now}, true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Not in scope, or the id is in the inbox already.
		row := c.QueryRow(ctx, `SELECT seq, event, accepted_at, consumed_at FROM inputs WHERE chat_id = $1 AND id = $4 AND `+inScope,
			chatID, scope.App, scope.User, ev.ID)
		in, err = scanInput(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(chatID)
		}
		return err
	})
	if err != nil {
		return baton.Input{}, false, s.dbErr("add input", err)
	}
	return in, added, nil
}

// Inputs returns the chat's inputs not taken yet, oldest first; see
// baton.InboxStore.
func (s *Store) Inputs(ctx context.Context, scope baton.Scope, chatID string) ([]baton.Input, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	// One query checks the scope and reads the waiting inputs (a row of
	// NULLs when there is none, no row when the chat is not in scope): a
	// run reads the inbox at every pause.
	rows, err := s.pool.Query(ctx, `SELECT i.seq, i.event, i.accepted_at FROM chats c
		LEFT JOIN inputs i ON i.chat_id = c.id AND i.consumed_at IS NULL
		WHERE c.id = $1 AND (c.app, c.user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT c.deleted ORDER BY i.seq`, chatID, scope.App, scope.User)
	if err != nil {
		return nil, s.dbErr("inputs", err)
	}
	defer rows.Close()
	var out []baton.Input
	found := false
	for rows.Next() {
		found = true
		var seq *int64
		var raw *string
		var accepted *time.Time
		if err := rows.Scan(&seq, &raw, &accepted); err != nil {
			return nil, s.dbErr("inputs", err)
		}
		if seq == nil {
			continue // the chat, with no input waiting
		}
		in := baton.Input{Seq: *seq, AcceptedAt: accepted.UTC()}
		if err := json.Unmarshal([]byte(*raw), &in.Event); err != nil {
			return nil, baton.Errorf(baton.EINTERNAL, "input event: %v", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr("inputs", err)
	}
	if !found {
		return nil, notFound(chatID)
	}
	return out, nil
}

// ChatsWithInputs lists the chats with inputs not taken yet; see
// baton.InboxStore.
func (s *Store) ChatsWithInputs(ctx context.Context, limit int) ([]baton.Chat, error) {
	if limit <= 0 {
		limit = defaultListLimit
	}
	return s.listChats(ctx, `SELECT `+chatCols+` FROM chats JOIN (SELECT chat_id, min(seq) AS first FROM inputs WHERE consumed_at IS NULL GROUP BY chat_id) w
		ON w.chat_id = chats.id WHERE NOT deleted ORDER BY w.first LIMIT $1`, limit)
}

func scanInput(row pgx.Row) (baton.Input, error) {
	var in baton.Input
	var raw string
	var consumed *time.Time
	if err := row.Scan(&in.Seq, &raw, &in.AcceptedAt, &consumed); err != nil {
		return in, err
	}
	if err := json.Unmarshal([]byte(raw), &in.Event); err != nil {
		return in, baton.Errorf(baton.EINTERNAL, "input event: %v", err)
	}
	in.AcceptedAt = in.AcceptedAt.UTC()
	if consumed != nil {
		in.ConsumedAt = consumed.UTC()
	}
	return in, nil
}

// consumeInputs marks the chat's inputs ids taken, in tx after the chat row
// is locked (ChatUpdate.ConsumeInputs).
func consumeInputs(ctx context.Context, tx pgx.Tx, chatID string, ids []string, now time.Time) error {
	for _, id := range ids {
		tag, err := tx.Exec(ctx, `UPDATE inputs SET consumed_at = $3 WHERE chat_id = $1 AND id = $2 AND consumed_at IS NULL`, chatID, id, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			continue
		}
		var one int
		err = tx.QueryRow(ctx, `SELECT 1 FROM inputs WHERE chat_id = $1 AND id = $2`, chatID, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return baton.Errorf(baton.ENOTFOUND, "input %q: not in chat %q's inbox", id, chatID)
		}
		if err != nil {
			return err
		}
		return baton.Errorf(baton.ECONFLICT, "input %q: already taken", id)
	}
	return nil
}
