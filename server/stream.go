package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
	"github.com/coder/websocket"
)

// WebSocket close codes beyond RFC 6455's.
const (
	// CloseReconnect tells the client it fell behind (or the server lost
	// events): reconnect with the last sequence it saw and replay.
	CloseReconnect websocket.StatusCode = 4000
	// CloseUnauthorized: the auth message was missing, malformed or wrong.
	CloseUnauthorized websocket.StatusCode = 4401
	// CloseNotFound: the chat does not exist for this key, or was deleted.
	CloseNotFound websocket.StatusCode = 4404
)

// replayPage is how many events a replay reads from the store at a time.
const replayPage = 500

// cursor is a stream's position in its chat: the last sequence it has
// handled (sent or hidden by the filter). It makes replay and live delivery
// one gap-free, duplicate-free sequence.
type cursor struct {
	s      *Server
	scope  baton.Scope
	chatID string
	wf     *workflow.Workflow
	last   int64
}

// replay sends every event after c.last from the store.
func (c *cursor) replay(ctx context.Context, send func(*frame) error) error {
	for {
		evs, err := c.s.cfg.Store.Events(ctx, c.scope, c.chatID, c.last, replayPage)
		if err != nil {
			return fmt.Errorf("replay chat %s after %d: %w", c.chatID, c.last, err)
		}
		for i := range evs {
			if f := encodeFrame(c.wf, &evs[i]); f.data != nil {
				if err := send(f); err != nil {
					return err
				}
			}
			c.last = evs[i].Sequence
		}
		if len(evs) < replayPage {
			return nil
		}
	}
}

// live sends a frame from the hub: a transient one as it is; a recorded one
// only if it is the next sequence. One already replayed is skipped; one past
// a gap (which the hub's order makes impossible unless events were lost)
// is preceded by a replay from the store, which holds it.
func (c *cursor) live(ctx context.Context, f *frame, send func(*frame) error) error {
	if f.seq == 0 {
		return send(f)
	}
	if f.seq <= c.last {
		return nil
	}
	if f.seq > c.last+1 {
		return c.replay(ctx, send)
	}
	c.last = f.seq
	if f.data == nil {
		return nil
	}
	return send(f)
}

// lastSequence reads the client's starting point from the query.
func lastSequenceParam(r *http.Request) (int64, error) {
	return seqParam(r.URL.Query().Get("last_sequence"), "last_sequence")
}

// handleWS serves GET /ws/{app}/{chat_id}: replay after ?last_sequence=N,
// then live envelopes; client messages as in clientMessage.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	last, err := lastSequenceParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	app, chatID := r.PathValue("app"), r.PathValue("chat_id")
	var (
		p      principal
		chat   baton.Chat
		authed bool
	)
	if bearer(r) != "" || s.cfg.Dev {
		if p, err = s.principal(r, app); err == nil {
			if chat, err = s.chatIn(r.Context(), p.scope, chatID); err == nil {
				err = checkLast(last, chat)
			}
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		authed = true
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins})
	if err != nil {
		return // Accept has answered (403 for a foreign Origin, 4xx for a bad handshake)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(s.cfg.MaxMessage)
	// The reader's context is not tied to the server's: a cancelled Read
	// drops the connection without a close frame, and shutdown wants one.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	if !authed {
		// A browser cannot set headers on a WebSocket: its first message is
		// {"type":"auth","token":"…"}.
		actx, acancel := context.WithTimeout(ctx, s.cfg.AuthTimeout)
		_, data, err := conn.Read(actx)
		acancel()
		if err != nil {
			conn.Close(CloseUnauthorized, "auth: expected an auth message first")
			return
		}
		m, err := decodeClientMessage(data)
		if err != nil || m.Type != msgAuth {
			conn.Close(CloseUnauthorized, "auth: the first message must be {\"type\":\"auth\",\"token\":…}")
			return
		}
		if p, err = s.authenticate(r, m.Token, app); err == nil {
			chat, err = s.chatIn(ctx, p.scope, chatID)
		}
		switch {
		case err == nil:
		case baton.ErrorCode(err) == baton.EUNAUTHORIZED:
			conn.Close(CloseUnauthorized, "auth: invalid API key")
			return
		case baton.ErrorCode(err) == baton.ENOTFOUND:
			conn.Close(CloseNotFound, "chat not found")
			return
		default:
			conn.Close(websocket.StatusInternalError, "internal error")
			return
		}
	}
	if last > chat.LastSequence {
		conn.Close(websocket.StatusPolicyViolation, fmt.Sprintf("last_sequence: %d is after the chat's last sequence %d", last, chat.LastSequence))
		return
	}
	s.serveWS(ctx, cancel, conn, p, chat, last)
}

// checkLast refuses a starting point past the chat's end: the client would
// silently miss the events up to it.
func checkLast(last int64, c baton.Chat) error {
	if last > c.LastSequence {
		return baton.Errorf(baton.EINVALID, "last_sequence: %d is after the chat's last sequence %d", last, c.LastSequence)
	}
	return nil
}

// wsReply is a message the server sends besides envelopes.
type wsReply struct {
	Type string    `json:"type"` // ack, error, pong
	Data replyData `json:"data"`
}

type replyData struct {
	For     string `json:"for,omitempty"` // the client message type answered
	ID      string `json:"id,omitempty"`  // the client message's id
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// wsControl is what the reader hands the writer, in the order the client
// sent it: a reply to send, or a resume to replay from.
type wsControl struct {
	reply  wsReply
	resume bool
	last   int64 // with resume: the client's last sequence
}

// serveWS runs one authenticated WebSocket: a reader goroutine takes client
// messages; this goroutine owns every write.
func (s *Server) serveWS(ctx context.Context, cancel context.CancelFunc, conn *websocket.Conn, p principal, chat baton.Chat, last int64) {
	wf := s.workflowOf(chat.Workflow)
	sub, err := s.hub.subscribe(chat.ID, wf)
	if err != nil {
		conn.Close(websocket.StatusServiceRestart, "server shutting down")
		return
	}
	defer s.hub.unsubscribe(sub)
	cur := &cursor{s: s, scope: p.scope, chatID: chat.ID, wf: wf, last: last}
	if m := s.cfg.Metrics; m != nil {
		m.WSConnected(1)
		defer m.WSConnected(-1)
	}

	ctl := make(chan wsControl, 8)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { s.readWS(ctx, cancel, conn, p, chat.ID, ctl) })

	// A client that stops reading is cut off by the hub when its queue
	// fills, or fails the write within WriteTimeout: one timer per
	// connection, armed around each burst of writes, closes it. The writes
	// get a context that never ends, so coder/websocket arms nothing per
	// write: a context with a deadline per burst, and the context.AfterFunc
	// the library registers for each write with a cancellable context, cost
	// more than the envelope. (A write still blocked when the reader ends is
	// bounded by the same timer.)
	wctx := context.WithoutCancel(ctx)
	send := func(f *frame) error { return conn.Write(wctx, websocket.MessageText, f.data) }
	stalled := time.AfterFunc(s.cfg.WriteTimeout, func() { conn.CloseNow() }) // armed for the replay
	defer stalled.Stop()
	err = cur.replay(ctx, send)
	stalled.Stop()
	if err != nil {
		s.closeWS(conn, err)
		return
	}
	for {
		var err error
		select {
		case f := <-sub.q:
			stalled.Reset(s.cfg.WriteTimeout)
			err = cur.live(ctx, f, send)
			f.release()
			// What else is queued, without waiting; at most a queueful
			// under one deadline.
			for n := 1; err == nil && n < cap(sub.q) && len(sub.q) > 0; n++ {
				f = <-sub.q
				err = cur.live(ctx, f, send)
				f.release()
			}
			stalled.Stop()
		case c := <-ctl:
			stalled.Reset(s.cfg.WriteTimeout)
			if c.resume {
				cur.last = c.last
				err = cur.replay(ctx, send)
			} else {
				b, _ := json.Marshal(c.reply)
				err = send(&frame{data: b})
			}
			stalled.Stop()
		case <-sub.kicked:
			// The hub kicks every stream when the server shuts down.
			switch sub.reason.Load() {
			case kickSlow, kickResync:
				if m := s.cfg.Metrics; m != nil && sub.reason.Load() == kickSlow {
					m.WSDropped()
				}
				conn.Close(CloseReconnect, "reconnect and replay from your last sequence")
			case kickDeleted:
				conn.Close(CloseNotFound, "chat deleted")
			default:
				conn.Close(websocket.StatusServiceRestart, "server shutting down: reconnect and replay")
			}
			return
		case <-ctx.Done():
			return
		}
		if err != nil {
			s.closeWS(conn, err)
			return
		}
	}
}

// closeWS ends a stream after a failed write or replay.
func (s *Server) closeWS(conn *websocket.Conn, err error) {
	if errors.Is(err, context.Canceled) || websocket.CloseStatus(err) != -1 {
		return
	}
	s.log.Debug("server: websocket ended", "err", err)
	if baton.ErrorCode(err) == baton.ENOTFOUND {
		conn.Close(CloseNotFound, "chat not found") // deleted while the stream replayed
		return
	}
	conn.Close(CloseReconnect, "reconnect and replay from your last sequence")
}

// readWS reads client messages until the connection or ctx ends. Bad
// messages get an error reply naming the field; the connection and the
// chat go on.
func (s *Server) readWS(ctx context.Context, cancel context.CancelFunc, conn *websocket.Conn, p principal, chatID string, ctl chan<- wsControl) {
	defer cancel()
	reply := func(r wsReply) bool {
		select {
		case ctl <- wsControl{reply: r}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return // closed, too big (closed 1009 by the library), or ctx
		}
		if typ != websocket.MessageText {
			if !reply(wsReply{Type: "error", Data: replyData{Code: baton.EINVALID, Message: "message: must be a JSON text message"}}) {
				return
			}
			continue
		}
		m, err := decodeClientMessage(data)
		if err == nil && !s.limiter.allow(p.limit) {
			err = baton.Errorf(codeRateLimited, "rate limit exceeded: slow down")
		}
		if err == nil {
			err = s.wsMessage(ctx, p, chatID, m, ctl)
		}
		r := wsReply{Type: "ack", Data: replyData{For: m.Type, ID: m.ID}}
		if err != nil {
			r = wsReply{Type: "error", Data: replyData{For: m.Type, ID: m.ID, Code: baton.ErrorCode(err), Message: baton.ErrorMessage(err)}}
			if baton.ErrorCode(err) == baton.EINTERNAL {
				s.log.Error("server: websocket message", "chat_id", chatID, "type", m.Type, "err", err)
			}
		} else if m.Type == msgPing {
			r.Type = "pong"
		} else if m.Type == msgResume {
			continue // the replay is the answer
		}
		if !reply(r) {
			return
		}
	}
}

// wsMessage acts on one valid client message.
func (s *Server) wsMessage(ctx context.Context, p principal, chatID string, m clientMessage, ctl chan<- wsControl) error {
	if m.ChatID != "" && m.ChatID != chatID {
		return baton.Errorf(baton.EINVALID, "chat_id: %q is not this connection's chat", truncate(m.ChatID, baton.MaxEventIDLen))
	}
	switch m.Type {
	case msgPing:
		return nil
	case msgAuth:
		return baton.Errorf(baton.EINVALID, "type: auth is only the first message of a connection without an Authorization header")
	case msgResume:
		c, err := s.chatIn(ctx, p.scope, chatID)
		if err != nil {
			return err
		}
		if err := checkLast(*m.LastSequence, c); err != nil {
			return err
		}
		select {
		case ctl <- wsControl{resume: true, last: *m.LastSequence}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := s.needEngine(); err != nil {
		return err
	}
	return s.input(ctx, p.scope, chatID, m, "ws")
}

// handleSSE serves GET /api/chats/{app}/{chat_id}/stream as Server-Sent
// Events: "id: <sequence>" on each recorded event, replay after
// Last-Event-ID (or ?last_sequence=), comment heartbeats, and an
// "event: reconnect" before the server ends a stream that fell behind.
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) {
	p, err := s.principal(r, r.PathValue("app"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	last, err := lastSequenceParam(r)
	if err == nil && r.Header.Get("Last-Event-ID") != "" {
		last, err = seqParam(r.Header.Get("Last-Event-ID"), "Last-Event-ID")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	chat, err := s.chatIn(r.Context(), p.scope, r.PathValue("chat_id"))
	if err == nil {
		err = checkLast(last, chat)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wf := s.workflowOf(chat.Workflow)
	sub, err := s.hub.subscribe(chat.ID, wf)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer s.hub.unsubscribe(sub)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	rc := http.NewResponseController(w)
	// The server's ReadTimeout bounds reading requests; a stream has nothing
	// more to read, and an expired read deadline would end it.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	buf := make([]byte, 0, 1024)
	send := func(f *frame) error {
		buf = buf[:0]
		if f.seq > 0 {
			buf = append(buf, "id: "...)
			buf = strconv.AppendInt(buf, f.seq, 10)
			buf = append(buf, '\n')
		}
		buf = append(buf, "event: "...)
		buf = append(buf, f.typ...)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, f.data...) // compact JSON: one line
		buf = append(buf, "\n\n"...)
		return write(buf)
	}
	cur := &cursor{s: s, scope: p.scope, chatID: chat.ID, wf: wf, last: last}
	if err := write([]byte("retry: 1000\n\n")); err != nil {
		return
	}
	if err := cur.replay(ctx, send); err != nil {
		return
	}
	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	for {
		var err error
		select {
		case f := <-sub.q:
			err = cur.live(ctx, f, send)
			f.release()
		case <-tick.C:
			err = write([]byte(": heartbeat\n\n"))
		case <-sub.kicked:
			_ = write([]byte("event: reconnect\ndata: {\"reason\":\"reconnect and replay from Last-Event-ID\"}\n\n"))
			return
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}
