package metrics

import (
	"context"
	"fmt"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// Limits are a token and a cost limit; a zero field is no limit. Tokens are
// prompt plus completion tokens.
type Limits struct {
	MaxTokens  int64
	MaxCostUSD float64
}

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l.MaxTokens <= 0 && l.MaxCostUSD <= 0 }

// exceeded says which limit t has reached, or "".
func (l Limits) exceeded(what string, tokens int64, cost float64) string {
	switch {
	case l.MaxTokens > 0 && tokens >= l.MaxTokens:
		return fmt.Sprintf("%s token budget reached: %d of %d tokens used", what, tokens, l.MaxTokens)
	case l.MaxCostUSD > 0 && cost >= l.MaxCostUSD:
		return fmt.Sprintf("%s cost budget reached: $%.4f of $%.4f spent", what, cost, l.MaxCostUSD)
	}
	return ""
}

// BudgetConfig is the server's budget configuration.
type BudgetConfig struct {
	// Chat limits every chat whose workflow.json sets no budget.
	Chat Limits
	// App limits every app's total over all its chats (persisted rollups
	// plus what this process saw since it started).
	App Limits
	// Apps overrides App for the named apps.
	Apps map[string]Limits
}

// Budget returns the engine's budget hook (engine.Config.Budget). Before
// every model call it checks the chat's limits (workflow.json's budget,
// else cfg.Chat) against the chat's usage rows (Options.Usage, the truth;
// else the in-memory figures), then the app's limits against the app's
// total. The first check of an app loads its persisted total once
// (StatsStore.AppStats); later checks read memory. A store error is
// returned, and the engine lets the call go ahead (invariant 9). The hook's
// type is engine.BudgetFunc's, spelled out so that metrics does not import
// the engine.
func (c *Collector) Budget(cfg BudgetConfig) func(ctx context.Context, scope baton.Scope, chat baton.Chat, wf *workflow.Workflow) (exceeded bool, reason string, err error) {
	return func(ctx context.Context, scope baton.Scope, chat baton.Chat, wf *workflow.Workflow) (bool, string, error) {
		chatLimits := cfg.Chat
		if wf != nil && (wf.Config.Budget.MaxTokens > 0 || wf.Config.Budget.MaxCostUSD > 0) {
			chatLimits = Limits{MaxTokens: wf.Config.Budget.MaxTokens, MaxCostUSD: wf.Config.Budget.MaxCostUSD}
		}
		if !chatLimits.IsZero() {
			tokens, cost, err := c.chatSpent(ctx, scope, chat.ID)
			if err != nil {
				return false, "", err
			}
			if r := chatLimits.exceeded("chat", tokens, cost); r != "" {
				return true, r, nil
			}
		}
		appLimits, ok := cfg.Apps[scope.App]
		if !ok {
			appLimits = cfg.App
		}
		if appLimits.IsZero() {
			return false, "", nil
		}
		t, err := c.AppTotals(ctx, scope.App)
		if err != nil {
			return false, "", err
		}
		if r := appLimits.exceeded("app", t.TotalTokens(), t.Cost); r != "" {
			return true, r, nil
		}
		return false, "", nil
	}
}

func (c *Collector) chatSpent(ctx context.Context, scope baton.Scope, chatID string) (int64, float64, error) {
	if c.opts.Usage != nil {
		total, _, err := c.opts.Usage.ChatUsage(ctx, scope, chatID)
		if err != nil {
			return 0, 0, fmt.Errorf("budget of chat %s: %w", chatID, err)
		}
		return total.TotalTokens(), total.Cost, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, _ := c.chats.peek(chatID); ch != nil && (!ch.scoped || ch.scope == scope) {
		return ch.all.TotalTokens(), ch.all.Cost, nil
	}
	return 0, 0, nil
}

// AppTotals returns an app's totals: its persisted rollups as loaded on
// the first call (when Options.Stats is set), minus what this process had
// written by then, plus everything this process observed for the app. A
// rollup being written at the very moment of the first load may be counted
// twice; budgets err on the safe side.
func (c *Collector) AppTotals(ctx context.Context, app string) (baton.ChatStats, error) {
	c.mu.Lock()
	b, loaded := c.appBase[app]
	fresh := loaded && c.now().Sub(b.at) < appBaseRefresh
	c.mu.Unlock()
	if !fresh && c.opts.Stats != nil {
		st, err := c.opts.Stats.AppStats(ctx, app)
		if err != nil {
			return baton.ChatStats{}, fmt.Errorf("totals of app %s: %w", app, err)
		}
		c.mu.Lock()
		b := &appBase{stored: totals{Turns: st.Turns, ToolCalls: st.ToolCalls, Calls: st.Calls, Usage: st.Usage, Cost: st.Cost}, at: c.now()}
		if w := c.written[app]; w != nil {
			b.written = *w
		}
		c.appBase[app] = b
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := baton.ChatStats{App: app}
	if b := c.appBase[app]; b != nil {
		out.Turns = b.stored.Turns - b.written.Turns
		out.ToolCalls = b.stored.ToolCalls - b.written.ToolCalls
		out.Calls = b.stored.Calls - b.written.Calls
		out.Usage = b.stored.Usage.Add(baton.Usage{
			PromptTokens: -b.written.PromptTokens, CompletionTokens: -b.written.CompletionTokens,
			CachedTokens: -b.written.CachedTokens, ReasoningTokens: -b.written.ReasoningTokens,
		})
		out.Cost = b.stored.Cost - b.written.Cost
	}
	if t := c.apps[app]; t != nil {
		out.Turns += t.Turns
		out.ToolCalls += t.ToolCalls
		out.Calls += t.Calls
		out.Usage = out.Usage.Add(t.Usage)
		out.Cost += t.Cost
	}
	return out, nil
}
