package chatlog

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"

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
