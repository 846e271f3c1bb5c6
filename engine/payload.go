package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/batonhq/baton"
)

// Interaction types of tool calls the model did not make.
const (
	interactionAutoTool  = "auto_tool" // the runtime invoked the UI tool of an auto_tool_mode agent
	interactionLifecycle = "lifecycle" // a Lifecycle_Tool at its trigger
)

// systemAgent is the sender of the runtime's own messages (the resume
// signal, structured-output feedback).
const systemAgent = "system"

// ---- decoding for the fold ------------------------------------------------------
//
// The fold (state.apply) runs over every recorded event of a chat when it is
// resumed, so it decodes payloads with a small scanner instead of
// encoding/json: it reads only the members the fold needs, and copies only
// the strings it keeps. The payloads are the engine's own (json.Marshal of
// the root package's payload types: exact lower-case keys, valid UTF-8); whenever the
// scanner meets anything else — an escaped or upper-case key, a value of an
// unexpected type, a lone surrogate, invalid UTF-8 — the decoder starts over
// with encoding/json, so the result is always what json.Unmarshal gives.

// decode fills p from data with the scanner: set stores one member's value
// and reports whether it could. On anything the scanner does not handle it
// zeroes p and uses json.Unmarshal. (set is a closure over p, so that p
// stays on the caller's stack.)
func decode[P any](data []byte, p *P, set func(key, val []byte) bool) {
	if members(data, set) {
		return
	}
	q := new(P) // not p itself: that would put every p on the heap
	_ = json.Unmarshal(data, q)
	*p = *q
}

// otherKey reports whether a member the decoder does not read may be
// skipped: encoding/json matches keys without regard to case, so a key with
// an upper-case or non-ASCII letter might be a field in disguise.
func otherKey(key []byte) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return false
		}
	}
	return true
}

func decodeSelectSpeaker(data []byte, p *baton.SelectSpeakerPayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "agent":
			return n.str(v, &p.Agent)
		case "source":
			return n.str(v, &p.Source)
		case "turn_key":
			return jsonString(v, &p.TurnKey)
		case "turn_index":
			return jsonInt(v, &p.TurnIndex)
		case "prompt":
			return jsonString(v, &p.Prompt)
		}
		return otherKey(k)
	})
}

func decodeText(data []byte, p *baton.TextPayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "agent":
			return n.str(v, &p.Agent)
		case "content":
			return jsonString(v, &p.Content)
		case "agent_message_id":
			return jsonString(v, &p.AgentMessageID)
		case "has_tool_calls":
			return jsonBool(v, &p.HasToolCalls)
		case "tool_only":
			return jsonBool(v, &p.ToolOnly)
		case "feedback":
			return jsonBool(v, &p.Feedback)
		case "input_id":
			return jsonString(v, &p.InputID)
		case "event_id":
			return jsonString(v, &p.EventID)
		case "answers_tool_call_id":
			return jsonString(v, &p.AnswersToolCallID)
		}
		return otherKey(k)
	})
}

func decodeToolCall(data []byte, p *baton.ToolCallPayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "agent":
			return n.str(v, &p.Agent)
		case "tool_name":
			return n.str(v, &p.ToolName)
		case "tool_call_id":
			return jsonString(v, &p.ToolCallID)
		case "arguments":
			return jsonRaw(v, &p.Arguments)
		case "agent_message_id":
			return jsonString(v, &p.AgentMessageID)
		case "ui_event_id":
			return jsonString(v, &p.UIEventID)
		case "interaction_type":
			return n.str(v, &p.InteractionType)
		case "transfer":
			return jsonBool(v, &p.Transfer)
		case "lifecycle_key":
			return jsonString(v, &p.LifecycleKey)
		case "pending_kind":
			return n.str(v, &p.PendingKind)
		case "event_id":
			return jsonString(v, &p.EventID)
		}
		return otherKey(k)
	})
}

func decodeToolResponse(data []byte, p *baton.ToolResponsePayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "tool_name":
			return n.str(v, &p.ToolName)
		case "tool_call_id":
			return jsonString(v, &p.ToolCallID)
		case "content":
			return jsonString(v, &p.Content)
		case "payload": // an auto-tool's response, shown to the model
			return jsonRaw(v, &p.Payload)
		case "interaction_type":
			return n.str(v, &p.InteractionType)
		case "input_id":
			return jsonString(v, &p.InputID)
		case "event_id":
			return jsonString(v, &p.EventID)
		}
		return otherKey(k)
	})
}

func decodeStructured(data []byte, p *baton.StructuredOutputPayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "model_name":
			return n.str(v, &p.ModelName)
		case "data":
			return jsonRaw(v, &p.Data)
		}
		return otherKey(k)
	})
}

func decodeContext(data []byte, p *baton.ContextUpdatedPayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "variables":
			return jsonRawMap(v, &p.Variables)
		}
		return otherKey(k)
	})
}

func decodeHandoff(data []byte, p *baton.HandoffPayload, n names) {
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "from":
			return n.str(v, &p.From)
		case "to":
			return n.str(v, &p.To)
		case "transition_target":
			return n.str(v, &p.TransitionTarget)
		case "prompt":
			return jsonString(v, &p.Prompt)
		}
		return otherKey(k)
	})
}

func decodeInputRequest(data []byte, p *baton.InputRequestPayload, n names) {
	var rid []byte // request_id, read only for a tool's question: the fold needs no other's
	decode(data, p, func(k, v []byte) bool {
		switch string(k) {
		case "agent":
			return n.str(v, &p.Agent)
		case "request_id":
			rid = v
			return true
		case "tool_call_id":
			return jsonString(v, &p.ToolCallID)
		case "tool_name":
			return n.str(v, &p.ToolName)
		case "round":
			return jsonInt(v, &p.Round)
		case "resume":
			return jsonRaw(v, &p.Resume)
		}
		return otherKey(k)
	})
	if p.ToolCallID != "" && p.RequestID == "" && rid != nil && !jsonString(rid, &p.RequestID) {
		q := new(baton.InputRequestPayload)
		_ = json.Unmarshal(data, q)
		*p = *q
	}
}

// members calls fn with the key (as written, without quotes) and the raw
// value of each member of the JSON object data, in order. It returns false
// when data is not an object it can read — or fn returned false — and the
// caller must decode it some other way.
func members(data []byte, fn func(key, val []byte) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return false
		}
		end := stringEnd(data, i)
		if end < 0 {
			return false
		}
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false // an escaped key: leave it to encoding/json
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		vend := valueEnd(data, i)
		if vend < 0 {
			return false
		}
		if !fn(key, data[i:vend]) {
			return false
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the JSON string starting at i, or -1.
// A quote ends the string unless an odd number of backslashes precede it.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		n := 0
		for p := j - 1; p > i && data[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
	return -1
}

// valueEnd returns the index just past the JSON value starting at i, or -1.
// It checks the nesting of objects, arrays and strings, not every token: the
// values it skips were valid JSON when they were recorded, and any value the
// fold keeps is checked by the function that reads it.
func valueEnd(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end := stringEnd(data, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// names interns the short strings a chat's events repeat — agent and tool
// names, sources, targets — so that a fold allocates each once.
type names map[string]string

// str is jsonString, interning plain short strings (a nil names does not).
func (n names) str(v []byte, s *string) bool {
	if len(v) < 2 || len(v) > 66 || v[0] != '"' || v[len(v)-1] != '"' || n == nil {
		return jsonString(v, s)
	}
	body := v[1 : len(v)-1]
	if x, ok := n[string(body)]; ok {
		*s = x
		return true
	}
	for _, c := range body {
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return jsonString(v, s)
		}
	}
	x := string(body)
	if len(n) < 512 {
		n[x] = x
	}
	*s = x
	return true
}

// jsonString stores the JSON string v in *s; null leaves *s as it is, as
// encoding/json does.
func jsonString(v []byte, s *string) bool {
	if string(v) == "null" {
		return true
	}
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	body := v[1 : len(v)-1]
	for _, c := range body {
		if c < 0x20 {
			return false // a raw control character: not JSON
		}
		if c == '\\' || c >= utf8.RuneSelf {
			return unquote(body, s)
		}
	}
	*s = string(body)
	return true
}

// unquote decodes a JSON string's body with escapes or non-ASCII text. It
// gives up (false) on what encoding/json would replace: invalid UTF-8 and
// lone surrogates.
func unquote(body []byte, s *string) bool {
	var b strings.Builder
	b.Grow(len(body))
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c < 0x20:
			return false
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			b.Write(body[i : i+size])
			i += size
		case c != '\\':
			b.WriteByte(c)
			i++
		default:
			if i+1 >= len(body) {
				return false
			}
			switch body[i+1] {
			case '"', '\\', '/':
				b.WriteByte(body[i+1])
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := hex4(body, i+2)
				if !ok {
					return false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(body) && body[i] == '\\' && body[i+1] == 'u' {
						r2, ok = hex4(body, i+2)
					}
					if !ok {
						return false
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return false
					}
					i += 6
				}
				b.WriteRune(r)
				continue
			default:
				return false
			}
			i += 2
		}
	}
	*s = b.String()
	return true
}

func hex4(body []byte, i int) (rune, bool) {
	if i+4 > len(body) {
		return 0, false
	}
	var r rune
	for _, c := range body[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// jsonBool stores a JSON boolean; null leaves *b as it is.
func jsonBool(v []byte, b *bool) bool {
	switch string(v) {
	case "true":
		*b = true
	case "false":
		*b = false
	case "null":
	default:
		return false
	}
	return true
}

// jsonInt stores a JSON integer of up to 18 digits; null leaves *n as it is.
func jsonInt(v []byte, n *int) bool {
	if string(v) == "null" {
		return true
	}
	d, neg := v, false
	if len(d) > 0 && d[0] == '-' {
		d, neg = d[1:], true
	}
	if len(d) == 0 || len(d) > 18 || len(d) > 1 && d[0] == '0' {
		return false
	}
	x := 0
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
		x = x*10 + int(c-'0')
	}
	if neg {
		x = -x
	}
	*n = x
	return true
}

// jsonRaw stores a copy of the value, as json.RawMessage does (null too).
func jsonRaw(v []byte, m *json.RawMessage) bool {
	*m = append(json.RawMessage(nil), v...)
	return true
}

// jsonRawMap stores an object of raw values; null leaves *m as it is.
func jsonRawMap(v []byte, m *map[string]json.RawMessage) bool {
	if string(v) == "null" {
		return true
	}
	if *m == nil {
		*m = map[string]json.RawMessage{}
	}
	out := *m
	return members(v, func(key, val []byte) bool {
		for _, c := range key {
			if c < 0x20 || c >= utf8.RuneSelf && !utf8.Valid(key) {
				return false // encoding/json would mend it
			}
		}
		out[string(key)] = append(json.RawMessage(nil), val...)
		return true
	})
}
