package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"iter"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/batonhq/baton"
)

// Call is one model call of a recorded chat: who was asked, the digest of
// what it was asked (baton.RequestDigest; empty in chats recorded before
// the engine wrote it) and what it answered.
type Call struct {
	Sequence int64 // of the call's chat.text
	Agent    string
	Digest   string
	// Text is the reply's text; for a structured output, its JSON. Empty
	// for a reply of tool calls only.
	Text string
	// Structured is true when Text is the agent's structured output.
	Structured bool
	ToolCalls  []baton.ToolCall
	Usage      baton.Usage
}

// Calls returns the model calls of a recorded chat, in the order they
// were made. An interrupted call (the person's message stopped it) is
// left out: its reply was never whole.
func (f *File) Calls() []Call {
	type pending struct {
		call  *Call
		order int
	}
	byID := map[string]*pending{}
	var order []string
	for i := range f.Records {
		r := &f.Records[i]
		switch r.Type {
		case baton.TypeChatText:
			var p baton.TextPayload
			if json.Unmarshal(r.Payload, &p) != nil || p.AgentMessageID == "" || p.Agent == "user" || p.Interrupted {
				continue
			}
			c := &Call{Sequence: r.Sequence, Agent: p.Agent, Text: p.Content}
			if p.ToolOnly {
				c.Text = "" // the fallback text the engine wrote, not the model's
			}
			c.Structured = r.Flags.StructuredCapable && isJSONObject(c.Text)
			if _, dup := byID[p.AgentMessageID]; !dup {
				order = append(order, p.AgentMessageID)
			}
			byID[p.AgentMessageID] = &pending{call: c, order: len(order)}
		case baton.TypeChatToolCall:
			var p baton.ToolCallPayload
			if json.Unmarshal(r.Payload, &p) != nil || p.AgentMessageID == "" || p.InteractionType == "auto_tool" || p.LifecycleKey != "" {
				continue
			}
			if pc := byID[p.AgentMessageID]; pc != nil {
				args := "{}"
				if len(p.Arguments) > 0 {
					var b bytes.Buffer
					if json.Compact(&b, p.Arguments) == nil {
						args = b.String()
					}
				}
				pc.call.ToolCalls = append(pc.call.ToolCalls, baton.ToolCall{ID: p.ToolCallID, Name: p.ToolName, Arguments: args})
			}
		case baton.TypeChatUsageSummary:
			var p baton.UsageSummaryPayload
			if json.Unmarshal(r.Payload, &p) != nil {
				continue
			}
			if pc := byID[p.AgentMessageID]; pc != nil {
				pc.call.Digest = p.RequestDigest
				pc.call.Usage = baton.Usage{PromptTokens: p.PromptTokens, CompletionTokens: p.CompletionTokens, CachedTokens: p.CachedTokens, ReasoningTokens: p.ReasoningTokens}
			}
		}
	}
	calls := make([]Call, 0, len(order))
	for _, id := range order {
		calls = append(calls, *byID[id].call)
	}
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].Sequence < calls[j].Sequence })
	return calls
}

func isJSONObject(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}

// Divergence says where a Recorded provider stopped serving the recorded
// replies.
type Divergence struct {
	// Call is the index of the recorded call the request was compared
	// with (len(calls) when the recording had no more calls).
	Call int
	// Agent is the agent the request was for; Want the agent (and digest)
	// the recording had next.
	Agent, Want string
	// Reason says what differed.
	Reason string
}

// Recorded is a model provider that answers with a recorded chat's
// replies, in order, while the requests it gets match the recorded ones:
// the same agent as the next recorded call and, when the recording has
// one, the same request digest. From the first request that does not
// match on, every call goes to Fallback: the conversation has left the
// recording. It is safe for concurrent use, but it serves one chat.
type Recorded struct {
	Fallback baton.Provider

	mu       sync.Mutex
	calls    []Call
	next     int
	diverged *Divergence
	served   int
}

// NewRecorded returns a provider serving calls, then fallback.
func NewRecorded(calls []Call, fallback baton.Provider) *Recorded {
	return &Recorded{Fallback: fallback, calls: calls}
}

// ProviderName is the provider's name in traces.
func (p *Recorded) ProviderName() string { return "baton.replay" }

// Diverged returns where the provider left the recording, or nil while
// every request matched.
func (p *Recorded) Diverged() *Divergence {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.diverged == nil {
		return nil
	}
	d := *p.diverged
	return &d
}

// Served returns how many calls were answered from the recording.
func (p *Recorded) Served() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.served
}

// Stream answers req from the recording or the fallback.
func (p *Recorded) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	c, ok := p.take(req)
	if !ok {
		if p.Fallback == nil {
			return func(yield func(baton.Delta, error) bool) {
				yield(baton.Delta{}, baton.Errorf(baton.EUNAVAILABLE, "replay: agent %s's request left the recording and no fallback model is set", req.Agent))
			}
		}
		return p.Fallback.Stream(ctx, req)
	}
	return func(yield func(baton.Delta, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(baton.Delta{}, err)
			return
		}
		if c.Text != "" && !yield(baton.Delta{Kind: baton.DeltaText, Text: c.Text}, nil) {
			return
		}
		for i, tc := range c.ToolCalls {
			id := replayCallID(req.ChatID, req.MessageID, i)
			if !yield(baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{Index: i, ID: id, Name: tc.Name, Arguments: tc.Arguments}}, nil) {
				return
			}
		}
		finish := "stop"
		if len(c.ToolCalls) > 0 {
			finish = "tool_calls"
		}
		if !yield(baton.Delta{Kind: baton.DeltaFinish, FinishReason: finish, ResponseID: req.MessageID}, nil) {
			return
		}
		yield(baton.Delta{Kind: baton.DeltaUsage, Usage: c.Usage}, nil)
	}
}

// take returns the recorded call that answers req, if the conversation
// still follows the recording.
func (p *Recorded) take(req *baton.Request) (Call, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.diverged != nil {
		return Call{}, false
	}
	if p.next >= len(p.calls) {
		p.diverged = &Divergence{Call: p.next, Agent: req.Agent, Reason: "the recording has no more model calls"}
		return Call{}, false
	}
	c := p.calls[p.next]
	switch {
	case c.Agent != req.Agent:
		p.diverged = &Divergence{Call: p.next, Agent: req.Agent, Want: c.Agent, Reason: "the recording's next model call is " + c.Agent + "'s"}
		return Call{}, false
	case c.Digest != "" && c.Digest != baton.RequestDigest(req):
		p.diverged = &Divergence{Call: p.next, Agent: req.Agent, Want: c.Agent,
			Reason: "the request differs from the recorded one (the agent's prompt, the history it saw, its tools or its model settings changed)"}
		return Call{}, false
	}
	p.next++
	p.served++
	return c, true
}

// replayCallID is a tool call's id in a replay: fresh for each chat and
// call (a recorded id belongs to the recorded chat), the same on every run.
func replayCallID(chatID, msgID string, i int) string {
	h := sha256.Sum256([]byte(chatID + "\x00" + msgID + "\x00" + strconv.Itoa(i)))
	return "call_" + hex.EncodeToString(h[:12])
}
