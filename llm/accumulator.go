// Package llm holds what every model provider shares: the accumulator that
// turns a stream of deltas into a turn's final text and tool calls, the
// transient stream.* events built from deltas, provider errors by HTTP
// status, and model pricing.
//
// The providers themselves live in subpackages: llm/openai for any
// OpenAI-compatible endpoint, llm/scripted for offline runs.
package llm

import (
	"context"
	"log/slog"
	"strings"

	"github.com/batonhq/baton"
)

// FallbackText is the final text of a turn that made tool calls and said
// nothing, when the tools' names are unknown.
const FallbackText = "Action completed (Tool Call)"

// Accumulator builds a turn from its deltas (spec/accumulator-pattern.md):
// the final text is exactly the concatenation of the text deltas, tool-call
// arguments are assembled per index, and nothing else — in particular no
// provider's final message object — ever becomes text. The zero value is
// ready to use; an Accumulator is not safe for concurrent use.
type Accumulator struct {
	text      strings.Builder
	reasoning strings.Builder
	calls     []callBuf
	finish    string
	usage     baton.Usage
	deltas    int
}

type callBuf struct {
	index int // the provider's index
	id    string
	name  string
	args  []byte
}

// Add takes one delta. Empty deltas (no text, no tool-call data) are ignored.
// A DeltaRetry voids everything taken before it: the call starts again from
// scratch.
func (a *Accumulator) Add(d baton.Delta) {
	switch d.Kind {
	case baton.DeltaRetry:
		*a = Accumulator{}
		return
	case baton.DeltaText:
		if d.Text == "" {
			return
		}
		a.text.WriteString(d.Text)
	case baton.DeltaReasoning:
		if d.Text == "" {
			return
		}
		a.reasoning.WriteString(d.Text)
	case baton.DeltaToolCall:
		tc := d.ToolCall
		if tc.ID == "" && tc.Name == "" && tc.Arguments == "" {
			return
		}
		c := a.call(tc)
		if c.id == "" {
			c.id = tc.ID
		}
		if c.name == "" {
			c.name = tc.Name
		}
		c.args = append(c.args, tc.Arguments...)
	case baton.DeltaFinish:
		if d.FinishReason == "" {
			return
		}
		a.finish = d.FinishReason
	case baton.DeltaUsage:
		// A call's usage is cumulative: the last report is the total (some
		// servers report it in more than one chunk).
		a.usage = d.Usage
	default:
		return
	}
	a.deltas++
}

// call returns the buffer for a tool-call fragment. A fragment belongs to the
// last call with its index, unless it carries a different id: some servers
// (older Ollama) give every parallel call index 0, and the id tells them apart.
func (a *Accumulator) call(tc baton.ToolCallDelta) *callBuf {
	for i := len(a.calls) - 1; i >= 0; i-- {
		c := &a.calls[i]
		if c.index != tc.Index {
			continue
		}
		if tc.ID == "" || c.id == "" || c.id == tc.ID {
			return c
		}
		break
	}
	a.calls = append(a.calls, callBuf{index: tc.Index})
	return &a.calls[len(a.calls)-1]
}

// Deltas returns how many non-empty deltas were added.
func (a *Accumulator) Deltas() int { return a.deltas }

// Text returns the concatenation of the text deltas so far.
func (a *Accumulator) Text() string { return a.text.String() }

// Reasoning returns the concatenation of the reasoning deltas so far.
func (a *Accumulator) Reasoning() string { return a.reasoning.String() }

// FinishReason returns the last finish reason seen, or "".
func (a *Accumulator) FinishReason() string { return a.finish }

// Usage returns the last usage reported: the call's total.
func (a *Accumulator) Usage() baton.Usage { return a.usage }

// ToolCalls returns the assembled tool calls in the order they started.
func (a *Accumulator) ToolCalls() []baton.ToolCall {
	if len(a.calls) == 0 {
		return nil
	}
	out := make([]baton.ToolCall, len(a.calls))
	for i := range a.calls {
		c := &a.calls[i]
		out[i] = baton.ToolCall{ID: c.id, Name: c.name, Arguments: string(c.args)}
	}
	return out
}

// FinalText returns the turn's text: the concatenated text deltas when there
// are any (whitespace included, exactly as streamed); for a turn with only
// tool calls, a fallback naming them, like
// "Action completed (Tool Call: get_time)"; and "" for a turn with neither.
func (a *Accumulator) FinalText() string {
	if t := a.text.String(); strings.TrimSpace(t) != "" || len(a.calls) == 0 {
		return t
	}
	return FallbackFor(a.ToolCalls())
}

// FallbackFor returns the final text of a tool-only turn that made calls.
func FallbackFor(calls []baton.ToolCall) string {
	var names []string
	for _, c := range calls {
		if c.Name != "" {
			names = append(names, c.Name)
		}
	}
	switch len(names) {
	case 0:
		return FallbackText
	case 1:
		return "Action completed (Tool Call: " + names[0] + ")"
	default:
		return "Action completed (Tool Calls: " + strings.Join(names, ", ") + ")"
	}
}

// CheckFinal compares a provider's final message content with the
// accumulated text and logs a warning when they disagree. It never changes
// the result: the deltas win, and the provider's object never becomes text.
// It reports whether they agreed.
func (a *Accumulator) CheckFinal(ctx context.Context, log *slog.Logger, providerText string) bool {
	if providerText == a.text.String() {
		return true
	}
	if log == nil {
		log = slog.Default()
	}
	log.LogAttrs(ctx, slog.LevelWarn, "provider final message disagrees with streamed deltas; using the deltas",
		slog.Int("delta_text_len", a.text.Len()),
		slog.Int("final_text_len", len(providerText)),
		slog.Int("tool_calls", len(a.calls)))
	return false
}

// Reset empties the accumulator for the next turn, keeping its buffers' memory
// where it can.
func (a *Accumulator) Reset() {
	a.text.Reset()
	a.reasoning.Reset()
	a.calls = a.calls[:0]
	a.finish = ""
	a.usage = baton.Usage{}
	a.deltas = 0
}
