package mem

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// CreateKey stores an API key's hash and scope; see baton.KeyStore.
func (s *Store) CreateKey(ctx context.Context, k baton.APIKey) (baton.APIKey, error) {
	if err := s.check(ctx); err != nil {
		return baton.APIKey{}, err
	}
	if err := k.Validate(); err != nil {
		return baton.APIKey{}, err
	}
	k.CreatedAt, k.Revoked = now(), false
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	if _, dup := s.keys[k.Hash]; dup {
		return baton.APIKey{}, baton.Errorf(baton.ECONFLICT, "api key: hash already in use")
	}
	s.keys[k.Hash] = k
	return k, nil
}

// LookupKey returns the live key with this hash; see baton.KeyStore.
func (s *Store) LookupKey(ctx context.Context, hash string) (baton.APIKey, error) {
	if err := s.check(ctx); err != nil {
		return baton.APIKey{}, err
	}
	s.keysMu.RLock()
	k, ok := s.keys[hash]
	s.keysMu.RUnlock()
	if !ok || k.Revoked {
		return baton.APIKey{}, baton.Errorf(baton.ENOTFOUND, "api key not found")
	}
	return k, nil
}

// RevokeKey revokes the key with this hash; see baton.KeyStore.
func (s *Store) RevokeKey(ctx context.Context, hash string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	k, ok := s.keys[hash]
	if !ok {
		return baton.Errorf(baton.ENOTFOUND, "api key not found")
	}
	k.Revoked = true
	s.keys[hash] = k
	return nil
}

// statsKey names a chat's rollup within an app.
type statsKey struct{ workflow, chatID string }

// rollup is one chat's ChatStats: its totals and its agents'.
type rollup struct {
	total   baton.AgentStats // Agent empty
	agents  map[string]*baton.AgentStats
	updated time.Time
}

// addStats adds d's counts to a.
func addStats(a *baton.AgentStats, d baton.AgentStats) {
	a.Turns += d.Turns
	a.ToolCalls += d.ToolCalls
	a.Calls += d.Calls
	a.Usage = a.Usage.Add(d.Usage)
	a.Cost += d.Cost
}

// AddChatStats adds d to the chat's rollup; see baton.StatsStore.
func (s *Store) AddChatStats(ctx context.Context, d baton.ChatStats) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := d.Validate(); err != nil {
		return err
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	app := s.stats[d.App]
	if app == nil {
		app = map[statsKey]*rollup{}
		s.stats[d.App] = app
	}
	k := statsKey{d.Workflow, d.ChatID}
	r := app[k]
	if r == nil {
		r = &rollup{agents: map[string]*baton.AgentStats{}}
		app[k] = r
	}
	addStats(&r.total, baton.AgentStats{Turns: d.Turns, ToolCalls: d.ToolCalls, Calls: d.Calls, Usage: d.Usage, Cost: d.Cost})
	for _, a := range d.Agents {
		x := r.agents[a.Agent]
		if x == nil {
			x = &baton.AgentStats{Agent: a.Agent}
			r.agents[a.Agent] = x
		}
		addStats(x, a)
	}
	r.updated = now()
	return nil
}

// WorkflowStats returns the app's rollups, most recently updated first;
// see baton.StatsStore.
func (s *Store) WorkflowStats(ctx context.Context, app, workflow string, limit int) ([]baton.ChatStats, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultListLimit
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	var out []baton.ChatStats
	for k, r := range s.stats[app] {
		if workflow != "" && k.workflow != workflow {
			continue
		}
		c := baton.ChatStats{App: app, Workflow: k.workflow, ChatID: k.chatID, Turns: r.total.Turns, ToolCalls: r.total.ToolCalls,
			Calls: r.total.Calls, Usage: r.total.Usage, Cost: r.total.Cost, UpdatedAt: r.updated}
		for _, a := range r.agents {
			c.Agents = append(c.Agents, *a)
		}
		slices.SortFunc(c.Agents, func(a, b baton.AgentStats) int { return strings.Compare(a.Agent, b.Agent) })
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b baton.ChatStats) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), strings.Compare(a.ChatID, b.ChatID), strings.Compare(a.Workflow, b.Workflow))
	})
	return out[:min(limit, len(out))], nil
}

// AppStats sums the app's rollups; see baton.StatsStore.
func (s *Store) AppStats(ctx context.Context, app string) (baton.ChatStats, error) {
	if err := s.check(ctx); err != nil {
		return baton.ChatStats{}, err
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	var sum baton.AgentStats
	out := baton.ChatStats{App: app}
	for _, r := range s.stats[app] {
		addStats(&sum, r.total)
		if r.updated.After(out.UpdatedAt) {
			out.UpdatedAt = r.updated
		}
	}
	out.Turns, out.ToolCalls, out.Calls, out.Usage, out.Cost = sum.Turns, sum.ToolCalls, sum.Calls, sum.Usage, sum.Cost
	return out, nil
}
