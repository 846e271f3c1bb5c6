package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/batonhq/baton"
)

// RunStats checks a baton.StatsStore: writes add up per chat and agent,
// concurrent writes lose nothing, rollups are per app (another app sees
// nothing), the workflow filter and the app sum, and bad input is EINVALID.
func RunStats(t *testing.T, ss baton.StatsStore) {
	ctx := context.Background()
	app, other := NewScope().App, NewScope().App
	d := baton.ChatStats{
		App: app, Workflow: "generator", ChatID: "chat-1", Turns: 1, ToolCalls: 2, Calls: 1,
		Usage: baton.Usage{PromptTokens: 100, CompletionTokens: 10, CachedTokens: 5, ReasoningTokens: 1}, Cost: 0.25,
		Agents: []baton.AgentStats{{Agent: "A", Turns: 1, ToolCalls: 2, Calls: 1, Usage: baton.Usage{PromptTokens: 100, CompletionTokens: 10, CachedTokens: 5, ReasoningTokens: 1}, Cost: 0.25}},
	}
	if err := ss.AddChatStats(ctx, d); err != nil {
		t.Fatalf("AddChatStats: %v", err)
	}
	// Eight concurrent deltas of one model call by agent B each.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			errs <- ss.AddChatStats(ctx, baton.ChatStats{
				App: app, Workflow: "generator", ChatID: "chat-1", Calls: 1, Usage: baton.Usage{PromptTokens: 3, CompletionTokens: 2}, Cost: 0.5,
				Agents: []baton.AgentStats{{Agent: "B", Calls: 1, Usage: baton.Usage{PromptTokens: 3, CompletionTokens: 2}, Cost: 0.5}},
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent AddChatStats: %v", err)
		}
	}
	if err := ss.AddChatStats(ctx, baton.ChatStats{App: app, Workflow: "hello", ChatID: "chat-2", Turns: 3, Usage: baton.Usage{PromptTokens: 7}, Cost: 1}); err != nil {
		t.Fatalf("AddChatStats: %v", err)
	}

	got, err := ss.WorkflowStats(ctx, app, "generator", 0)
	if err != nil {
		t.Fatalf("WorkflowStats: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("WorkflowStats(generator) = %d rollups, want 1: %+v", len(got), got)
	}
	c := got[0]
	if c.ChatID != "chat-1" || c.Workflow != "generator" || c.App != app || c.Turns != 1 || c.ToolCalls != 2 || c.Calls != 9 ||
		c.PromptTokens != 124 || c.CompletionTokens != 26 || c.CachedTokens != 5 || c.ReasoningTokens != 1 || !near(c.Cost, 4.25) {
		t.Errorf("chat-1 rollup = %+v", c)
	}
	if c.UpdatedAt.IsZero() {
		t.Errorf("UpdatedAt not set")
	}
	if len(c.Agents) != 2 || c.Agents[0].Agent != "A" || c.Agents[1].Agent != "B" ||
		c.Agents[0].PromptTokens != 100 || c.Agents[1].Calls != 8 || c.Agents[1].TotalTokens() != 40 || !near(c.Agents[1].Cost, 4) {
		t.Errorf("chat-1 agents = %+v", c.Agents)
	}
	all, err := ss.WorkflowStats(ctx, app, "", 0)
	if err != nil || len(all) != 2 {
		t.Fatalf("WorkflowStats(all) = %d rollups, %v; want 2", len(all), err)
	}
	if one, err := ss.WorkflowStats(ctx, app, "", 1); err != nil || len(one) != 1 {
		t.Fatalf("WorkflowStats(limit 1) = %d rollups, %v", len(one), err)
	}

	sum, err := ss.AppStats(ctx, app)
	if err != nil {
		t.Fatalf("AppStats: %v", err)
	}
	if sum.Turns != 4 || sum.Calls != 9 || sum.PromptTokens != 131 || sum.CompletionTokens != 26 || !near(sum.Cost, 5.25) || sum.UpdatedAt.IsZero() {
		t.Errorf("AppStats = %+v", sum)
	}

	// Another app sees nothing of these.
	if rs, err := ss.WorkflowStats(ctx, other, "", 0); err != nil || len(rs) != 0 {
		t.Errorf("another app's WorkflowStats = %+v, %v; want none", rs, err)
	}
	if s, err := ss.AppStats(ctx, other); err != nil || s.TotalTokens() != 0 || s.Cost != 0 || !s.UpdatedAt.IsZero() {
		t.Errorf("another app's AppStats = %+v, %v; want zero", s, err)
	}

	for _, bad := range []baton.ChatStats{
		{Workflow: "w", ChatID: "c"},
		{App: app, ChatID: "c"},
		{App: app, Workflow: "w"},
		{App: app, Workflow: "w", ChatID: "c", Agents: []baton.AgentStats{{}}},
	} {
		if err := ss.AddChatStats(ctx, bad); !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("AddChatStats(%+v) = %v, want EINVALID", bad, err)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
