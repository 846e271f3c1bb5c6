package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/batonhq/baton"
	"github.com/jackc/pgx/v5"
)

// appendSQL moves the chat's counter and inserts the events in one statement.
// The UPDATE locks the chat row until commit; a concurrent append waits and
// then reads the counter this one left, so sequences neither repeat nor skip.
const appendSQL = `WITH c AS (
	UPDATE chats SET last_sequence = last_sequence + $4, updated_at = $5,
		status = COALESCE($6, status), turn_agent = COALESCE($7, turn_agent),
		context = CASE WHEN $8::jsonb IS NULL THEN context ELSE (context || $8::jsonb) - $9::text[] END
	WHERE id = $1 AND (app, user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT deleted
		AND ($28::bigint = 0 OR last_sequence = $28::bigint - 1)
	RETURNING last_sequence - $4 AS base
), u AS (
	INSERT INTO usage (chat_id, app, workflow, agent, model, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, at)
	SELECT $1, $2, x.* FROM c, unnest($19::text[], $20::text[], $21::text[], $22::bigint[], $23::bigint[], $24::bigint[], $25::bigint[], $26::float8[], $27::timestamptz[]) AS x
)
INSERT INTO events (chat_id, sequence, id, type, ts, agent_id, agent_name, env_name, source, extra, payload)
SELECT $1, c.base + t.ord, t.id, t.type, t.ts, t.agent_id, t.agent_name, t.env_name, t.source, t.extra, t.payload
FROM c, unnest($10::text[], $11::text[], $12::bigint[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[])
	WITH ORDINALITY AS t(id, type, ts, agent_id, agent_name, env_name, source, extra, payload, ord)
RETURNING sequence`

// usageSQL inserts a ChatUpdate's usage rows ($3..$11, as in appendSQL's
// $19..$27) for chat $1 of app $2, whose scope the caller has checked.
const usageSQL = `INSERT INTO usage (chat_id, app, workflow, agent, model, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, at)
	SELECT $1, $2, x.* FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[], $11::timestamptz[]) AS x`

const updateSQL = `UPDATE chats SET updated_at = $2, status = COALESCE($3, status), turn_agent = COALESCE($4, turn_agent),
	context = CASE WHEN $5::jsonb IS NULL THEN context ELSE (context || $5::jsonb) - $6::text[] END
	WHERE id = $1`

// Append assigns the chat's next sequences to events and applies u in the
// same transaction; see baton.EventStore and the package comment. An append
// with no fence and no pending changes is one statement (one round trip); one
// with them runs in a transaction that locks the chat row first.
func (s *Store) Append(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	return s.appendWith(ctx, scope, chatID, events, u, nil)
}

// appendWith is Append; before, when not nil, runs first in the append's
// transaction (which then takes the slow path): CreateChatAndAppend creates
// the chat there.
func (s *Store) appendWith(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate, before func(context.Context, pgx.Tx) error) ([]baton.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	evs, err := baton.PrepareEvents(chatID, events)
	if err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	n := len(evs)
	ids, types, agentIDs, agentNames, envs, sources := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ts, extras, payloads := make([]int64, n), make([]*string, n), make([]*string, n)
	for i, e := range evs {
		md := &e.Metadata
		x, err := md.ExtraJSON()
		if err != nil {
			return nil, baton.Errorf(baton.EINVALID, "events[%d].metadata: %w", i, err)
		}
		if x != nil {
			xs := string(x)
			extras[i] = &xs
		}
		ids[i], types[i], ts[i] = e.ID, e.Type, e.Timestamp
		agentIDs[i], agentNames[i], envs[i], sources[i] = md.TriggerAgentID, md.TriggerAgentName, md.EnvName, md.Source
		if len(e.Payload) > 0 {
			p := string(e.Payload)
			payloads[i] = &p
		}
	}
	ua, err := updateArgsOf(u)
	if err != nil {
		return nil, err
	}
	status, turn, set, del := ua.status, ua.turn, ua.set, ua.del
	// ExpectNext is checked in appendSQL's update of the chat row (or, on
	// the slow path, by checkUpdate), so it keeps the one-statement path.
	var expect int64
	if u != nil {
		expect = u.ExpectNext
	}
	slow := before != nil || n == 0 || u != nil && (u.Fence > 0 || len(u.AddPending) > 0 || len(u.ResolvePending) > 0 || len(u.ConsumeInputs) > 0)
	now := time.Now()
	use := usageArgsOf(u, now)
	insert := func(ctx context.Context, q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}) error {
		rows, err := q.Query(ctx, appendSQL, append(append([]any{chatID, scope.App, scope.User, int64(n), now, status, turn, set, del, ids, types, ts, agentIDs, agentNames, envs, sources, extras, payloads}, use...), expect)...)
		if err != nil {
			return err
		}
		var base int64 = -1
		count := 0
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return err
			}
			if base < 0 || seq-1 < base {
				base = seq - 1
			}
			count++
		}
		if err := rows.Err(); err != nil {
			if c, ok := isUnique(err); ok && c == "events_id_chat" {
				return baton.Errorf(baton.ECONFLICT, "chat %q: an event id is already recorded", chatID)
			}
			return err
		}
		if count == 0 {
			return notFound(chatID)
		}
		if count != n {
			return baton.Errorf(baton.EINTERNAL, "chat %q: inserted %d of %d events", chatID, count, n)
		}
		for i := range evs {
			evs[i].Sequence = base + int64(i) + 1
		}
		return nil
	}
	if !slow {
		var plain *plainAppend
		if status == nil && turn == nil && set == nil && expect == 0 && (u == nil || len(u.Usage) == 0) {
			plain = &plainAppend{app: scope.App, user: scope.User, ids: ids, types: types, agentIDs: agentIDs, agentNames: agentNames,
				envs: envs, srcs: sources, ts: ts, extras: extras, payloads: payloads}
		}
		seqs, err := s.groupAppend(ctx, chatID, append(append([]any{chatID, scope.App, scope.User, int64(n), now, status, turn, set, del,
			ids, types, ts, agentIDs, agentNames, envs, sources, extras, payloads}, use...), expect), plain)
		if err != nil {
			return nil, s.dbErr("append", err)
		}
		if len(seqs) == 0 {
			if expect > 0 {
				return nil, s.staleOrNotFound(ctx, scope, chatID, expect)
			}
			return nil, notFound(chatID)
		}
		if len(seqs) != n {
			return nil, baton.Errorf(baton.EINTERNAL, "chat %q: inserted %d of %d events", chatID, len(seqs), n)
		}
		base := slices.Min(seqs) - 1
		for i := range evs {
			evs[i].Sequence = base + int64(i) + 1
		}
		return evs, nil
	}
	// The slow path: a transaction that locks the chat row first. It runs
	// on a context the caller cannot cancel once it has begun (writeTx), so
	// that an error means it was not committed.
	err = s.writeTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if before != nil {
			if err := before(ctx, tx); err != nil {
				return err
			}
		}
		if err := lockChat(ctx, tx, scope, chatID); err != nil {
			return err
		}
		if u != nil {
			if err := checkUpdate(ctx, tx, chatID, u, now); err != nil {
				return err
			}
		}
		if n > 0 {
			return insert(ctx, tx) // with the usage rows
		}
		if _, err := tx.Exec(ctx, updateSQL, chatID, now, status, turn, set, del); err != nil {
			return err
		}
		return insertUsage(ctx, tx, scope, chatID, u, now)
	})
	if err != nil {
		return nil, s.dbErr("append", err)
	}
	return evs, nil
}

// noUsageArgs are usageArgsOf's arrays for no rows: NULL arrays, which
// unnest to nothing.
var noUsageArgs = []any{[]string(nil), []string(nil), []string(nil), []int64(nil), []int64(nil), []int64(nil), []int64(nil), []float64(nil), []time.Time(nil)}

// usageArgsOf returns the usage rows of u as appendSQL's $19..$27 (and
// usageSQL's $3..$11): one array per column. A row with no time is stamped
// now.
func usageArgsOf(u *baton.ChatUpdate, now time.Time) []any {
	if u == nil || len(u.Usage) == 0 {
		return noUsageArgs
	}
	n := len(u.Usage)
	wfs, agents, models := make([]string, n), make([]string, n), make([]string, n)
	prompt, completion, cached, reasoning := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	cost, at := make([]float64, n), make([]time.Time, n)
	for i := range n {
		r := &u.Usage[i]
		wfs[i], agents[i], models[i] = r.Workflow, r.Agent, r.Model
		prompt[i], completion[i], cached[i], reasoning[i] = r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.ReasoningTokens
		cost[i], at[i] = r.Cost, r.At
		if r.At.IsZero() {
			at[i] = now
		}
	}
	return []any{wfs, agents, models, prompt, completion, cached, reasoning, cost, at}
}

// insertUsage inserts u's usage rows for the chat id of scope, which the
// caller has checked, in tx.
func insertUsage(ctx context.Context, tx pgx.Tx, scope baton.Scope, id string, u *baton.ChatUpdate, now time.Time) error {
	if u == nil || len(u.Usage) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, usageSQL, append([]any{id, scope.App}, usageArgsOf(u, now)...)...)
	return err
}

// updateArgs are a ChatUpdate's parameters of appendSQL and updateSQL.
type updateArgs struct {
	status, turn *string
	set          []byte   // the context keys to set, a JSON object; nil for none
	del          []string // the context keys to delete
}

// updateArgsOf returns u's parameters; a nil u changes nothing.
func updateArgsOf(u *baton.ChatUpdate) (updateArgs, error) {
	a := updateArgs{del: []string{}}
	if u == nil {
		return a, nil
	}
	if u.Status != nil {
		st := string(*u.Status)
		a.status = &st
	}
	a.turn = u.TurnAgent
	if len(u.Context) > 0 {
		m := map[string]json.RawMessage{}
		for k, v := range u.Context {
			if t := bytes.TrimSpace(v); len(t) == 0 || bytes.Equal(t, []byte("null")) {
				a.del = append(a.del, k)
			} else {
				m[k] = v
			}
		}
		var err error
		if a.set, err = json.Marshal(m); err != nil {
			return updateArgs{}, baton.Errorf(baton.EINVALID, "context: %w", err)
		}
	}
	return a, nil
}

// Events returns the chat's events after the given sequence; see
// baton.EventStore.
func (s *Store) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, `SELECT e.sequence, e.id, e.type, e.ts, e.agent_id, e.agent_name, e.env_name, e.source, e.extra, e.payload
		FROM chats c JOIN events e ON e.chat_id = c.id
		WHERE c.id = $1 AND (c.app, c.user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT c.deleted AND e.sequence > $4
		ORDER BY e.sequence LIMIT $5`, chatID, scope.App, scope.User, after, lim)
	if err != nil {
		return nil, s.dbErr("events", err)
	}
	defer rows.Close()
	out := make([]baton.Event, 0, 64)
	for rows.Next() {
		var e baton.Event
		var extra, payload []byte
		md := &e.Metadata
		if err := rows.Scan(&e.Sequence, &e.ID, &e.Type, &e.Timestamp, &md.TriggerAgentID, &md.TriggerAgentName, &md.EnvName, &md.Source, &extra, &payload); err != nil {
			return nil, s.dbErr("events", err)
		}
		if len(extra) > 0 {
			if err := md.SetExtraJSON(extra); err != nil {
				return nil, s.dbErr("events metadata", err)
			}
		}
		e.Metadata.TriggerSessionID = chatID
		if len(payload) > 0 {
			e.Payload = json.RawMessage(payload)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr("events", err)
	}
	if len(out) == 0 {
		if _, err := s.GetChat(ctx, scope, chatID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// staleOrNotFound tells why an append that expected to give its first
// event sequence expect wrote nothing: the chat is not in scope, or its
// last sequence is not expect-1 (baton.ErrStale).
func (s *Store) staleOrNotFound(ctx context.Context, scope baton.Scope, chatID string, expect int64) error {
	var last int64
	err := s.pool.QueryRow(ctx, `SELECT last_sequence FROM chats WHERE id = $1 AND (app, user_id) IS NOT DISTINCT FROM ($2, $3) AND NOT deleted`,
		chatID, scope.App, scope.User).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(chatID)
	}
	if err != nil {
		return s.dbErr("append", err)
	}
	return baton.StaleNext(chatID, expect, last)
}
