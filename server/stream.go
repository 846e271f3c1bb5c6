package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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
	// CloseTooManyStreams: the key has Config.MaxStreamsPerKey streams open
	// already (the 429 of a connection that authenticated by message).
	CloseTooManyStreams websocket.StatusCode = 4429
)

// replayPage is how many events a replay reads from the store at a time.
const replayPage = 500

// cursor is a stream's position in its chat: the last sequence it has
// handled (sent or hidden by the filter). It makes replay and live delivery
// one gap-free, duplicate-free sequence. There is one per stream and it
// only moves forward once the stream has sent a recorded event: no
// sequence reaches a stream twice (see resume).
type cursor struct {
	s      *Server
	scope  baton.Scope
	chatID string
	wf     *workflow.Workflow
	last   int64
	// sent: the stream has sent a recorded event; from then on the cursor
	// never moves back.
	sent bool
}

// resume handles a client's resume message: it has every event up to
// last. Forward of the cursor, the cursor moves there and what follows is
// replayed. Behind it, the events in between were either sent on this
// stream already — nothing is sent again — or, on a stream that has sent
// no recorded event yet (opened at a later ?last_sequence), are not sent
// at all: that first resume sets the cursor.
func (c *cursor) resume(ctx context.Context, last int64, send func(*frame) error) error {
	if last < c.last && c.sent {
		return nil
	}
	c.last = last
	return c.replay(ctx, send)
}

// replay sends every event after c.last from the store.
func (c *cursor) replay(ctx context.Context, send func(*frame) error) error {
	for ev, err := range baton.EventsAfter(ctx, c.s.cfg.Store, c.scope, c.chatID, c.last, replayPage) {
		if err != nil {
			return fmt.Errorf("replay chat %s after %d: %w", c.chatID, c.last, err)
		}
		if f := encodeFrame(c.wf, &ev); f.data != nil {
			if err := send(f); err != nil {
				return err
			}
			c.sent = true
		}
		c.last = ev.Sequence
	}
	return nil
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
	c.sent = true
	return send(f)
}

// liveStream is what a WebSocket and an SSE stream share: the chat's hub
// subscription and the stream's cursor, so that the replay from the store
// and the live frames from the queue are one gap-free sequence. The
// transport keeps what is its own: how a frame is written, keepalives,
// client messages and how the stream is closed.
type liveStream struct {
	s     *Server
	sub   *subscriber
	cur   *cursor
	batch []*frame // reused by deliver
}

// subscribeLive subscribes to chat's live events for a stream that has
// every event up to last; it fails only while the hub shuts down. The
// caller checks the chat is still there (checkChat), replays and closes
// the stream.
func (s *Server) subscribeLive(scope baton.Scope, chat baton.Chat, last int64) (*liveStream, error) {
	wf := s.workflowOf(chat.Workflow)
	sub, err := s.hub.subscribe(chat.ID, wf)
	if err != nil {
		return nil, err
	}
	return &liveStream{s: s, sub: sub, cur: &cursor{s: s, scope: scope, chatID: chat.ID, wf: wf, last: last}}, nil
}

// checkChat reports whether the chat is still in the stream's scope: a
// delete that landed between the caller's scope check and subscribe kicked
// the chat's streams before this one was among them; the store knows. (A
// delete after this check kicks this subscriber.) A WebSocket needs no
// such check: its replay's read says ENOTFOUND (serveWS).
func (l *liveStream) checkChat(ctx context.Context) error {
	_, err := l.s.chatIn(ctx, l.cur.scope, l.cur.chatID)
	return err
}

// close unsubscribes the stream.
func (l *liveStream) close() { l.s.hub.unsubscribe(l.sub) }

// ready is signalled when the stream's queue has frames for deliver.
func (l *liveStream) ready() <-chan struct{} { return l.sub.q.ready }

// kicked is closed when the hub ends the stream; kickReason says why.
func (l *liveStream) kicked() <-chan struct{} { return l.sub.kicked }

// kickReason is why the hub kicked the stream (kickSlow, kickResync,
// kickDeleted, or shutdown).
func (l *liveStream) kickReason() int { return int(l.sub.reason.Load()) }

// replay sends every event after the cursor from the store.
func (l *liveStream) replay(ctx context.Context, send func(*frame) error) error {
	return l.cur.replay(ctx, send)
}

// resume handles a client's resume message (see cursor.resume).
func (l *liveStream) resume(ctx context.Context, last int64, send func(*frame) error) error {
	return l.cur.resume(ctx, last, send)
}

// deliver sends everything queued, at once (merging can only touch frames
// still in the queue), through the cursor. After a failed send it sends
// nothing more but still releases every frame taken.
func (l *liveStream) deliver(ctx context.Context, send func(*frame) error) error {
	var err error
	l.batch = l.sub.q.take(l.batch[:0])
	for i, f := range l.batch {
		if err == nil {
			err = l.cur.live(ctx, f.prepare(), send)
		}
		f.release()
		l.batch[i] = nil
	}
	return err
}

// lastSequence reads the client's starting point from the query.
func lastSequenceParam(r *http.Request) (int64, error) {
	return seqParam(r.URL.Query().Get("last_sequence"), "last_sequence")
}

// authMessageParam reads ?auth=message: the client, which sends no
// Authorization header, will authenticate by its first message. Only dev
// mode needs to be told (see handleWS); elsewhere such a socket must send
// the auth message anyway.
func authMessageParam(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("auth"); v {
	case "":
		return false, nil
	case "message":
		return true, nil
	default:
		return false, baton.Errorf(baton.EINVALID, "auth: must be \"message\" (the first message is {\"type\":\"auth\",\"token\":…}), not %q", truncate(v, 64))
	}
}

// admitPending admits a WebSocket that will wait for its auth message, or
// refuses it (ERATELIMITED) when its client address is over its handshake
// rate or holds MaxPendingAuthPerAddr such sockets already, or when
// MaxPendingAuth are waiting in all. release uncounts it.
func (s *Server) admitPending(r *http.Request) (release func(), err error) {
	addr := clientAddr(r)
	if !s.handshakes.allow(addr) {
		return nil, baton.Errorf(codeRateLimited, "too many unauthenticated WebSocket handshakes from this address: retry later")
	}
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	if s.pendingByAddr[addr] >= s.cfg.MaxPendingAuthPerAddr {
		return nil, baton.Errorf(codeRateLimited, "too many connections from this address waiting to authenticate: retry later")
	}
	if s.pendingAuth.Add(1) > int64(s.cfg.MaxPendingAuth) {
		s.pendingAuth.Add(-1)
		return nil, baton.Errorf(codeRateLimited, "too many connections waiting to authenticate: retry later")
	}
	s.pendingByAddr[addr]++
	return func() {
		s.pendingAuth.Add(-1)
		s.pendingMu.Lock()
		defer s.pendingMu.Unlock()
		if s.pendingByAddr[addr]--; s.pendingByAddr[addr] <= 0 {
			delete(s.pendingByAddr, addr)
		}
	}, nil
}

// wsConn is what a WebSocket's reader and writer share.
type wsConn struct {
	conn *websocket.Conn
	// batch is conn's network connection: the writer gathers a batch of
	// envelopes' writes into one (see batchConn).
	batch  *batchConn
	app    string
	chatID string
	r      *http.Request // the handshake, for the client's address
	slot   *streamSlot   // its count against the principal's bucket
	// devOpen: opened in dev mode without a key, as the dev user; a first
	// auth message may still name a key, which the connection then acts as.
	devOpen bool
	p       atomic.Pointer[principal] // who it acts as: stored by the reader, loaded by the writer's key re-check
}

// principal returns who the connection acts as.
func (ws *wsConn) principal() principal { return *ws.p.Load() }

// handleWS serves GET /ws/{app}/{chat_id}: replay after ?last_sequence=N,
// then live envelopes; client messages as in clientMessage.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	last, err := lastSequenceParam(r)
	var byMessage bool
	if err == nil {
		byMessage, err = authMessageParam(r)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	app, chatID := r.PathValue("app"), r.PathValue("chat_id")
	var (
		p               principal
		chat            baton.Chat
		authed, devOpen bool
		// notFound: a dev-mode socket of the dev user, who has no such
		// chat and will send no auth message: closed 4404 once accepted.
		notFound bool
	)
	switch {
	case bearer(r) != "":
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
	case s.cfg.Dev:
		// A browser cannot set headers on a WebSocket. In dev mode its
		// socket is the dev user's, unless its first message is an auth
		// message: a request that sends a key is authenticated with it. A
		// chat the dev user does not have may be a key's: a socket that
		// says it will authenticate (?auth=message) is accepted and must do
		// so by its first message. Any other is the dev user's, who needs
		// no auth message and has no such chat: it is closed with 4404 at
		// once, not after AuthTimeout spent waiting for a message that is
		// not coming. (It is accepted first because a browser is shown
		// only 1006 for a refused handshake, never why.)
		if p, err = s.principal(r, app); err == nil {
			chat, err = s.chatIn(r.Context(), p.scope, chatID)
		}
		switch {
		case err == nil:
			if err := checkLast(last, chat); err != nil {
				s.writeError(w, r, err)
				return
			}
			authed, devOpen = true, true
		case baton.ErrorCode(err) == baton.ENOTFOUND:
			notFound = !byMessage
		default:
			s.writeError(w, r, err)
			return
		}
	}
	ws := &wsConn{app: app, chatID: chatID, r: r, devOpen: devOpen}
	defer func() { ws.slot.release() }()
	waiting := func() {}
	switch {
	case notFound:
		// Closed as soon as it is accepted: nobody's stream, no wait.
	case authed:
		if ws.slot, err = s.acquireStream(p); err != nil {
			s.writeError(w, r, err)
			return
		}
	default:
		// Until its auth message, a socket is nobody's: bounds per client
		// address (a rate and a count) keep one client from filling the
		// global bound and locking every browser out.
		release, err := s.admitPending(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		waiting = sync.OnceFunc(release)
		defer waiting()
	}
	hj := &batchHijacker{ResponseWriter: w, writes: &s.wsWrites}
	conn, err := websocket.Accept(hj, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins})
	if err != nil {
		return // Accept has answered (403 for a foreign Origin, 4xx for a bad handshake)
	}
	defer conn.CloseNow()
	if notFound {
		conn.Close(CloseNotFound, "chat not found")
		return
	}
	ws.conn, ws.batch = conn, hj.conn
	conn.SetReadLimit(s.cfg.MaxMessage)
	// The reader's context is not tied to the server's: a cancelled Read
	// drops the connection without a close frame, and shutdown wants one.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	if !authed {
		// A browser cannot set headers on a WebSocket: its first message is
		// {"type":"auth","token":"…"}.
		// At the deadline the socket is closed with the 4401 frame, not
		// dropped: a cancelled Read would close it without one, and the
		// client would not know why.
		timedOut := make(chan struct{})
		timer := time.AfterFunc(s.cfg.AuthTimeout, func() {
			defer close(timedOut)
			conn.Close(CloseUnauthorized, "auth: no auth message in time")
		})
		_, data, err := conn.Read(ctx)
		if !timer.Stop() {
			<-timedOut // the close is sent; the socket is done
			return
		}
		// (In dev mode, a socket here said it would authenticate:
		// ?auth=message. One that did not was closed 4404 above.)
		if err != nil {
			conn.Close(CloseUnauthorized, "auth: expected an auth message first")
			return
		}
		m, err := decodeClientMessage(data)
		if err != nil || m.Type != msgAuth {
			conn.Close(CloseUnauthorized, "auth: the first message must be {\"type\":\"auth\",\"token\":…}")
			return
		}
		if p, err = s.authenticate(ctx, r, m.Token, app); err == nil {
			chat, err = s.chatIn(ctx, p.scope, chatID)
		}
		waiting()
		if !s.closeAuthFailed(conn, err) {
			return
		}
		if ws.slot, err = s.acquireStream(p); err != nil {
			conn.Close(CloseTooManyStreams, "too many open streams for this key")
			return
		}
	}
	if last > chat.LastSequence {
		conn.Close(websocket.StatusPolicyViolation, fmt.Sprintf("last_sequence: %d is after the chat's last sequence %d", last, chat.LastSequence))
		return
	}
	ws.p.Store(&p)
	s.serveWS(ctx, cancel, ws, chat, last)
}

// closeAuthFailed closes a connection whose auth message failed, with the
// code that tells the client what to do; it reports whether err is nil
// (the connection goes on).
func (s *Server) closeAuthFailed(conn *websocket.Conn, err error) bool {
	if err == nil {
		return true
	}
	code, reason := s.authClose(err)
	conn.Close(code, reason)
	return false
}

// authClose maps a failed WebSocket authentication (err != nil) to the
// close code and reason the client gets, logging what the client is not
// told.
func (s *Server) authClose(err error) (websocket.StatusCode, string) {
	switch baton.ErrorCode(err) {
	case baton.EUNAUTHORIZED:
		return CloseUnauthorized, "auth: invalid API key"
	case baton.ENOTFOUND:
		return CloseNotFound, "chat not found"
	case baton.EUNAVAILABLE:
		s.log.Warn("server: websocket auth", "err", err)
		return websocket.StatusTryAgainLater, msgUnavailable
	default:
		s.log.Error("server: websocket auth", "err", err)
		return websocket.StatusInternalError, "internal error"
	}
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

// replyData is the body of a wsReply.
type replyData struct {
	For     string `json:"for,omitempty"` // the client message type answered
	ID      string `json:"id,omitempty"`  // the client message's id
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// wsControl is what the reader hands the writer, in the order the client
// sent it: a reply to send, a resume to replay from, or the end of the
// connection (the writer owns every write, the close frame included).
type wsControl struct {
	reply  wsReply
	resume bool
	last   int64 // with resume: the client's last sequence
	// close, when non-zero, closes the connection with this code and
	// reason, after the reply if there is one.
	close  websocket.StatusCode
	reason string
}

// serveWS runs one authenticated WebSocket: a reader goroutine takes client
// messages; this goroutine owns every write.
func (s *Server) serveWS(ctx context.Context, cancel context.CancelFunc, ws *wsConn, chat baton.Chat, last int64) {
	conn := ws.conn
	live, err := s.subscribeLive(ws.principal().scope, chat, last)
	if err != nil {
		conn.Close(websocket.StatusServiceRestart, "server shutting down")
		return
	}
	defer live.close()
	// No checkChat here: the replay below, before any other write, is a
	// read of the chat in the stream's scope, and a chat deleted between
	// the scope check and the subscription fails it with ENOTFOUND
	// (baton.EventStore.Events), which closes the socket 4404 — one store
	// read a connection fewer. (An SSE stream checks before its replay:
	// its status line goes out with the first write, and a deleted chat
	// must still answer 404.)
	if m := s.cfg.Metrics; m != nil {
		m.WSConnected(1)
		defer m.WSConnected(-1)
	}

	ctl := make(chan wsControl, 8)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		defer cancel() // the client is gone (or the connection ends): so is the writer
		s.readWS(ctx, ws, ctl)
	})

	// A client that stops reading is cut off by the hub when its queue
	// fills, or fails a write within WriteTimeout: one timer per
	// connection, armed around each write (a replay page's writes, an
	// envelope, a reply), closes it. The writes get a context that never
	// ends, so coder/websocket arms nothing per write: a context with a
	// deadline per write, and the context.AfterFunc the library registers
	// for each write with a cancellable context, cost more than the
	// envelope; resetting one timer costs next to nothing. (A write still
	// blocked when the reader ends is bounded by the same timer.) A slow
	// store read between two writes of a replay is not a stalled client.
	wctx := context.WithoutCancel(ctx)
	stalled := time.AfterFunc(time.Hour, func() { conn.CloseNow() })
	stalled.Stop()
	defer stalled.Stop()
	send := func(f *frame) error {
		stalled.Reset(s.cfg.WriteTimeout)
		err := conn.Write(wctx, websocket.MessageText, f.data)
		stalled.Stop()
		return err
	}
	// batched sends what fn sends as one write (batchConn): the frames of a
	// replay page, or all those a delivery took from the queue at once.
	batched := func(fn func(send func(*frame) error) error) error {
		ws.batch.gather()
		err := fn(send)
		stalled.Reset(s.cfg.WriteTimeout)
		ferr := ws.batch.flush()
		stalled.Stop()
		if err == nil {
			err = ferr
		}
		return err
	}
	if err := batched(func(send func(*frame) error) error { return live.replay(ctx, send) }); err != nil {
		s.closeWS(conn, err)
		return
	}
	// Keepalive: a ping every PingInterval, on its own goroutine so that
	// waiting for the pong (which the reader receives) holds up no
	// envelope; an unanswered one ends the connection.
	pingTick := time.NewTicker(s.cfg.PingInterval)
	defer pingTick.Stop()
	pong := make(chan error, 1)
	pinging := false
	recheck := time.NewTicker(s.cfg.KeyRecheck)
	defer recheck.Stop()
	for {
		var err error
		select {
		case <-live.ready():
			err = batched(func(send func(*frame) error) error { return live.deliver(ctx, send) })
		case c := <-ctl:
			switch {
			case c.resume:
				err = batched(func(send func(*frame) error) error { return live.resume(ctx, c.last, send) })
			case c.reply.Type != "":
				b, _ := json.Marshal(c.reply)
				err = send(&frame{data: b})
			}
			if err == nil && c.close != 0 {
				conn.Close(c.close, c.reason)
				return
			}
		case <-pingTick.C:
			if !pinging {
				pinging = true
				wg.Go(func() {
					pctx, pcancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
					defer pcancel()
					pong <- conn.Ping(pctx)
				})
			}
		case err = <-pong:
			pinging = false
			if err != nil && ctx.Err() == nil {
				s.log.Debug("server: websocket ping unanswered; closing", "chat_id", chat.ID, "err", err)
				conn.CloseNow()
				return
			}
		case <-recheck.C:
			if err := s.recheckKey(ctx, ws.principal()); errors.Is(err, errRevoked) {
				conn.Close(websocket.StatusPolicyViolation, "API key revoked")
				return
			}
		case <-live.kicked():
			// The hub kicks every stream when the server shuts down.
			switch reason := live.kickReason(); reason {
			case kickSlow, kickResync:
				if m := s.cfg.Metrics; m != nil && reason == kickSlow {
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

// recheckKey is a stream's periodic key re-check (Config.KeyRecheck),
// bounded so that a slow store holds the stream's writes up for at most
// WriteTimeout. Only errRevoked ends the stream: a store that cannot answer
// now is no reason to drop a client it authorized.
func (s *Server) recheckKey(ctx context.Context, p principal) error {
	kctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	err := s.keyLive(kctx, p)
	if err != nil && !errors.Is(err, errRevoked) {
		s.log.Debug("server: stream key re-check failed; keeping the stream", "err", err)
	}
	return err
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
// chat go on. Inputs re-check the connection's key first: a key revoked
// since the handshake gets an error and the connection is closed (1008).
func (s *Server) readWS(ctx context.Context, ws *wsConn, ctl chan<- wsControl) {
	conn, chatID := ws.conn, ws.chatID
	p := ws.principal()
	push := func(c wsControl) bool {
		select {
		case ctl <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// end hands the writer the connection's last words and waits for it
	// to close: the writer owns every write. Returning at once would
	// cancel ctx and race the close frame.
	end := func(c wsControl) {
		if push(c) {
			<-ctx.Done()
		}
	}
	for first := true; ; first = false {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return // closed, too big (closed 1009 by the library), or ctx
		}
		if typ != websocket.MessageText {
			if !push(wsControl{reply: wsReply{Type: "error", Data: replyData{Code: baton.EINVALID, Message: "message: must be a JSON text message"}}}) {
				return
			}
			continue
		}
		m, err := decodeClientMessage(data)
		if err == nil && m.Type == msgAuth && first && ws.devOpen {
			np, c := s.devAuth(ctx, ws, m.Token)
			if c.close != 0 {
				end(c)
				return
			}
			p = np
			continue // no ack: the stream is the answer, as for a first auth message
		}
		if err == nil && !s.limiter.allow(p.limit) {
			err = errRateLimited
		}
		if err == nil && (m.Type == msgSubmit || m.Type == msgUIResponse || m.Type == msgCancel) {
			if err = s.keyLive(ctx, p); errors.Is(err, errRevoked) {
				end(wsControl{
					reply: wsReply{Type: "error", Data: replyData{For: m.Type, ID: m.ID, Code: baton.EUNAUTHORIZED, Message: baton.ErrorMessage(errRevoked)}},
					close: websocket.StatusPolicyViolation, reason: "API key revoked",
				})
				return
			}
		}
		if err == nil {
			err = s.wsMessage(ctx, p, chatID, m, ctl)
		}
		r := wsReply{Type: "ack", Data: replyData{For: m.Type, ID: m.ID}}
		if err != nil {
			if ctx.Err() != nil {
				return // the connection is ending: nobody reads the answer
			}
			code, msg := publicError(err)
			r = wsReply{Type: "error", Data: replyData{For: m.Type, ID: m.ID, Code: code, Message: msg}}
			switch code {
			case baton.EINTERNAL:
				s.log.Error("server: websocket message", "chat_id", chatID, "type", m.Type, "err", err)
			case baton.EUNAVAILABLE:
				s.log.Warn("server: websocket message", "chat_id", chatID, "type", m.Type, "err", err)
			}
		} else if m.Type == msgPing {
			r.Type = "pong"
		} else if m.Type == msgResume {
			continue // the replay is the answer
		}
		if !push(wsControl{reply: r}) {
			return
		}
	}
}

// devAuth authenticates the first-message key of a dev-mode connection
// opened as the dev user: the connection goes on as the key's principal if
// the key is live and its scope holds the chat, else it is closed (the
// returned control's close is set).
func (s *Server) devAuth(ctx context.Context, ws *wsConn, token string) (principal, wsControl) {
	p, err := s.authenticate(ctx, ws.r, token, ws.app)
	if err == nil {
		_, err = s.chatIn(ctx, p.scope, ws.chatID)
	}
	if err != nil {
		code, reason := s.authClose(err)
		return p, wsControl{close: code, reason: reason}
	}
	if err := ws.slot.move(p); err != nil {
		return p, wsControl{close: CloseTooManyStreams, reason: "too many open streams for this key"}
	}
	ws.p.Store(&p)
	return p, wsControl{}
}

// wsMessage acts on one valid client message. A message's id is its
// idempotency key (inputEventID).
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
	if m.Type == msgCancel {
		_, err := s.cancelRun(ctx, p.scope, chatID)
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
	slot, err := s.acquireStream(p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer slot.release()
	live, err := s.subscribeLive(p.scope, chat, last)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer live.close()
	if err := live.checkChat(r.Context()); err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	write := newEventStream(w, s.cfg.WriteTimeout).write
	// The events of a batch (those a delivery took from the queue at once,
	// or a replay page) are written and flushed together, as a WebSocket's
	// are (batchConn): one write to the network each, not one per event.
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		s.sseWrites.Add(1)
		err := write(buf)
		buf = buf[:0]
		if cap(buf) > 4*batchWriteLimit {
			buf = nil // a long replay's buffer is not kept for the stream's life
		}
		return err
	}
	send := func(f *frame) error {
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
		if len(buf) >= batchWriteLimit {
			return flush()
		}
		return nil
	}
	// batched writes what a batch's sends gathered; it returns the batch's
	// error, else the write's.
	batched := func(err error) error {
		if ferr := flush(); err == nil {
			err = ferr
		}
		return err
	}
	if err := write([]byte("retry: 1000\n\n")); err != nil {
		return
	}
	if err := batched(live.replay(ctx, send)); err != nil {
		return
	}
	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	recheck := time.NewTicker(s.cfg.KeyRecheck)
	defer recheck.Stop()
	for {
		var err error
		select {
		case <-live.ready():
			err = batched(live.deliver(ctx, send))
		case <-tick.C:
			err = write([]byte(": heartbeat\n\n"))
		case <-recheck.C:
			// A revoked key's stream ends without "event: reconnect": the
			// EventSource's reconnection then gets 401 and stops.
			if errors.Is(s.recheckKey(ctx, p), errRevoked) {
				return
			}
		case <-live.kicked():
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
