package baton

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"sync"
)

// Tool is something an agent can call: a Go function, a command beside the
// workflow, an HTTP endpoint, a tool of an MCP server or a UI component (see
// package tool, whose registry builds them from tools.json).
type Tool interface {
	// Name is the name the model calls the tool by.
	Name() string
	// Description tells the model what the tool does.
	Description() string
	// Parameters is the JSON Schema of the arguments object.
	Parameters() json.RawMessage
	// Call runs the tool with the arguments (a JSON object). A failure the
	// model should see — bad arguments, a non-zero exit, a 4xx answer, a
	// timeout — is a ToolResult with Status ToolStatusError and Content
	// explaining it; a Go error means the call could not be made or its
	// outcome is unknown (the context was cancelled, the registry failed).
	Call(ctx context.Context, cc *CallContext, args json.RawMessage) (ToolResult, error)
}

// Tool result statuses.
const (
	ToolStatusOK    = "ok"
	ToolStatusError = "error"
	// ToolStatusPending marks the result of a UI tool: the component in
	// ToolResult.UI is waiting for the person, and the chat pauses until a
	// ui.tool.response arrives.
	ToolStatusPending = "pending"
	// ToolStatusInputRequired marks the result of a call that waits for the
	// person (an a2a tool whose remote task asks for input): Content is the
	// question the person is shown, Resume what the tool needs to go on.
	// The call stays open; the engine records a chat.input_request and
	// calls the tool again with CallContext.Answer set to the person's
	// answer. Tools the engine does not run for a model (lifecycle and
	// auto-tools) must not return it.
	ToolStatusInputRequired = "input_required"
)

// ToolAnswer is the person's answer to a call that returned
// ToolStatusInputRequired, given to the same tool's next Call.
type ToolAnswer struct {
	// Text is what the person wrote.
	Text string
	// Resume is the ToolResult.Resume of the result that asked.
	Resume json.RawMessage
	// Round counts the answers to this call: 1 for the first.
	Round int
}

// AnswerEffectKey is the effect key of the round-th answer to the call
// whose effect key is callKey: each answer is an effect of its own (a
// message to a remote agent), taken once however often the call is run
// again after a restart.
func AnswerEffectKey(callKey string, round int) string {
	return callKey + "/answer/" + strconv.Itoa(round)
}

// CallContext is what a tool call knows about where it happens. The engine
// fills it for every call.
type CallContext struct {
	ChatID     string
	App        string // the chat's app (the spec's enterprise)
	User       string
	Workflow   string
	Agent      string // the agent that called the tool
	TurnKey    string // the turn's idempotency key
	ToolCallID string // the model's id for this call
	// EffectKey identifies the call's side effect: the same for every replay
	// or retry of the same call. The tool registry sets it to
	// EffectKey(ChatID, TurnKey, ToolCallID) when it is empty and there is a
	// ToolCallID. Tools with side
	// effects should use it to de-duplicate (it is sent as BATON_EFFECT_KEY
	// to commands and as the Idempotency-Key header to HTTP tools).
	EffectKey string
	// Recovery is set when the call is run again because the process that
	// ran it before is gone and no result was recorded: the effect may
	// have happened once already, under the same EffectKey. (Commands get
	// it as BATON_EFFECT_RECOVERY=1.)
	Recovery bool
	// Vars are the chat's context variables; a tool reads them and sets
	// updates, which the engine applies after the call (recording
	// chat.context_updated). May be nil when the chat has none.
	Vars *ContextVars
	// Secrets are resolved secrets for the tools that need them. They are
	// never logged or recorded.
	Secrets map[string]string
	// Answer is set when the call continues after the person answered the
	// question of its ToolStatusInputRequired result; EffectKey is then
	// AnswerEffectKey(the call's key, Answer.Round). Nil for a first call.
	Answer *ToolAnswer
}

// EffectKey returns the effect-ledger key of a tool call: the chat, the
// turn's idempotency key and the model's tool-call id.
func EffectKey(chatID, turnKey, toolCallID string) string {
	return chatID + "/" + turnKey + "/" + toolCallID
}

// ToolResult is the outcome of a tool call.
type ToolResult struct {
	// Content is what the model reads.
	Content string `json:"content"`
	// UI is an optional payload for the chat UI (for a UI tool, the
	// component to show; see package tool's UIRequest).
	UI json.RawMessage `json:"ui,omitempty"`
	// Status is ToolStatusOK, ToolStatusError, ToolStatusPending or
	// ToolStatusInputRequired.
	Status string `json:"status"`
	// Resume is, with ToolStatusInputRequired, the state the tool needs to
	// go on with the person's answer (for an a2a tool, the remote task and
	// context ids). The engine records it with the chat.input_request and
	// gives it back in CallContext.Answer; it must hold no secret.
	Resume json.RawMessage `json:"resume,omitempty"`
	// Updates are context-variable updates the engine applies after the
	// call, by name.
	Updates map[string]json.RawMessage `json:"updates,omitempty"`
}

// OK reports whether the result's status is ToolStatusOK.
func (r ToolResult) OK() bool { return r.Status == ToolStatusOK }

// ContextVars is a chat's context variables as one tool call sees them: the
// values at the start of the call plus the call's own updates. It is safe for
// concurrent use; a nil *ContextVars reads as empty.
type ContextVars struct {
	mu      sync.Mutex
	values  map[string]json.RawMessage
	updates map[string]json.RawMessage
}

// NewContextVars returns the variables with the given values (not copied
// deeply: the caller must not change the raw values afterwards).
func NewContextVars(values map[string]json.RawMessage) *ContextVars {
	return &ContextVars{values: maps.Clone(values)}
}

// Get returns a variable's value, with the call's own updates applied.
func (v *ContextVars) Get(name string) (json.RawMessage, bool) {
	if v == nil {
		return nil, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if val, ok := v.updates[name]; ok {
		return val, true
	}
	val, ok := v.values[name]
	return val, ok
}

// Set records an update of a variable to value (JSON-encoded). The engine
// applies the updates after the call.
func (v *ContextVars) Set(name string, value any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return Errorf(EINVALID, "context variable %s: %w", name, err)
	}
	v.SetRaw(name, raw)
	return nil
}

// SetRaw records an update of a variable to a raw JSON value.
func (v *ContextVars) SetRaw(name string, value json.RawMessage) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.updates == nil {
		v.updates = make(map[string]json.RawMessage)
	}
	v.updates[name] = value
}

// Snapshot returns every variable with the updates applied.
func (v *ContextVars) Snapshot() map[string]json.RawMessage {
	if v == nil {
		return map[string]json.RawMessage{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]json.RawMessage, len(v.values)+len(v.updates))
	maps.Copy(out, v.values)
	maps.Copy(out, v.updates)
	return out
}

// Updates returns the updates set so far.
func (v *ContextVars) Updates() map[string]json.RawMessage {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.updates)
}
