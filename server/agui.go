package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton"
)

// AG-UI (https://docs.ag-ui.com, @ag-ui/core 1.0.0): POST /agui/{app}/{workflow}
// takes a RunAgentInput and answers with a text/event-stream of AG-UI
// events. The thread is a chat of the workflow, in the caller's scope; the
// events are the chat's events a client may see (follow: the envelope
// filter of the WebSocket and SSE streams), mapped by aguiMapper
// (agui_map.go). docs/agui.md describes the mapping for users.

// aguiInput is AG-UI's RunAgentInput. Fields AG-UI may add later are
// ignored (its schema is open), but a known field of the wrong type is
// refused, naming it.
type aguiInput struct {
	ThreadID       string          `json:"threadId"`
	RunID          string          `json:"runId"`
	ParentRunID    string          `json:"parentRunId,omitempty"`
	State          json.RawMessage `json:"state,omitempty"`
	Messages       []aguiMessage   `json:"messages"`
	Tools          []aguiTool      `json:"tools,omitempty"`
	Context        []aguiContext   `json:"context,omitempty"`
	ForwardedProps json.RawMessage `json:"forwardedProps,omitempty"`
}

// aguiMessage is one message of RunAgentInput.messages (and of a
// MESSAGES_SNAPSHOT). Content is a string, or for a user or tool message an
// array of content parts, of which the text parts are read.
type aguiMessage struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []aguiToolCall  `json:"toolCalls,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
	Error      string          `json:"error,omitempty"`

	text string // Content's text, set by check
}

// aguiToolCall is a call in an assistant message.
type aguiToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
	Metadata map[string]any `json:"metadata,omitempty"` // a UI tool's component (uiMetadata)
}

// aguiTool is a tool the client offers (RunAgentInput.tools).
type aguiTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// clientTools returns the tools the run offers (RunAgentInput.tools), for
// the agents that may use them; none is an empty set, which replaces the
// chat's: AG-UI sends the client's tools with every run.
func (in *aguiInput) clientTools() []baton.ClientTool {
	out := make([]baton.ClientTool, len(in.Tools))
	for i, t := range in.Tools {
		out[i] = baton.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
	}
	return out
}

// aguiContext is a piece of ambient information (RunAgentInput.context).
type aguiContext struct {
	Description string `json:"description"`
	Value       string `json:"value"`
}

// Limits of a RunAgentInput.
const (
	maxAGUIID       = 256 // threadId, runId, a message's id and toolCallId
	maxAGUIMessages = 10000
)

// decodeAGUIInput decodes and checks a RunAgentInput, naming the field at
// fault in its error.
func decodeAGUIInput(data []byte) (*aguiInput, error) {
	if !utf8.Valid(data) {
		return nil, baton.Errorf(baton.EINVALID, "body: not valid UTF-8")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, baton.Errorf(baton.EINVALID, "body: required (a RunAgentInput JSON object)")
	}
	var in aguiInput
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&in); err != nil {
		return nil, jsonError("body", data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, baton.Errorf(baton.EINVALID, "body: unexpected data after the JSON object")
	}
	if err := in.check(); err != nil {
		return nil, err
	}
	return &in, nil
}

// checkAGUIID checks an id the client chose.
func checkAGUIID(field, id string) error {
	switch {
	case id == "":
		return baton.Errorf(baton.EINVALID, "%s: required (a non-empty string)", field)
	case len(id) > maxAGUIID:
		return baton.Errorf(baton.EINVALID, "%s: longer than %d bytes", field, maxAGUIID)
	}
	for _, c := range id {
		if c < 0x20 || c == 0x7f {
			return baton.Errorf(baton.EINVALID, "%s: contains a control character", field)
		}
	}
	return nil
}

func (in *aguiInput) check() error {
	if err := checkAGUIID("threadId", in.ThreadID); err != nil {
		return err
	}
	if err := checkAGUIID("runId", in.RunID); err != nil {
		return err
	}
	if in.Messages == nil {
		return baton.Errorf(baton.EINVALID, "messages: required (an array, which may be empty)")
	}
	if len(in.Messages) > maxAGUIMessages {
		return baton.Errorf(baton.EINVALID, "messages: more than %d messages", maxAGUIMessages)
	}
	for i := range in.Messages {
		if err := in.Messages[i].check(fmt.Sprintf("messages[%d]", i)); err != nil {
			return err
		}
	}
	for i, t := range in.Tools {
		if t.Name == "" {
			return baton.Errorf(baton.EINVALID, "tools[%d].name: required", i)
		}
	}
	if st := bytes.TrimSpace(in.State); len(st) > 0 && !bytes.Equal(st, []byte("null")) && st[0] != '{' {
		return baton.Errorf(baton.EINVALID, "state: must be an object (the workflow's client-settable context variables) or null")
	}
	return nil
}

func (m *aguiMessage) check(field string) error {
	if err := checkAGUIID(field+".id", m.ID); err != nil {
		return err
	}
	switch m.Role {
	case "user", "tool", "assistant", "system", "developer", "activity", "reasoning":
	case "":
		return baton.Errorf(baton.EINVALID, "%s.role: required", field)
	default:
		return baton.Errorf(baton.EINVALID, "%s.role: %q is not user, assistant, tool, system, developer, activity or reasoning", field, truncate(m.Role, 64))
	}
	c := bytes.TrimSpace(m.Content)
	switch {
	case len(c) == 0 || bytes.Equal(c, []byte("null")):
		if m.Role == "user" || m.Role == "tool" {
			return baton.Errorf(baton.EINVALID, "%s.content: required", field)
		}
	case c[0] == '"':
		if err := json.Unmarshal(c, &m.text); err != nil {
			return baton.Errorf(baton.EINVALID, "%s.content: %v", field, err)
		}
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return baton.Errorf(baton.EINVALID, "%s.content: must be a string or an array of content parts", field)
		}
		var texts []string
		for j, p := range parts {
			switch p.Type {
			case "text":
				texts = append(texts, p.Text)
			case "":
				return baton.Errorf(baton.EINVALID, "%s.content[%d].type: required", field, j)
			}
		}
		m.text = strings.Join(texts, "\n")
	case m.Role == "activity":
	default:
		return baton.Errorf(baton.EINVALID, "%s.content: must be a string or an array of content parts", field)
	}
	if m.Role == "tool" {
		if err := checkAGUIID(field+".toolCallId", m.ToolCallID); err != nil {
			return err
		}
	}
	return nil
}

// newestInput returns the input's last message when it is a user or a tool
// message (what a run continues the thread with), and its index; -1 when
// the last message is another role's (or there is none): a reconnect.
func (in *aguiInput) newestInput() int {
	n := len(in.Messages) - 1
	if n >= 0 && (in.Messages[n].Role == "user" || in.Messages[n].Role == "tool") {
		return n
	}
	return -1
}

// aguiChatID is the chat of thread threadID of workflow wf in scope. It is
// derived, not stored: a client chooses its thread ids, so a thread id is
// never used as a chat id itself (two tenants' "thread-1" must be two
// chats, and a chosen id must not collide with another chat's), and the
// derivation needs no mapping table that could be lost.
func aguiChatID(scope baton.Scope, wf, threadID string) string {
	return inputEventID(scope, "agui:"+wf, threadID)
}

// aguiInputKey is the idempotency key of an AG-UI message submitted to a
// chat (inputEventID derives the input's event id from it): the same
// message id is one input however often the client sends it.
func aguiInputKey(messageID string) string { return "agui:" + messageID }

func (s *Server) handleAGUI(w http.ResponseWriter, r *http.Request) {
	if err := s.agui(w, r); err != nil {
		s.writeError(w, r, err)
	}
}

// agui serves one AG-UI run. Errors before the stream starts are answered
// as JSON errors with their status; after, as RUN_ERROR.
func (s *Server) agui(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, r.PathValue("app"))
	if err != nil {
		return err
	}
	if err := s.needEngine(); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return baton.Errorf(codeTooLarge, "body: larger than %d bytes", mbe.Limit)
		}
		return baton.Errorf(baton.EINVALID, "body: %v", err)
	}
	in, err := decodeAGUIInput(body)
	if err != nil {
		return err
	}
	wfName := r.PathValue("workflow")
	wf := s.cfg.Engine.Workflow(wfName)
	if wf == nil {
		return baton.Errorf(baton.ENOTFOUND, "workflow %q not found", truncate(wfName, 200))
	}
	if err := s.cfg.Engine.CheckClientTools(wf.Name, in.clientTools()); err != nil {
		return err
	}
	// The stream's slot first: an input is not sent for a run that cannot
	// be streamed.
	slot, err := s.acquireStream(p)
	if err != nil {
		return err
	}
	defer slot.release()
	ctx := withFollower(r.Context(), p) // follow re-checks p's key
	chatID := aguiChatID(p.scope, wf.Name, in.ThreadID)
	m := newAGUIMapper(in, wf, p.scope, chatID, webURL(r, chatID))

	var from int64   // the sequence after which the run's events are live
	replay := false  // a reconnect: a MESSAGES_SNAPSHOT of the history first
	waiting := false // nothing new was sent to a chat that waits: the run ends after the snapshot
	chat, err := s.chatIn(ctx, p.scope, chatID)
	switch {
	case baton.ErrorCode(err) == baton.ENOTFOUND:
		if chat, err = s.aguiStart(ctx, p.scope, wf.Name, in, chatID); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		from = chat.LastSequence
		sent, err := s.aguiContinue(ctx, p.scope, chat, in, m)
		if err != nil {
			return err
		}
		if !sent {
			replay = true
			if chat, waiting, err = s.aguiWaits(ctx, p.scope, chatID); err != nil {
				return err
			}
			from = chat.LastSequence
		}
	}

	out, err := startAGUIStream(w, s.cfg.WriteTimeout)
	if err != nil {
		return nil // the client is gone
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	var hb sync.WaitGroup
	hb.Go(func() { _ = out.heartbeats(hbCtx, s.cfg.Heartbeat, ": heartbeat\n\n") })
	defer func() { stopHB(); hb.Wait() }()

	m.emit, m.batch = out.event, out
	err = s.aguiRun(ctx, p.scope, chat, from, replay, waiting, m)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("server: AG-UI run", "chat_id", chatID, "err", err)
		// The stream is open: the error becomes RUN_ERROR, never a JSON body.
		_ = m.fail(err)
	}
	return nil
}

// aguiWaits reads the chat for a reconnect and reports whether it waits
// for the person (or has ended): then the run ends after the snapshot. A
// chat whose inbox holds an input not yet taken (a response just sent
// through the web UI) does not wait: its run is about to go on. The inbox
// is read before the chat, so that an input taken in between shows in the
// chat's status.
func (s *Server) aguiWaits(ctx context.Context, scope baton.Scope, chatID string) (baton.Chat, bool, error) {
	inputs, err := s.cfg.Store.Inputs(ctx, scope, chatID)
	if err != nil {
		return baton.Chat{}, false, err
	}
	chat, err := s.chatIn(ctx, scope, chatID)
	if err != nil {
		return baton.Chat{}, false, err
	}
	return chat, chat.Status != baton.ChatRunning && !takesInput(chat, inputs), nil
}

// takesInput reports whether the chat's run is about to take one of its
// inbox's inputs. While a tool waits for the person's answer (a pending
// tool_input request), only a message that answers it
// (baton.AnswersToolInput, the rule the engine applies) makes the chat go
// on: one accepted before the question stays queued until the call ends.
func takesInput(chat baton.Chat, inputs []baton.Input) bool {
	var asked *baton.PendingRequest
	for i := range chat.Pending {
		if chat.Pending[i].Kind == baton.PendingToolInput {
			asked = &chat.Pending[i]
		}
	}
	for _, in := range inputs {
		if asked == nil || in.Event.Type != baton.TypeUserQuery || baton.AnswersToolInput(*asked, in) {
			return true
		}
	}
	return false
}

// firstUser returns the index of the input's first user message, or -1.
func (in *aguiInput) firstUser() int {
	for i := range in.Messages {
		if in.Messages[i].Role == "user" {
			return i
		}
	}
	return -1
}

// aguiStart starts the thread's chat: its first user message is the
// start message (for an AgentDriven workflow it replaces the workflow's
// initial message); RunAgentInput.state sets client-settable context
// variables. The start is idempotent by the thread: two first runs of one
// thread start one chat.
func (s *Server) aguiStart(ctx context.Context, scope baton.Scope, wf string, in *aguiInput, chatID string) (baton.Chat, error) {
	opts := baton.StartOptions{ChatID: chatID, ClientTools: in.clientTools()}
	if n, last := in.firstUser(), in.newestInput(); last > n && n >= 0 {
		// The chat starts with one message: a later one would be lost.
		return baton.Chat{}, baton.Errorf(baton.EINVALID, "messages[%d]: the thread has no chat yet; its first run starts it with its first user message (messages[%d]): send the later ones in the next runs", last, n)
	}
	if n := in.firstUser(); n >= 0 {
		opts.Message = strings.TrimSpace(in.Messages[n].text)
		if len(opts.Message) > maxContent {
			return baton.Chat{}, baton.Errorf(baton.EINVALID, "messages[%d].content: longer than %d bytes", n, maxContent)
		}
	}
	if st := bytes.TrimSpace(in.State); len(st) > 0 && !bytes.Equal(st, []byte("null")) {
		if err := json.Unmarshal(st, &opts.Context); err != nil {
			return baton.Chat{}, baton.Errorf(baton.EINVALID, "state: %v", err)
		}
		if len(opts.Context) == 0 {
			opts.Context = nil
		}
	}
	chat, _, err := s.cfg.Engine.StartOnce(ctx, scope, wf, inputEventID(scope, "agui-thread:"+wf, in.ThreadID), opts)
	if err != nil {
		switch code := baton.ErrorCode(err); code {
		case baton.ECONFLICT:
			// The thread's chat id is taken by a chat that was deleted
			// (the store keeps it, soft-deleted), or this thread's first
			// run is being retried with another start message or state.
			return baton.Chat{}, baton.Errorf(code, "threadId: %q names a chat that was deleted, or was started with another first message or state: use a new threadId", truncate(in.ThreadID, maxAGUIID))
		case baton.EINVALID:
			// The engine names context variables as "context.x": for AG-UI
			// they are the state's.
			return baton.Chat{}, baton.Errorf(code, "%s", strings.Replace(err.Error(), "context.", "state.", 1))
		}
		return baton.Chat{}, err
	}
	return chat, nil
}

// aguiContinue sends the run's newest user or tool message to a known
// thread's chat, unless the chat has it already (a retry, or a reconnect
// with the same input). It reports whether it sent something; it records
// in m the client's ids of the messages it knows, so that the stream does
// not echo them.
func (s *Server) aguiContinue(ctx context.Context, scope baton.Scope, chat baton.Chat, in *aguiInput, m *aguiMapper) (bool, error) {
	for i := range in.Messages {
		msg := &in.Messages[i]
		if msg.Role == "user" || msg.Role == "tool" {
			m.own[inputEventID(scope, chat.ID, aguiInputKey(msg.ID))] = msg.ID
		}
	}
	n := in.newestInput()
	if n < 0 {
		return false, nil
	}
	msg := &in.Messages[n]
	field := fmt.Sprintf("messages[%d]", n)
	if msg.Role == "tool" {
		var pending *baton.PendingRequest
		for i := range chat.Pending {
			if chat.Pending[i].ToolCallID == msg.ToolCallID && (chat.Pending[i].Kind == baton.PendingUITool || chat.Pending[i].Kind == baton.PendingClientTool) {
				pending = &chat.Pending[i]
			}
		}
		if pending == nil {
			// Answered before (this is a retry or a reconnect), or no UI
			// tool of this chat: either way nothing waits for it.
			return false, nil
		}
		data := json.RawMessage(msg.text)
		if !json.Valid(data) || pending.Kind == baton.PendingClientTool {
			// A plain-text result is a JSON string; a client tool's result
			// is the content as the client gave it, JSON or not.
			data, _ = json.Marshal(msg.text)
		}
		status := "success"
		if msg.Error != "" {
			status = "error"
		}
		err := s.input(ctx, scope, chat.ID, clientMessage{Type: msgUIResponse, ID: aguiInputKey(msg.ID), UIEventID: pending.UIEventID, Status: status, Data: data,
			offers: true, tools: in.clientTools()}, "agui")
		return err == nil, renameField(err, "data", field+".content")
	}
	// A user message.
	recorded, err := s.aguiRecorded(ctx, scope, chat, inputEventID(scope, chat.ID, aguiInputKey(msg.ID)), in, n)
	if err != nil || recorded {
		return false, err
	}
	for _, p := range chat.Pending {
		if p.Kind == baton.PendingSecret {
			return false, baton.Errorf(baton.ECONFLICT, "%s: the chat waits for a secret form, which is never answered over AG-UI: answer it in the web UI (%s)", field, m.webURL)
		}
		if p.Kind == baton.PendingUITool || p.Kind == baton.PendingClientTool {
			return false, baton.Errorf(baton.ECONFLICT, "%s: the chat waits for the result of tool call %q: send it as a tool message with that toolCallId", field, p.ToolCallID)
		}
	}
	content := msg.text
	err = s.input(ctx, scope, chat.ID, clientMessage{Type: msgSubmit, ID: aguiInputKey(msg.ID), Content: &content, offers: true, tools: in.clientTools()}, "agui")
	return err == nil, renameField(err, "content", field+".content")
}

// renameField makes an input error name the AG-UI field it came from.
func renameField(err error, from, to string) error {
	if err == nil || baton.ErrorCode(err) != baton.EINVALID {
		return err
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, from+":"); ok {
		return baton.Errorf(baton.EINVALID, "%s:%s", to, rest)
	}
	return err
}

// aguiRecorded reports whether the chat recorded the person's message
// in.Messages[n], of input id inputID. It reads the history backwards a
// page at a time and stops at the record of the client's previous user
// message: the newest message comes after it, so a retry is found in the
// first page or two, and a new message costs no more. The thread's first
// user message is recorded when it started the chat (aguiStart): the
// chat's start message, with its content.
func (s *Server) aguiRecorded(ctx context.Context, scope baton.Scope, chat baton.Chat, inputID string, in *aguiInput, n int) (bool, error) {
	content := strings.TrimSpace(in.Messages[n].text)
	prev := ""
	for i := n - 1; i >= 0; i-- {
		if in.Messages[i].Role == "user" {
			prev = inputEventID(scope, chat.ID, aguiInputKey(in.Messages[i].ID))
			break
		}
	}
	const page = 64
	for end := chat.LastSequence; end > 0; end -= page {
		evs, err := s.cfg.Store.Events(ctx, scope, chat.ID, max(end-page, 0), int(min(end, page)))
		if err != nil {
			return false, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type != baton.TypeChatText {
				continue
			}
			var t struct {
				Agent   string `json:"agent"`
				InputID string `json:"input_id"`
				Source  string `json:"source"`
				Content string `json:"content"`
			}
			if json.Unmarshal(evs[i].Payload, &t) != nil || t.Agent != "user" {
				continue
			}
			switch {
			case t.InputID == inputID:
				return true, nil
			case prev != "" && t.InputID == prev:
				return false, nil
			case prev == "" && t.Source == sourceStart && t.Content == content:
				return true, nil
			}
		}
	}
	return false, nil
}

// webURL is the web UI's page of the chat on this server, for what cannot
// be answered over a protocol adapter (a secret form).
func webURL(r *http.Request, chatID string) string {
	return requestOrigin(r) + "/#chat=" + chatID
}

// requestOrigin is the scheme and host the client addressed r to: https
// when r came over TLS or through a TLS proxy (X-Forwarded-Proto).
func requestOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// aguiStream writes AG-UI events as Server-Sent Events ("data: <json>"),
// and comment heartbeats between them, one writer at a time.
type aguiStream struct {
	lockedEventStream
	buf []byte // event's, under mu
}

// startAGUIStream sends the stream's headers.
func startAGUIStream(w http.ResponseWriter, timeout time.Duration) (*aguiStream, error) {
	out := &aguiStream{lockedEventStream: lockedEventStream{es: newEventStream(w, timeout)}, buf: make([]byte, 0, 1024)}
	return out, out.write(nil)
}

// aguiRaw is an AG-UI event encoded already (the deltas, by hand: they are
// most of a stream).
type aguiRaw []byte

// event writes one AG-UI event.
func (o *aguiStream) event(ev any) error {
	raw, ok := ev.(aguiRaw)
	if !ok {
		var err error
		if raw, err = json.Marshal(ev); err != nil {
			return fmt.Errorf("agui: encode event: %w", err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf[:0], "data: "...)
	o.buf = append(o.buf, raw...) // compact JSON: one line
	o.buf = append(o.buf, "\n\n"...)
	return o.writeLocked(o.buf)
}

// aguiRun streams the run: RUN_STARTED, the state, on a reconnect the
// history up to from as MESSAGES_SNAPSHOT, then the chat's events after
// from as they come, until the segment ends (RUN_FINISHED or RUN_ERROR).
func (s *Server) aguiRun(ctx context.Context, scope baton.Scope, chat baton.Chat, from int64, replay, waiting bool, m *aguiMapper) error {
	if err := m.started(); err != nil {
		return err
	}
	// The state as it was at from: the deltas after it follow.
	if err := m.stateSnapshot(chat.Context); err != nil {
		return err
	}
	if replay {
		if err := s.aguiSnapshot(ctx, scope, chat, from, m); err != nil {
			return err
		}
		if waiting {
			return m.endWaiting(chat)
		}
	}
	return s.followBatched(ctx, scope, chat, from, m.batch, func(seq int64, typ string, envelope []byte, subscription int) error {
		done, err := m.liveEnvelope(seq, typ, envelope, subscription)
		if err != nil {
			return err
		}
		if done {
			return errStopFollow
		}
		return nil
	})
}

// aguiSnapshot sends MESSAGES_SNAPSHOT of the chat's visible messages up
// to sequence last, read from the store through the envelope filter.
func (s *Server) aguiSnapshot(ctx context.Context, scope baton.Scope, chat baton.Chat, last int64, m *aguiMapper) error {
	wf := s.workflowOf(chat.Workflow)
	var buf []byte
	for after := int64(0); after < last; {
		evs, err := s.cfg.Store.Events(ctx, scope, chat.ID, after, int(min(last-after, replayPage)))
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for i := range evs {
			after = evs[i].Sequence
			var ok bool
			if buf, ok = appendEnvelope(buf[:0], wf, &evs[i]); !ok {
				continue
			}
			var f Followed
			if err := json.Unmarshal(buf, &f.Envelope); err != nil {
				return fmt.Errorf("agui snapshot of chat %s: decode envelope: %w", chat.ID, err)
			}
			f.Sequence = evs[i].Sequence
			m.history(&f)
		}
	}
	return m.messagesSnapshot()
}

// sourceStart is the source of a chat's start message given by the client
// (StartOptions.Message), as the engine records it.
const sourceStart = "api"

// seqString is a sequence as an id suffix.
func seqString(n int64) string { return strconv.FormatInt(n, 10) }
