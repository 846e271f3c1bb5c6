package baton

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Event types. chat.* events are conversation facts, persisted with a
// sequence; stream.* events are transient model progress, never persisted;
// the rest are inputs and environment events. A chat.* payload's "kind" is
// the part after "chat.".
const (
	TypeChatText                  = "chat.text"
	TypeChatSelectSpeaker         = "chat.select_speaker"
	TypeChatToolCall              = "chat.tool_call"
	TypeChatToolResponse          = "chat.tool_response"
	TypeChatStructuredOutputReady = "chat.structured_output_ready"
	TypeChatInputRequest          = "chat.input_request"
	TypeChatContextUpdated        = "chat.context_updated"
	TypeChatHandoff               = "chat.handoff"
	TypeChatUsageSummary          = "chat.usage_summary"
	TypeChatWorkflowResumed       = "chat.workflow_resumed"
	TypeChatRunComplete           = "chat.run_complete"
	TypeChatError                 = "chat.error"
	// TypeChatNotice is a status line for the person while something
	// recovers on its own (a slow model being retried, an interrupted tool
	// call being recovered). It is recorded like every chat.* event, so a
	// client that reconnects sees it too, but it is no message: it never
	// enters the model's history, and a UI shows it until the next event
	// of the chat replaces it. Its payload is a NoticePayload.
	TypeChatNotice = "chat.notice"

	TypeStreamStart     = "stream.start"
	TypeStreamText      = "stream.text"
	TypeStreamReasoning = "stream.reasoning"
	TypeStreamToolCall  = "stream.tool_call"
	TypeStreamCompleted = "stream.completed"
	TypeStreamError     = "stream.error"

	TypeUserQuery               = "user_query"
	TypeUIToolResponse          = "ui.tool.response"
	TypeSessionCreated          = "session.created"
	TypeSessionUpdated          = "session.updated"
	TypeSessionDeleted          = "session.deleted"
	TypeBackgroundTaskCompleted = "background_task.completed"
	TypeBackgroundTaskFailed    = "background_task.failed"
	TypeToolExecuted            = "tool.executed"
	TypeToolError               = "tool.error"
)

// Notice codes, the values of NoticePayload.Code.
const (
	// NoticeModelRetry: the model call failed or stalled and is tried again.
	NoticeModelRetry = "model_retry"
	// NoticeToolRecovery: a tool call interrupted by a crash or a lost
	// owner is run again under the same effect key.
	NoticeToolRecovery = "tool_recovery"
)

// NoticePayload is the payload of a chat.notice event.
type NoticePayload struct {
	Kind        string `json:"kind"` // always "notice"
	Code        string `json:"code"` // one of the Notice* codes
	Message     string `json:"message"`
	Agent       string `json:"agent,omitempty"`
	Attempt     int    `json:"attempt,omitempty"`      // the attempt about to start, from 2
	MaxAttempts int    `json:"max_attempts,omitempty"` // how many attempts there will be at most
	Tool        string `json:"tool,omitempty"`         // tool_recovery: the tool's name
	ToolCallID  string `json:"tool_call_id,omitempty"` // tool_recovery: the interrupted call
}

// Event sources, the values of Metadata.Source.
const (
	SourceUser   = "user"
	SourceTool   = "tool"
	SourceEnv    = "env"
	SourceLLM    = "llm"
	SourceSystem = "system"
)

// Limits on the identifying fields of an event, so that a hostile client
// cannot make the bus or the store keep arbitrarily large keys.
const (
	MaxEventIDLen   = 128
	MaxEventTypeLen = 128
)

// IsChatType reports whether typ is a persisted conversation fact (chat.*).
func IsChatType(typ string) bool { return strings.HasPrefix(typ, "chat.") }

// IsStreamType reports whether typ is a transient streaming event (stream.*).
func IsStreamType(typ string) bool { return strings.HasPrefix(typ, "stream.") }

// Event is the one thing that flows through baton (spec/environment-events.md
// §2.3). Its JSON form is
//
//	{"id": "…", "type": "…", "timestamp": 1700000000000, "metadata": {…}, "payload": …}
//
// plus "chat_id" (equal to metadata.trigger_session_id) when the event belongs
// to a chat and "sequence" once the store has recorded it.
type Event struct {
	// ID is unique per event (a UUID for events baton creates); the bus drops
	// an ID it has already seen within its idempotency window.
	ID string
	// Type names what happened, for example TypeUserQuery or "webhook.received".
	Type string
	// Timestamp is when the event was created, in Unix milliseconds.
	Timestamp int64
	// Metadata links the event to a chat, an agent and a source.
	Metadata Metadata
	// Payload is the event-specific data as raw JSON; nil means null.
	Payload json.RawMessage
	// Sequence is the chat's sequence number the store gave this event; 0
	// until it is recorded. Only chat.* events are recorded.
	Sequence int64
}

// Metadata is an event's routing and provenance data. Keys beyond the named
// ones are kept in Extra and survive a JSON round trip.
type Metadata struct {
	TriggerSessionID string // the chat this event belongs to; "" for none
	TriggerAgentID   string
	TriggerAgentName string
	EnvName          string
	Source           string // one of the Source* constants, or ""
	// App and User are the tenant scope of an input event (see NewInput
	// and Scope): every store call of the run it starts uses them. Their
	// JSON keys are "app" and "user", the keys the scope had when it was
	// kept in Extra, so events stored or streamed before these fields
	// existed decode into them unchanged.
	App  string
	User string
	// TraceParent is the W3C traceparent of the request that brought an
	// input (engine.WithTraceParent), so that the run's trace links to it.
	// Its JSON key is "traceparent", as when it was kept in Extra.
	TraceParent string
	// Extra holds any other keys as raw JSON values.
	Extra map[string]json.RawMessage
}

// NewEvent returns an event of the given type with a fresh time-ordered UUID
// and the current time. payload must be valid JSON or nil.
func NewEvent(typ string, md Metadata, payload json.RawMessage) Event {
	return Event{
		ID:        NewID(),
		Type:      typ,
		Timestamp: time.Now().UnixMilli(),
		Metadata:  md,
		Payload:   payload,
	}
}

// The random bits of ids come from a pool that google/uuid refills from
// crypto/rand 256 bytes at a time, instead of a read of crypto/rand per id: a
// turn makes a dozen ids. Ids are unique, not secret, so the pool costs no
// safety. EnableRandPool must run before any id is made, hence init.
func init() { uuid.EnableRandPool() }

// NewID returns a fresh time-ordered (version 7) UUID string. Time order keeps
// store indexes on event ids append-mostly.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only when the system's random source fails.
		return uuid.NewString()
	}
	return id.String()
}

// ChatID returns the chat the event belongs to (metadata.trigger_session_id).
func (e *Event) ChatID() string { return e.Metadata.TriggerSessionID }

// Validate checks the fields every event must have. The error is an EINVALID
// *Error whose message names the field.
func (e *Event) Validate() error {
	if err := validateID("id", e.ID); err != nil {
		return err
	}
	if err := ValidateType(e.Type); err != nil {
		return err
	}
	if e.Timestamp < 0 {
		return Errorf(EINVALID, "timestamp: must not be negative")
	}
	if err := validateSource(e.Metadata.Source); err != nil {
		return err
	}
	if e.Metadata.TriggerSessionID != "" {
		if err := validateID("metadata.trigger_session_id", e.Metadata.TriggerSessionID); err != nil {
			return err
		}
	}
	if err := validateTexts("metadata.trigger_agent_id", e.Metadata.TriggerAgentID,
		"metadata.trigger_agent_name", e.Metadata.TriggerAgentName, "metadata.env_name", e.Metadata.EnvName,
		"metadata.app", e.Metadata.App, "metadata.user", e.Metadata.User, "metadata.traceparent", e.Metadata.TraceParent); err != nil {
		return err
	}
	for k, v := range e.Metadata.Extra {
		if err := ValidateText("metadata key "+strconv.Quote(k), k); err != nil {
			return err
		}
		if err := validateJSONText("metadata."+k, v); err != nil {
			return err
		}
	}
	// encoding/json accepts invalid UTF-8 inside strings; PostgreSQL's text
	// refuses it and SQLite would keep it: validateJSONText refuses it for both.
	return validateJSONText("payload", e.Payload)
}

// ValidateText checks a free-text field that a store keeps as text: it must
// be valid UTF-8 without a NUL character. PostgreSQL's text type refuses
// both and SQLite keeps them, so the check makes the two stores accept and
// refuse the same values. The error is EINVALID and names field.
func ValidateText(field, s string) error {
	if !utf8.ValidString(s) {
		return Errorf(EINVALID, "%s: not valid UTF-8", field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return Errorf(EINVALID, "%s: NUL character not allowed", field)
	}
	return nil
}

// ValidateJSONB checks raw JSON (already known to be valid JSON) for what
// PostgreSQL's jsonb refuses although encoding/json accepts it: invalid
// UTF-8, the escape \u0000 (jsonb cannot hold a NUL character) and a UTF-16
// surrogate escape that is not half of a pair. Stores check the context
// snapshot with it, so that both stores accept and refuse the same values.
// The error is EINVALID and names field.
func ValidateJSONB(field string, b []byte) error {
	if !utf8.Valid(b) {
		return Errorf(EINVALID, "%s: not valid UTF-8", field)
	}
	// In valid JSON a backslash appears only inside a string, where it
	// starts an escape; most values have none.
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i+1 < len(b); {
		if b[i+1] != 'u' {
			i += 2 // a one-character escape, possibly \\ itself
		} else {
			r := hex4(b[i+2:])
			switch {
			case r == 0:
				return Errorf(EINVALID, "%s: the escape \\u0000 is not allowed (a NUL character)", field)
			case r >= 0xd800 && r < 0xdc00: // a high surrogate: a low one must follow
				if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					if lo := hex4(b[i+8:]); lo >= 0xdc00 && lo < 0xe000 {
						i += 12
						break
					}
				}
				return Errorf(EINVALID, "%s: unpaired UTF-16 surrogate escape", field)
			case r >= 0xdc00 && r < 0xe000:
				return Errorf(EINVALID, "%s: unpaired UTF-16 surrogate escape", field)
			default:
				i += 6
			}
		}
		j := bytes.IndexByte(b[min(i, len(b)):], '\\')
		if j < 0 {
			break
		}
		i += j
	}
	return nil
}

// hex4 returns the value of the four hex digits at the start of b, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// ValidateType checks an event type: 1 to MaxEventTypeLen characters of
// letters, digits, '_', '-', ':' and '.'.
func ValidateType(typ string) error {
	if typ == "" {
		return Errorf(EINVALID, "type: required")
	}
	if len(typ) > MaxEventTypeLen {
		return Errorf(EINVALID, "type: longer than %d characters", MaxEventTypeLen)
	}
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return Errorf(EINVALID, "type: character %q not allowed (use letters, digits, '_', '-', ':' and '.')", c)
		}
	}
	return nil
}

func validateID(field, id string) error {
	if id == "" {
		return Errorf(EINVALID, "%s: required", field)
	}
	if len(id) > MaxEventIDLen {
		return Errorf(EINVALID, "%s: longer than %d characters", field, MaxEventIDLen)
	}
	if !utf8.ValidString(id) {
		return Errorf(EINVALID, "%s: not valid UTF-8", field)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return Errorf(EINVALID, "%s: control characters not allowed", field)
		}
	}
	return nil
}

var sources = []string{SourceUser, SourceTool, SourceEnv, SourceLLM, SourceSystem}

func validateSource(s string) error {
	if s == "" || slices.Contains(sources, s) {
		return nil
	}
	return Errorf(EINVALID, "metadata.source: %q is not one of %s", s, strings.Join(sources, ", "))
}

// MarshalJSON writes the event's JSON form.
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(128 + len(e.Payload))
	b.WriteString(`{"id":`)
	writeJSONString(&b, e.ID)
	b.WriteString(`,"type":`)
	writeJSONString(&b, e.Type)
	fmt.Fprintf(&b, `,"timestamp":%d`, e.Timestamp)
	if e.Metadata.TriggerSessionID != "" {
		b.WriteString(`,"chat_id":`)
		writeJSONString(&b, e.Metadata.TriggerSessionID)
	}
	if e.Sequence != 0 {
		fmt.Fprintf(&b, `,"sequence":%d`, e.Sequence)
	}
	md, err := e.Metadata.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b.WriteString(`,"metadata":`)
	b.Write(md)
	b.WriteString(`,"payload":`)
	if len(e.Payload) == 0 {
		b.WriteString("null")
	} else {
		if err := json.Compact(&b, e.Payload); err != nil {
			return nil, fmt.Errorf("event %s payload: %w", e.ID, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an event strictly; see DecodeEvent.
func (e *Event) UnmarshalJSON(data []byte) error {
	ev, err := DecodeEvent(data)
	if err != nil {
		return err
	}
	*e = ev
	return nil
}

// DecodeEvent parses an event from JSON that came from outside. It never
// panics; an error is an EINVALID *Error naming the offending field (or, for
// malformed JSON, the byte offset). Unknown top-level fields are errors, so a
// misspelt field is reported rather than silently ignored. DecodeEvent does
// not require id or timestamp: callers that accept events from clients fill
// them (see Event.Validate for what a complete event needs).
func DecodeEvent(data []byte) (Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Event{}, syntaxError("event", data, err)
	}
	if fields == nil {
		return Event{}, Errorf(EINVALID, "event: must be a JSON object")
	}
	var e Event
	var chatID string
	for _, k := range sortedKeys(fields) {
		v := fields[k]
		var err error
		switch k {
		case "id":
			err = decodeString(k, v, &e.ID)
		case "type":
			err = decodeString(k, v, &e.Type)
		case "chat_id":
			err = decodeString(k, v, &chatID)
		case "timestamp":
			err = decodeInt(k, v, &e.Timestamp)
		case "sequence":
			err = decodeInt(k, v, &e.Sequence)
		case "metadata":
			err = e.Metadata.UnmarshalJSON(v)
		case "payload":
			if !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
				e.Payload = append(json.RawMessage(nil), v...)
			}
		default:
			err = Errorf(EINVALID, "%s: unknown field", k)
		}
		if err != nil {
			return Event{}, err
		}
	}
	if chatID != "" {
		switch e.Metadata.TriggerSessionID {
		case "":
			e.Metadata.TriggerSessionID = chatID
		case chatID:
		default:
			return Event{}, Errorf(EINVALID, "chat_id: %q does not match metadata.trigger_session_id %q", chatID, e.Metadata.TriggerSessionID)
		}
	}
	if e.Timestamp < 0 {
		return Event{}, Errorf(EINVALID, "timestamp: must not be negative")
	}
	if e.Sequence < 0 {
		return Event{}, Errorf(EINVALID, "sequence: must not be negative")
	}
	if e.Type != "" {
		if err := ValidateType(e.Type); err != nil {
			return Event{}, err
		}
	}
	if e.ID != "" {
		if err := validateID("id", e.ID); err != nil {
			return Event{}, err
		}
	}
	return e, nil
}

// MarshalJSON writes the named fields (omitted when empty) and then the extra
// keys in sorted order, so the output is deterministic.
func (m Metadata) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	field := func(k, v string) {
		if v == "" {
			return
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		writeJSONString(&b, k)
		b.WriteByte(':')
		writeJSONString(&b, v)
	}
	field("trigger_session_id", m.TriggerSessionID)
	field("trigger_agent_id", m.TriggerAgentID)
	field("trigger_agent_name", m.TriggerAgentName)
	field("env_name", m.EnvName)
	field("source", m.Source)
	field(metaApp, m.App)
	field(metaUser, m.User)
	field(metaTraceParent, m.TraceParent)
	for _, k := range sortedKeys(m.Extra) {
		if isNamedMetadataKey(k) && !m.extraScopeKey(k) {
			continue // the named field wins; an Extra copy would duplicate the key
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		writeJSONString(&b, k)
		b.WriteByte(':')
		v := m.Extra[k]
		if len(v) == 0 {
			b.WriteString("null")
		} else if err := json.Compact(&b, v); err != nil {
			return nil, fmt.Errorf("metadata.%s: %w", k, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// isNamedMetadataKey reports whether k is the JSON key of a named Metadata
// field: the one list of them (the stores' extra column is encoded by
// ExtraJSON).
func isNamedMetadataKey(k string) bool {
	switch k {
	case "trigger_session_id", "trigger_agent_id", "trigger_agent_name", "env_name", "source", metaApp, metaUser, metaTraceParent:
		return true
	}
	return false
}

// UnmarshalJSON reads metadata; the named keys must be strings (or null) and
// source must be one of the Source* constants. Other keys go to Extra.
func (m *Metadata) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return syntaxError("metadata", data, err)
	}
	*m = Metadata{}
	if fields == nil {
		return nil // null metadata is empty metadata
	}
	for _, k := range sortedKeys(fields) {
		v := fields[k]
		var err error
		switch k {
		case "trigger_session_id":
			err = decodeString("metadata."+k, v, &m.TriggerSessionID)
		case "trigger_agent_id":
			err = decodeString("metadata."+k, v, &m.TriggerAgentID)
		case "trigger_agent_name":
			err = decodeString("metadata."+k, v, &m.TriggerAgentName)
		case "env_name":
			err = decodeString("metadata."+k, v, &m.EnvName)
		case "source":
			if err = decodeString("metadata."+k, v, &m.Source); err == nil {
				err = validateSource(m.Source)
			}
		case metaApp:
			err = decodeString("metadata."+k, v, &m.App)
		case metaUser:
			err = decodeString("metadata."+k, v, &m.User)
		case metaTraceParent:
			err = decodeString("metadata."+k, v, &m.TraceParent)
		default:
			if m.Extra == nil {
				m.Extra = make(map[string]json.RawMessage, len(fields))
			}
			m.Extra[k] = append(json.RawMessage(nil), v...)
		}
		if err != nil {
			return err
		}
	}
	if m.TriggerSessionID != "" {
		return validateID("metadata.trigger_session_id", m.TriggerSessionID)
	}
	return nil
}

func decodeString(field string, v json.RawMessage, dst *string) error {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		*dst = ""
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return Errorf(EINVALID, "%s: must be a string", field)
	}
	return nil
}

func decodeInt(field string, v json.RawMessage, dst *int64) error {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		*dst = 0
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return Errorf(EINVALID, "%s: must be an integer", field)
	}
	return nil
}

// syntaxError turns a JSON decoding error into an EINVALID error that says
// where the input went wrong.
func syntaxError(what string, data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the bytes read, including the one that is wrong.
		line, col := LineCol(data, max(se.Offset-1, 0))
		return Errorf(EINVALID, "%s: malformed JSON at line %d, column %d: %v", what, line, col, se)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return Errorf(EINVALID, "%s: must be a JSON object, not %s", what, te.Value)
	}
	return Errorf(EINVALID, "%s: %v", what, err)
}

// LineCol converts a byte offset in data to a 1-based line and column, for
// error messages that point into a file.
func LineCol(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	line, col = 1, 1
	for _, c := range data[:offset] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// writeJSONString writes s as a JSON string. encoding/json's escaping is used
// so that the output is identical to what json.Marshal would produce.
func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always marshals
	b.Write(enc)
}
