package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// The A2A adapter: every workflow of an app is an Agent2Agent agent at
// /a2a/{app}/{workflow}, its agent card under that path's
// /.well-known/agent-card.json. The JSON-RPC transport is a2a-go's
// (a2asrv.NewJSONRPCHandler); the RequestHandler behind it is baton's own,
// not a2a-go's default one, which keeps tasks in a TaskStore and runs an
// AgentExecutor through in-memory event queues: here a task is a chat run,
// read from the store and followed through s.follow, so nothing is kept
// twice and a task survives a restart of the server.
//
// Task ids: a chat's runs are counted from 1, a run ending with a terminal
// event (chat.run_complete or chat.error); the task of run n of chat c is
// "c.n", its contextId c. A message to a chat whose last run ended failed or
// cancelled starts run n+1 in the same context. The ids are derived from
// the recorded events alone, so any instance answers for any task.

// a2aProtocolVersion is the A2A protocol version a2a-go v0.3.x speaks.
const a2aProtocolVersion = "0.3.0"

// Metadata keys baton adds to the A2A objects it sends, and reads from
// the ones it receives.
const (
	// a2aSeqKey is the chat sequence of the recorded event an A2A event
	// came from (absent for streamed deltas, which are not recorded); in a
	// task's metadata, the last sequence the task reflects.
	a2aSeqKey = "baton_sequence"
	// a2aLastSeqKey, in tasks/resubscribe's metadata, is the last
	// baton_sequence the client saw: the stream goes on after it, with
	// no gap and no duplicate. Without it the stream starts with the task
	// as it stands.
	a2aLastSeqKey = "baton_last_sequence"
	// a2aUIEventKey names, in a message's metadata, the pending UI tool or
	// secret form the message's data part answers (default: the oldest).
	a2aUIEventKey = "ui_event_id"
	// a2aStatusKey is a UI tool response's status (success, error,
	// cancelled); default success.
	a2aStatusKey = "status"
)

// handleA2ACard serves a workflow's agent card. It needs a key like every
// route (another app's workflow is not found); ADK and a2a-go clients send
// one with the card request (docs/a2a.md).
func (s *Server) handleA2ACard(w http.ResponseWriter, r *http.Request) {
	wf, _, err := s.a2aWorkflow(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a2aCard(wf, a2aEndpoint(r)))
}

// handleA2A serves the JSON-RPC endpoint of a workflow's agent.
func (s *Server) handleA2A(w http.ResponseWriter, r *http.Request) {
	wf, p, err := s.a2aWorkflow(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	if s.cfg.WriteTimeout > 0 {
		// a2a-go's SSE writer sets no deadline: each write gets one, so a
		// client that stops reading frees its stream.
		w = &a2aDeadlineWriter{ResponseWriter: w, dl: writeDeadline{rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout, now: time.Now}}
	}
	a2asrv.NewJSONRPCHandler(&a2aAgent{s: s, p: p, wf: wf, origin: requestOrigin(r)}).ServeHTTP(w, r)
}

// a2aDeadlineWriter keeps a write deadline ahead of each write and flush
// (writeDeadline: at least 15/16 of WriteTimeout). a2a-go writes from
// the handler's goroutine only.
type a2aDeadlineWriter struct {
	http.ResponseWriter
	dl writeDeadline
}

func (d *a2aDeadlineWriter) Write(b []byte) (int, error) {
	d.dl.arm()
	return d.ResponseWriter.Write(b)
}

// Flush flushes with a deadline; a2a-go's SSE writer needs an http.Flusher.
func (d *a2aDeadlineWriter) Flush() {
	d.dl.arm()
	_ = d.dl.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (d *a2aDeadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// a2aWorkflow authenticates r for its app and returns the workflow it names.
func (s *Server) a2aWorkflow(r *http.Request) (*workflow.Workflow, principal, error) {
	p, err := s.principal(r, r.PathValue("app"))
	if err != nil {
		return nil, principal{}, err
	}
	if err := s.needEngine(); err != nil {
		return nil, principal{}, err
	}
	name := r.PathValue("workflow")
	wf := s.cfg.Engine.Workflow(name)
	if wf == nil {
		return nil, principal{}, baton.Errorf(baton.ENOTFOUND, "workflow %q not found", truncate(name, 200))
	}
	return wf, p, nil
}

// a2aEndpoint is the absolute URL of the JSON-RPC endpoint r was sent to
// (the card's url), as the client addressed it.
func a2aEndpoint(r *http.Request) string {
	return requestOrigin(r) + "/a2a/" + r.PathValue("app") + "/" + r.PathValue("workflow")
}

// a2aCard is a workflow's agent card: one skill, the workflow; streaming;
// bearer API keys.
func a2aCard(wf *workflow.Workflow, url string) *a2a.AgentCard {
	version := wf.Config.Version
	if version == "" {
		version = "1.0.0"
	}
	desc := wf.Config.Description
	if desc == "" {
		desc = "The baton workflow " + wf.Name + "."
	}
	out := []string{"text/plain"}
	if len(wf.Models) > 0 {
		out = append(out, "application/json")
	}
	skill := a2a.AgentSkill{
		ID: wf.Name, Name: wf.Name, Description: desc, Tags: []string{"baton", "workflow"},
		InputModes: []string{"text/plain", "application/json"}, OutputModes: out,
	}
	if m := wf.Config.Orchestration.InitialMessage; m != "" {
		skill.Examples = []string{m}
	}
	return &a2a.AgentCard{
		Name: wf.Name, Description: desc, URL: url, Version: version,
		ProtocolVersion:    a2aProtocolVersion,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: out,
		Skills:             []a2a.AgentSkill{skill},
		SecuritySchemes: a2a.NamedSecuritySchemes{
			"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "bearer", BearerFormat: "baton API key",
				Description: "A baton API key (bk_…) of the app: Authorization: Bearer <key>."},
		},
		Security: []a2a.SecurityRequirements{{"bearer": a2a.SecuritySchemeScopes{}}},
	}
}

// a2aAgent is one request's a2asrv.RequestHandler: the caller's principal
// and the workflow the URL names.
type a2aAgent struct {
	s      *Server
	p      principal
	wf     *workflow.Workflow
	origin string // the scheme and host the client addressed, for web UI links
}

var _ a2asrv.RequestHandler = (*a2aAgent)(nil)

// a2aTaskID is a task's id: the chat and the run's ordinal (from 1).
type a2aTaskID struct {
	chat string
	run  int
}

func (t a2aTaskID) String() string { return t.chat + "." + strconv.Itoa(t.run) }

// parseA2ATask parses a task id; a malformed one is an unknown task.
func parseA2ATask(id a2a.TaskID) (a2aTaskID, error) {
	s := string(id)
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || len(s) > baton.MaxEventIDLen+12 {
		return a2aTaskID{}, a2aNotFound(s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 || strconv.Itoa(n) != s[i+1:] {
		return a2aTaskID{}, a2aNotFound(s)
	}
	return a2aTaskID{chat: s[:i], run: n}, nil
}

func a2aNotFound(id string) error {
	return fmt.Errorf("%w: task %q", a2a.ErrTaskNotFound, truncate(id, baton.MaxEventIDLen))
}

func a2aInvalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", a2a.ErrInvalidParams, fmt.Sprintf(format, args...))
}

// a2aError turns a baton error into the A2A error a client gets: its
// message where it is one for clients, never an internal cause.
func (h *a2aAgent) a2aError(ctx context.Context, err error) error {
	var be *baton.Error
	if !errors.As(err, &be) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		h.s.log.ErrorContext(ctx, "a2a request failed", "err", err)
		return a2a.ErrInternalError
	}
	switch be.Code {
	case baton.ENOTFOUND:
		return fmt.Errorf("%w: %s", a2a.ErrTaskNotFound, be.Message)
	case baton.EINVALID, baton.ETOOLARGE:
		return fmt.Errorf("%w: %s", a2a.ErrInvalidParams, be.Message)
	case baton.ECONFLICT:
		return fmt.Errorf("%w: %s", a2a.ErrUnsupportedOperation, be.Message)
	case baton.EUNAVAILABLE, baton.ERATELIMITED, baton.EUNAUTHORIZED:
		// EUNAUTHORIZED: the key was revoked during a follow (A2A has no
		// error of its own for it).
		return fmt.Errorf("%w: %s", a2a.ErrServerError, be.Message)
	}
	h.s.log.ErrorContext(ctx, "a2a request failed", "err", err)
	return a2a.ErrInternalError
}

// chat returns the chat of task id, in the caller's scope and of this
// workflow; anything else is an unknown task.
func (h *a2aAgent) chat(ctx context.Context, id a2aTaskID) (baton.Chat, error) {
	c, err := h.s.chatIn(ctx, h.p.scope, id.chat)
	if err != nil {
		if baton.ErrorCode(err) == baton.ENOTFOUND {
			return baton.Chat{}, a2aNotFound(id.String())
		}
		return baton.Chat{}, h.a2aError(ctx, err)
	}
	if c.Workflow != h.wf.Name {
		return baton.Chat{}, a2aNotFound(id.String())
	}
	return c, nil
}

// terminal reports whether a chat's status ends its current run.
func terminal(st baton.ChatStatus) bool {
	return st == baton.ChatCompleted || st == baton.ChatFailed || st == baton.ChatCancelled
}

// runs counts a chat's ended runs. With a key, it also finds the input an
// A2A message with that key was recorded as (a person's chat.text, or a
// UI tool's or form's chat.tool_response, whose input_id is derived from
// the key): applied, its sequence, and the ended runs before it.
func (h *a2aAgent) runs(ctx context.Context, chat baton.Chat, key string) (ended int, applied int64, endedBefore int, err error) {
	msgID := inputEventID(h.p.scope, chat.ID, key)
	for ev, err := range baton.EventsAfter(ctx, h.s.cfg.Store, h.p.scope, chat.ID, 0, replayPage) {
		if err != nil {
			return 0, 0, 0, fmt.Errorf("a2a: read chat %s: %w", chat.ID, err)
		}
		switch ev.Type {
		case baton.TypeChatRunComplete, baton.TypeChatError:
			ended++
		case baton.TypeChatText, baton.TypeChatToolResponse:
			if applied != 0 || key == "" {
				break
			}
			var in struct {
				InputID   string `json:"input_id"`
				UIEventID string `json:"ui_event_id"`
			}
			if json.Unmarshal(ev.Payload, &in) != nil || in.InputID == "" {
				break
			}
			if in.InputID == msgID || (in.UIEventID != "" && in.InputID == inputEventID(h.p.scope, chat.ID, key, in.UIEventID)) {
				applied, endedBefore = ev.Sequence, ended
			}
		}
	}
	return ended, applied, endedBefore, nil
}

// OnSendMessage handles message/send: the message starts a chat, answers
// the task's input request, UI tool or form, or starts the context's next
// run; blocking (the default), it returns the task when its run ends or
// waits for the person again.
func (h *a2aAgent) OnSendMessage(ctx context.Context, params *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	if c := params.Config; c != nil && c.HistoryLength != nil && *c.HistoryLength < 0 {
		return nil, a2aInvalid("configuration.historyLength: must be >= 0") // refused before anything starts
	}
	blocking := params.Config == nil || params.Config.Blocking == nil || *params.Config.Blocking
	if blocking {
		// A blocking send follows the run as a stream does: it holds one
		// of the key's stream slots.
		slot, err := h.s.acquireStream(h.p)
		if err != nil {
			return nil, h.a2aError(ctx, err)
		}
		defer slot.release()
	}
	id, chat, last, err := h.submit(ctx, params)
	if err != nil {
		return nil, err
	}
	if blocking {
		err := h.s.follow(withFollower(ctx, h.p), h.p.scope, chat, last, func(f *Followed) error {
			if f.Sequence != 0 && f.EndsSegment() {
				return errStopFollow
			}
			return nil
		})
		if err != nil {
			return nil, h.a2aError(ctx, err)
		}
	}
	var hl *int
	if params.Config != nil {
		hl = params.Config.HistoryLength
	}
	return h.task(ctx, id, hl)
}

// OnSendMessageStream handles message/stream: the task as it stands, then
// its events as they come (deltas as appended artifact chunks, the agents'
// messages as working status updates), until the run ends or waits for
// the person (a final status update).
func (h *a2aAgent) OnSendMessageStream(ctx context.Context, params *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		slot, err := h.s.acquireStream(h.p)
		if err != nil {
			yield(nil, h.a2aError(ctx, err))
			return
		}
		defer slot.release()
		id, chat, last, err := h.submit(ctx, params)
		if err != nil {
			yield(nil, err)
			return
		}
		t := &a2a.Task{ID: a2a.TaskID(id.String()), ContextID: id.chat, Status: a2a.TaskStatus{State: a2a.TaskStateSubmitted},
			Metadata: map[string]any{a2aSeqKey: last}}
		if params.Message != nil {
			m := *params.Message
			m.TaskID, m.ContextID = t.ID, t.ContextID
			// Only the text comes back: a data part is the client's own
			// data, which the task echoes nowhere else either.
			m.Parts = nil
			for _, p := range params.Message.Parts {
				if tp, ok := p.(a2a.TextPart); ok {
					m.Parts = append(m.Parts, tp)
				}
			}
			t.History = []*a2a.Message{&m}
		}
		if !yield(t, nil) {
			return
		}
		h.stream(ctx, id, chat, last, yield)
	}
}

// OnResubscribeToTask handles tasks/resubscribe: after the metadata's
// baton_last_sequence, the task's events from there; without it, the task
// as it stands, then its events. A task that has ended yields itself.
func (h *a2aAgent) OnResubscribeToTask(ctx context.Context, params *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		id, err := parseA2ATask(params.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		slot, err := h.s.acquireStream(h.p)
		if err != nil {
			yield(nil, h.a2aError(ctx, err))
			return
		}
		defer slot.release()
		chat, err := h.chat(ctx, id)
		if err != nil {
			yield(nil, err)
			return
		}
		last, ok, err := lastSeqParam(params.Metadata)
		if err != nil {
			yield(nil, err)
			return
		}
		if ok {
			snap, err := h.snapshot(ctx, id, chat, nil)
			if err != nil {
				yield(nil, err)
				return
			}
			if last > chat.LastSequence {
				yield(nil, a2aInvalid("metadata.%s: %d is after the chat's last sequence %d", a2aLastSeqKey, last, chat.LastSequence))
				return
			}
			if last < snap.start {
				last = snap.start
			}
			if snap.task.Status.State.Terminal() && last >= snap.end {
				yield(snap.task, nil)
				return
			}
		} else {
			snap, err := h.snapshot(ctx, id, chat, nil)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(snap.task, nil) || snap.task.Status.State.Terminal() {
				return
			}
			last = snap.last
		}
		h.stream(ctx, id, chat, last, yield)
	}
}

// lastSeqParam reads baton_last_sequence from a request's metadata.
func lastSeqParam(md map[string]any) (int64, bool, error) {
	v, ok := md[a2aLastSeqKey]
	if !ok {
		return 0, false, nil
	}
	f, isNum := v.(float64)
	if !isNum || f < 0 || f != float64(int64(f)) {
		return 0, false, a2aInvalid("metadata.%s: must be a sequence (an integer >= 0)", a2aLastSeqKey)
	}
	return int64(f), true, nil
}

// stream yields task id's events after sequence last until a final one.
func (h *a2aAgent) stream(ctx context.Context, id a2aTaskID, chat baton.Chat, last int64, yield func(a2a.Event, error) bool) {
	conv := newA2AConv(id)
	stopped := false
	err := h.s.followEnvelopes(withFollower(ctx, h.p), h.p.scope, chat, last, func(seq int64, typ string, envelope []byte, subscription int) error {
		if typ == baton.TypeStreamText {
			// Most of a streamed reply: read without reflection when the
			// envelope has the hub's shape (decodeStreamText), not twice
			// (follow's envelope, then its data) as the other events are.
			if d, ok := decodeStreamText(envelope); ok {
				if ev := conv.delta(d.MessageID, d.Agent, d.Delta); ev != nil && !yield(ev, nil) {
					stopped = true
					return errStopFollow
				}
				return nil
			}
		}
		f := Followed{Sequence: seq, Subscription: subscription}
		if err := json.Unmarshal(envelope, &f.Envelope); err != nil {
			return fmt.Errorf("a2a: follow chat %s: decode envelope: %w", chat.ID, err)
		}
		evs, final := conv.events(&f)
		for _, ev := range evs {
			if !yield(ev, nil) {
				stopped = true
				return errStopFollow
			}
		}
		if final {
			return errStopFollow
		}
		return nil
	})
	if err != nil && !stopped && ctx.Err() == nil {
		yield(nil, h.a2aError(ctx, err))
	}
}

// OnGetTask handles tasks/get.
func (h *a2aAgent) OnGetTask(ctx context.Context, q *a2a.TaskQueryParams) (*a2a.Task, error) {
	id, err := parseA2ATask(q.ID)
	if err != nil {
		return nil, err
	}
	if q.HistoryLength != nil && *q.HistoryLength < 0 {
		return nil, a2aInvalid("historyLength: must be >= 0")
	}
	return h.task(ctx, id, q.HistoryLength)
}

// OnCancelTask handles tasks/cancel: the run stops (the engine's Cancel)
// and the task is returned canceled. Only a running task can be canceled:
// one that waits for the person or has ended is not cancelable.
func (h *a2aAgent) OnCancelTask(ctx context.Context, params *a2a.TaskIDParams) (*a2a.Task, error) {
	id, err := parseA2ATask(params.ID)
	if err != nil {
		return nil, err
	}
	chat, err := h.chat(ctx, id)
	if err != nil {
		return nil, err
	}
	snap, err := h.snapshot(ctx, id, chat, nil)
	if err != nil {
		return nil, err
	}
	switch {
	case snap.task.Status.State == a2a.TaskStateCanceled:
		return snap.task, nil
	case snap.task.Status.State != a2a.TaskStateWorking:
		return nil, fmt.Errorf("%w: task %s is %s: only a working task can be canceled", a2a.ErrTaskNotCancelable, id, snap.task.Status.State)
	}
	if err := h.s.cfg.Engine.Cancel(ctx, h.p.scope, chat.ID); err != nil {
		return nil, h.a2aError(ctx, err)
	}
	// The run stops at its next step; the task is returned once it has,
	// following it in one of the key's stream slots.
	slot, err := h.s.acquireStream(h.p)
	if err != nil {
		return nil, h.a2aError(ctx, err)
	}
	defer slot.release()
	err = h.s.follow(withFollower(ctx, h.p), h.p.scope, chat, snap.last, func(f *Followed) error {
		if f.Sequence != 0 && f.EndsSegment() {
			return errStopFollow
		}
		return nil
	})
	if err != nil {
		return nil, h.a2aError(ctx, err)
	}
	return h.task(ctx, id, nil)
}

// submit applies a message: a new chat (no task or context id), or an
// input of the chat its task or context names. It returns the message's
// task, the chat, and the chat's last sequence before the input, after
// which the task's new events come.
func (h *a2aAgent) submit(ctx context.Context, params *a2a.MessageSendParams) (a2aTaskID, baton.Chat, int64, error) {
	m := params.Message
	switch {
	case m == nil:
		return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message: required")
	case m.ID == "":
		return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.messageId: required")
	case len(m.ID) > 256:
		return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.messageId: longer than 256 bytes")
	case m.Role != a2a.MessageRoleUser:
		return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.role: must be %q", a2a.MessageRoleUser)
	}
	var text []string
	var data map[string]any
	for i, p := range m.Parts {
		switch p := p.(type) {
		case a2a.TextPart:
			text = append(text, p.Text)
		case a2a.DataPart:
			if data != nil {
				return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts[%d]: at most one data part", i)
			}
			data = p.Data
		default:
			return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts[%d]: only text and data parts are accepted", i)
		}
	}
	content := strings.Join(text, "\n")
	// The client's message id is the input's idempotency key: a retry is
	// one input. It is hashed, as clients choose ids freely.
	sum := sha256.Sum256([]byte(m.ID))
	key := "a2a:" + hex.EncodeToString(sum[:16])

	chatID := m.ContextID
	var want *a2aTaskID
	if m.TaskID != "" {
		id, err := parseA2ATask(m.TaskID)
		if err != nil {
			return a2aTaskID{}, baton.Chat{}, 0, err
		}
		if chatID != "" && chatID != id.chat {
			return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.contextId: %q is not the context of task %s", truncate(chatID, 200), id)
		}
		chatID, want = id.chat, &id
	}
	if chatID == "" {
		return h.start(ctx, key, content, data)
	}
	chat, err := h.chat(ctx, a2aTaskID{chat: chatID, run: 1})
	if err != nil {
		return a2aTaskID{}, baton.Chat{}, 0, err
	}
	ended, applied, endedBefore, err := h.runs(ctx, chat, key)
	if err != nil {
		return a2aTaskID{}, baton.Chat{}, 0, h.a2aError(ctx, err)
	}
	if applied != 0 {
		// A retry of a message that was applied: its task, followed from
		// the input on, whatever the chat does now; nothing is sent again.
		return a2aTaskID{chat: chat.ID, run: endedBefore + 1}, chat, applied - 1, nil
	}
	cur := a2aTaskID{chat: chat.ID, run: ended + 1}
	if terminal(chat.Status) {
		cur.run = ended
		if chat.Status == baton.ChatCompleted {
			return a2aTaskID{}, baton.Chat{}, 0, fmt.Errorf("%w: task %s has completed: send the message without taskId and contextId to start a new one", a2a.ErrUnsupportedOperation, cur)
		}
		if want != nil {
			// A failed or canceled task is immutable: the context's next run
			// is a new task, asked for without a taskId.
			return a2aTaskID{}, baton.Chat{}, 0, fmt.Errorf("%w: task %s is %s: send the message with contextId %s and no taskId to go on in a new task", a2a.ErrUnsupportedOperation, cur, a2aState(chat.Status), chat.ID)
		}
		cur.run = ended + 1
	}
	if want != nil && *want != cur {
		if want.run > cur.run {
			return a2aTaskID{}, baton.Chat{}, 0, a2aNotFound(want.String())
		}
		return a2aTaskID{}, baton.Chat{}, 0, fmt.Errorf("%w: task %s has ended; the context's current task is %s", a2a.ErrUnsupportedOperation, want, cur)
	}
	last := chat.LastSequence
	in := clientMessage{ChatID: chat.ID, ID: key}
	if p := pendingClientTool(chat); p != nil {
		// A2A offers no tools: the call is answered by the client
		// application that offered the tool, never here.
		return a2aTaskID{}, baton.Chat{}, 0, fmt.Errorf("%w: task %s waits for the result of %s, a tool the client application offered over AG-UI or Chat Completions, which A2A cannot answer", a2a.ErrUnsupportedOperation, cur, p.ToolName)
	}
	switch chat.Status {
	case baton.ChatWaitingSecret:
		// A secret is typed into the web UI's masked form, never sent
		// through another program (which would see, log or echo it).
		return a2aTaskID{}, baton.Chat{}, 0, fmt.Errorf("%w: task %s waits for a secret form, which is never answered over A2A: answer it in the web UI (%s/#chat=%s)", a2a.ErrUnsupportedOperation, cur, h.origin, chat.ID)
	case baton.ChatWaitingUITool:
		if data == nil {
			return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts: task %s waits for a UI tool or form: answer with a data part (its response)", cur)
		}
		in.Type, in.UIEventID, in.Status = msgUIResponse, metaString(m.Metadata, a2aUIEventKey), metaString(m.Metadata, a2aStatusKey)
		if in.UIEventID == "" {
			for _, p := range chat.Pending {
				if p.Kind == baton.PendingUITool {
					in.UIEventID = p.UIEventID
					break
				}
			}
		}
		if in.Data, err = json.Marshal(data); err != nil {
			return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts: data: %v", err)
		}
	default:
		if data != nil {
			return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts: a data part answers a UI tool or form, and task %s waits for none", cur)
		}
		in.Type, in.Content = msgSubmit, &content
	}
	if err := h.s.input(ctx, h.p.scope, chat.ID, in, "a2a"); err != nil {
		return a2aTaskID{}, baton.Chat{}, 0, h.a2aError(ctx, err)
	}
	return cur, chat, last, nil
}

// start starts a chat of the workflow for a message without a task or
// context: its text is the first message, its data part the start context.
func (h *a2aAgent) start(ctx context.Context, key, content string, data map[string]any) (a2aTaskID, baton.Chat, int64, error) {
	opts := baton.StartOptions{Message: content}
	if len(content) > maxContent {
		return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts: text longer than %d bytes", maxContent)
	}
	if data != nil {
		opts.Context = make(map[string]json.RawMessage, len(data))
		for k, v := range data {
			b, err := json.Marshal(v)
			if err != nil {
				return a2aTaskID{}, baton.Chat{}, 0, a2aInvalid("message.parts: data.%s: %v", k, err)
			}
			opts.Context[k] = b
		}
	}
	opts.ChatID = inputEventID(h.p.scope, "start:"+h.wf.Name, key)
	chat, err := h.startOnce(ctx, key, opts)
	if err != nil {
		return a2aTaskID{}, baton.Chat{}, 0, h.a2aError(ctx, err)
	}
	return a2aTaskID{chat: chat.ID, run: 1}, chat, 0, nil
}

// startOnce starts the chat of a message under its idempotency key. A
// retry that arrives while the first start with the key is still being
// recorded (EUNAVAILABLE; a caller that was restarted mid-send, as the a2a
// tool is after a crash) waits for it, for a few seconds at most, rather
// than fail: an A2A client has no way to tell that error from a failed run.
func (h *a2aAgent) startOnce(ctx context.Context, key string, opts baton.StartOptions) (baton.Chat, error) {
	wait := 20 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		chat, _, err := h.s.cfg.Engine.StartOnce(ctx, h.p.scope, h.wf.Name, key, opts)
		if baton.ErrorCode(err) != baton.EUNAVAILABLE || time.Now().After(deadline) {
			return chat, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return baton.Chat{}, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func metaString(md map[string]any, key string) string {
	s, _ := md[key].(string)
	return s
}

// a2aSnapshot is a task as the store has it.
type a2aSnapshot struct {
	task *a2a.Task
	// start is the sequence after which the task's events come; end, for
	// an ended task, its last event's sequence; last is the last sequence
	// read.
	start, end, last int64
}

// task returns task id as it stands, with at most historyLength messages.
func (h *a2aAgent) task(ctx context.Context, id a2aTaskID, historyLength *int) (*a2a.Task, error) {
	chat, err := h.chat(ctx, id)
	if err != nil {
		return nil, err
	}
	snap, err := h.snapshot(ctx, id, chat, historyLength)
	if err != nil {
		return nil, err
	}
	return snap.task, nil
}

// snapshot folds the recorded events a client may see of task id's run
// into the task: its history (the person's and the visual agents'
// messages), artifacts (structured outputs) and status.
func (h *a2aAgent) snapshot(ctx context.Context, id a2aTaskID, chat baton.Chat, historyLength *int) (*a2aSnapshot, error) {
	conv := newA2AConv(id)
	snap := &a2aSnapshot{task: &a2a.Task{ID: a2a.TaskID(id.String()), ContextID: chat.ID}}
	t := snap.task
	run := 1
	ended := false
	wf := h.s.workflowOf(chat.Workflow)
	for ev, err := range baton.EventsAfter(ctx, h.s.cfg.Store, h.p.scope, chat.ID, 0, replayPage) {
		if err != nil {
			return nil, h.a2aError(ctx, fmt.Errorf("a2a: read chat %s: %w", chat.ID, err))
		}
		snap.last = ev.Sequence
		if run > id.run {
			continue // a later run's: read on only to know the last sequence
		}
		end := ev.Type == baton.TypeChatRunComplete || ev.Type == baton.TypeChatError
		if run == id.run {
			if f := encodeFrame(wf, &ev); f.data != nil {
				var fl Followed
				if err := json.Unmarshal(f.data, &fl.Envelope); err != nil {
					return nil, h.a2aError(ctx, fmt.Errorf("a2a: decode envelope: %w", err))
				}
				fl.Sequence = ev.Sequence
				conv.fold(t, &fl)
			}
			if end {
				snap.end, ended = ev.Sequence, true
			}
		}
		if end {
			run++
			if run == id.run {
				snap.start = ev.Sequence
			}
		}
	}
	switch {
	case id.run > run || (id.run == run && terminal(chat.Status)):
		// No such run yet: a run after an ended one begins only when a
		// message starts it.
		return nil, a2aNotFound(id.String())
	case !ended:
		// The run goes on: its state is the chat's (a status message from
		// the pause, folded above, stays).
		if st := a2aState(chat.Status); st != t.Status.State {
			t.Status = a2a.TaskStatus{State: st}
		}
	}
	// The task stands at the last sequence read: a resubscribe after it
	// goes on with no gap and no duplicate.
	t.Metadata = map[string]any{a2aSeqKey: snap.last}
	if historyLength != nil && *historyLength >= 0 && len(t.History) > *historyLength {
		t.History = t.History[len(t.History)-*historyLength:]
	}
	return snap, nil
}

// a2aState is the task state of a chat status.
func a2aState(st baton.ChatStatus) a2a.TaskState {
	switch st {
	case baton.ChatWaitingInput, baton.ChatWaitingUITool, baton.ChatWaitingSecret:
		return a2a.TaskStateInputRequired
	case baton.ChatCompleted:
		return a2a.TaskStateCompleted
	case baton.ChatFailed:
		return a2a.TaskStateFailed
	case baton.ChatCancelled:
		return a2a.TaskStateCanceled
	}
	return a2a.TaskStateWorking
}

// a2aConv turns a task's followed events into A2A events.
type a2aConv struct {
	id      a2a.TaskID
	ctxID   string
	started map[string]bool // stream message ids whose first chunk was sent
}

func newA2AConv(id a2aTaskID) *a2aConv {
	return &a2aConv{id: a2a.TaskID(id.String()), ctxID: id.chat, started: map[string]bool{}}
}

// a2aData is the part of an envelope's data the conversion reads.
type a2aData struct {
	Agent          string          `json:"agent"`
	Content        string          `json:"content"`
	Delta          string          `json:"delta"`
	MessageID      string          `json:"message_id"`
	AgentMessageID string          `json:"agent_message_id"`
	Prompt         string          `json:"prompt"`
	Status         string          `json:"status"`
	Reason         string          `json:"reason"`
	Message        string          `json:"message"`
	Code           string          `json:"code"`
	Data           json.RawMessage `json:"data"`
	AgentName      string          `json:"agent_name"`
	ToolName       string          `json:"tool_name"`
	UIEventID      string          `json:"ui_event_id"`
	PendingKind    string          `json:"pending_kind"`
	ComponentType  string          `json:"component_type"`
	Payload        json.RawMessage `json:"payload"`
	Arguments      json.RawMessage `json:"arguments"`
	IsVisual       bool            `json:"is_visual"`
	UIHidden       bool            `json:"ui_hidden"`
	ToolOnly       bool            `json:"tool_only"`
	Feedback       bool            `json:"feedback"`
}

// events converts one followed event; final is true for the event that
// ends the stream (the run ended or waits for the person).
func (c *a2aConv) events(f *Followed) (evs []a2a.Event, final bool) {
	var d a2aData
	if err := json.Unmarshal(f.Data, &d); err != nil {
		return nil, false
	}
	md := map[string]any{}
	if f.Sequence != 0 {
		md[a2aSeqKey] = f.Sequence
	}
	status := func(state a2a.TaskState, msg *a2a.Message, final bool) *a2a.TaskStatusUpdateEvent {
		return &a2a.TaskStatusUpdateEvent{TaskID: c.id, ContextID: c.ctxID, Final: final, Metadata: md,
			Status: a2a.TaskStatus{State: state, Message: msg}}
	}
	switch f.Type {
	case baton.TypeStreamText:
		if ev := c.delta(d.MessageID, d.Agent, d.Delta); ev != nil {
			return []a2a.Event{ev}, false
		}
		return nil, false
	case baton.TypeChatText:
		if d.Agent == agentUser || d.Agent == agentSystem || d.UIHidden || d.ToolOnly || d.Feedback || d.Content == "" {
			// The client's own message, the runtime's, one for the model
			// only (a hidden trigger, a tool-only fallback, structured-
			// output feedback), or nothing to say.
			return nil, false
		}
		return []a2a.Event{status(a2a.TaskStateWorking, c.agentMessage(f, d.Agent, a2a.TextPart{Text: d.Content}), false)}, false
	case baton.TypeChatStructuredOutputReady:
		return []a2a.Event{&a2a.TaskArtifactUpdateEvent{TaskID: c.id, ContextID: c.ctxID, LastChunk: true, Metadata: md,
			Artifact: c.structured(f, &d)}}, false
	case baton.TypeChatInputRequest:
		text := d.Prompt
		if text == "" {
			text = d.Agent + " waits for your reply."
		}
		return []a2a.Event{status(a2a.TaskStateInputRequired, c.agentMessage(f, d.Agent, a2a.TextPart{Text: text},
			a2a.DataPart{Data: map[string]any{"kind": baton.PendingInput}}), true)}, true
	case baton.TypeChatToolCall:
		if d.PendingKind == "" {
			return nil, false
		}
		return []a2a.Event{status(a2a.TaskStateInputRequired, c.pendingMessage(f, &d), true)}, true
	case baton.TypeChatRunComplete:
		state := a2a.TaskStateCompleted
		if d.Status == "cancelled" {
			state = a2a.TaskStateCanceled
		}
		var msg *a2a.Message
		if d.Reason != "" {
			msg = c.agentMessage(f, "", a2a.TextPart{Text: d.Reason})
		}
		return []a2a.Event{status(state, msg, true)}, true
	case baton.TypeChatError:
		return []a2a.Event{status(a2a.TaskStateFailed, c.agentMessage(f, d.Agent, a2a.TextPart{Text: d.Message},
			a2a.DataPart{Data: map[string]any{"code": d.Code}}), true)}, true
	}
	return nil, false
}

// delta converts a stream.text delta to an artifact update of the
// message's stream artifact (nil for an empty delta).
func (c *a2aConv) delta(msgID, agent, text string) a2a.Event {
	if text == "" || msgID == "" {
		return nil
	}
	ev := &a2a.TaskArtifactUpdateEvent{TaskID: c.id, ContextID: c.ctxID, Append: c.started[msgID],
		Artifact: &a2a.Artifact{ID: a2a.ArtifactID("stream-" + msgID), Name: agent,
			Parts: a2a.ContentParts{a2a.TextPart{Text: text}}, Metadata: map[string]any{"agent": agent}}}
	c.started[msgID] = true
	return ev
}

// agentMessage is an agent's message of the task, its id the recorded
// event's (stable across replays).
func (c *a2aConv) agentMessage(f *Followed, agent string, parts ...a2a.Part) *a2a.Message {
	id := string(c.id) + "/" + strconv.FormatInt(f.Sequence, 10)
	md := map[string]any{a2aSeqKey: f.Sequence}
	if agent != "" {
		md["agent"] = agent
	}
	return &a2a.Message{ID: id, Role: a2a.MessageRoleAgent, TaskID: c.id, ContextID: c.ctxID, Parts: parts, Metadata: md}
}

// pendingMessage says what a UI tool or secret form waiting for the person
// needs: a text for people, and a data part for programs, with the
// ui_event_id a data-part answer may name in its metadata.
func (c *a2aConv) pendingMessage(f *Followed, d *a2aData) *a2a.Message {
	info := map[string]any{"kind": d.PendingKind, "ui_event_id": d.UIEventID, "tool_name": d.ToolName}
	if d.ComponentType != "" {
		info["component_type"] = d.ComponentType
	}
	if p := jsonValue(d.Payload); p != nil {
		info["payload"] = p
	} else if a := jsonValue(d.Arguments); a != nil {
		info["payload"] = a
	}
	text := fmt.Sprintf("%s waits for the person's response to %s: answer with a data part.", d.Agent, d.ToolName)
	if d.PendingKind == baton.PendingSecret {
		text = fmt.Sprintf("%s needs secrets (%s): the person answers the form in the web UI (/#chat=%s); it is never answered over A2A.", d.Agent, d.ToolName, c.ctxID)
	}
	if d.PendingKind == baton.PendingClientTool {
		text = fmt.Sprintf("%s called %s, a tool the client application offered over AG-UI or Chat Completions: only that client answers it, never A2A.", d.Agent, d.ToolName)
	}
	return c.agentMessage(f, d.Agent, a2a.TextPart{Text: text}, a2a.DataPart{Data: info})
}

// structured is a structured output's artifact: one data part.
func (c *a2aConv) structured(f *Followed, d *a2aData) *a2a.Artifact {
	data, ok := jsonValue(d.Data).(map[string]any)
	if !ok {
		data = map[string]any{"value": jsonValue(d.Data)}
	}
	agent := d.AgentName
	if agent == "" {
		agent = d.Agent
	}
	return &a2a.Artifact{ID: a2a.ArtifactID("structured-" + strconv.FormatInt(f.Sequence, 10)), Name: agent,
		Description: "The structured output of " + agent + ".",
		Parts:       a2a.ContentParts{a2a.DataPart{Data: data}}, Metadata: map[string]any{"agent": agent, a2aSeqKey: f.Sequence}}
}

func jsonValue(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return v
}

// fold applies one recorded event to a task snapshot.
func (c *a2aConv) fold(t *a2a.Task, f *Followed) {
	if f.Type == baton.TypeChatText {
		var d a2aData
		if json.Unmarshal(f.Data, &d) == nil && d.Agent == agentUser && !d.UIHidden && d.Content != "" {
			m := c.agentMessage(f, "", a2a.TextPart{Text: d.Content})
			m.Role = a2a.MessageRoleUser
			t.History = append(t.History, m)
			return
		}
	}
	evs, _ := c.events(f)
	for _, ev := range evs {
		switch ev := ev.(type) {
		case *a2a.TaskStatusUpdateEvent:
			if ev.Status.Message != nil && ev.Status.State == a2a.TaskStateWorking {
				t.History = append(t.History, ev.Status.Message)
			}
			t.Status = ev.Status
			if ev.Status.State == a2a.TaskStateWorking {
				t.Status.Message = nil
			}
		case *a2a.TaskArtifactUpdateEvent:
			t.Artifacts = append(t.Artifacts, ev.Artifact)
		}
	}
}

// The push-notification and extended-card methods are not offered: the
// card says so (no pushNotifications, no authenticated extended card).

// OnGetTaskPushConfig answers that push notifications are not supported.
func (h *a2aAgent) OnGetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

// OnListTaskPushConfig answers that push notifications are not supported.
func (h *a2aAgent) OnListTaskPushConfig(context.Context, *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

// OnSetTaskPushConfig answers that push notifications are not supported.
func (h *a2aAgent) OnSetTaskPushConfig(context.Context, *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

// OnDeleteTaskPushConfig answers that push notifications are not supported.
func (h *a2aAgent) OnDeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigParams) error {
	return a2a.ErrPushNotificationNotSupported
}

// OnGetExtendedAgentCard answers that there is no extended card.
func (h *a2aAgent) OnGetExtendedAgentCard(context.Context) (*a2a.AgentCard, error) {
	return nil, a2a.ErrAuthenticatedExtendedCardNotConfigured
}
