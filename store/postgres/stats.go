package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton"
)

var _ baton.StatsStore = (*Store)(nil)

const addStatsSQL = `INSERT INTO workflow_stats AS s (app, workflow, chat_id, agent, turns, tool_calls, calls,
		prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
	ON CONFLICT (app, workflow, chat_id, agent) DO UPDATE SET
		turns = s.turns + excluded.turns, tool_calls = s.tool_calls + excluded.tool_calls, calls = s.calls + excluded.calls,
		prompt_tokens = s.prompt_tokens + excluded.prompt_tokens, completion_tokens = s.completion_tokens + excluded.completion_tokens,
		cached_tokens = s.cached_tokens + excluded.cached_tokens, reasoning_tokens = s.reasoning_tokens + excluded.reasoning_tokens,
		cost = s.cost + excluded.cost, updated_at = excluded.updated_at`

// AddChatStats adds d to the chat's rollup in one transaction; see
// baton.StatsStore.
func (s *Store) AddChatStats(ctx context.Context, d baton.ChatStats) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := d.Validate(); err != nil {
		return err
	}
	now := time.Now().UTC()
	b := &pgx.Batch{}
	b.Queue(addStatsSQL, d.App, d.Workflow, d.ChatID, "", d.Turns, d.ToolCalls, d.Calls,
		d.PromptTokens, d.CompletionTokens, d.CachedTokens, d.ReasoningTokens, d.Cost, now)
	for _, a := range d.Agents {
		b.Queue(addStatsSQL, d.App, d.Workflow, d.ChatID, a.Agent, a.Turns, a.ToolCalls, a.Calls,
			a.PromptTokens, a.CompletionTokens, a.CachedTokens, a.ReasoningTokens, a.Cost, now)
	}
	err := s.writeTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	return s.dbErr("add chat stats", err)
}

// WorkflowStats returns the app's rollups; see baton.StatsStore.
func (s *Store) WorkflowStats(ctx context.Context, app, workflow string, limit int) ([]baton.ChatStats, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT t.workflow, t.chat_id, t.agent, t.turns, t.tool_calls, t.calls, t.prompt_tokens,
			t.completion_tokens, t.cached_tokens, t.reasoning_tokens, t.cost, t.updated_at
		FROM (SELECT workflow, chat_id, updated_at FROM workflow_stats
			WHERE app = $1 AND agent = '' AND ($2 = '' OR workflow = $2) ORDER BY updated_at DESC, chat_id LIMIT $3) c
		JOIN workflow_stats t ON t.app = $1 AND t.workflow = c.workflow AND t.chat_id = c.chat_id
		ORDER BY c.updated_at DESC, c.chat_id, t.agent`, app, workflow, limit)
	if err != nil {
		return nil, s.dbErr("workflow stats", err)
	}
	defer rows.Close()
	var out []baton.ChatStats
	for rows.Next() {
		var a baton.AgentStats
		var wf, chat string
		var updated time.Time
		if err := rows.Scan(&wf, &chat, &a.Agent, &a.Turns, &a.ToolCalls, &a.Calls, &a.PromptTokens,
			&a.CompletionTokens, &a.CachedTokens, &a.ReasoningTokens, &a.Cost, &updated); err != nil {
			return nil, s.dbErr("workflow stats", err)
		}
		if a.Agent == "" {
			out = append(out, baton.ChatStats{App: app, Workflow: wf, ChatID: chat, Turns: a.Turns, ToolCalls: a.ToolCalls,
				Calls: a.Calls, Usage: a.Usage, Cost: a.Cost, UpdatedAt: updated.UTC()})
			continue
		}
		if n := len(out); n > 0 && out[n-1].ChatID == chat && out[n-1].Workflow == wf {
			out[n-1].Agents = append(out[n-1].Agents, a)
		}
	}
	return out, s.dbErr("workflow stats", rows.Err())
}

// AppStats sums the app's rollups; see baton.StatsStore.
func (s *Store) AppStats(ctx context.Context, app string) (baton.ChatStats, error) {
	if err := s.check(); err != nil {
		return baton.ChatStats{}, err
	}
	t := baton.ChatStats{App: app}
	var updated *time.Time
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(turns), 0)::bigint, coalesce(sum(tool_calls), 0)::bigint, coalesce(sum(calls), 0)::bigint,
			coalesce(sum(prompt_tokens), 0)::bigint, coalesce(sum(completion_tokens), 0)::bigint, coalesce(sum(cached_tokens), 0)::bigint,
			coalesce(sum(reasoning_tokens), 0)::bigint, coalesce(sum(cost), 0), max(updated_at)
		FROM workflow_stats WHERE app = $1 AND agent = ''`, app).
		Scan(&t.Turns, &t.ToolCalls, &t.Calls, &t.PromptTokens, &t.CompletionTokens, &t.CachedTokens, &t.ReasoningTokens, &t.Cost, &updated)
	if err != nil {
		return baton.ChatStats{}, s.dbErr("app stats", err)
	}
	if updated != nil {
		t.UpdatedAt = updated.UTC()
	}
	return t, nil
}
