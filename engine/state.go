package engine

import (
	"bytes"
	"encoding/json"
	"maps"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// state is everything the engine knows about a chat, and it is a pure fold
// over the chat's recorded events (apply) on top of the chat row. A run
// applies each event it records, and a resume — after a pause, a restart or
// on another instance — rebuilds the same state by applying the stored
// events in order. That is why resume needs no in-memory object from before
// (invariant 4): there is only one way to get a state.
type state struct {
	chat baton.Chat
	wf   *workflow.Workflow

	vars     map[string]json.RawMessage // context variables, as JSON values; change them through setVar
	eval     map[string]any             // vars decoded for conditions and system messages; nil when stale
	systems  map[string]string          // system messages rendered with eval, by agent; nil when stale
	messages []baton.Message            // the conversation as models see it (hidden messages included)
	byMsgID  map[string]int             // agent_message_id → index in messages, to attach tool calls

	texts        int    // chat.text events so far: the index of the next message
	turns        int    // native select_speaker events: turns started
	turn         *turn  // the turn in progress; nil between turns
	next         string // between turns: the agent to speak next, "user" to wait, "" before the first turn
	nextPrompt   string // the event prompt for the next turn
	revertedFrom string // the agent that last handed over to the person
	turnAgent    string // the sender of the last text (persisted as the chat's turn_agent)
	selected     string // the agent of the last select_speaker recorded since the last text
	started      bool   // the chat's start is recorded (a handoff, an input request or a turn)
	done         bool   // chat.run_complete recorded
	failed       bool   // the last event recorded is a chat.error (see isFailed)
	cancelled    bool   // the last event recorded is a chat.run_complete of a cancelled run (see isFailed)
	terminating  bool   // a handoff to TerminateTarget is recorded; after_chat tools and run_complete follow

	lifecycle map[string]bool // lifecycle tool calls recorded, by lifecycle key
	lcOpen    []openCall      // lifecycle UI calls waiting for the person

	names names // interned agent and tool names, for the fold

	// unanswered are the ids of the model's tool calls not answered yet,
	// and deferred the messages of environment events observed meanwhile:
	// a model expects a message with tool calls to be followed at once by
	// their answers (OpenAI refuses anything in between), so an event
	// observed while a UI tool waits for the person is shown to the model
	// after the answers.
	unanswered map[string]bool
	deferred   []baton.Message

	inputs     map[string]bool // ids of the recent inputs recorded (user_query, ui.tool.response, environment events)
	inputOrder []string        // their order, to forget the oldest

	// inboxClear: a run of this process last found the chat's inbox
	// holding nothing but what it took; with no input kept since
	// (Engine.inbox), the next input point need not read it.
	inboxClear bool
	// startInput and startMessage: a chat Start made in this process with
	// the person's first message, kept in its inbox until the start's
	// append takes it: what takeStart would read there.
	startInput, startMessage string
}

// maxRememberedInputs bounds the input ids a chat's state remembers: a
// retried input is recognised if it is among the chat's last this many.
const maxRememberedInputs = 256

// recordedInputs returns the ids of the inputs recorded that the state
// remembers, as a slice no later change of the state writes to (an input
// remembered later is appended past its end, and forgetting one moves the
// start of inputOrder): another goroutine may read it (interrupt).
func (st *state) recordedInputs() []string {
	n := len(st.inputOrder)
	return st.inputOrder[:n:n]
}

// rememberInput notes that an input was recorded.
func (st *state) rememberInput(id string) {
	if id == "" || st.inputs[id] {
		return
	}
	if st.inputs == nil {
		st.inputs = map[string]bool{}
	}
	st.inputs[id] = true
	st.inputOrder = append(st.inputOrder, id)
	if len(st.inputOrder) > maxRememberedInputs {
		delete(st.inputs, st.inputOrder[0])
		st.inputOrder = st.inputOrder[1:]
	}
}

// turn is one agent speaking once: select, model call(s), tools, result.
type turn struct {
	index    int
	agent    string
	key      string
	calls    int        // model calls recorded in this turn
	finished bool       // a model call ended without tool calls: the turn's text is final
	text     string     // the text of the last model call
	transfer string     // the transfer tool the model called (llm handoff), if any
	open     []openCall // tool calls recorded and not yet answered, in order

	structured json.RawMessage // the validated structured output of this turn
	model      string          // its model's name
	autoFired  bool            // the auto-tool for it is recorded
	retries    int             // schema feedback given in this turn
	prompt     string          // an event rule's prompt for this turn
}

// openCall is a chat.tool_call without its chat.tool_response yet.
type openCall struct {
	id, name, agent string
	args            json.RawMessage
	uiEventID       string // set for a UI tool awaiting the person
	transfer        bool
	interaction     string // "", "auto_tool" or "lifecycle"
	pendingKind     string // for UI calls: baton.PendingUITool or baton.PendingSecret

	ask *toolAsk // set once the call's tool asked the person (toolinput.go)
}

func newState(chat baton.Chat, wf *workflow.Workflow) *state {
	return &state{chat: chat, wf: wf, vars: initialVars(wf), byMsgID: map[string]int{}, lifecycle: map[string]bool{}, names: names{}}
}

// initialVars returns the workflow's variables with their defaults.
func initialVars(wf *workflow.Workflow) map[string]json.RawMessage {
	vars := make(map[string]json.RawMessage, len(wf.Variables)+len(wf.DerivedVariables))
	for _, v := range wf.Variables {
		raw, err := json.Marshal(v.Default)
		if err != nil {
			raw = []byte("null")
		}
		vars[v.Name] = raw
	}
	for _, d := range wf.DerivedVariables {
		if _, ok := vars[d.Name]; !ok {
			vars[d.Name] = json.RawMessage("false")
		}
	}
	return vars
}

// setVar sets a context variable.
func (st *state) setVar(name string, value json.RawMessage) {
	st.vars[name] = value
	st.varsChanged()
}

// varsChanged drops what was derived from the variables.
func (st *state) varsChanged() {
	st.eval, st.systems = nil, nil
}

// systemMessage returns agent's system message rendered with the current
// variables, rendering it only when they changed since the last time.
func (st *state) systemMessage(agent *workflow.Agent) string {
	if s, ok := st.systems[agent.Name]; ok {
		return s
	}
	s := agent.RenderSystemMessage(st.varsForEval())
	if st.systems == nil {
		st.systems = map[string]string{}
	}
	st.systems[agent.Name] = s
	return s
}

// sync takes the chat row's word for what the row holds: status, pending
// requests, speaker, and the context snapshot, which wins over the fold's
// variables (they agree, since every change is recorded with its event in
// one append, but the snapshot is the store's word).
func (st *state) sync(chat baton.Chat) {
	st.chat = chat
	if len(chat.Context) > 0 {
		var snap map[string]json.RawMessage
		if json.Unmarshal(chat.Context, &snap) == nil {
			for k, v := range snap {
				if cur, ok := st.vars[k]; !ok || !bytes.Equal(cur, v) {
					st.setVar(k, v) // else keep what was derived from it
				}
			}
		}
	}
}

// releaseDeferred appends the messages held while tool calls were
// unanswered.
func (st *state) releaseDeferred() {
	if len(st.deferred) > 0 {
		st.messages = append(st.messages, st.deferred...)
		st.deferred = nil
	}
}

// isFailed reports whether the chat is paused after an error, waiting for a
// retry: its last run ended with chat.error, and nothing since moved it on.
// An environment event observed meanwhile is recorded with the status kept
// failed, so the stored status says so even when the last event is not the
// error.
//
// A run the person cancelled pauses the same way (status cancelled, after
// a chat.run_complete with status "cancelled"): its turn stays open, and a
// resume or the person's next message goes on from it.
func (st *state) isFailed() bool {
	return st.failed || st.cancelled || st.chat.Status == baton.ChatFailed || st.chat.Status == baton.ChatCancelled
}

// apply folds one recorded event into the state.
func (st *state) apply(ev *baton.Event) {
	if ev.Sequence > st.chat.LastSequence {
		st.chat.LastSequence = ev.Sequence
	}
	if ev.Type == baton.TypeChatNotice {
		return // a status line for the person: no message, no step of the chat
	}
	// Anything recorded after a chat.error means the chat moved on.
	st.failed = ev.Type == baton.TypeChatError
	st.cancelled = ev.Type == baton.TypeChatRunComplete && runCancelled(ev.Payload)
	switch ev.Type {
	case baton.TypeChatHandoff, baton.TypeChatInputRequest:
		st.started = true
	}
	switch ev.Type {
	case baton.TypeChatSelectSpeaker:
		var p baton.SelectSpeakerPayload
		decodeSelectSpeaker(ev.Payload, &p, st.names)
		st.selected = p.Agent
		if p.Source == "native" {
			st.turn = &turn{index: p.TurnIndex, agent: p.Agent, key: p.TurnKey, prompt: p.Prompt}
			st.nextPrompt = ""
			st.turns = p.TurnIndex + 1
		}
	case baton.TypeChatText:
		var p baton.TextPayload
		decodeText(ev.Payload, &p, st.names)
		st.texts++
		st.turnAgent = p.Agent
		st.selected = ""
		st.rememberInput(p.InputID)
		st.rememberInput(p.EventID) // an environment event's "Observed event" message
		switch {
		case p.AnswersToolCallID != "" && st.toolAnswered(p.AnswersToolCallID, p.Content):
			// The person's answer to a tool's question: it goes to the tool,
			// whose result the model reads, not to the model.
		case p.Agent == workflow.UserAgent || p.Agent == systemAgent: // systemAgent: also an observed event's text
			msg := baton.Message{Role: baton.RoleUser, Name: p.Agent, Content: p.Content}
			if len(st.unanswered) > 0 {
				// An observed event, or the person's message to a chat that
				// failed between a tool call and its answer: the model sees
				// it after the answers.
				st.deferred = append(st.deferred, msg)
			} else {
				st.messages = append(st.messages, msg)
			}
			if t := st.turn; t != nil && p.Feedback {
				t.finished = false // the agent answers the feedback in the same turn
				t.retries++
			}
		default:
			msg := baton.Message{Role: baton.RoleAssistant, Name: p.Agent}
			if !p.ToolOnly {
				msg.Content = p.Content
			}
			st.messages = append(st.messages, msg)
			if p.AgentMessageID != "" {
				st.byMsgID[p.AgentMessageID] = len(st.messages) - 1
			}
			if t := st.turn; t != nil && t.agent == p.Agent {
				t.calls++
				t.text = p.Content
				if p.ToolOnly {
					t.text = ""
				}
				t.finished = !p.HasToolCalls
			}
		}
	case baton.TypeChatToolCall:
		var p baton.ToolCallPayload
		decodeToolCall(ev.Payload, &p, st.names)
		oc := openCall{id: p.ToolCallID, name: p.ToolName, agent: p.Agent, args: p.Arguments, transfer: p.Transfer,
			interaction: p.InteractionType, uiEventID: p.UIEventID, pendingKind: p.PendingKind}
		switch p.InteractionType {
		case interactionLifecycle:
			// The runtime's own call: not part of the model's conversation.
			st.lifecycle[p.LifecycleKey] = true
			if oc.uiEventID != "" {
				st.lcOpen = append(st.lcOpen, oc)
			}
			return
		case interactionAutoTool:
			if t := st.turn; t != nil {
				t.autoFired = true
				if oc.uiEventID != "" {
					t.open = append(t.open, oc)
				}
			}
			return
		}
		call := baton.ToolCall{ID: p.ToolCallID, Name: p.ToolName, Arguments: argumentsText(p.Arguments)}
		if p.EventID != "" && len(st.unanswered) > 0 {
			// An observed event's get_event_info call, answered in the
			// same append: held with the event's other messages.
			st.deferred = append(st.deferred, baton.Message{Role: baton.RoleAssistant, Name: p.Agent, ToolCalls: []baton.ToolCall{call}})
			return
		}
		i, ok := st.byMsgID[p.AgentMessageID]
		if !ok {
			st.messages = append(st.messages, baton.Message{Role: baton.RoleAssistant, Name: p.Agent})
			i = len(st.messages) - 1
			st.byMsgID[p.AgentMessageID] = i
		}
		st.messages[i].ToolCalls = append(st.messages[i].ToolCalls, call)
		if p.EventID == "" {
			if st.unanswered == nil {
				st.unanswered = map[string]bool{}
			}
			st.unanswered[p.ToolCallID] = true
		}
		if t := st.turn; t != nil {
			t.open = append(t.open, oc)
			if p.Transfer && t.transfer == "" {
				t.transfer = p.ToolName
			}
		}
	case baton.TypeChatToolResponse:
		var p baton.ToolResponsePayload
		decodeToolResponse(ev.Payload, &p, st.names)
		st.rememberInput(p.InputID)
		switch p.InteractionType {
		case interactionLifecycle:
			st.lcOpen = removeCall(st.lcOpen, p.ToolCallID)
			return
		case interactionAutoTool:
			// The model did not make this call; it learns the person's
			// response as a message, so the next agent can act on it: the
			// response itself (its status and data: which button, what
			// feedback), not only that the tool completed.
			resp := p.Content
			if len(p.Payload) > 0 {
				resp = personsResponse(p.Payload)
			}
			st.messages = append(st.messages, baton.Message{Role: baton.RoleUser, Name: systemAgent,
				Content: "The person responded to " + p.ToolName + ": " + resp})
			if t := st.turn; t != nil {
				t.open = removeCall(t.open, p.ToolCallID)
			}
			return
		}
		msg := baton.Message{Role: baton.RoleTool, Name: p.ToolName, ToolCallID: p.ToolCallID, Content: p.Content}
		if p.EventID != "" && len(st.unanswered) > 0 {
			st.deferred = append(st.deferred, msg)
			return
		}
		st.messages = append(st.messages, msg)
		delete(st.unanswered, p.ToolCallID)
		if len(st.unanswered) == 0 {
			st.releaseDeferred()
		}
		if t := st.turn; t != nil {
			t.open = removeCall(t.open, p.ToolCallID)
		}
	case baton.TypeChatStructuredOutputReady:
		var p baton.StructuredOutputPayload
		decodeStructured(ev.Payload, &p, st.names)
		if t := st.turn; t != nil {
			t.structured, t.model = p.Data, p.ModelName
		}
	case baton.TypeChatContextUpdated:
		var p baton.ContextUpdatedPayload
		decodeContext(ev.Payload, &p, st.names)
		maps.Copy(st.vars, p.Variables)
		st.varsChanged()
	case baton.TypeChatHandoff:
		var p baton.HandoffPayload
		decodeHandoff(ev.Payload, &p, st.names)
		st.turn = nil
		if p.From == workflow.UserAgent && st.done {
			// The person's message after the end (accepted while the run
			// went on): it starts the next run.
			st.done = false
		}
		// A turn that ended with calls unanswered (a transfer among
		// them, say) leaves nothing to wait for.
		clear(st.unanswered)
		st.releaseDeferred()
		switch p.TransitionTarget {
		case workflow.AgentTarget:
			st.next = p.To
			st.nextPrompt = p.Prompt
		case workflow.RevertToUserTarget:
			st.next = workflow.UserAgent
			st.revertedFrom = p.From
		case workflow.TerminateTarget:
			st.next = ""
			st.terminating = true
		}
	case baton.TypeChatInputRequest:
		var p baton.InputRequestPayload
		decodeInputRequest(ev.Payload, &p, st.names)
		if p.ToolCallID != "" && st.toolAsked(&p, ev.Sequence) {
			break // the turn goes on once the call has its answer
		}
		st.next = workflow.UserAgent
		if p.Agent != "" && p.Agent != workflow.UserAgent {
			st.revertedFrom = p.Agent
		}
	case baton.TypeChatRunComplete:
		if st.cancelled {
			break // the run stopped, not the chat: the turn stays open
		}
		st.done = true
		st.terminating = false
		st.turn = nil
	}
}

// waitingUI returns the UI calls waiting for the person: the current
// turn's and the lifecycle tools'.
func (st *state) waitingUI() []openCall {
	out := append([]openCall(nil), st.lcOpen...)
	if st.turn != nil {
		for _, oc := range st.turn.open {
			if oc.uiEventID != "" {
				out = append(out, oc)
			}
		}
	}
	return out
}

func removeCall(calls []openCall, id string) []openCall {
	for i, oc := range calls {
		if oc.id == id {
			return append(calls[:i:i], calls[i+1:]...)
		}
	}
	return calls
}

// argumentsText returns a tool call's arguments as the model wrote them:
// the JSON text, or the string the engine wrapped when it was not JSON.
func argumentsText(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// varsForEval returns the variables decoded for condition evaluation and
// system messages. Secrets are never among them. The map is decoded once
// per change of the variables and shared: callers only read it.
func (st *state) varsForEval() map[string]any {
	if st.eval != nil {
		return st.eval
	}
	out := make(map[string]any, len(st.vars))
	for k, raw := range st.vars {
		if baton.IsReservedVariable(k) { // secretsVar, ForkedFromVar
			continue
		}
		var v any
		if json.Unmarshal(raw, &v) == nil {
			out[k] = v
		}
	}
	st.eval = out
	return out
}

// personsResponse is what a model is shown of the person's response to an
// auto-tool: its status and data. The ui_event_id the payload also holds
// names this chat's call, not what the person said: a model has no use for
// it, and with it the same conversation would be a different request in
// every chat (a replay's request digest could never match).
func personsResponse(payload json.RawMessage) string {
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data,omitempty"`
	}
	if json.Unmarshal(payload, &r) != nil || r.Status == "" {
		return string(payload)
	}
	out, err := json.Marshal(r)
	if err != nil {
		return string(payload)
	}
	return string(out)
}
