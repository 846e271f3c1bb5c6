package baton

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Role is the author of a message sent to a model.
type Role string

// Message roles, as the Chat Completions API names them.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation a model sees.
type Message struct {
	Role Role
	// Name is the speaker: an agent's name, or "user". Providers send it as
	// the OpenAI `name` field where the role allows one.
	Name    string
	Content string
	// ToolCalls are the calls an assistant message made.
	ToolCalls []ToolCall
	// ToolCallID links a tool-role message (a tool result) to its call.
	ToolCallID string
}

// ToolCall is one call a model made to a tool.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the JSON text of the arguments exactly as the model
	// produced it; it may be invalid JSON, which the caller must check.
	Arguments string
}

// ToolDef describes a tool a model may call.
type ToolDef struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments; nil means none.
	Parameters json.RawMessage
	// Strict asks the provider to enforce the schema exactly.
	Strict bool
}

// ResponseFormat asks for a reply that is a JSON document matching Schema,
// enforced strictly (OpenAI's json_schema response format).
type ResponseFormat struct {
	Name   string
	Schema json.RawMessage
}

// ModelParams are the model and its sampling and connection settings for one
// call. Zero values mean the provider's defaults.
type ModelParams struct {
	Model       string
	Temperature *float64
	MaxTokens   int
	// Seed makes sampling reproducible where the provider supports it; the
	// engine passes the chat's cache_seed.
	Seed *int64
	// Timeout bounds the whole call, streaming included, retries too.
	Timeout time.Duration
	// FirstTokenTimeout bounds one attempt's wait for the first delta of
	// the reply and IdleTimeout the wait between two chunks after it; an
	// attempt that stalls longer is abandoned and retried (see DeltaRetry).
	// Zero means the provider's defaults.
	FirstTokenTimeout time.Duration
	IdleTimeout       time.Duration
	// BaseURL and APIKey override the provider's configured endpoint.
	BaseURL string
	APIKey  string
}

// Request is one model call.
type Request struct {
	// ChatID, Agent and MessageID attribute the call: they name the stream.*
	// events built from its deltas, and the scripted provider uses them to
	// choose and identify its answers.
	ChatID    string
	Agent     string
	MessageID string

	Messages       []Message
	Tools          []ToolDef
	ResponseFormat *ResponseFormat
	Params         ModelParams
}

// DeltaKind says which field of a Delta is set.
type DeltaKind uint8

// Delta kinds.
const (
	DeltaText      DeltaKind = iota + 1 // Text holds a fragment of the reply
	DeltaReasoning                      // Text holds a fragment of the model's reasoning
	DeltaToolCall                       // ToolCall holds a fragment of a tool call
	DeltaFinish                         // FinishReason says why the model stopped
	DeltaUsage                          // Usage holds the token counts of the call
	// DeltaRetry says the attempt so far failed and the call is sent again:
	// every delta yielded before it is void, and the deltas after it are a
	// new reply from scratch. Retry says why and which attempt follows.
	DeltaRetry
)

// String returns the kind's name.
func (k DeltaKind) String() string {
	switch k {
	case DeltaText:
		return "text"
	case DeltaReasoning:
		return "reasoning"
	case DeltaToolCall:
		return "tool_call"
	case DeltaFinish:
		return "finish"
	case DeltaUsage:
		return "usage"
	case DeltaRetry:
		return "retry"
	}
	return "DeltaKind(" + strconv.Itoa(int(k)) + ")"
}

// ModelNamer is implemented by a Provider that answers under a model name
// of its own whatever the request names: the scripted provider is no
// gpt-4o-mini. The engine reports a call's usage (chat.usage_summary, the
// usage records, the metrics) under ModelName(requested) and prices it as
// that model, so an offline demo costs 0 instead of a made-up price.
type ModelNamer interface {
	ModelName(requested string) string
}

// ModelOf returns the model name a call of p for requested is reported
// and priced under: p's own (ModelNamer), else requested.
func ModelOf(p Provider, requested string) string {
	if n, ok := p.(ModelNamer); ok {
		if m := n.ModelName(requested); m != "" {
			return m
		}
	}
	return requested
}

// Delta is one piece of a streamed model reply. It is a value type: a
// provider yields it without allocating.
type Delta struct {
	Kind         DeltaKind
	Text         string
	ToolCall     ToolCallDelta
	FinishReason string
	// ResponseID is the provider's id of the response (OpenAI's chunk id),
	// set on a DeltaFinish when the provider gives one; traces report it as
	// gen_ai.response.id.
	ResponseID string
	Usage      Usage
	// Retry is set on a DeltaRetry only (a pointer, so that the deltas of
	// a healthy stream stay small).
	Retry *Retry
}

// Retry describes a model call sent again after a failed attempt.
type Retry struct {
	// Attempt is the attempt about to start (2 for the first retry), of at
	// most MaxAttempts.
	Attempt, MaxAttempts int
	// Err is why the previous attempt failed, a *ProviderError.
	Err error
	// Wait is how long the provider waits before the attempt.
	Wait time.Duration
}

// ToolCallDelta is a fragment of the tool call at position Index of the
// reply. ID and Name usually come in the first fragment of a call, Arguments
// in pieces to be concatenated.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Usage counts the tokens of a model call. CachedTokens are part of
// PromptTokens; ReasoningTokens are part of CompletionTokens.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	ReasoningTokens  int64
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		CachedTokens:     u.CachedTokens + v.CachedTokens,
		ReasoningTokens:  u.ReasoningTokens + v.ReasoningTokens,
	}
}

// Provider is a model: it streams the reply to a request as deltas. The
// iterator yields a non-nil error at most once, as its last element. Stopping
// the loop or cancelling ctx ends the call and releases its connection. A
// provider that sends a request again after it has yielded a delta yields a
// DeltaRetry first, so the caller voids what it got (its stream.* deltas
// are retracted) and a partly streamed turn is never duplicated.
type Provider interface {
	Stream(ctx context.Context, req *Request) iter.Seq2[Delta, error]
}

// ProviderErrorKind classifies a failed model call.
type ProviderErrorKind string

// Provider error kinds.
const (
	ProviderAuth          ProviderErrorKind = "auth"           // 401/403: bad or missing API key
	ProviderRateLimit     ProviderErrorKind = "rate_limit"     // 429: rate limit or quota
	ProviderBadRequest    ProviderErrorKind = "bad_request"    // 400/404/422: the provider rejected the request
	ProviderContextLength ProviderErrorKind = "context_length" // the conversation is longer than the model's context
	ProviderContentFilter ProviderErrorKind = "content_filter" // the provider's content filter stopped the reply
	ProviderTimeout       ProviderErrorKind = "timeout"        // the call's timeout elapsed
	ProviderUnavailable   ProviderErrorKind = "unavailable"    // 408/409/5xx, an error event in the stream, a connection that failed before a response
	ProviderProtocol      ProviderErrorKind = "protocol"       // the provider sent something that is not the API's format
	// A reply that had started streaming broke off: the connection was
	// cut, or the stream ended before the model finished.
	ProviderConnectionDropped ProviderErrorKind = "connection_dropped"
	// One chunk of a streamed reply was not valid JSON.
	ProviderMalformedChunk ProviderErrorKind = "malformed_chunk"
	// No delta of the reply came within the first-token timeout.
	ProviderTimeoutFirstToken ProviderErrorKind = "timeout_first_token"
	// The reply stalled: after its first delta, no chunk came within the
	// idle timeout.
	ProviderTimeoutIdle ProviderErrorKind = "timeout_idle"
)

// ProviderError is a failed model call. Its message names the endpoint and
// the model, never the API key. errors.As finds, besides it, an *Error whose
// code follows the kind (auth: EUNAUTHORIZED; bad request, context length
// and content filter: EINVALID; the rest: EUNAVAILABLE), so ErrorCode and
// ErrorMessage work on it.
type ProviderError struct {
	Kind     ProviderErrorKind
	Status   int    // the HTTP status, or 0
	Code     string // the provider's error code (e.g. "context_length_exceeded"), or ""
	Message  string // the provider's message, or a description of the failure
	Endpoint string // the base URL (without credentials), or "scripted:PATH"
	Model    string
	// RetryAfter is how long the provider asked to wait, or 0.
	RetryAfter time.Duration
	Err        error // the cause, for logs
}

// Error returns a one-line description.
func (e *ProviderError) Error() string { return e.describe(e.Endpoint, e.Message) }

// ClientMessage describes e to clients — the person in the chat, a UI —
// leaving out what only the operator should see: the endpoint (it may be an
// internal gateway's address) and, unless the kind says the fault is in the
// request (bad request, context length, content filter) or the reply (the
// timeouts, protocol, malformed chunk), the provider's own text, which may
// quote an organization id, a masked API key or a transport error's
// addresses.
// Error has it all, for logs.
func (e *ProviderError) ClientMessage() string {
	switch e.Kind {
	case ProviderBadRequest, ProviderContextLength, ProviderContentFilter, ProviderTimeout, ProviderProtocol,
		ProviderMalformedChunk, ProviderTimeoutFirstToken, ProviderTimeoutIdle:
		return e.describe("", e.Message)
	}
	return e.describe("", "")
}

// describe writes `model "M"[ at ENDPOINT]: KIND[ (HTTP S)][: MESSAGE]`,
// leaving out an empty endpoint or message.
func (e *ProviderError) describe(endpoint, message string) string {
	var b strings.Builder
	b.WriteString("model ")
	b.WriteString(strconv.Quote(e.Model))
	if endpoint != "" {
		b.WriteString(" at ")
		b.WriteString(endpoint)
	}
	b.WriteString(": ")
	b.WriteString(string(e.Kind))
	if e.Status != 0 {
		b.WriteString(" (HTTP ")
		b.WriteString(strconv.Itoa(e.Status))
		b.WriteString(")")
	}
	if message != "" {
		b.WriteString(": ")
		b.WriteString(message)
	}
	return b.String()
}

// Unwrap returns the coded *Error that describes e to clients
// (ClientMessage), and the cause.
func (e *ProviderError) Unwrap() []error {
	coded := &Error{Code: e.ErrorCode(), Message: e.ClientMessage()}
	if e.Err == nil {
		return []error{coded}
	}
	return []error{coded, e.Err}
}

// ErrorCode returns the baton error code for e's kind.
func (e *ProviderError) ErrorCode() string {
	switch e.Kind {
	case ProviderAuth:
		return EUNAUTHORIZED
	case ProviderBadRequest, ProviderContextLength, ProviderContentFilter:
		return EINVALID
	default:
		return EUNAVAILABLE
	}
}

// IsProviderError reports whether err is a *ProviderError of the given kind.
func IsProviderError(err error, kind ProviderErrorKind) bool {
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Kind == kind
}

// RequestDigest returns a fingerprint of what a model is asked: the
// model, temperature and token limit, the messages (role, name, content,
// tool calls' names and arguments), the tools offered and the response
// format. The engine records it with each call's chat.usage_summary, so
// that `baton replay` can tell whether a replayed chat asks a model what
// the recorded one asked: a prompt edited in the workflow, a changed
// history or a new tool changes it. What differs from chat to chat while
// the conversation is the same is left out: the chat and message ids, the
// tool call ids, the seed, timeouts and the endpoint, and the ui_event_id
// in a UI tool's result. The digest is a hex SHA-256 of a private
// encoding: compare digests, never decode one.
func RequestDigest(req *Request) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		io.WriteString(h, s)
	}
	field("baton.request.v1")
	field(req.Params.Model)
	if t := req.Params.Temperature; t != nil {
		field(strconv.FormatFloat(*t, 'g', -1, 64))
	} else {
		field("")
	}
	field(strconv.Itoa(req.Params.MaxTokens))
	field(strconv.Itoa(len(req.Messages)))
	for i := range req.Messages {
		m := &req.Messages[i]
		field(string(m.Role))
		field(m.Name)
		content := m.Content
		if m.Role == RoleTool {
			content = withoutUIEventID(content)
		}
		field(content)
		field(strconv.Itoa(len(m.ToolCalls)))
		for _, c := range m.ToolCalls {
			field(c.Name)
			field(c.Arguments)
		}
	}
	field(strconv.Itoa(len(req.Tools)))
	for _, t := range req.Tools {
		field(t.Name)
		field(t.Description)
		field(string(t.Parameters))
		field(strconv.FormatBool(t.Strict))
	}
	if rf := req.ResponseFormat; rf != nil {
		field(rf.Name)
		field(string(rf.Schema))
	} else {
		field("")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// withoutUIEventID drops the ui_event_id of a UI tool's result (a JSON
// object the engine writes with encoding/json, so re-encoding it keeps
// the rest as it was): it names the chat's call, not what the person said.
func withoutUIEventID(content string) string {
	if !strings.Contains(content, `"ui_event_id"`) {
		return content
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(content), &m) != nil {
		return content
	}
	delete(m, "ui_event_id")
	out, err := json.Marshal(m)
	if err != nil {
		return content
	}
	return string(out)
}
