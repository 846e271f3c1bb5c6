package llm

import (
	"math"
	"strings"

	"github.com/batonhq/baton"
)

// Price is what a model costs, in US dollars per million tokens. Its JSON
// form is the workflow's pricing entry: {"input": 2.5, "output": 10,
// "cached_input": 1.25}.
type Price struct {
	Input       float64 `json:"input"`
	Output      float64 `json:"output"`
	CachedInput float64 `json:"cached_input"`
}

// Prices is the built-in table: OpenAI's list prices (standard tier, USD per
// million tokens) as published on https://openai.com/api/pricing/ in August
// 2025. Prices change; a workflow overrides them with its `pricing` map.
// Dated snapshots ("gpt-4o-2024-08-06") use their family's price.
var Prices = map[string]Price{
	"gpt-5":         {Input: 1.25, Output: 10.00, CachedInput: 0.125},
	"gpt-5-mini":    {Input: 0.25, Output: 2.00, CachedInput: 0.025},
	"gpt-5-nano":    {Input: 0.05, Output: 0.40, CachedInput: 0.005},
	"gpt-5-chat":    {Input: 1.25, Output: 10.00, CachedInput: 0.125},
	"gpt-4.1":       {Input: 2.00, Output: 8.00, CachedInput: 0.50},
	"gpt-4.1-mini":  {Input: 0.40, Output: 1.60, CachedInput: 0.10},
	"gpt-4.1-nano":  {Input: 0.10, Output: 0.40, CachedInput: 0.025},
	"gpt-4o":        {Input: 2.50, Output: 10.00, CachedInput: 1.25},
	"gpt-4o-mini":   {Input: 0.15, Output: 0.60, CachedInput: 0.075},
	"o3":            {Input: 2.00, Output: 8.00, CachedInput: 0.50},
	"o3-mini":       {Input: 1.10, Output: 4.40, CachedInput: 0.55},
	"o4-mini":       {Input: 1.10, Output: 4.40, CachedInput: 0.275},
	"o1":            {Input: 15.00, Output: 60.00, CachedInput: 7.50},
	"o1-mini":       {Input: 1.10, Output: 4.40, CachedInput: 0.55},
	"gpt-4-turbo":   {Input: 10.00, Output: 30.00},
	"gpt-3.5-turbo": {Input: 0.50, Output: 1.50},
}

// LookupPrice returns the price of model: from overrides first, then from
// Prices; an exact name first, then the longest known name that model
// extends with "-" (so "gpt-4o-mini-2024-07-18" is priced as
// "gpt-4o-mini", not "gpt-4o"). It reports false for an unknown model.
func LookupPrice(model string, overrides map[string]Price) (Price, bool) {
	for _, table := range []map[string]Price{overrides, Prices} {
		if p, ok := table[model]; ok {
			return p, true
		}
	}
	for _, table := range []map[string]Price{overrides, Prices} {
		best := ""
		for name := range table {
			if len(name) > len(best) && strings.HasPrefix(model, name+"-") {
				best = name
			}
		}
		if best != "" {
			return table[best], true
		}
	}
	return Price{}, false
}

// Cost returns the cost in US dollars of one call's usage: uncached prompt
// tokens at the input price, cached prompt tokens at the cached-input price
// (the input price when none is set), completion tokens (reasoning included)
// at the output price. An unknown model costs 0, and so does a cost that is
// not a finite number (a price no workflow passes validation with): no
// store keeps it and no event encodes it.
func Cost(model string, u baton.Usage, overrides map[string]Price) float64 {
	p, ok := LookupPrice(model, overrides)
	if !ok {
		return 0
	}
	cached := u.CachedTokens
	if cached > u.PromptTokens {
		cached = u.PromptTokens
	}
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	cost := (float64(u.PromptTokens-cached)*p.Input +
		float64(cached)*cachedPrice +
		float64(u.CompletionTokens)*p.Output) / 1e6
	if math.IsNaN(cost) || math.IsInf(cost, 0) {
		return 0
	}
	return cost
}
