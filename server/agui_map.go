package server

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// AG-UI event types (@ag-ui/core 1.0.0 EventType).
const (
	aguiRunStarted       = "RUN_STARTED"
	aguiRunFinished      = "RUN_FINISHED"
	aguiRunError         = "RUN_ERROR"
	aguiStepStarted      = "STEP_STARTED"
	aguiStepFinished     = "STEP_FINISHED"
	aguiTextStart        = "TEXT_MESSAGE_START"
	aguiTextContent      = "TEXT_MESSAGE_CONTENT"
	aguiTextEnd          = "TEXT_MESSAGE_END"
	aguiToolCallStart    = "TOOL_CALL_START"
	aguiToolCallArgs     = "TOOL_CALL_ARGS"
	aguiToolCallEnd      = "TOOL_CALL_END"
	aguiToolCallResult   = "TOOL_CALL_RESULT"
	aguiStateSnapshot    = "STATE_SNAPSHOT"
	aguiStateDelta       = "STATE_DELTA"
	aguiMessagesSnapshot = "MESSAGES_SNAPSHOT"
)

// The AG-UI events baton sends, one struct per shape: the fields each
// event's schema requires are never omitted.
type (
	aguiRunStartedEvent struct {
		Type     string `json:"type"`
		ThreadID string `json:"threadId"`
		RunID    string `json:"runId"`
	}
	aguiRunFinishedEvent struct {
		Type     string       `json:"type"`
		ThreadID string       `json:"threadId"`
		RunID    string       `json:"runId"`
		Result   any          `json:"result,omitempty"`
		Outcome  *aguiOutcome `json:"outcome,omitempty"`
		Usage    []aguiUsage  `json:"usage,omitempty"`
	}
	aguiOutcome struct {
		Type               string   `json:"type"` // success or cancelled
		PendingToolCallIDs []string `json:"pendingToolCallIds,omitempty"`
	}
	aguiUsage struct {
		Model             string `json:"model,omitempty"`
		InputTokens       int64  `json:"inputTokens"`
		OutputTokens      int64  `json:"outputTokens"`
		TotalTokens       int64  `json:"totalTokens"`
		ReasoningTokens   int64  `json:"reasoningTokens,omitempty"`
		CachedInputTokens int64  `json:"cachedInputTokens,omitempty"`
	}
	aguiRunErrorEvent struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code,omitempty"`
	}
	aguiStepEvent struct {
		Type     string `json:"type"`
		StepName string `json:"stepName"`
	}
	aguiTextStartEvent struct {
		Type      string `json:"type"`
		MessageID string `json:"messageId"`
		Role      string `json:"role"`
		Name      string `json:"name,omitempty"`
	}
	aguiTextContentEvent struct {
		Type      string `json:"type"`
		MessageID string `json:"messageId"`
		Delta     string `json:"delta"`
	}
	aguiIDEvent struct { // TEXT_MESSAGE_END, TOOL_CALL_END
		Type       string `json:"type"`
		MessageID  string `json:"messageId,omitempty"`
		ToolCallID string `json:"toolCallId,omitempty"`
	}
	aguiToolStartEvent struct {
		Type            string         `json:"type"`
		ToolCallID      string         `json:"toolCallId"`
		ToolCallName    string         `json:"toolCallName"`
		ParentMessageID string         `json:"parentMessageId,omitempty"`
		Metadata        map[string]any `json:"metadata,omitempty"`
	}
	aguiToolArgsEvent struct {
		Type       string `json:"type"`
		ToolCallID string `json:"toolCallId"`
		Delta      string `json:"delta"`
	}
	aguiToolResultEvent struct {
		Type       string `json:"type"`
		MessageID  string `json:"messageId"`
		ToolCallID string `json:"toolCallId"`
		Content    string `json:"content"`
		Role       string `json:"role"`
	}
	aguiStateSnapshotEvent struct {
		Type     string                     `json:"type"`
		Snapshot map[string]json.RawMessage `json:"snapshot"`
	}
	aguiStateDeltaEvent struct {
		Type  string        `json:"type"`
		Delta []aguiPatchOp `json:"delta"`
	}
	aguiPatchOp struct {
		Op    string          `json:"op"` // add or remove
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value,omitempty"`
	}
	aguiMessagesSnapshotEvent struct {
		Type     string        `json:"type"`
		Messages []aguiMessage `json:"messages"`
	}
)

// aguiMapper turns the chat's envelopes (as follow delivers them, or as the
// snapshot reads them from the store) into one AG-UI run.
type aguiMapper struct {
	threadID, runID string
	wf              *workflow.Workflow
	scope           baton.Scope
	chatID, webURL  string
	emit            func(any) error
	batch           batcher // the stream's, to coalesce a delivery's events (nil: none)

	// own maps the input event ids of the client's user and tool messages
	// to their AG-UI ids: the client has those messages, so the run does
	// not echo them, and a snapshot names them as the client does.
	own map[string]string
	// startMessage is the index of the client's first user message in the
	// input (-1: none), startText its text: the chat's start message.
	startMessage int
	startText    string
	startID      string

	streaming map[string]string // message id → agent, for model calls whose stream.start this run saw
	sent      map[string]bool   // message ids whose TEXT_MESSAGE_START was sent
	open      map[string]bool   // … and whose TEXT_MESSAGE_END was not yet
	tools     map[string]bool   // tool call ids shown (their results are shown too)
	state     map[string]bool   // the state's variables
	step      string            // the open step's name
	usage     []aguiUsage       // per model, in the order first used
	msgs      []aguiMessage     // the snapshot's messages
	byID      map[string]int    // the snapshot's assistant messages by id
	finished  bool
	raw       []byte // a delta's event, encoded

	// streamed is what each message's deltas sent, for its recorded text
	// to send the rest when follow lost some (oaiStreamed).
	streamed map[string]*oaiStreamed
}

func newAGUIMapper(in *aguiInput, wf *workflow.Workflow, scope baton.Scope, chatID, webURL string) *aguiMapper {
	m := &aguiMapper{
		threadID: in.ThreadID, runID: in.RunID, wf: wf, scope: scope, chatID: chatID, webURL: webURL,
		own: map[string]string{}, startMessage: in.firstUser(),
		streaming: map[string]string{}, sent: map[string]bool{}, open: map[string]bool{},
		tools: map[string]bool{}, state: map[string]bool{}, byID: map[string]int{},
	}
	if m.startMessage >= 0 {
		m.startText = strings.TrimSpace(in.Messages[m.startMessage].text)
		m.startID = in.Messages[m.startMessage].ID
	}
	return m
}

// started sends RUN_STARTED.
func (m *aguiMapper) started() error {
	return m.emit(aguiRunStartedEvent{Type: aguiRunStarted, ThreadID: m.threadID, RunID: m.runID})
}

// stateSnapshot sends STATE_SNAPSHOT: the chat's context variables a
// client may see.
func (m *aguiMapper) stateSnapshot(raw json.RawMessage) error {
	vars := clientContext(raw)
	for k := range vars {
		m.state[k] = true
	}
	return m.emit(aguiStateSnapshotEvent{Type: aguiStateSnapshot, Snapshot: vars})
}

// The parts of the envelopes' data the mapper reads.
type (
	aguiStreamData struct {
		MessageID string `json:"message_id"`
		Agent     string `json:"agent"`
		Delta     string `json:"delta"`
	}
	aguiTextData struct {
		baton.TextPayload
		Sequence int64 `json:"sequence"`
	}
	aguiSpeakerData struct {
		Agent    string `json:"agent"`
		Source   string `json:"source"`
		IsVisual bool   `json:"is_visual"`
	}
)

// live maps one followed event to AG-UI events; done reports that the run
// ended (RUN_FINISHED or RUN_ERROR was sent).
func (m *aguiMapper) live(f *Followed) (done bool, err error) {
	switch f.Type {
	case baton.TypeStreamStart:
		var d aguiStreamData
		if json.Unmarshal(f.Data, &d) == nil && d.MessageID != "" {
			m.streaming[d.MessageID] = d.Agent
		}
	case baton.TypeStreamText:
		var d aguiStreamData
		if json.Unmarshal(f.Data, &d) != nil {
			return false, nil
		}
		return false, m.delta(&d, f.Subscription)
	case baton.TypeStreamCompleted, baton.TypeStreamError:
		var d aguiStreamData
		if json.Unmarshal(f.Data, &d) == nil {
			delete(m.streaming, d.MessageID)
			if f.Type == baton.TypeStreamCompleted && m.gap(d.MessageID, f.Subscription) {
				return false, nil // the recorded text sends the rest, then ends it
			}
			return false, m.endText(d.MessageID)
		}
	case baton.TypeChatSelectSpeaker:
		var d aguiSpeakerData
		if json.Unmarshal(f.Data, &d) != nil || d.Source != "native" {
			return false, nil
		}
		if err := m.endStep(); err != nil {
			return false, err
		}
		if d.IsVisual {
			m.step = d.Agent
			return false, m.emit(aguiStepEvent{Type: aguiStepStarted, StepName: d.Agent})
		}
	case baton.TypeChatText:
		return false, m.liveText(f)
	case baton.TypeChatToolCall:
		var p baton.ToolCallPayload
		if json.Unmarshal(f.Data, &p) != nil || p.UIHidden {
			return false, nil
		}
		if p.PendingKind == baton.PendingSecret {
			return true, m.secret(p)
		}
		if err := m.toolCall(p); err != nil {
			return false, err
		}
		if p.PendingKind == baton.PendingUITool || p.PendingKind == baton.PendingClientTool {
			// A frontend tool call: the run ends, and the client's tool
			// message in the next run is the UI tool's response (or the
			// result of the client's own tool).
			return true, m.finish(&aguiOutcome{Type: "success", PendingToolCallIDs: []string{p.ToolCallID}}, nil)
		}
	case baton.TypeChatToolResponse:
		var p baton.ToolResponsePayload
		if json.Unmarshal(f.Data, &p) != nil || p.UIHidden || !m.tools[p.ToolCallID] {
			return false, nil
		}
		if _, ok := m.own[p.InputID]; ok && p.InputID != "" {
			return false, nil // the client's own tool message
		}
		return false, m.emit(aguiToolResultEvent{Type: aguiToolCallResult, MessageID: "result-" + p.ToolCallID, ToolCallID: p.ToolCallID, Content: p.Content, Role: "tool"})
	case baton.TypeChatContextUpdated:
		var p baton.ContextUpdatedPayload
		if json.Unmarshal(f.Data, &p) != nil || len(p.Variables) == 0 {
			return false, nil
		}
		return false, m.stateDelta(p.Variables)
	case baton.TypeChatUsageSummary:
		var p baton.UsageSummaryPayload
		if json.Unmarshal(f.Data, &p) == nil {
			m.addUsage(p)
		}
	case baton.TypeChatInputRequest:
		var p baton.InputRequestPayload
		if json.Unmarshal(f.Data, &p) == nil && p.ToolCallID != "" && p.Prompt != "" {
			// A tool's question (a remote agent's, through an a2a tool): no
			// agent said it, so it is sent as the agent's message; the
			// client's next message answers it.
			if err := m.wholeText(toolQuestionID(&p), "assistant", p.Agent, p.Prompt); err != nil {
				return false, err
			}
		}
		return true, m.finish(&aguiOutcome{Type: "success"}, map[string]any{"waiting": "input"})
	case baton.TypeChatRunComplete:
		var p baton.RunCompletePayload
		_ = json.Unmarshal(f.Data, &p)
		outcome := &aguiOutcome{Type: "success"}
		if p.Status == "cancelled" {
			outcome.Type = "cancelled"
		}
		return true, m.finish(outcome, map[string]any{"status": p.Status, "reason": p.Reason})
	case baton.TypeChatError:
		var p baton.ErrorPayload
		_ = json.Unmarshal(f.Data, &p)
		return true, m.runError(p.Message, p.Code)
	}
	return false, nil
}

// delta maps a stream.text delta: TEXT_MESSAGE_START before its message's
// first, then TEXT_MESSAGE_CONTENT.
func (m *aguiMapper) delta(d *aguiStreamData, subscription int) error {
	if d.Delta == "" {
		return nil
	}
	agent, ok := m.streaming[d.MessageID]
	if !ok {
		// Its start came before this run followed the chat: the recorded
		// text will carry it whole.
		return nil
	}
	if m.gap(d.MessageID, subscription) {
		return nil // the recorded text sends the rest
	}
	if !m.sent[d.MessageID] {
		m.sent[d.MessageID], m.open[d.MessageID] = true, true
		if err := m.emit(aguiTextStartEvent{Type: aguiTextStart, MessageID: d.MessageID, Role: "assistant", Name: agent}); err != nil {
			return err
		}
	}
	if !m.open[d.MessageID] {
		return nil
	}
	st := m.streamed[d.MessageID]
	st.text = append(st.text, d.Delta...)
	// As aguiTextContentEvent encodes, by hand.
	m.raw = append(m.raw[:0], `{"type":"TEXT_MESSAGE_CONTENT","messageId":`...)
	m.raw = baton.AppendJSONString(m.raw, d.MessageID)
	m.raw = append(m.raw, `,"delta":`...)
	m.raw = baton.AppendJSONString(m.raw, d.Delta)
	m.raw = append(m.raw, '}')
	return m.emit(aguiRaw(m.raw))
}

// liveEnvelope maps one followed envelope (followEnvelopes): a delta, the
// bulk of a streamed reply, is decoded from the envelope straight into its
// data, in one pass; any other event goes through live.
func (m *aguiMapper) liveEnvelope(seq int64, typ string, envelope []byte, subscription int) (done bool, err error) {
	if typ == baton.TypeStreamText {
		s, ok := decodeStreamText(envelope)
		if !ok {
			// A shape the fast path leaves to encoding/json.
			var d struct {
				Data aguiStreamData `json:"data"`
			}
			if json.Unmarshal(envelope, &d) != nil {
				return false, nil // as live: an undecodable delta is skipped
			}
			s = streamDelta(d.Data)
		}
		d := aguiStreamData(s)
		return false, m.delta(&d, subscription)
	}
	f := Followed{Sequence: seq, Subscription: subscription}
	if err := json.Unmarshal(envelope, &f.Envelope); err != nil {
		return false, fmt.Errorf("agui: decode envelope: %w", err)
	}
	return m.live(&f)
}

// liveText maps a recorded chat.text.
func (m *aguiMapper) liveText(f *Followed) error {
	var p aguiTextData
	if json.Unmarshal(f.Data, &p) != nil {
		return nil
	}
	if p.RetractMessageID != "" {
		// AG-UI cannot take back what it streamed; the message at least ends.
		if err := m.endText(p.RetractMessageID); err != nil {
			return err
		}
	}
	switch {
	case p.Agent == workflow.UserAgent:
		if p.UIHidden || m.clientHas(&p) {
			return nil
		}
		// The person's message sent another way (the web UI, the HTTP API).
		return m.wholeText(m.userID(&p), "user", "", p.Content)
	case p.Agent == "system" || p.UIHidden || p.ToolOnly || p.Feedback:
		return m.endText(p.AgentMessageID)
	}
	if m.sent[p.AgentMessageID] {
		if err := m.restText(p.AgentMessageID, p.Content); err != nil {
			return err
		}
		return m.endText(p.AgentMessageID)
	}
	id := p.AgentMessageID
	if id == "" {
		id = "seq-" + seqString(p.Sequence)
	}
	m.sent[id] = true
	return m.wholeText(id, "assistant", p.Agent, p.Content)
}

// clientHas reports whether a person's recorded message is one of the
// client's own: a message it sent, or the chat's start message.
func (m *aguiMapper) clientHas(p *aguiTextData) bool {
	if _, ok := m.own[p.InputID]; ok && p.InputID != "" {
		return true
	}
	return m.isStart(p)
}

// isStart reports whether the recorded text is the chat's start message,
// the client's first user message.
func (m *aguiMapper) isStart(p *aguiTextData) bool {
	return m.startMessage >= 0 && p.Source == sourceStart && p.InputID == "" && strings.TrimSpace(p.Content) == m.startText
}

// userID is the AG-UI id of a person's recorded message.
func (m *aguiMapper) userID(p *aguiTextData) string {
	if id, ok := m.own[p.InputID]; ok && p.InputID != "" {
		return id
	}
	if m.isStart(p) {
		return m.startID
	}
	if p.InputID != "" {
		return p.InputID
	}
	return "seq-" + seqString(p.Sequence)
}

// wholeText sends a text message at once.
func (m *aguiMapper) wholeText(id, role, name, content string) error {
	if err := m.emit(aguiTextStartEvent{Type: aguiTextStart, MessageID: id, Role: role, Name: name}); err != nil {
		return err
	}
	if content != "" {
		if err := m.emit(aguiTextContentEvent{Type: aguiTextContent, MessageID: id, Delta: content}); err != nil {
			return err
		}
	}
	return m.emit(aguiIDEvent{Type: aguiTextEnd, MessageID: id})
}

// gap reports whether follow lost deltas of message id: a stream event
// of it came in a later subscription than its first.
func (m *aguiMapper) gap(id string, sub int) bool {
	st := m.streamed[id]
	if st == nil {
		if m.streamed == nil {
			m.streamed = map[string]*oaiStreamed{}
		}
		st = &oaiStreamed{sub: sub}
		m.streamed[id] = st
	}
	st.gap = st.gap || sub != st.sub
	return st.gap
}

// restText sends the part of a streamed message's recorded content that
// its deltas did not (none, unless follow lost some), when they sent a
// prefix of it.
func (m *aguiMapper) restText(id, content string) error {
	st := m.streamed[id]
	if st == nil || !m.open[id] || len(content) <= len(st.text) || content[:len(st.text)] != string(st.text) {
		return nil
	}
	return m.emit(aguiTextContentEvent{Type: aguiTextContent, MessageID: id, Delta: content[len(st.text):]})
}

// endText ends a streamed text message that is open.
func (m *aguiMapper) endText(id string) error {
	if !m.open[id] {
		return nil
	}
	delete(m.open, id)
	return m.emit(aguiIDEvent{Type: aguiTextEnd, MessageID: id})
}

// endStep ends the open step.
func (m *aguiMapper) endStep() error {
	if m.step == "" {
		return nil
	}
	name := m.step
	m.step = ""
	return m.emit(aguiStepEvent{Type: aguiStepFinished, StepName: name})
}

// toolCall sends a tool call whole: baton records a call with its
// arguments complete, so TOOL_CALL_ARGS carries them at once.
func (m *aguiMapper) toolCall(p baton.ToolCallPayload) error {
	if p.ToolCallID == "" || m.tools[p.ToolCallID] {
		return nil
	}
	m.tools[p.ToolCallID] = true
	ev := aguiToolStartEvent{Type: aguiToolCallStart, ToolCallID: p.ToolCallID, ToolCallName: p.ToolName}
	if m.sent[p.AgentMessageID] {
		ev.ParentMessageID = p.AgentMessageID
	}
	ev.Metadata = uiMetadata(&p)
	if err := m.emit(ev); err != nil {
		return err
	}
	if args := strings.TrimSpace(string(p.Arguments)); args != "" && args != "null" {
		if err := m.emit(aguiToolArgsEvent{Type: aguiToolCallArgs, ToolCallID: p.ToolCallID, Delta: args}); err != nil {
			return err
		}
	}
	return m.emit(aguiIDEvent{Type: aguiToolCallEnd, ToolCallID: p.ToolCallID})
}

// uiMetadata is what a frontend needs to render a UI tool's call (nil for
// another tool's).
func uiMetadata(p *baton.ToolCallPayload) map[string]any {
	if p.ComponentType == "" {
		return nil
	}
	return map[string]any{"baton": map[string]any{"component": p.ComponentType, "mode": p.Mode, "ui_event_id": p.UIEventID}}
}

// secretNotice is what a client is told of a secret form: never the form
// over AG-UI, where its answer would pass through the client's hands and
// its history.
func (m *aguiMapper) secretNotice() string {
	return fmt.Sprintf("This step needs a secret (an API key or a password), which is never asked for over AG-UI. "+
		"Enter it in the baton web UI for this chat: %s . Then post this thread again to go on.", m.webURL)
}

// secret ends the run at a secret form, with a message that points to the
// web UI.
func (m *aguiMapper) secret(p baton.ToolCallPayload) error {
	if err := m.closeAll(); err != nil {
		return err
	}
	// No agent name: the form's agent is often one people do not see.
	if err := m.wholeText("secret-"+p.UIEventID, "assistant", "", m.secretNotice()); err != nil {
		return err
	}
	return m.finish(&aguiOutcome{Type: "success"}, map[string]any{"waiting": "secret", "ui_event_id": p.UIEventID, "web_url": m.webURL})
}

// stateDelta sends the changed variables as a JSON Patch: "add" sets a
// member whether or not it exists (RFC 6902 4.1), a null removes one.
func (m *aguiMapper) stateDelta(vars map[string]json.RawMessage) error {
	names := make([]string, 0, len(vars))
	for k := range vars {
		if !baton.IsReservedVariable(k) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	ops := make([]aguiPatchOp, 0, len(names))
	for _, k := range names {
		v := vars[k]
		path := "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
		if strings.TrimSpace(string(v)) == "null" {
			if m.state[k] {
				delete(m.state, k)
				ops = append(ops, aguiPatchOp{Op: "remove", Path: path})
			}
			continue
		}
		m.state[k] = true
		ops = append(ops, aguiPatchOp{Op: "add", Path: path, Value: v})
	}
	if len(ops) == 0 {
		return nil
	}
	return m.emit(aguiStateDeltaEvent{Type: aguiStateDelta, Delta: ops})
}

// addUsage adds a model call's tokens to its model's total.
func (m *aguiMapper) addUsage(p baton.UsageSummaryPayload) {
	for i := range m.usage {
		if m.usage[i].Model == p.Model {
			u := &m.usage[i]
			u.InputTokens += p.PromptTokens
			u.OutputTokens += p.CompletionTokens
			u.TotalTokens += p.PromptTokens + p.CompletionTokens
			u.ReasoningTokens += p.ReasoningTokens
			u.CachedInputTokens += p.CachedTokens
			return
		}
	}
	m.usage = append(m.usage, aguiUsage{Model: p.Model, InputTokens: p.PromptTokens, OutputTokens: p.CompletionTokens,
		TotalTokens: p.PromptTokens + p.CompletionTokens, ReasoningTokens: p.ReasoningTokens, CachedInputTokens: p.CachedTokens})
}

// closeAll ends what is open: text messages and the step.
func (m *aguiMapper) closeAll() error {
	ids := make([]string, 0, len(m.open))
	for id := range m.open {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := m.endText(id); err != nil {
			return err
		}
	}
	return m.endStep()
}

// finish ends the run with RUN_FINISHED.
func (m *aguiMapper) finish(outcome *aguiOutcome, result map[string]any) error {
	if m.finished {
		return nil
	}
	if err := m.closeAll(); err != nil {
		return err
	}
	m.finished = true
	if result == nil {
		result = map[string]any{}
	}
	result["chat_id"] = m.chatID
	return m.emit(aguiRunFinishedEvent{Type: aguiRunFinished, ThreadID: m.threadID, RunID: m.runID, Result: result, Outcome: outcome, Usage: m.usage})
}

// runError ends the run with RUN_ERROR.
func (m *aguiMapper) runError(message, code string) error {
	if m.finished {
		return nil
	}
	if err := m.closeAll(); err != nil {
		return err
	}
	m.finished = true
	if message == "" {
		message = "the run failed"
	}
	return m.emit(aguiRunErrorEvent{Type: aguiRunError, Message: message, Code: code})
}

// fail ends the run with RUN_ERROR for an error of the server's (the
// store, a deleted chat, shutdown), quoting only what a client may read.
func (m *aguiMapper) fail(err error) error {
	code := baton.ErrorCode(err)
	msg := "the stream broke off: post the same input again to reconnect"
	if code == baton.ENOTFOUND {
		msg = "the thread's chat was deleted"
	}
	return m.runError(msg, code)
}

// endWaiting ends a reconnect's run to a chat that waits (or has ended):
// as the live run ended when the chat began to wait.
func (m *aguiMapper) endWaiting(chat baton.Chat) error {
	switch chat.Status {
	case baton.ChatWaitingUITool:
		for _, p := range chat.Pending {
			if p.Kind == baton.PendingUITool || p.Kind == baton.PendingClientTool {
				return m.finish(&aguiOutcome{Type: "success", PendingToolCallIDs: []string{p.ToolCallID}}, nil)
			}
		}
	case baton.ChatWaitingSecret:
		for _, p := range chat.Pending {
			if p.Kind == baton.PendingSecret {
				return m.secret(baton.ToolCallPayload{UIEventID: p.UIEventID})
			}
		}
	case baton.ChatWaitingInput:
		return m.finish(&aguiOutcome{Type: "success"}, map[string]any{"waiting": "input"})
	case baton.ChatFailed:
		return m.runError("the chat's run failed; resume it (POST /api/chats/{app}/{chat_id}/resume) or send a message", "failed")
	case baton.ChatCancelled:
		return m.finish(&aguiOutcome{Type: "cancelled"}, map[string]any{"status": "cancelled"})
	}
	return m.finish(&aguiOutcome{Type: "success"}, map[string]any{"status": string(chat.Status)})
}

// toolQuestionID is the AG-UI message id of a tool's question.
func toolQuestionID(p *baton.InputRequestPayload) string { return "toolinput-" + p.RequestID }

// history adds a recorded envelope of the history to the snapshot.
func (m *aguiMapper) history(f *Followed) {
	switch f.Type {
	case baton.TypeChatInputRequest:
		var p baton.InputRequestPayload
		if json.Unmarshal(f.Data, &p) == nil && p.ToolCallID != "" && p.Prompt != "" {
			m.msgs = append(m.msgs, aguiMessage{ID: toolQuestionID(&p), Role: "assistant", Name: p.Agent, Content: jsonString(p.Prompt)})
		}
	case baton.TypeChatText:
		var p aguiTextData
		if json.Unmarshal(f.Data, &p) != nil || p.UIHidden || p.Feedback || p.Agent == "system" {
			return
		}
		if p.Agent == workflow.UserAgent {
			m.msgs = append(m.msgs, aguiMessage{ID: m.userID(&p), Role: "user", Content: jsonString(p.Content)})
			return
		}
		if p.ToolOnly {
			return // its calls make its message (assistantFor)
		}
		id := p.AgentMessageID
		if id == "" {
			id = "seq-" + seqString(p.Sequence)
		}
		m.byID[id] = len(m.msgs)
		m.msgs = append(m.msgs, aguiMessage{ID: id, Role: "assistant", Name: p.Agent, Content: jsonString(p.Content)})
	case baton.TypeChatToolCall:
		var p baton.ToolCallPayload
		if json.Unmarshal(f.Data, &p) != nil || p.UIHidden || p.PendingKind == baton.PendingSecret || p.ToolCallID == "" || m.tools[p.ToolCallID] {
			return
		}
		if p.InteractionType == "lifecycle" && p.ComponentType == "SecretsInput" {
			return
		}
		m.tools[p.ToolCallID] = true
		id := p.AgentMessageID
		if id == "" {
			id = "call-" + p.ToolCallID
		}
		i, ok := m.byID[id]
		if !ok {
			i = len(m.msgs)
			m.byID[id] = i
			m.msgs = append(m.msgs, aguiMessage{ID: id, Role: "assistant", Name: p.Agent})
		}
		args := strings.TrimSpace(string(p.Arguments))
		if args == "" || args == "null" {
			args = "{}"
		}
		tc := aguiToolCall{ID: p.ToolCallID, Type: "function", Metadata: uiMetadata(&p)}
		tc.Function.Name, tc.Function.Arguments = p.ToolName, args
		m.msgs[i].ToolCalls = append(m.msgs[i].ToolCalls, tc)
	case baton.TypeChatToolResponse:
		var p baton.ToolResponsePayload
		if json.Unmarshal(f.Data, &p) != nil || p.UIHidden || !m.tools[p.ToolCallID] {
			return
		}
		id := "result-" + p.ToolCallID
		if own, ok := m.own[p.InputID]; ok && p.InputID != "" {
			id = own
		}
		m.msgs = append(m.msgs, aguiMessage{ID: id, Role: "tool", ToolCallID: p.ToolCallID, Content: jsonString(p.Content)})
	}
}

// messagesSnapshot sends MESSAGES_SNAPSHOT of the history added.
func (m *aguiMapper) messagesSnapshot() error {
	msgs := m.msgs
	if msgs == nil {
		msgs = []aguiMessage{}
	}
	return m.emit(aguiMessagesSnapshotEvent{Type: aguiMessagesSnapshot, Messages: msgs})
}

// jsonString encodes s as a JSON string.
func jsonString(s string) json.RawMessage {
	return baton.AppendJSONString(nil, s)
}
