package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/google/uuid"
)

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	body := map[string]any{"status": "ok"}
	if s.cfg.Health != nil {
		for k, v := range s.cfg.Health() {
			body[k] = v
		}
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Store.Ping(r.Context()); err != nil {
		s.log.Warn("server: store not ready", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "store"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// needEngine is the error of endpoints that run chats when the server has no engine.
func (s *Server) needEngine() error {
	if s.cfg.Engine == nil {
		return unavailable("session support not available: this server does not run chats", nil)
	}
	return nil
}

// workflowInfo is what a client may know of a workflow: never its system
// messages, tools or models.
type workflowInfo struct {
	Name         string   `json:"name"`
	Description  string   `json:"description"`
	Version      string   `json:"version,omitempty"`
	VisualAgents []string `json:"visual_agents"`
	StartupMode  string   `json:"startup_mode,omitempty"`
	// DoubleTexting is what the workflow does with a message sent while a
	// run goes (enqueue, reject, interrupt), so a UI knows whether to let
	// the person write then.
	DoubleTexting string `json:"double_texting"`
}

func (s *Server) handleWorkflows(w http.ResponseWriter, r *http.Request) {
	if bearer(r) != "" || !s.cfg.Dev {
		if _, err := s.principal(r, ""); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	out := []workflowInfo{}
	if s.cfg.Engine != nil {
		for _, wf := range s.cfg.Engine.Workflows() {
			out = append(out, workflowInfo{
				Name: wf.Name, Description: wf.Config.Description, Version: wf.Config.Version,
				VisualAgents: append([]string{}, wf.Config.VisualAgents...), StartupMode: wf.Config.Orchestration.StartupMode,
				DoubleTexting: wf.DoubleTexting(),
			})
		}
	}
	slices.SortFunc(out, func(a, b workflowInfo) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"workflows": out})
}

// startRequest is the optional body of the start endpoint.
type startRequest struct {
	Message string                     `json:"message"`
	Context map[string]json.RawMessage `json:"context"`
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	if err := s.start(w, r); err != nil {
		s.writeError(w, r, err)
	}
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) error {
	p, err := s.principal(r, r.PathValue("app"))
	if err != nil {
		return err
	}
	if err := s.needEngine(); err != nil {
		return err
	}
	var req startRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	if len(req.Message) > maxContent {
		return baton.Errorf(baton.EINVALID, "message: longer than %d bytes", maxContent)
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	opts := baton.StartOptions{Message: req.Message, Context: req.Context}
	wf := r.PathValue("workflow")
	var chat baton.Chat
	status := http.StatusCreated
	if key == "" {
		if chat, err = s.cfg.Engine.Start(r.Context(), p.scope, wf, opts); err != nil {
			return startError(chat, err)
		}
	} else {
		// The key, with the caller and the workflow, makes the chat's id:
		// a retry after a lost answer names the same chat, and gets it (200)
		// instead of another one.
		opts.ChatID = inputEventID(p.scope, "start:"+wf, key)
		created := false
		if chat, created, err = s.cfg.Engine.StartOnce(r.Context(), p.scope, wf, key, opts); err != nil {
			return err
		}
		if !created {
			status = http.StatusOK
		}
	}
	writeJSON(w, status, map[string]any{"chat_id": chat.ID, "app": chat.App, "workflow": chat.Workflow, "status": chat.Status})
	return nil
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		if err := s.needEngine(); err != nil {
			return err
		}
		chat, err := s.chatIn(r.Context(), p.scope, r.PathValue("chat_id"))
		if err != nil {
			return err
		}
		if p := pendingClientTool(chat); p != nil {
			return errClientToolPending(chat.ID, p)
		}
		switch chat.Status {
		case baton.ChatCompleted:
			return baton.Errorf(baton.ECONFLICT, "chat %s has completed: start a new chat", chat.ID)
		case baton.ChatWaitingInput, baton.ChatWaitingUITool, baton.ChatWaitingSecret:
			return baton.Errorf(baton.ECONFLICT, "chat %s is %s: answer it with POST /api/input/submit", chat.ID, chat.Status)
		}
		// failed, cancelled, or running (after a restart): the run goes on
		// from its open turn.
		if err := s.cfg.Engine.Resume(r.Context(), p.scope, chat.ID); err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"chat_id": chat.ID, "status": "resuming"})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		if err := s.needEngine(); err != nil {
			return err
		}
		status, err := s.cancelRun(r.Context(), p.scope, r.PathValue("chat_id"))
		if err != nil {
			return err
		}
		code := http.StatusAccepted
		if status == baton.ChatCancelled {
			code = http.StatusOK // cancelled already: nothing more to do
		}
		writeJSON(w, code, map[string]any{"chat_id": r.PathValue("chat_id"), "status": status})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// cancelRun stops the run of a running chat (POST …/cancel and the
// WebSocket's run.cancel) and returns the status the chat is going to:
// "cancelling" when a cancel was sent to the engine, "cancelled" when the
// chat was cancelled already (a repeated Stop is no error). A chat with no
// run to stop — paused, failed, completed — is ECONFLICT, naming its status.
func (s *Server) cancelRun(ctx context.Context, scope baton.Scope, chatID string) (baton.ChatStatus, error) {
	chat, err := s.chatIn(ctx, scope, chatID)
	if err != nil {
		return "", err
	}
	switch chat.Status {
	case baton.ChatCancelled:
		return baton.ChatCancelled, nil
	case baton.ChatRunning:
	default:
		return "", baton.Errorf(baton.ECONFLICT, "chat %s is %s: there is no run to stop", chat.ID, chat.Status)
	}
	if err := s.cfg.Engine.Cancel(ctx, scope, chat.ID); err != nil {
		if baton.ErrorCode(err) == baton.EUNAVAILABLE {
			return "", unavailable(msgInputUnroutable, err)
		}
		return "", err
	}
	return "cancelling", nil
}

// handleMe answers who the caller is: the app and user of its key (or, in
// dev mode without a key, of the dev user of ?app=, default "default"), so
// that a client asks only for a key and learns its app.
func (s *Server) handleMe(w http.ResponseWriter, r *http.Request) {
	app := ""
	if bearer(r) == "" && s.cfg.Dev {
		app = r.URL.Query().Get("app")
		if app == "" {
			app = DefaultApp
		}
	}
	p, err := s.principal(r, app)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"app": p.scope.App, "user": p.scope.User, "dev": p.keyHash == ""})
}

// DefaultApp is the app that the web UI, baton chat and the README's
// examples use when none is named.
const DefaultApp = "default"

// chatSummary is a chat in the list.
type chatSummary struct {
	ChatID       string           `json:"chat_id"`
	Workflow     string           `json:"workflow"`
	Status       baton.ChatStatus `json:"status"`
	LastSequence int64            `json:"last_sequence"`
	CreatedAt    time.Time        `json:"created_at"`
	UpdatedAt    time.Time        `json:"updated_at"`
	// ForkedFrom names the chat and sequence a fork was copied from.
	ForkedFrom *baton.ForkedFrom `json:"forked_from,omitempty"`
}

func summaryOf(c baton.Chat) chatSummary {
	return chatSummary{ChatID: c.ID, Workflow: c.Workflow, Status: c.Status, LastSequence: c.LastSequence, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
		ForkedFrom: baton.ForkedFromOf(c)}
}

// forkRequest is the body of POST /api/chats/{app}/{chat_id}/fork.
type forkRequest struct {
	AtSequence json.RawMessage `json:"at_sequence"`
}

// handleFork copies a chat's history up to at_sequence into a new chat of
// the caller's and continues it (engine.Engine.Fork).
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		if err := s.needEngine(); err != nil {
			return err
		}
		var req forkRequest
		if err := s.decodeBody(w, r, &req, false); err != nil {
			return err
		}
		at, err := sequenceField("at_sequence", req.AtSequence)
		if err != nil {
			return err
		}
		chatID := r.PathValue("chat_id")
		if _, err := s.chatIn(r.Context(), p.scope, chatID); err != nil {
			return err
		}
		chat, err := s.cfg.Engine.Fork(r.Context(), p.scope, chatID, at)
		if err != nil {
			if baton.ErrorCode(err) == baton.ENOTFOUND {
				return baton.Errorf(baton.ENOTFOUND, "chat %q not found", truncate(chatID, baton.MaxEventIDLen))
			}
			return err
		}
		writeJSON(w, http.StatusCreated, map[string]any{"chat_id": chat.ID, "app": chat.App, "workflow": chat.Workflow,
			"status": chat.Status, "last_sequence": chat.LastSequence, "forked_from": baton.ForkedFromOf(chat)})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// sequenceField parses a required JSON field holding a sequence number
// (an integer >= 1).
func sequenceField(name string, raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, baton.Errorf(baton.EINVALID, "%s: required (the sequence of the last event to keep)", name)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, baton.Errorf(baton.EINVALID, "%s: must be a sequence number (an integer >= 1), not %s", name, truncate(string(raw), 32))
	}
	if n < 1 {
		return 0, baton.Errorf(baton.EINVALID, "%s: must be a sequence number (an integer >= 1), not %d", name, n)
	}
	return n, nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		q := r.URL.Query()
		opts := baton.ListOptions{Workflow: q.Get("workflow"), Status: baton.ChatStatus(q.Get("status"))}
		if opts.Status != "" && !opts.Status.Valid() {
			return baton.Errorf(baton.EINVALID, "status: %q is not a chat status", truncate(string(opts.Status), 64))
		}
		if opts.Limit, err = intParam(q.Get("limit"), "limit", 100, 1, 1000); err != nil {
			return err
		}
		chats, err := s.cfg.Store.ListChats(r.Context(), p.scope, opts)
		if err != nil {
			return err
		}
		out := make([]chatSummary, 0, len(chats))
		for _, c := range chats {
			out = append(out, summaryOf(c))
		}
		writeJSON(w, http.StatusOK, map[string]any{"chats": out})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// pendingView is a request the chat waits for, as a client sees it.
type pendingView struct {
	UIEventID string `json:"ui_event_id"`
	Kind      string `json:"kind"`
	ToolName  string `json:"tool_name,omitempty"`
	Agent     string `json:"agent,omitempty"`
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		c, err := s.chatIn(r.Context(), p.scope, r.PathValue("chat_id"))
		if err != nil {
			return err
		}
		pending := make([]pendingView, 0, len(c.Pending))
		for _, pr := range c.Pending {
			pending = append(pending, pendingView{UIEventID: pr.UIEventID, Kind: pr.Kind, ToolName: pr.ToolName, Agent: pr.Agent})
		}
		writeJSON(w, http.StatusOK, struct {
			chatSummary
			Context map[string]json.RawMessage `json:"context"`
			Pending []pendingView              `json:"pending"`
		}{summaryOf(c), clientContext(c.Context), pending})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		id := r.PathValue("chat_id")
		if err := s.cfg.Store.DeleteChat(r.Context(), p.scope, id); err != nil {
			if baton.ErrorCode(err) == baton.ENOTFOUND {
				return baton.Errorf(baton.ENOTFOUND, "chat %q not found", truncate(id, baton.MaxEventIDLen))
			}
			return err
		}
		s.hub.kickChat(id, kickDeleted)
		payload, _ := json.Marshal(map[string]string{"chat_id": id})
		ev := baton.NewInput(p.scope, baton.TypeSessionDeleted, id, payload)
		ev.Metadata.Source = baton.SourceSystem
		if err := s.cfg.Bus.Publish(r.Context(), ev); err != nil {
			s.log.Warn("server: publish session.deleted", "chat_id", id, "err", err)
		}
		writeJSON(w, http.StatusOK, map[string]any{"chat_id": id, "deleted": true})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// historyPage is the answer of the events endpoint.
type historyPage struct {
	ChatID string            `json:"chat_id"`
	Events []json.RawMessage `json:"events"`
	// LastSequence is the last sequence this page covers (shown or not):
	// ask for after=LastSequence next.
	LastSequence int64 `json:"last_sequence"`
	// More is true when the chat has events after LastSequence.
	More bool `json:"more"`
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		p, err := s.principal(r, r.PathValue("app"))
		if err != nil {
			return err
		}
		q := r.URL.Query()
		after, err := seqParam(q.Get("after"), "after")
		if err != nil {
			return err
		}
		limit, err := intParam(q.Get("limit"), "limit", 1000, 1, 10000)
		if err != nil {
			return err
		}
		c, err := s.chatIn(r.Context(), p.scope, r.PathValue("chat_id"))
		if err != nil {
			return err
		}
		evs, err := s.cfg.Store.Events(r.Context(), p.scope, c.ID, after, limit)
		if err != nil {
			return err
		}
		wf := s.workflowOf(c.Workflow)
		page := historyPage{ChatID: c.ID, Events: []json.RawMessage{}, LastSequence: after}
		for i := range evs {
			if f := encodeFrame(wf, &evs[i]); f.data != nil {
				page.Events = append(page.Events, f.data)
			}
			page.LastSequence = evs[i].Sequence
		}
		page.More = page.LastSequence < c.LastSequence
		writeJSON(w, http.StatusOK, page)
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// submitRequest is the body of POST /api/input/submit: a message (content)
// or a UI tool response (ui_event_id, data, status).
type submitRequest struct {
	App       string          `json:"app"`
	ChatID    string          `json:"chat_id"`
	Content   *string         `json:"content"`
	UIEventID string          `json:"ui_event_id"`
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		pre, err := s.authFirst(r)
		if err != nil {
			return err
		}
		var req submitRequest
		if err := s.decodeBody(w, r, &req, false); err != nil {
			return err
		}
		p, err := pre.forApp(s, r, req.App)
		if err != nil {
			return err
		}
		if err := s.needEngine(); err != nil {
			return err
		}
		in := clientMessage{ChatID: req.ChatID, Content: req.Content, UIEventID: req.UIEventID, Status: req.Status, Data: req.Data}
		switch {
		case req.Content != nil && req.UIEventID != "":
			return baton.Errorf(baton.EINVALID, "content: give either content (a message) or ui_event_id (a UI tool response), not both")
		case req.Content != nil:
			in.Type = msgSubmit
			if req.Status != "" || req.Data != nil {
				return baton.Errorf(baton.EINVALID, "data: only with ui_event_id")
			}
		case req.UIEventID != "":
			in.Type = msgUIResponse
		default:
			return baton.Errorf(baton.EINVALID, "content: required (or ui_event_id and data for a UI tool response)")
		}
		if in.ID, err = idempotencyKey(r); err != nil {
			return err
		}
		if err := s.input(r.Context(), p.scope, req.ChatID, in, "http"); err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"chat_id": req.ChatID, "accepted": true})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// input checks a person's message or UI tool response against the chat's
// state and publishes it. The engine ignores input that does not fit the
// chat, so everything it would ignore is refused here, with a 4xx that
// names the field: the chat stays as it was. m.ID, when set, is the
// input's idempotency key (inputEventID): the input is recorded once, and a
// UI tool response retried with it after it was applied succeeds again
// (nothing is published) where another response to the answered request is
// ENOTFOUND. A publish the bus could not take is EUNAVAILABLE with a
// message that asks for a retry and never quotes the cause (NATS's error
// text goes to the log).
func (s *Server) input(ctx context.Context, scope baton.Scope, chatID string, m clientMessage, source string) error {
	err := s.publishInput(ctx, scope, chatID, m, source)
	if baton.ErrorCode(err) == baton.EUNAVAILABLE {
		return unavailable(msgInputUnroutable, err)
	}
	return err
}

func (s *Server) publishInput(ctx context.Context, scope baton.Scope, chatID string, m clientMessage, source string) error {
	chat, err := s.chatIn(ctx, scope, chatID)
	if err != nil {
		return err
	}
	switch m.Type {
	case msgSubmit:
		content := strings.TrimSpace(*m.Content)
		switch {
		case content == "":
			return baton.Errorf(baton.EINVALID, "content: must not be empty")
		case len(content) > maxContent:
			return baton.Errorf(baton.EINVALID, "content: longer than %d bytes", maxContent)
		}
		// With an idempotency key the event's id is derived from it, so that
		// a retry is dropped by the bus (and JetStream) within their windows
		// and by the engine's record of the chat's recent inputs after.
		eventID := ""
		if m.ID != "" {
			eventID = inputEventID(scope, chat.ID, m.ID)
		}
		if err := s.acceptsMessageOnce(ctx, scope, chat, eventID); err != nil {
			return err
		}
		if m.offers {
			return s.cfg.Engine.SubmitWithTools(ctx, scope, chat.ID, eventID, content, source, m.tools)
		}
		return s.cfg.Engine.SubmitOnce(ctx, scope, chat.ID, eventID, content, source)
	case msgUIResponse:
		// With an idempotency key the response's event id is derived from
		// it, as a message's is: a retry is dropped by the bus and the
		// engine while the first is on its way, and once the first was
		// applied (the request is no longer pending) the retry is
		// recognised by the engine's record of the response that answered
		// the request (Engine.AnsweredBy), and gets the same success.
		eventID := ""
		if m.ID != "" {
			eventID = inputEventID(scope, chat.ID, m.ID, m.UIEventID)
		}
		var pending *baton.PendingRequest
		for i := range chat.Pending {
			if chat.Pending[i].UIEventID == m.UIEventID {
				pending = &chat.Pending[i]
			}
		}
		if pending == nil && eventID != "" {
			// A retry of the response that answered it succeeds, publishing
			// nothing; any other is ENOTFOUND (the engine tells them apart).
			return s.cfg.Engine.RespondUIOnce(ctx, scope, chat.ID, eventID, m.UIEventID, m.Status, m.Data)
		}
		if pending == nil || (pending.Kind != baton.PendingUITool && pending.Kind != baton.PendingSecret && pending.Kind != baton.PendingClientTool) {
			return baton.Errorf(baton.ENOTFOUND, "ui_event_id: %q is not pending in this chat (unknown, already answered, or another chat's)", truncate(m.UIEventID, baton.MaxEventIDLen))
		}
		if pending.Kind == baton.PendingClientTool && !m.offers {
			return errClientToolPending(chat.ID, pending)
		}
		switch m.Status {
		case "", "success", "error", "cancelled":
		default:
			return baton.Errorf(baton.EINVALID, "status: %q is not success, error or cancelled", truncate(m.Status, 64))
		}
		if len(m.Data) == 0 {
			return baton.Errorf(baton.EINVALID, "data: required (the response, a JSON value)")
		}
		if pending.Kind == baton.PendingSecret && (m.Status == "" || m.Status == "success") {
			var secrets map[string]string
			if err := json.Unmarshal(m.Data, &secrets); err != nil || secrets == nil {
				return baton.Errorf(baton.EINVALID, "data: a secret form's response must be an object of name to string value")
			}
		}
		if m.offers {
			return s.cfg.Engine.RespondUIWithTools(ctx, scope, chat.ID, eventID, m.UIEventID, m.Status, m.Data, m.tools)
		}
		if eventID == "" {
			return s.cfg.Engine.RespondUI(ctx, scope, chat.ID, m.UIEventID, m.Status, m.Data)
		}
		return s.cfg.Engine.RespondUIOnce(ctx, scope, chat.ID, eventID, m.UIEventID, m.Status, m.Data)
	}
	return baton.Errorf(baton.EINVALID, "type: %q is not an input", m.Type)
}

// acceptsMessageOnce is acceptsMessage for a message sent with an
// idempotency key (eventID, "" without one): a retry of a message the chat
// accepted — waiting in its inbox, or recorded since — is accepted again,
// as the first was, whatever the chat's status now (it may wait for a form
// the message led to): a client that lost the first answer must not take
// its accepted message for a refused one. SubmitOnce then keeps and
// records nothing new.
func (s *Server) acceptsMessageOnce(ctx context.Context, scope baton.Scope, c baton.Chat, eventID string) error {
	refused := acceptsMessage(c)
	if refused == nil || eventID == "" {
		return refused
	}
	if seq, waiting, err := s.messageHeld(ctx, scope, c, eventID); err != nil || seq > 0 || waiting {
		return err
	}
	return refused
}

// acceptedWindow is how far back in a chat's events messageHeld looks for
// a message recorded under an idempotency key (the engine remembers as
// many).
const acceptedWindow = 1000

// messageHeld tells where the chat holds the message eventID (sent under
// an idempotency key): recorded at seq (a person's chat.text with that
// input_id, among its last acceptedWindow events), waiting in its inbox, or
// neither (0, false).
func (s *Server) messageHeld(ctx context.Context, scope baton.Scope, c baton.Chat, eventID string) (seq int64, waiting bool, err error) {
	ins, err := s.cfg.Store.Inputs(ctx, scope, c.ID)
	if err != nil {
		return 0, false, err
	}
	for _, in := range ins {
		if in.Event.ID == eventID {
			return 0, true, nil
		}
	}
	for ev, err := range baton.EventsAfter(ctx, s.cfg.Store, scope, c.ID, max(0, c.LastSequence-acceptedWindow), replayPage) {
		if err != nil {
			return 0, false, err
		}
		if ev.Type != baton.TypeChatText || !strings.Contains(string(ev.Payload), eventID) {
			continue
		}
		var p baton.TextPayload
		if json.Unmarshal(ev.Payload, &p) == nil && p.InputID == eventID {
			return ev.Sequence, false, nil
		}
	}
	return 0, false, nil
}

// acceptsMessage says whether the chat can take a person's message now.
func acceptsMessage(c baton.Chat) error {
	switch c.Status {
	case baton.ChatCompleted:
		return baton.Errorf(baton.ECONFLICT, "chat %s has completed: it takes no more messages", c.ID)
	case baton.ChatWaitingUITool, baton.ChatWaitingSecret:
		return baton.Errorf(baton.ECONFLICT, "chat %s is %s: answer the pending ui_event_id with ui.tool.response", c.ID, c.Status)
	}
	return nil
}

// promptRequest is the body of POST /sessions/{id}/prompt (seed 004 §3.4).
type promptRequest struct {
	App     string `json:"app"`
	Content string `json:"content"`
}

// handlePrompt is seed 004's session route: it only produces a user_query
// event ({sessionId, content}, metadata trigger_session_id and source
// user) and lets the bus route it.
func (s *Server) handlePrompt(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		if err := s.needEngine(); err != nil {
			return err
		}
		pre, err := s.authFirst(r)
		if err != nil {
			return err
		}
		var req promptRequest
		if err := s.decodeBody(w, r, &req, true); err != nil {
			return err
		}
		p, err := pre.forApp(s, r, req.App)
		if err != nil {
			return err
		}
		content := strings.TrimSpace(req.Content)
		if content == "" {
			return baton.Errorf(baton.EINVALID, "content: required")
		}
		if len(content) > maxContent {
			return baton.Errorf(baton.EINVALID, "content: longer than %d bytes", maxContent)
		}
		id := r.PathValue("id")
		chat, err := s.chatIn(r.Context(), p.scope, id)
		if err != nil {
			return err
		}
		key, err := idempotencyKey(r)
		if err != nil {
			return err
		}
		eventID := ""
		if key != "" {
			eventID = inputEventID(p.scope, id, key)
		}
		if err := s.acceptsMessageOnce(r.Context(), p.scope, chat, eventID); err != nil {
			return err
		}
		// Kept in the chat's inbox before the answer, and under the
		// workflow's double_texting policy (reject, interrupt), as
		// /api/input/submit's messages are.
		if err := s.cfg.Engine.SubmitOnce(r.Context(), p.scope, id, eventID, content, "api"); err != nil {
			switch baton.ErrorCode(err) {
			case baton.EUNAVAILABLE:
				return unavailable(msgInputUnroutable, err)
			case baton.ECONFLICT:
				return err
			}
			return fmt.Errorf("publish user_query for chat %s: %w", id, err)
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "sessionId": id, "message": "Processing started"})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// reservedExternal are the event types POST /api/events refuses: facts only
// the runtime records or streams (its tools' tool.* reports among them,
// which metrics count by tool name), its own commands, and inputs that
// have their own validated endpoints. background_task.* stays open: an
// outside job runner reports its jobs' outcomes to a chat that way.
func reservedExternal(typ string) bool {
	switch {
	case baton.IsChatType(typ), baton.IsStreamType(typ):
		return true
	case strings.HasPrefix(typ, "run."), strings.HasPrefix(typ, "session."), strings.HasPrefix(typ, "tool."):
		return true
	case typ == baton.TypeUserQuery, typ == baton.TypeUIToolResponse:
		return true
	}
	return false
}

// handleExternalEvent accepts an environment event into a chat
// (spec/environment-events.md): validated, scoped to the caller, and
// idempotent by id (the bus drops an id it has already seen).
func (s *Server) handleExternalEvent(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		pre, err := s.authFirst(r)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
		if err != nil {
			return baton.Errorf(codeTooLarge, "body: larger than %d bytes", s.cfg.MaxBody)
		}
		var app string
		ev, err := baton.DecodeEvent(stripApp(body, &app))
		if err != nil {
			return err
		}
		p, err := pre.forApp(s, r, app)
		if err != nil {
			return err
		}
		if ev.Type == "" {
			return baton.Errorf(baton.EINVALID, "type: required")
		}
		if reservedExternal(ev.Type) {
			return baton.Errorf(baton.EINVALID, "type: %q is reserved to the runtime (use the input endpoints for user_query and ui.tool.response)", ev.Type)
		}
		if ev.Sequence != 0 {
			return baton.Errorf(baton.EINVALID, "sequence: set by the store, not by clients")
		}
		if ev.ChatID() == "" {
			return baton.Errorf(baton.EINVALID, "chat_id: required")
		}
		if _, err := s.chatIn(r.Context(), p.scope, ev.ChatID()); err != nil {
			return err
		}
		if ev.ID == "" {
			ev.ID = baton.NewID()
		}
		if ev.Timestamp == 0 {
			ev.Timestamp = time.Now().UnixMilli()
		}
		// metadata.origin names the instance a NATS bridge received an event
		// from (bus.Remote): one that carries it is skipped by this
		// instance's metrics and rollups, and is taken for another
		// instance's record.
		if bus.Remote(ev) {
			return baton.Errorf(baton.EINVALID, "metadata.%s: reserved to the runtime", bus.OriginKey)
		}
		if _, ok := ev.Metadata.Extra[baton.InboxKey]; ok {
			return baton.Errorf(baton.EINVALID, "metadata.%s: reserved to the runtime", baton.InboxKey)
		}
		// The trace a run links to, and whose traceparent reaches tool
		// endpoints, is the request's own span's (the server's, a child of
		// the W3C traceparent header), never one named in the body.
		if ev.Metadata.TraceParent != "" {
			return baton.Errorf(baton.EINVALID, "metadata.traceparent: reserved to the runtime (send a W3C traceparent header instead)")
		}
		// The scope comes from the key, never from the client's metadata.
		ev.Metadata.SetScope(p.scope)
		switch ev.Metadata.Source {
		case "":
			ev.Metadata.Source = baton.SourceEnv
		case baton.SourceEnv, baton.SourceTool:
		default:
			// user, llm and system events are the runtime's own: a client
			// claiming them could pass for the person, a model or baton.
			return baton.Errorf(baton.EINVALID, "metadata.source: %q is reserved to the runtime (use env or tool)", ev.Metadata.Source)
		}
		if err := ev.Validate(); err != nil {
			return err
		}
		// With an engine, an event an event-handler agent will observe is
		// kept in its chat's inbox before the 202 (Engine.PublishEvent).
		publish := s.cfg.Bus.Publish
		if s.cfg.Engine != nil {
			publish = func(ctx context.Context, ev baton.Event) error { return s.cfg.Engine.PublishEvent(ctx, p.scope, ev) }
		}
		if err := publish(r.Context(), ev); err != nil {
			return fmt.Errorf("publish %s %s: %w", ev.Type, ev.ID, err)
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"id": ev.ID, "type": ev.Type, "chat_id": ev.ChatID(), "accepted": true})
		return nil
	}()
	if err != nil {
		s.writeError(w, r, err)
	}
}

// stripApp removes a top-level "app" string field (the dev-mode scope) from
// an event body, which baton.DecodeEvent would refuse as unknown.
func stripApp(body []byte, app *string) []byte {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields["app"] == nil {
		return body
	}
	if json.Unmarshal(fields["app"], app) != nil {
		return body // DecodeEvent names the field
	}
	delete(fields, "app")
	out, err := json.Marshal(fields)
	if err != nil {
		return body
	}
	return out
}

// seqParam parses a sequence query parameter (default 0).
func seqParam(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, baton.Errorf(baton.EINVALID, "%s: must be a sequence number (an integer >= 0)", name)
	}
	return n, nil
}

// intParam parses an integer query parameter within [lo, hi].
func intParam(v, name string, def, lo, hi int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, baton.Errorf(baton.EINVALID, "%s: must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}

// maxIdempotencyKey bounds an idempotency key (an HTTP Idempotency-Key or a
// WebSocket message's id).
const maxIdempotencyKey = 128

// checkIdempotencyKey checks an idempotency key: 1–128 characters of
// A–Z, a–z, 0–9, '_', '.', ':' and '-'. field names it in the error.
func checkIdempotencyKey(field, key string) error {
	ok := key != "" && len(key) <= maxIdempotencyKey
	for i := 0; ok && i < len(key); i++ {
		c := key[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
	}
	if !ok {
		return baton.Errorf(baton.EINVALID, "%s: must be 1 to %d characters of A-Z, a-z, 0-9, '_', '.', ':' and '-'", field, maxIdempotencyKey)
	}
	return nil
}

// idempotencyKey returns the request's Idempotency-Key header ("" without one).
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", baton.Errorf(baton.EINVALID, "Idempotency-Key: give it once")
	}
	if err := checkIdempotencyKey("Idempotency-Key", vs[0]); err != nil {
		return "", err
	}
	return vs[0], nil
}

// inputNamespace is the UUID namespace of the input event ids derived from
// idempotency keys.
var inputNamespace = uuid.MustParse("5f0c3a52-8a4e-4f3e-9d7b-3c1e0b6a9d21")

// inputEventID is the event id of a person's input sent with an idempotency
// key: the same for the same key in the same chat of the same scope (and,
// for a UI response, the same ui_event_id, given as more), and unrelated
// otherwise. Clients choose keys, so a key is never used as the id itself:
// two tenants' "m-1" must not collide in the bus's window. A UI response's
// id also names the request it answers, so that a key reused for another
// request, or first used for a message, is not taken for a retry and
// dropped — which would leave the request waiting for ever.
func inputEventID(scope baton.Scope, chatID, key string, more ...string) string {
	var name []byte
	for _, part := range append([]string{scope.App, scope.User, chatID, key}, more...) {
		name = strconv.AppendInt(name, int64(len(part)), 10) // length-prefixed: the join is unambiguous
		name = append(name, ':')
		name = append(name, part...)
	}
	return uuid.NewSHA1(inputNamespace, name).String()
}

// pendingClientTool returns the call of a client's tool the chat waits
// for, or nil.
func pendingClientTool(chat baton.Chat) *baton.PendingRequest {
	for i := range chat.Pending {
		if chat.Pending[i].Kind == baton.PendingClientTool {
			return &chat.Pending[i]
		}
	}
	return nil
}

// errClientToolPending is the answer to an input the chat cannot take
// while it waits for the result of a tool the client application offered:
// only that client (over AG-UI or Chat Completions) runs the tool.
func errClientToolPending(chatID string, p *baton.PendingRequest) error {
	return baton.Errorf(baton.ECONFLICT, "chat %s waits for the result of %s, a tool the client application offered (AG-UI or Chat Completions): only that client answers it, with a tool message for tool call %q", chatID, p.ToolName, p.ToolCallID)
}
