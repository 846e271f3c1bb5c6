package sqlite

import (
	"context"
	"time"

	"github.com/batonhq/baton"
)

var _ baton.StatsStore = (*Store)(nil)

const addStatsSQL = `INSERT INTO workflow_stats (app, workflow, chat_id, agent, turns, tool_calls, calls,
		prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (app, workflow, chat_id, agent) DO UPDATE SET
		turns = turns + excluded.turns, tool_calls = tool_calls + excluded.tool_calls, calls = calls + excluded.calls,
		prompt_tokens = prompt_tokens + excluded.prompt_tokens, completion_tokens = completion_tokens + excluded.completion_tokens,
		cached_tokens = cached_tokens + excluded.cached_tokens, reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
		cost = cost + excluded.cost, updated_at = excluded.updated_at`

// AddChatStats adds d to the chat's rollup in one transaction; see
// baton.StatsStore.
func (s *Store) AddChatStats(ctx context.Context, d baton.ChatStats) error {
	if err := d.Validate(); err != nil {
		return err
	}
	now := micros(time.Now())
	return s.write(ctx, func(ctx context.Context, w *wconn) error {
		if _, err := w.exec(ctx, addStatsSQL, d.App, d.Workflow, d.ChatID, "", d.Turns, d.ToolCalls, d.Calls,
			d.PromptTokens, d.CompletionTokens, d.CachedTokens, d.ReasoningTokens, d.Cost, now); err != nil {
			return storeErr("add chat stats", err)
		}
		for _, a := range d.Agents {
			if _, err := w.exec(ctx, addStatsSQL, d.App, d.Workflow, d.ChatID, a.Agent, a.Turns, a.ToolCalls, a.Calls,
				a.PromptTokens, a.CompletionTokens, a.CachedTokens, a.ReasoningTokens, a.Cost, now); err != nil {
				return storeErr("add chat stats", err)
			}
		}
		return nil
	})
}

// WorkflowStats returns the app's rollups; see baton.StatsStore.
func (s *Store) WorkflowStats(ctx context.Context, app, workflow string, limit int) ([]baton.ChatStats, error) {
	if s.closed.Load() {
		return nil, baton.ErrClosed
	}
	if limit <= 0 {
		limit = 100
	}
	s.reads.Add(1)
	rows, err := s.rdb.QueryContext(ctx, `SELECT t.workflow, t.chat_id, t.agent, t.turns, t.tool_calls, t.calls, t.prompt_tokens,
			t.completion_tokens, t.cached_tokens, t.reasoning_tokens, t.cost, t.updated_at
		FROM (SELECT workflow, chat_id, updated_at FROM workflow_stats
			WHERE app = ? AND agent = '' AND (? = '' OR workflow = ?) ORDER BY updated_at DESC, chat_id LIMIT ?) c
		JOIN workflow_stats t ON t.app = ? AND t.workflow = c.workflow AND t.chat_id = c.chat_id
		ORDER BY c.updated_at DESC, c.chat_id, t.agent`, app, workflow, workflow, limit, app)
	if err != nil {
		return nil, s.readErr("workflow stats", err)
	}
	defer rows.Close()
	var out []baton.ChatStats
	for rows.Next() {
		var a baton.AgentStats
		var wf, chat string
		var updated int64
		if err := rows.Scan(&wf, &chat, &a.Agent, &a.Turns, &a.ToolCalls, &a.Calls, &a.PromptTokens,
			&a.CompletionTokens, &a.CachedTokens, &a.ReasoningTokens, &a.Cost, &updated); err != nil {
			return nil, s.readErr("workflow stats", err)
		}
		if a.Agent == "" {
			out = append(out, baton.ChatStats{App: app, Workflow: wf, ChatID: chat, Turns: a.Turns, ToolCalls: a.ToolCalls,
				Calls: a.Calls, Usage: a.Usage, Cost: a.Cost, UpdatedAt: fromMicros(updated)})
			continue
		}
		if n := len(out); n > 0 && out[n-1].ChatID == chat && out[n-1].Workflow == wf {
			out[n-1].Agents = append(out[n-1].Agents, a)
		}
	}
	return out, s.readErr("workflow stats", rows.Err())
}

// AppStats sums the app's rollups; see baton.StatsStore.
func (s *Store) AppStats(ctx context.Context, app string) (baton.ChatStats, error) {
	if s.closed.Load() {
		return baton.ChatStats{}, baton.ErrClosed
	}
	t := baton.ChatStats{App: app}
	var updated int64
	s.reads.Add(1)
	err := s.rdb.QueryRowContext(ctx, `SELECT coalesce(sum(turns), 0), coalesce(sum(tool_calls), 0), coalesce(sum(calls), 0),
			coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cached_tokens), 0),
			coalesce(sum(reasoning_tokens), 0), coalesce(sum(cost), 0), coalesce(max(updated_at), 0)
		FROM workflow_stats WHERE app = ? AND agent = ''`, app).
		Scan(&t.Turns, &t.ToolCalls, &t.Calls, &t.PromptTokens, &t.CompletionTokens, &t.CachedTokens, &t.ReasoningTokens, &t.Cost, &updated)
	if err != nil {
		return baton.ChatStats{}, s.readErr("app stats", err)
	}
	if updated > 0 {
		t.UpdatedAt = fromMicros(updated)
	}
	return t, nil
}
