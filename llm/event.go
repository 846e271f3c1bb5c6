package llm

import (
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton"
)

// StreamEvent returns the transient stream.* event for one delta of the
// message messageID that agent is writing in chat chatID, and false for a
// delta that is not published (usage, which the engine reports in
// chat.usage_summary, and empty deltas). The event's metadata carries the
// chat id (trigger_session_id), the agent (trigger_agent_name) and source
// "llm"; its payload is
//
//	stream.text, stream.reasoning: {"message_id", "agent", "delta"}
//	stream.tool_call:              {"message_id", "agent", "index", "id"?, "name"?, "delta"}
//	stream.completed:              {"message_id", "agent", "finish_reason", "response_id"?}
//
// stream.* events are never stored (DESIGN.md, "Event types").
func StreamEvent(chatID, agent, messageID string, d baton.Delta) (baton.Event, bool) {
	var typ string
	b := make([]byte, 0, 64+len(messageID)+len(agent)+len(d.Text)+len(d.ToolCall.Arguments)+len(d.ToolCall.Name)+len(d.ToolCall.ID))
	b = append(b, `{"message_id":`...)
	b = appendJSONString(b, messageID)
	b = append(b, `,"agent":`...)
	b = appendJSONString(b, agent)
	switch d.Kind {
	case baton.DeltaText, baton.DeltaReasoning:
		if d.Text == "" {
			return baton.Event{}, false
		}
		typ = baton.TypeStreamText
		if d.Kind == baton.DeltaReasoning {
			typ = baton.TypeStreamReasoning
		}
		b = append(b, `,"delta":`...)
		b = appendJSONString(b, d.Text)
	case baton.DeltaToolCall:
		tc := d.ToolCall
		if tc.ID == "" && tc.Name == "" && tc.Arguments == "" {
			return baton.Event{}, false
		}
		typ = baton.TypeStreamToolCall
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(tc.Index), 10)
		if tc.ID != "" {
			b = append(b, `,"id":`...)
			b = appendJSONString(b, tc.ID)
		}
		if tc.Name != "" {
			b = append(b, `,"name":`...)
			b = appendJSONString(b, tc.Name)
		}
		b = append(b, `,"delta":`...)
		b = appendJSONString(b, tc.Arguments)
	case baton.DeltaFinish:
		typ = baton.TypeStreamCompleted
		b = append(b, `,"finish_reason":`...)
		b = appendJSONString(b, d.FinishReason)
		if d.ResponseID != "" {
			b = append(b, `,"response_id":`...)
			b = appendJSONString(b, d.ResponseID)
		}
	default:
		return baton.Event{}, false
	}
	b = append(b, '}')
	return streamEvent(typ, chatID, agent, b), true
}

// StreamStartEvent returns the stream.start event that opens message messageID.
func StreamStartEvent(chatID, agent, messageID string) baton.Event {
	return streamEvent(baton.TypeStreamStart, chatID, agent, simplePayload(messageID, agent, "", ""))
}

// ModelCallEvent returns the stream.start event that opens the message of
// req, naming the call's provider and request parameters for traces:
//
//	{"message_id", "agent", "model"?, "provider"?, "temperature"?, "max_tokens"?, "seed"?}
//
// provider is the provider's name (ProviderName), "" when unknown.
func ModelCallEvent(req *baton.Request, provider string) baton.Event {
	b := make([]byte, 0, 128+len(req.MessageID)+len(req.Agent)+len(req.Params.Model))
	b = append(b, `{"message_id":`...)
	b = appendJSONString(b, req.MessageID)
	b = append(b, `,"agent":`...)
	b = appendJSONString(b, req.Agent)
	if req.Params.Model != "" {
		b = append(b, `,"model":`...)
		b = appendJSONString(b, req.Params.Model)
	}
	if provider != "" {
		b = append(b, `,"provider":`...)
		b = appendJSONString(b, provider)
	}
	if t := req.Params.Temperature; t != nil {
		b = append(b, `,"temperature":`...)
		b = strconv.AppendFloat(b, *t, 'g', -1, 64)
	}
	if req.Params.MaxTokens > 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(req.Params.MaxTokens), 10)
	}
	if s := req.Params.Seed; s != nil {
		b = append(b, `,"seed":`...)
		b = strconv.AppendInt(b, *s, 10)
	}
	return streamEvent(baton.TypeStreamStart, req.ChatID, req.Agent, append(b, '}'))
}

// ProviderName returns p's name for traces (gen_ai.provider.name): what its
// ProviderName method says, or "" when it has none.
func ProviderName(p baton.Provider) string {
	if n, ok := p.(interface{ ProviderName() string }); ok {
		return n.ProviderName()
	}
	return ""
}

// StreamErrorEvent returns the stream.error event that ends message messageID
// when its model call, or this attempt of it, fails. Its payload is
//
//	{"message_id", "agent", "message", "code", "retryable", "will_retry", "void": true}
//
// message is err's client-safe message, code its machine code (StreamCode),
// retryable whether the failure is of a kind that is retried, will_retry
// whether the call is sent again now — the retry streams under a new
// message id. void is always true: nothing of a failed attempt is recorded,
// so a client drops the deltas it showed for messageID.
func StreamErrorEvent(chatID, agent, messageID string, err error, willRetry bool) baton.Event {
	retryable := willRetry
	var pe *baton.ProviderError
	if errors.As(err, &pe) {
		retryable = retryable || Retryable(pe)
	}
	b := simplePayload(messageID, agent, "message", baton.ErrorMessage(err))
	b = b[:len(b)-1]
	b = append(b, `,"code":`...)
	b = appendJSONString(b, StreamCode(err))
	b = append(b, `,"retryable":`...)
	b = strconv.AppendBool(b, retryable)
	b = append(b, `,"will_retry":`...)
	b = strconv.AppendBool(b, willRetry)
	b = append(b, `,"void":true}`...)
	return streamEvent(baton.TypeStreamError, chatID, agent, b)
}

func simplePayload(messageID, agent, key, value string) []byte {
	b := make([]byte, 0, 48+len(messageID)+len(agent)+len(value))
	b = append(b, `{"message_id":`...)
	b = appendJSONString(b, messageID)
	b = append(b, `,"agent":`...)
	b = appendJSONString(b, agent)
	if key != "" {
		b = append(b, ',')
		b = appendJSONString(b, key)
		b = append(b, ':')
		b = appendJSONString(b, value)
	}
	return append(b, '}')
}

func streamEvent(typ, chatID, agent string, payload []byte) baton.Event {
	return baton.Event{
		ID:        baton.NewID(),
		Type:      typ,
		Timestamp: time.Now().UnixMilli(),
		Metadata: baton.Metadata{
			TriggerSessionID: chatID,
			TriggerAgentName: agent,
			Source:           baton.SourceLLM,
		},
		Payload: payload,
	}
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does; <, > and & are escaped so the text is safe in HTML.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
