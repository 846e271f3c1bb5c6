package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// The OpenAI Chat Completions API: every workflow is a model, a
// conversation is a chat. docs/api.md ("OpenAI Chat Completions") is the
// contract; this is its code.
//
// A request's messages end with the person's new message (or a tool
// message answering a UI tool). Which chat it goes to:
//
//   - X-Baton-Chat-Id (or the body's baton.chat_id) names it;
//   - else, with earlier messages (clients such as Open WebUI and
//     LibreChat send the whole history every time), the newest of the
//     caller's recent chats of that workflow whose transcript the history
//     continues (oaiFind);
//   - else a new chat starts with the message.
//
// The input goes through the engine's durable path (StartOnce, SubmitOnce,
// RespondUIOnce) under an id derived from the chat, the message's place in
// the conversation and its text, so that a resent request is one input; a
// request whose every message the chat already has is answered with the
// recorded reply that followed it, nothing submitted.

// oaiScanChats is how many of the caller's most recent chats of a workflow
// a history is compared with: a conversation older than that starts a new
// chat.
const oaiScanChats = 50

// oaiFingerprint is system_fingerprint: the runtime, not a model's build.
const oaiFingerprint = "baton"

// oaiModelsCreated is the "created" of every model: when this server
// started (workflows have no creation date).
var oaiModelsCreated = time.Now().Unix()

// oaiAuth authenticates an OpenAI request: the key's app, or in dev mode
// without a key the app of X-Baton-App (default DefaultApp).
func (s *Server) oaiAuth(r *http.Request) (principal, error) {
	app := ""
	if bearer(r) == "" && s.cfg.Dev {
		app = r.Header.Get("X-Baton-App")
		if app == "" {
			app = DefaultApp
		}
	}
	return s.principal(r, app)
}

func (s *Server) handleOAIModels(w http.ResponseWriter, r *http.Request) {
	p, err := s.oaiAuth(r)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	out := []oaiModel{}
	if s.cfg.Engine != nil {
		for _, wf := range s.cfg.Engine.Workflows() {
			out = append(out, s.oaiModelOf(p, wf.Name))
		}
	}
	slices.SortFunc(out, func(a, b oaiModel) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

func (s *Server) handleOAIModel(w http.ResponseWriter, r *http.Request) {
	p, err := s.oaiAuth(r)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	name := r.PathValue("model")
	if s.workflowOf(name) == nil {
		s.oaiWriteError(w, r, errModelNotFound(name))
		return
	}
	writeJSON(w, http.StatusOK, s.oaiModelOf(p, name))
}

func (s *Server) oaiModelOf(p principal, name string) oaiModel {
	m := oaiModel{ID: name, Object: "model", Created: oaiModelsCreated, OwnedBy: p.scope.App}
	if wf := s.workflowOf(name); wf != nil {
		m.Description = wf.Config.Description
		m.VisualAgents = append([]string{}, wf.Config.VisualAgents...)
		m.Baton = oaiUITools(wf)
	}
	return m
}

// errModelNotFound is OpenAI's model_not_found.
func errModelNotFound(name string) error {
	return &oaiCoded{code: "model_not_found", param: "model",
		err: baton.Errorf(baton.ENOTFOUND, "model: the model %q does not exist (GET /v1/models lists the workflows)", truncate(name, 128))}
}

// oaiCoded gives an error OpenAI's code and param.
type oaiCoded struct {
	code, param string
	err         error
}

func (e *oaiCoded) Error() string { return e.err.Error() }
func (e *oaiCoded) Unwrap() error { return e.err }

// oaiWriteError answers err in OpenAI's error shape, with the status of
// its baton code, the client-safe message (publicError) and the field at
// fault as param (the part of the message before ": " when it names one).
func (s *Server) oaiWriteError(w http.ResponseWriter, r *http.Request, err error) {
	if clientGone(r, err) {
		s.log.Debug("server: client went away", "method", r.Method, "path", r.URL.Path, "err", err)
		return
	}
	code, msg := publicError(err)
	status := baton.HTTPStatus(code)
	switch code {
	case baton.EINTERNAL:
		s.log.Error("server: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	case baton.EUNAVAILABLE:
		s.log.Warn("server: unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	typ, ocode, param := "invalid_request_error", code, ""
	switch code {
	case baton.EUNAUTHORIZED:
		w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
		ocode = "invalid_api_key"
	case baton.ERATELIMITED:
		typ, ocode = "requests", "rate_limit_exceeded"
	case codeTooLarge:
		ocode = "request_too_large"
	case baton.EFORBIDDEN:
		typ = "permission_error"
	case baton.EINTERNAL, baton.EUNAVAILABLE:
		typ = "server_error"
	case baton.EINVALID:
		if f, _, ok := strings.Cut(msg, ": "); ok && !strings.Contains(f, " ") {
			param = f
		}
	}
	var c *oaiCoded
	if errors.As(err, &c) {
		ocode, param = c.code, c.param
	}
	if status >= 500 || status == http.StatusConflict {
		// The SDKs retry these by default; the request may have been
		// taken (a run that failed after its message was recorded), and a
		// message sent alone by chat id would be taken again.
		w.Header().Set("X-Should-Retry", "false")
	}
	body := oaiErrorBody{Error: oaiError{Message: msg, Type: typ, Code: &ocode}}
	if param != "" {
		body.Error.Param = &param
	}
	writeJSON(w, status, body)
}

// oaiTurn is one request's resolved work: the chat, what to submit, and
// where its reply starts.
type oaiTurn struct {
	chat    baton.Chat
	created bool
	// last is the sequence the reply is read after; gate, when set, says
	// which event is the input this request submitted (the reply follows
	// it; events before it belong to earlier inputs).
	last int64
	gate func(*oaiEvent) bool
	// id is the completion's id: the same for a resent request.
	id string
}

func (s *Server) handleChatCompletions(w http.ResponseWriter, r *http.Request) {
	created := time.Now().Unix()
	p, err := s.oaiAuth(r)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	r = r.WithContext(withFollower(r.Context(), p)) // follow re-checks p's key
	if err := s.needEngine(); err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = baton.Errorf(codeTooLarge, "body: larger than %d bytes", mbe.Limit)
		} else {
			err = baton.Errorf(baton.EINVALID, "body: %v", err)
		}
		s.oaiWriteError(w, r, err)
		return
	}
	req, items, err := decodeChatRequest(body)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	wf := s.workflowOf(req.Model)
	if wf == nil {
		s.oaiWriteError(w, r, errModelNotFound(req.Model))
		return
	}
	prefix := req.Baton != nil && req.Baton.AgentPrefix
	if v := r.Header.Get("X-Baton-Agent-Prefix"); v != "" {
		prefix, _ = strconv.ParseBool(v)
	}
	chatID := r.Header.Get("X-Baton-Chat-Id")
	if chatID == "" && req.Baton != nil {
		chatID = req.Baton.ChatID
	}
	key, err := idempotencyKey(r)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	slot, err := s.acquireStream(p)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	defer slot.release()
	tools, err := s.oaiClientTools(wf.Name, req)
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	turn, err := s.oaiResolve(r.Context(), p.scope, req.Model, chatID, key, items, tools)
	if turn.chat.ID != "" {
		w.Header().Set("X-Baton-Chat-Id", turn.chat.ID)
	}
	if err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	out := &oaiReply{
		id: turn.id, model: req.Model, created: created, chatID: turn.chat.ID, prefix: prefix,
		secretNotice: s.secretNotice(r, p.scope, turn.chat.ID),
		schema:       func(tool string) json.RawMessage { return oaiToolSchema(wf, tool) },
	}
	if req.Stream {
		s.oaiStream(w, r, p.scope, turn, out, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	if err := s.oaiCollect(r.Context(), p.scope, turn, out); err != nil {
		s.oaiWriteError(w, r, err)
		return
	}
	if out.errMsg != "" {
		s.oaiWriteError(w, r, &oaiCoded{code: "chat_error", err: unavailable("the workflow stopped with an error: "+out.errMsg, nil)})
		return
	}
	content := out.content.String()
	msg := oaiOutMessage{Role: "assistant", Content: &content, Name: out.agent, ToolCalls: out.toolCalls}
	writeJSON(w, http.StatusOK, oaiCompletion{
		ID: turn.id, Object: "chat.completion", Created: created, Model: req.Model, SystemFingerprint: oaiFingerprint,
		Choices: []oaiChoice{{Message: msg, FinishReason: out.finish}},
		Usage:   &out.usage, ChatID: turn.chat.ID,
	})
}

// secretNotice is the text a reply shows when the workflow asks for
// secrets: they are never typed into this API (a client keeps its history,
// and sends it back with every request), so the person is sent to the web
// UI's form for this chat; the reply goes on once it is answered.
func (s *Server) secretNotice(r *http.Request, scope baton.Scope, chatID string) func(agent string) string {
	return func(agent string) string {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		link := scheme + "://" + r.Host + "/?app=" + url.QueryEscape(scope.App) + "#chat=" + chatID
		who := "The workflow"
		if agent != "" {
			who = agent
		}
		return who + " needs secrets (API keys) entered in a form, which this API never carries. Open " + link +
			" and fill in the form there; this reply goes on once it is answered."
	}
}

// oaiResolve finds or starts the request's chat and submits its last
// message.
func (s *Server) oaiResolve(ctx context.Context, scope baton.Scope, model, chatID, key string, items []oaiItem, tools []baton.ClientTool) (oaiTurn, error) {
	last := items[len(items)-1]
	if chatID == "" && len(items) == 1 {
		if last.role != "user" {
			return oaiTurn{}, baton.Errorf(baton.EINVALID, "messages: a tool message needs the chat it answers (X-Baton-Chat-Id, or the history before it)")
		}
		return s.oaiStart(ctx, scope, model, key, last.content, tools)
	}
	var chat baton.Chat
	var tr []oaiItem
	var err error
	if chatID != "" {
		if chat, err = s.chatIn(ctx, scope, chatID); err != nil {
			if baton.ErrorCode(err) == baton.ENOTFOUND {
				err = &oaiCoded{code: "chat_not_found", param: "X-Baton-Chat-Id", err: err}
			}
			return oaiTurn{}, err
		}
		if chat.Workflow != model {
			return oaiTurn{chat: chat}, baton.Errorf(baton.EINVALID, "model: chat %s is a chat of %s, not %s", chat.ID, chat.Workflow, truncate(model, 128))
		}
		if tr, err = s.oaiTranscript(ctx, scope, chat); err != nil {
			return oaiTurn{chat: chat}, err
		}
		if len(items) > 1 {
			switch oaiMatch(tr, items) {
			case matchNone:
				return oaiTurn{chat: chat}, baton.Errorf(baton.EINVALID, "messages: the history does not continue chat %s (its person's messages and turns differ)", chat.ID)
			case matchResend:
				return s.oaiReplay(chat, tr, len(items)), nil
			}
		} else if last.role == "tool" {
			// A tool result alone, by chat id: a retry of one the chat has
			// is answered with what followed it.
			for i, it := range tr {
				if it.role == "tool" && it.callID == last.callID {
					return s.oaiReplay(chat, tr, i+1), nil
				}
			}
		}
	} else {
		var kind int
		chat, tr, kind, err = s.oaiFind(ctx, scope, model, items)
		switch {
		case err != nil:
			return oaiTurn{}, err
		case chat.ID == "":
			if last.role != "user" {
				return oaiTurn{}, baton.Errorf(baton.EINVALID, "messages: no chat of %s continues this history, and a tool message cannot start one", truncate(model, 128))
			}
			// A conversation baton does not know (older than the chats it
			// compares, or edited): a new chat with the person's message.
			return s.oaiStart(ctx, scope, model, key, last.content, tools)
		case kind == matchResend:
			return s.oaiReplay(chat, tr, len(items)), nil
		}
	}
	return s.oaiSubmit(ctx, scope, chat, items, key, tools)
}

// oaiStart starts a chat of model with the person's first message.
func (s *Server) oaiStart(ctx context.Context, scope baton.Scope, model, key, content string, tools []baton.ClientTool) (oaiTurn, error) {
	opts := baton.StartOptions{Message: content, ClientTools: tools}
	var chat baton.Chat
	var err error
	if key == "" {
		chat, err = s.cfg.Engine.Start(ctx, scope, model, opts)
		err = startError(chat, err)
	} else {
		opts.ChatID = inputEventID(scope, "oai-start:"+model, key)
		chat, _, err = s.cfg.Engine.StartOnce(ctx, scope, model, key, opts)
	}
	if err != nil {
		return oaiTurn{}, err
	}
	return oaiTurn{chat: chat, created: true, id: "chatcmpl-" + chat.ID + "-1"}, nil
}

// oaiSubmit submits the last message of items to chat, under an event id
// derived from its place in the conversation and its text (or, for a
// message sent alone by chat id, the Idempotency-Key): a resent request
// is one input.
func (s *Server) oaiSubmit(ctx context.Context, scope baton.Scope, chat baton.Chat, items []oaiItem, key string, tools []baton.ClientTool) (oaiTurn, error) {
	last := items[len(items)-1]
	turn := oaiTurn{chat: chat, last: chat.LastSequence, id: "chatcmpl-" + chat.ID + "-" + strconv.Itoa(len(items))}
	idKey := ""
	switch {
	case key != "":
		idKey = "oai-key:" + key
	case len(items) > 1:
		sum := sha256.Sum256([]byte(last.role + "\x00" + last.callID + "\x00" + last.content))
		idKey = "oai:" + strconv.Itoa(len(items)) + ":" + hex.EncodeToString(sum[:16])
	}
	if idKey == "" && last.role == "user" {
		// A message alone, without a key: nothing tells a retry from the
		// same words said again. A fresh id; the reply is the one after it.
		idKey = "oai-new:" + baton.NewID()
	}
	switch last.role {
	case "user":
		eventID := inputEventID(scope, chat.ID, idKey)
		content := last.content
		turn.gate = func(ev *oaiEvent) bool {
			return ev.Type == baton.TypeChatText && ev.Agent == agentUser && (ev.InputID == eventID || ev.InputID == "" && ev.Content == content)
		}
		if key != "" {
			// A request resent with its Idempotency-Key: the chat may hold
			// its message already. Then it is not sent again (the engine
			// would drop it, and the gate never open), and the answer is
			// the one that follows the message, recorded or on its way.
			seq, waiting, err := s.messageHeld(ctx, scope, chat, eventID)
			if err != nil {
				return turn, err
			}
			if seq > 0 || waiting {
				if seq > 0 {
					turn.last = seq - 1
				}
				return turn, nil
			}
		}
		if err := s.oaiAccepts(chat); err != nil {
			return turn, err
		}
		if err := s.cfg.Engine.SubmitWithTools(ctx, scope, chat.ID, eventID, content, "openai", tools); err != nil {
			if baton.ErrorCode(err) == baton.EUNAVAILABLE {
				return turn, unavailable(msgInputUnroutable, err)
			}
			return turn, err
		}
	case "tool":
		pending, client := false, false
		for _, pr := range chat.Pending {
			if pr.UIEventID == last.callID && (pr.Kind == baton.PendingUITool || pr.Kind == baton.PendingClientTool) {
				pending, client = true, pr.Kind == baton.PendingClientTool
			}
		}
		if !pending {
			return turn, &oaiCoded{code: "tool_call_not_pending", param: "messages",
				err: baton.Errorf(baton.ENOTFOUND, "messages[%d].tool_call_id: %q is not a tool call chat %s waits for", len(items)-1, truncate(last.callID, baton.MaxEventIDLen), chat.ID)}
		}
		data := json.RawMessage(last.content)
		if !json.Valid(data) || client {
			// A client tool's result is its content as the client gave it.
			data, _ = json.Marshal(last.content)
		}
		callID := last.callID
		turn.gate = func(ev *oaiEvent) bool {
			return ev.Type == baton.TypeChatToolResponse && ev.UIEventID == callID
		}
		eventID := inputEventID(scope, chat.ID, idKey, callID)
		if err := s.cfg.Engine.RespondUIWithTools(ctx, scope, chat.ID, eventID, callID, "success", data, tools); err != nil {
			if baton.ErrorCode(err) == baton.EUNAVAILABLE {
				return turn, unavailable(msgInputUnroutable, err)
			}
			return turn, err
		}
	}
	return turn, nil
}

// oaiAccepts says whether the chat takes a person's message now, in words
// for this API's clients.
func (s *Server) oaiAccepts(c baton.Chat) error {
	switch c.Status {
	case baton.ChatCompleted:
		return &oaiCoded{code: "chat_completed", param: "messages",
			err: baton.Errorf(baton.ECONFLICT, "the workflow's chat %s has ended: start a new conversation", c.ID)}
	case baton.ChatWaitingUITool:
		return &oaiCoded{code: "tool_call_pending", param: "messages",
			err: baton.Errorf(baton.ECONFLICT, "chat %s waits for the result of its tool call: send a tool message with its tool_call_id", c.ID)}
	case baton.ChatWaitingSecret:
		return &oaiCoded{code: "secret_pending", param: "messages",
			err: baton.Errorf(baton.ECONFLICT, "chat %s waits for secrets entered in the web UI's form (this API never carries them): open /#chat=%s there", c.ID, c.ID)}
	}
	return nil
}

// oaiReplay is the turn of a resent request whose every message the chat
// has: its reply is what followed the n-th message, read again.
func (s *Server) oaiReplay(chat baton.Chat, tr []oaiItem, n int) oaiTurn {
	return oaiTurn{chat: chat, last: tr[n-1].seq, id: "chatcmpl-" + chat.ID + "-" + strconv.Itoa(n)}
}

// Results of oaiMatch.
const (
	matchNone     = iota
	matchContinue // the request's history is the transcript: its last message is new
	matchResend   // the chat has every message of the request already
)

// oaiMatch compares a request's conversation with a chat's transcript.
// The person's messages must be equal, the turns in the same order, and
// tool messages must answer the same calls; an assistant message's text is
// not compared, since clients reformat it (and it is the chat's own).
func oaiMatch(tr, items []oaiItem) int {
	same := oaiSame
	n := len(items)
	switch {
	case len(tr) == n-1:
		for i := range tr {
			if !same(tr[i], items[i]) {
				return matchNone
			}
		}
		return matchContinue
	case len(tr) >= n:
		for i := range items {
			if !same(tr[i], items[i]) {
				return matchNone
			}
		}
		return matchResend
	}
	return matchNone
}

// oaiFind finds the chat a full history continues: of the caller's
// oaiScanChats most recently created chats of model, the one updated last
// whose transcript it continues or repeats. No index is kept: a transcript
// is read from the chat's events, the chat updated last first, so a client
// continuing its current conversation finds it in the first read. Chat.ID
// is "" when none does.
//
// What is compared is oaiMatch's: the request's messages (system and
// developer left out) with the chat's transcript, item by item — the
// person's texts equal, the turns in the same order, tool results answering
// the same calls, an assistant message's tool calls among the reply's. Each
// candidate's events are read a page (oaiFindPage) at a time and only until
// that comparison is settled (oaiPrefix): a chat whose first message differs
// costs a page, one the request repeats costs the events up to the
// request's last message, and only a chat the request continues (or a
// shorter one it starts with) is read to its end — the request's own length.
func (s *Server) oaiFind(ctx context.Context, scope baton.Scope, model string, items []oaiItem) (baton.Chat, []oaiItem, int, error) {
	chats, err := s.cfg.Store.ListChats(ctx, scope, baton.ListOptions{Workflow: model, Limit: oaiScanChats})
	if err != nil {
		return baton.Chat{}, nil, 0, err
	}
	// The conversation a client continues is most often the one that
	// moved last: read it first.
	slices.SortStableFunc(chats, func(a, b baton.Chat) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	for _, c := range chats {
		prefix := &oaiPrefix{items: items}
		tr, err := s.oaiTranscriptUntil(ctx, scope, c, oaiFindPage, prefix.decided)
		if err != nil {
			if baton.ErrorCode(err) == baton.ENOTFOUND {
				continue // deleted meanwhile
			}
			return baton.Chat{}, nil, 0, err
		}
		if kind := oaiMatch(tr, items); kind != matchNone {
			if kind == matchContinue {
				// Pending requests are not listed: the submit checks them.
				if c, err = s.chatIn(ctx, scope, c.ID); err != nil {
					return baton.Chat{}, nil, 0, err
				}
			}
			return c, tr, kind, nil
		}
	}
	return baton.Chat{}, nil, matchNone, nil
}

// oaiTranscript is a chat's conversation as this API's client saw it: the
// person's messages, the UI tool results, and between them one assistant
// message for each reply (with the UI tool calls that ended it), built from
// the envelopes a client may see.
func (s *Server) oaiTranscript(ctx context.Context, scope baton.Scope, chat baton.Chat) ([]oaiItem, error) {
	return s.oaiTranscriptUntil(ctx, scope, chat, 0, nil)
}

// oaiTranscriptUntil is oaiTranscript read page events at a time (0: all
// at once), asking enough after each event whether the transcript so far
// decides what the caller wants; when it says so, no more events are read
// and the transcript is returned as it stands (its last item may be an
// assistant reply that had more to come).
func (s *Server) oaiTranscriptUntil(ctx context.Context, scope baton.Scope, chat baton.Chat, page int, enough func(tr []oaiItem) bool) ([]oaiItem, error) {
	wf := s.workflowOf(chat.Workflow)
	var tr []oaiItem
	reply := func() *oaiItem {
		if len(tr) == 0 || tr[len(tr)-1].role != "assistant" {
			tr = append(tr, oaiItem{role: "assistant"})
		}
		return &tr[len(tr)-1]
	}
	uiCalls := map[string]bool{}
	for recorded, err := range baton.EventsAfter(ctx, s.cfg.Store, scope, chat.ID, 0, page) {
		if err != nil {
			return nil, err
		}
		f := encodeFrame(wf, &recorded)
		if f.data == nil {
			continue
		}
		var env baton.Envelope
		if err := json.Unmarshal(f.data, &env); err != nil {
			return nil, fmt.Errorf("transcript of chat %s: %w", chat.ID, err)
		}
		var ev oaiEvent
		if err := ev.decode(env.Type, env.Data); err != nil {
			return nil, fmt.Errorf("transcript of chat %s: %w", chat.ID, err)
		}
		switch {
		case ev.Type == baton.TypeChatText && ev.Agent == agentUser && !ev.UIHidden:
			tr = append(tr, oaiItem{role: "user", content: strings.TrimSpace(ev.Content), seq: f.seq})
		case ev.Type == baton.TypeChatToolCall && (ev.PendingKind == baton.PendingUITool || ev.PendingKind == baton.PendingClientTool):
			r := reply()
			r.toolCalls = append(r.toolCalls, ev.UIEventID)
			uiCalls[ev.UIEventID] = true
		case ev.Type == baton.TypeChatToolResponse && ev.UIEventID != "" && uiCalls[ev.UIEventID]:
			tr = append(tr, oaiItem{role: "tool", callID: ev.UIEventID, seq: f.seq})
		case len(tr) > 0 && tr[len(tr)-1].role != "assistant":
			// Anything a client sees after an input is the reply to it.
			reply()
		}
		if enough != nil && enough(tr) {
			break
		}
	}
	return tr, nil
}

// oaiClientTools returns the function tools a request offers, checked for
// workflow wf (Engine.CheckClientTools): the agents that may use them are
// offered them, and their calls come back as tool_calls. A request without
// tools offers none, which replaces the chat's set (the newest wins).
// tool_choice and parallel_tool_calls are accepted and ignored: the
// workflow's agents choose their tools.
func (s *Server) oaiClientTools(wf string, req oaiRequest) ([]baton.ClientTool, error) {
	tools := make([]baton.ClientTool, 0, len(req.Tools))
	for i, t := range req.Tools {
		if t.Type != "function" {
			return nil, baton.Errorf(baton.EINVALID, "tools[%d].type: %q is not function (the only kind of tool a client can offer)", i, truncate(t.Type, 64))
		}
		tools = append(tools, baton.ClientTool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	if err := s.cfg.Engine.CheckClientTools(wf, tools); err != nil {
		return nil, err // it names tools[i].name
	}
	return tools, nil
}
