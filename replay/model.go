package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"iter"
	"strconv"
	"sync"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
)

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
	calls    []chatlog.Call
	next     int
	diverged *Divergence
	served   int
}

// NewRecorded returns a provider serving calls, then fallback.
func NewRecorded(calls []chatlog.Call, fallback baton.Provider) *Recorded {
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
func (p *Recorded) take(req *baton.Request) (chatlog.Call, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.diverged != nil {
		return chatlog.Call{}, false
	}
	if p.next >= len(p.calls) {
		p.diverged = &Divergence{Call: p.next, Agent: req.Agent, Reason: "the recording has no more model calls"}
		return chatlog.Call{}, false
	}
	c := p.calls[p.next]
	switch {
	case c.Agent != req.Agent:
		p.diverged = &Divergence{Call: p.next, Agent: req.Agent, Want: c.Agent, Reason: "the recording's next model call is " + c.Agent + "'s"}
		return chatlog.Call{}, false
	case c.Digest != "" && c.Digest != baton.RequestDigest(req):
		p.diverged = &Divergence{Call: p.next, Agent: req.Agent, Want: c.Agent,
			Reason: "the request differs from the recorded one (the agent's prompt, the history it saw, its tools or its model settings changed)"}
		return chatlog.Call{}, false
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
