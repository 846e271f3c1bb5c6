package engine

import (
	"encoding/json"

	"github.com/batonhq/baton"
)

// Payloads of the chat.* events the engine records. Field names follow
// spec/runtime-lifecycle.md, spec/synthetic-events.md and
// spec/auto-tool-execution.md; "kind" is the part of the type after "chat.".

// textPayload is chat.text: a message of an agent, the person ("user") or
// the runtime ("system", the resume signal).
type textPayload struct {
	Kind           string  `json:"kind"`
	Agent          string  `json:"agent"`
	Content        string  `json:"content"`
	Index          int     `json:"index"`                      // 0-based place among the chat's messages
	Source         string  `json:"source,omitempty"`           // for the person's messages: ws, http, api, initial_message
	AgentMessageID string  `json:"agent_message_id,omitempty"` // the model call that produced it
	Tokens         int64   `json:"tokens,omitempty"`
	Cost           float64 `json:"cost,omitempty"`
	UIHidden       bool    `json:"ui_hidden,omitempty"`      // the model sees it; people don't
	HasToolCalls   bool    `json:"has_tool_calls,omitempty"` // chat.tool_call events of the same agent_message_id follow
	ToolOnly       bool    `json:"tool_only,omitempty"`      // the model produced no text: Content is the fallback, not sent back to the model
	Feedback       bool    `json:"feedback,omitempty"`       // the runtime's feedback on an invalid structured output
	EventID        string  `json:"event_id,omitempty"`       // an observed environment event's id
	InputID        string  `json:"input_id,omitempty"`       // the id of the user_query this message came from
	TurnKey        string  `json:"turn_key,omitempty"`
}

// Interaction types of tool calls the model did not make.
const (
	interactionAutoTool  = "auto_tool" // the runtime invoked the UI tool of an auto_tool_mode agent
	interactionLifecycle = "lifecycle" // a Lifecycle_Tool at its trigger
)

// systemAgent is the sender of the runtime's own messages (the resume
// signal, structured-output feedback).
const systemAgent = "system"

// structuredPayload is chat.structured_output_ready.
type structuredPayload struct {
	Kind               string          `json:"kind"`
	Agent              string          `json:"agent"`
	AgentName          string          `json:"agent_name"`
	ModelName          string          `json:"model_name"`
	Data               json.RawMessage `json:"data"`
	TurnIdempotencyKey string          `json:"turn_idempotency_key"`
	AutoToolMode       bool            `json:"auto_tool_mode"`
}

// selectSpeakerPayload is chat.select_speaker. A native one starts a turn;
// a synthetic one (spec/synthetic-events.md) only keeps the UI's thinking
// bubbles right.
type selectSpeakerPayload struct {
	Kind      string `json:"kind"`
	Agent     string `json:"agent"`
	Source    string `json:"source"` // "native" or "synthetic"
	Synthetic bool   `json:"_synthetic,omitempty"`
	TurnKey   string `json:"turn_key,omitempty"`
	TurnIndex int    `json:"turn_index"`
	Prompt    string `json:"prompt,omitempty"` // an event rule's prompt, added to the agent's system message for this turn
}

// toolCallPayload is chat.tool_call.
type toolCallPayload struct {
	Kind             string          `json:"kind"`
	Agent            string          `json:"agent"`
	ToolName         string          `json:"tool_name"`
	ToolCallID       string          `json:"tool_call_id"`
	Corr             string          `json:"corr"`
	Arguments        json.RawMessage `json:"arguments"`
	AgentMessageID   string          `json:"agent_message_id,omitempty"`
	TurnKey          string          `json:"turn_key"`
	AwaitingResponse bool            `json:"awaiting_response"`
	UIEventID        string          `json:"ui_event_id,omitempty"`
	ComponentType    string          `json:"component_type,omitempty"`
	Mode             string          `json:"mode,omitempty"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	InteractionType  string          `json:"interaction_type,omitempty"`
	Transfer         bool            `json:"transfer,omitempty"` // an llm handoff's transfer tool
	LifecycleKey     string          `json:"lifecycle_key,omitempty"`
	LifecycleTrigger string          `json:"lifecycle_trigger,omitempty"`
	PendingKind      string          `json:"pending_kind,omitempty"` // ui_tool or secret, for calls awaiting the person
	EventID          string          `json:"event_id,omitempty"`     // the observed event this get_event_info call injects
	UIHidden         bool            `json:"ui_hidden,omitempty"`
}

// toolResponsePayload is chat.tool_response.
type toolResponsePayload struct {
	Kind            string          `json:"kind"`
	Agent           string          `json:"agent"`
	ToolName        string          `json:"tool_name"`
	ToolCallID      string          `json:"tool_call_id"`
	CallID          string          `json:"call_id"`
	Corr            string          `json:"corr"`
	Status          string          `json:"status"` // ok or error
	Success         bool            `json:"success"`
	Content         string          `json:"content"`
	Payload         json.RawMessage `json:"payload,omitempty"`
	InteractionType string          `json:"interaction_type,omitempty"`
	UIEventID       string          `json:"ui_event_id,omitempty"`
	EventID         string          `json:"event_id,omitempty"`
	UIHidden        bool            `json:"ui_hidden,omitempty"`
	InputID         string          `json:"input_id,omitempty"` // the id of the ui.tool.response this came from
}

// usagePayload is chat.usage_summary, recorded after every model call.
type usagePayload struct {
	Kind             string  `json:"kind"`
	Agent            string  `json:"agent"`
	Model            string  `json:"model"`
	AgentMessageID   string  `json:"agent_message_id"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	Cost             float64 `json:"cost"`
}

// contextPayload is chat.context_updated: the variables that changed and
// their new values, recorded in the same append as the snapshot change.
type contextPayload struct {
	Kind      string                     `json:"kind"`
	Agent     string                     `json:"agent,omitempty"`
	Variables map[string]json.RawMessage `json:"variables"`
	Trigger   string                     `json:"trigger,omitempty"` // what set them: a derived variable's trigger_type, or "tool"
}

// handoffPayload is chat.handoff: who speaks after a turn, and why.
type handoffPayload struct {
	Kind             string `json:"kind"`
	From             string `json:"from"`
	To               string `json:"to,omitempty"` // the next agent; empty for the person or the end
	HandoffType      string `json:"handoff_type"` // after_work, condition, llm, default, user_input, max_auto_reply
	TransitionTarget string `json:"transition_target"`
	Condition        string `json:"condition,omitempty"`
	Prompt           string `json:"prompt,omitempty"` // for an event's handoff: the rule's prompt for the agent's turn
}

// inputRequestPayload is chat.input_request: the chat waits for the person.
type inputRequestPayload struct {
	Kind      string `json:"kind"`
	Agent     string `json:"agent"` // the agent that handed over to the person
	Prompt    string `json:"prompt,omitempty"`
	RequestID string `json:"request_id"`
}

// runCompletePayload is chat.run_complete.
type runCompletePayload struct {
	Kind       string `json:"kind"`
	Status     string `json:"status"` // success, max_turns, budget_exceeded
	Reason     string `json:"reason"`
	TotalTurns int    `json:"total_turns"`
}

// errorPayload is chat.error: the run stopped; the person can retry.
type errorPayload struct {
	Kind      string `json:"kind"`
	Agent     string `json:"agent,omitempty"`
	Message   string `json:"message"`
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
	TurnKey   string `json:"turn_key,omitempty"`
}

// resumedPayload is chat.workflow_resumed.
type resumedPayload struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	Agent  string `json:"agent,omitempty"`
}

// chatEvent builds a chat.* event for chatID from a payload struct.
func chatEvent(typ, chatID, agent string, payload any) baton.Event {
	raw, err := json.Marshal(payload)
	if err != nil {
		// Every payload type above is plain data; this cannot fail.
		panic("engine: marshal " + typ + ": " + err.Error())
	}
	return baton.NewEvent(typ, baton.Metadata{TriggerSessionID: chatID, TriggerAgentName: agent, Source: baton.SourceSystem}, raw)
}
