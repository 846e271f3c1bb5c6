package baton

import "encoding/json"

// Payloads of the chat.* events, as the engine records them and every
// reader (the server's envelope filter, metrics, the terminal chat, the
// store's message view) decodes them. Their JSON field names are the wire
// format clients and stored chats depend on: never rename one. "kind" is
// the part of the type after "chat."; chat.notice's payload is
// NoticePayload (event.go).

// TextPayload is chat.text: a message of an agent, the person ("user") or
// the runtime ("system", the resume signal).
type TextPayload struct {
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
	// RetractMessageID names the message whose stream.text deltas reached
	// clients before the text turned out to be hidden (ui_hidden): a client
	// drops what it showed of that message.
	RetractMessageID string `json:"retract_message_id,omitempty"`
	Interrupted      bool   `json:"interrupted,omitempty"` // the model call was stopped by the person's message (double_texting: interrupt)
	// AnswersToolCallID names the open tool call whose question
	// (chat.input_request with tool_call_id) the person's message answers:
	// the message goes to the tool, not to the agent's model.
	AnswersToolCallID string `json:"answers_tool_call_id,omitempty"`
}

// StructuredOutputPayload is chat.structured_output_ready.
type StructuredOutputPayload struct {
	Kind               string          `json:"kind"`
	Agent              string          `json:"agent"`
	AgentName          string          `json:"agent_name"`
	ModelName          string          `json:"model_name"`
	Data               json.RawMessage `json:"data"`
	TurnIdempotencyKey string          `json:"turn_idempotency_key"`
	AutoToolMode       bool            `json:"auto_tool_mode"`
}

// SelectSpeakerPayload is chat.select_speaker. A native one starts a turn;
// a synthetic one (spec/synthetic-events.md) only keeps the UI's thinking
// bubbles right.
type SelectSpeakerPayload struct {
	Kind      string `json:"kind"`
	Agent     string `json:"agent"`
	Source    string `json:"source"` // "native" or "synthetic"
	Synthetic bool   `json:"_synthetic,omitempty"`
	TurnKey   string `json:"turn_key,omitempty"`
	TurnIndex int    `json:"turn_index"`
	Prompt    string `json:"prompt,omitempty"` // an event rule's prompt, added to the agent's system message for this turn
}

// ToolCallPayload is chat.tool_call.
type ToolCallPayload struct {
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
	PendingKind      string          `json:"pending_kind,omitempty"` // ui_tool, secret or client_tool, for calls awaiting an answer
	EventID          string          `json:"event_id,omitempty"`     // the observed event this get_event_info call injects
	UIHidden         bool            `json:"ui_hidden,omitempty"`
}

// ToolResponsePayload is chat.tool_response.
type ToolResponsePayload struct {
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

// UsageSummaryPayload is chat.usage_summary, recorded after every model call.
type UsageSummaryPayload struct {
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
	// RequestDigest is RequestDigest of the call's request, so that a
	// replay can tell whether the model was asked the same (baton replay).
	RequestDigest string `json:"request_digest,omitempty"`
}

// ContextUpdatedPayload is chat.context_updated: the variables that changed and
// their new values, recorded in the same append as the snapshot change.
type ContextUpdatedPayload struct {
	Kind      string                     `json:"kind"`
	Agent     string                     `json:"agent,omitempty"`
	Variables map[string]json.RawMessage `json:"variables"`
	Trigger   string                     `json:"trigger,omitempty"` // what set them: a derived variable's trigger_type, or "tool"
}

// HandoffPayload is chat.handoff: who speaks after a turn, and why.
type HandoffPayload struct {
	Kind             string `json:"kind"`
	From             string `json:"from"`
	To               string `json:"to,omitempty"` // the next agent; empty for the person or the end
	HandoffType      string `json:"handoff_type"` // after_work, condition, llm, default, user_input, max_auto_reply
	TransitionTarget string `json:"transition_target"`
	Condition        string `json:"condition,omitempty"`
	Prompt           string `json:"prompt,omitempty"` // for an event's handoff: the rule's prompt for the agent's turn
}

// InputRequestPayload is chat.input_request: the chat waits for the person.
type InputRequestPayload struct {
	Kind      string `json:"kind"`
	Agent     string `json:"agent"` // the agent that handed over to the person, or whose tool call asks
	Prompt    string `json:"prompt,omitempty"`
	RequestID string `json:"request_id"`
	// The next four are set when an open tool call asks the person (its
	// result was ToolStatusInputRequired, e.g. a remote A2A task that
	// needs input): the person's next message answers it and the call
	// goes on with the answer.
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolName   string          `json:"tool_name,omitempty"`
	Round      int             `json:"round,omitempty"`  // 1 for the call's first question, 2 for the next…
	Resume     json.RawMessage `json:"resume,omitempty"` // the tool's state to go on with (ToolResult.Resume)
}

// RunCompletePayload is chat.run_complete.
type RunCompletePayload struct {
	Kind       string `json:"kind"`
	Status     string `json:"status"` // success, max_turns, budget_exceeded, cancelled
	Reason     string `json:"reason"`
	TotalTurns int    `json:"total_turns"`
}

// ErrorPayload is chat.error: the run stopped; the person can retry.
type ErrorPayload struct {
	Kind      string `json:"kind"`
	Agent     string `json:"agent,omitempty"`
	Message   string `json:"message"`
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
	TurnKey   string `json:"turn_key,omitempty"`
}

// WorkflowResumedPayload is chat.workflow_resumed.
type WorkflowResumedPayload struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	Agent  string `json:"agent,omitempty"`
}

// Input event types the engine handles besides user_query and
// ui.tool.response. They are commands to the engine, not conversation
// facts, so they are never recorded.
const (
	// TypeRunStart starts a chat created by the engine's Start; its
	// payload is a RunStartPayload.
	TypeRunStart = "run.start"
	// TypeRunResume goes on with a chat: after an error, or after a
	// restart. It has no payload.
	TypeRunResume = "run.resume"
	// TypeRunWake is the engine's own input that runs a chat's agent after
	// a coalescing window collected a burst of environment events; its
	// payload is a RunWakePayload.
	TypeRunWake = "run.wake"
	// TypeRunCancel asks the instance running a chat to stop its run: the model
	// call and any tool in progress are cancelled at once and the run's end is
	// recorded as chat.run_complete with status "cancelled" (the chat's status
	// becomes cancelled; a resume goes on from the open turn). It is a command,
	// never recorded.
	//
	// It cannot wait its turn on the chat's lane like the other inputs — the
	// run it stops is the handler holding that lane — so the engine watches it
	// as a bus observer, which sees an event when it is accepted: on the
	// instance that publishes it, or, with input routing (natsbridge), on the
	// instance that owns the chat, where the router delivers it.
	TypeRunCancel = "run.cancel"
)

// RunStartPayload is the payload of run.start.
type RunStartPayload struct {
	// Message is the person's first message, if the chat was started with one.
	Message string `json:"message,omitempty"`
}

// RunWakePayload is the payload of run.wake: the event rule's prompt for
// the agent's turn and its system prompt.
type RunWakePayload struct {
	Prompt string `json:"prompt"`
	System string `json:"system"`
}

// UserQueryPayload is the payload of user_query, a person's message. The
// one shape, whichever way in it came (WebSocket, HTTP, the seed's prompt
// route, the terminal): sessionId is the seed's name for the chat id.
type UserQueryPayload struct {
	SessionID string `json:"sessionId,omitempty"`
	Content   string `json:"content"`
	Source    string `json:"source"` // ws, http, api
	// ClientTools, when present, is the set of tools the client offers
	// with this message (a JSON array of ClientTool; [] for none): the
	// newest set wins. Absent, the chat keeps the set it has.
	ClientTools json.RawMessage `json:"client_tools,omitempty"`
}

// UIToolResponsePayload is the payload of ui.tool.response, the person's
// answer to a UI tool or form.
type UIToolResponsePayload struct {
	UIEventID string          `json:"ui_event_id"`
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data,omitempty"`
	// Sealed holds a secret form's values, sealed before they reached the
	// bus (the engine seals them; a client never sends this).
	Sealed map[string]string `json:"sealed,omitempty"`
	// ClientTools is UserQueryPayload.ClientTools, for a response that
	// comes with the client's tools (an AG-UI run's tool message).
	ClientTools json.RawMessage `json:"client_tools,omitempty"`
}

// NewInput builds an input event for a chat in scope: the scope travels in
// the metadata (Metadata.App and User) so the run uses the caller's tenant
// for every store call. run.start and run.resume come from the system, the
// rest from the user; a caller may set another source on the result.
func NewInput(scope Scope, typ, chatID string, payload json.RawMessage) Event {
	source := SourceUser
	if typ == TypeRunResume || typ == TypeRunStart {
		source = SourceSystem
	}
	md := Metadata{TriggerSessionID: chatID, Source: source}
	md.SetScope(scope)
	return NewEvent(typ, md, payload)
}

// NewUserQuery builds the user_query input of a person's message to a chat.
func NewUserQuery(scope Scope, chatID, content, source string) Event {
	return NewInput(scope, TypeUserQuery, chatID, mustMarshal(UserQueryPayload{SessionID: chatID, Content: content, Source: source}))
}

// NewUIToolResponse builds the ui.tool.response input of a person's answer
// to a UI tool or form of a chat.
func NewUIToolResponse(scope Scope, chatID string, p UIToolResponsePayload) Event {
	return NewInput(scope, TypeUIToolResponse, chatID, mustMarshal(p))
}

// NewChatEvent builds a chat.* event of chatID from a payload struct of
// this file (or any value that marshals to a JSON object), sent by the
// system on behalf of agent.
func NewChatEvent(typ, chatID, agent string, payload any) Event {
	return NewEvent(typ, Metadata{TriggerSessionID: chatID, TriggerAgentName: agent, Source: SourceSystem}, mustMarshal(payload))
}

// mustMarshal encodes a payload struct of this package: plain data, whose
// encoding cannot fail, so a failure is a programming error.
func mustMarshal(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		panic("baton: marshal payload: " + err.Error())
	}
	return raw
}

// DecodePayload decodes an event's payload into a payload struct of this
// package, for readers of recorded events.
func DecodePayload[P any](ev *Event) (P, error) {
	var p P
	if len(ev.Payload) == 0 {
		return p, Errorf(EINVALID, "%s %s: no payload", ev.Type, ev.ID)
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return p, Errorf(EINVALID, "%s %s payload: %v", ev.Type, ev.ID, err)
	}
	return p, nil
}
