package bus

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/batonhq/baton"
)

// Handler handles one event. It runs on the event's chat lane: no other
// event of the same chat is handled until it returns. The context is
// cancelled when the bus is closed and its drain deadline passes.
//
// A handler must not wait for a later event of its own chat (that event is
// queued behind it), and should not publish to its own chat faster than its
// lane can hold (WithLaneCapacity): Publish would wait for room that only
// this handler's return can make.
type Handler func(ctx context.Context, ev baton.Event) error

// Rule routes events whose type matches one of its patterns to a handler
// (spec/environment-events.md §3.1). Of all enabled rules that match an
// event, the one with the highest Priority handles it; ties go to the rule
// registered first. Exactly one rule handles an event.
type Rule struct {
	// Name identifies the rule in logs and in EnableRule; optional but
	// unique when set.
	Name string
	// Types are the event type patterns: an exact type ("user_query"), a
	// glob ("session.*", "background_task.*", with path.Match syntax), or
	// "*" for every type. A rule matches when any one pattern matches.
	Types []string
	// Handler is called with each event the rule wins.
	Handler Handler
	// Priority orders competing rules; higher wins.
	Priority int
	// Disabled rules never match. (Rules files spell this "enabled": false.)
	Disabled bool
}

// matcher is one compiled pattern.
type matcher struct {
	pattern string
	glob    bool
}

func compilePatterns(patterns []string) ([]matcher, error) {
	if len(patterns) == 0 {
		return nil, baton.Errorf(baton.EINVALID, "types: at least one event type pattern is required")
	}
	ms := make([]matcher, 0, len(patterns))
	for i, p := range patterns {
		if p == "" {
			return nil, baton.Errorf(baton.EINVALID, "types[%d]: empty pattern", i)
		}
		glob := strings.ContainsAny(p, `*?[\`)
		if glob {
			if _, err := path.Match(p, ""); err != nil {
				return nil, baton.Errorf(baton.EINVALID, "types[%d]: bad pattern %q: %v", i, p, err)
			}
		} else if err := baton.ValidateType(p); err != nil {
			return nil, baton.Errorf(baton.EINVALID, "types[%d]: %s", i, baton.ErrorMessage(err))
		}
		ms = append(ms, matcher{pattern: p, glob: glob})
	}
	return ms, nil
}

// CheckPattern reports whether p is a valid event type pattern (an exact
// type, a glob, or "*"), for validating rules before they are registered.
func CheckPattern(p string) error {
	if _, err := compilePatterns([]string{p}); err != nil {
		return baton.Errorf(baton.EINVALID, "%s", strings.TrimPrefix(baton.ErrorMessage(err), "types[0]: "))
	}
	return nil
}

func (m matcher) match(typ string) bool {
	if !m.glob {
		return m.pattern == typ
	}
	if m.pattern == "*" {
		return true
	}
	ok, _ := path.Match(m.pattern, typ) // the pattern was checked when compiled
	return ok
}

func matchAny(ms []matcher, typ string) bool {
	for _, m := range ms {
		if m.match(typ) {
			return true
		}
	}
	return false
}

// rule is a registered Rule with its compiled patterns.
type rule struct {
	Rule
	order    int
	matchers []matcher
}

// routeTable is an immutable set of rules, sorted by priority (descending)
// then registration order, with a cache from event type to the winning rule.
// It is replaced wholesale when rules change, so routing reads it without a
// lock.
type routeTable struct {
	rules []*rule
	cache atomic.Pointer[map[string]*rule]
}

// maxCachedTypes bounds the route cache, so that a client inventing event
// types cannot grow it without limit; types beyond it are matched each time.
const maxCachedTypes = 1024

func newRouteTable(rules []*rule) *routeTable {
	sorted := slices.Clone(rules)
	slices.SortStableFunc(sorted, func(a, b *rule) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return a.order - b.order
	})
	t := &routeTable{rules: sorted}
	empty := map[string]*rule{}
	t.cache.Store(&empty)
	return t
}

// route returns the winning rule for typ, or nil.
func (t *routeTable) route(typ string) *rule {
	cur := t.cache.Load()
	if r, ok := (*cur)[typ]; ok {
		return r
	}
	var won *rule
	for _, r := range t.rules {
		if !r.Disabled && matchAny(r.matchers, typ) {
			won = r
			break
		}
	}
	if len(*cur) < maxCachedTypes {
		// Copy on write: new types are rare, lookups are constant.
		next := make(map[string]*rule, len(*cur)+1)
		for k, v := range *cur {
			next[k] = v
		}
		next[typ] = won
		t.cache.CompareAndSwap(cur, &next) // losing the race only costs a recomputation
	}
	return won
}

// RegisterRule adds a rule. It is safe to call while events are flowing;
// events dispatched after it returns see the new rule.
func (b *Bus) RegisterRule(r Rule) error {
	if r.Handler == nil {
		return baton.Errorf(baton.EINVALID, "rule %q: handler is required", r.Name)
	}
	ms, err := compilePatterns(r.Types)
	if err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	if r.Name != "" {
		for _, have := range b.ruleList {
			if have.Name == r.Name {
				return baton.Errorf(baton.ECONFLICT, "rule %q: already registered", r.Name)
			}
		}
	}
	r.Types = slices.Clone(r.Types)
	b.ruleList = append(b.ruleList, &rule{Rule: r, order: len(b.ruleList), matchers: ms})
	b.routes.Store(newRouteTable(b.ruleList))
	return nil
}

// EnableRule enables or disables the named rule.
func (b *Bus) EnableRule(name string, enabled bool) error {
	b.rulesMu.Lock()
	defer b.rulesMu.Unlock()
	for i, have := range b.ruleList {
		if have.Name == name {
			next := *have
			next.Disabled = !enabled
			b.ruleList[i] = &next
			b.routes.Store(newRouteTable(b.ruleList))
			return nil
		}
	}
	return baton.Errorf(baton.ENOTFOUND, "rule %q: not registered", name)
}

// Rules returns the registered rules in the order they compete: priority
// descending, then registration order.
func (b *Bus) Rules() []Rule {
	t := b.routes.Load()
	out := make([]Rule, len(t.rules))
	for i, r := range t.rules {
		out[i] = r.Rule
		out[i].Types = slices.Clone(r.Types)
	}
	return out
}

// Match returns the rule that would handle an event of type typ, and
// whether any does.
func (b *Bus) Match(typ string) (Rule, bool) {
	r := b.routes.Load().route(typ)
	if r == nil {
		return Rule{}, false
	}
	return r.Rule, true
}
