package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/batonhq/baton"
)

// Codes of transport-level errors, from the root package.
const (
	codeForbidden   = baton.EFORBIDDEN   // 403: an Origin that is not allowed
	codeRateLimited = baton.ERATELIMITED // 429: the key's token bucket is empty
	codeTooLarge    = baton.ETOOLARGE    // 413: the request body is over the limit
)

// errRateLimited answers a request or message whose bucket is empty.
var errRateLimited = baton.Errorf(codeRateLimited, "rate limit exceeded: slow down")

// Messages of unavailable errors whose cause a client must not see.
const (
	// msgUnavailable is what a client learns of a dependency that is down
	// (the store, the bus, NATS): the cause names hosts, timeouts and
	// internals, and goes to the log only.
	msgUnavailable = "service temporarily unavailable: retry later"
	// msgInputUnroutable is the answer to an input the bus could not take.
	// JetStream may have stored it anyway, so the client is told to send
	// it again with the same id, which is de-duplicated.
	msgInputUnroutable = "the input could not be routed: retry with the same id (or Idempotency-Key)"
)

// unavailableError is an EUNAVAILABLE error whose message the server wrote
// for clients; its cause is logged, never shown. Any other EUNAVAILABLE
// error reaching a client is shown as msgUnavailable, because its message
// may quote a dependency's error text (natsbridge's "route input …: nats:
// timeout").
type unavailableError struct {
	public *baton.Error // EUNAVAILABLE with the client's message, no cause
	cause  error
}

// startError is the error of a Start without an idempotency key. When the
// chat was created all the same (Start returns it with the error: its run
// could not be started), the client is told so, with the chat's id, rather
// than "retry later": a retry without a key would start a second chat.
// With a key a retry finds the chat and starts its run, so StartOnce's
// errors need nothing of this.
func startError(chat baton.Chat, err error) error {
	if err == nil || chat.ID == "" || baton.ErrorCode(err) != baton.EUNAVAILABLE {
		return err
	}
	return unavailable(fmt.Sprintf("chat %s was created, but its run could not be started; it starts when the service recovers it: do not start it again", chat.ID), err)
}

// unavailable returns an EUNAVAILABLE error that shows msg to clients and
// keeps cause (which may be nil) for the log.
func unavailable(msg string, cause error) error {
	return &unavailableError{public: &baton.Error{Code: baton.EUNAVAILABLE, Message: msg}, cause: cause}
}

func (e *unavailableError) Error() string {
	if e.cause != nil {
		return e.public.Message + ": " + e.cause.Error()
	}
	return e.public.Message
}

// Unwrap gives baton.ErrorCode and baton.ErrorMessage the public error
// (it comes first, so it is the first *baton.Error they find: a handler
// outside this package, like the metrics ones, shows its message too) and
// errors.Is/As the cause.
func (e *unavailableError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.public}
	}
	return []error{e.public, e.cause}
}

// publicError is the one place where the server turns an error into what a
// client sees: the code, and a message that never carries a cause from
// below the engine. Internal errors say "internal error"; unavailable ones
// say what the server wrote for them (unavailableError) or msgUnavailable.
// Every other code's message is written for clients (it names the field or
// the state at fault) and is shown as it is.
func publicError(err error) (code, message string) {
	code = baton.ErrorCode(err)
	switch code {
	case baton.EINTERNAL:
		return code, "internal error"
	case baton.EUNAVAILABLE:
		var u *unavailableError
		if errors.As(err, &u) {
			return code, u.public.Message
		}
		return code, msgUnavailable
	}
	return code, baton.ErrorMessage(err)
}

// clientGone reports whether err is only the end of the client's request:
// it disconnected, and its context was cancelled under a store or bus call.
// That is no failure of the server's, and is not logged as one.
func clientGone(r *http.Request, err error) bool {
	return errors.Is(err, context.Canceled) && r.Context().Err() != nil
}

// errorBody is the JSON of every error response: {"error": {"code", "message"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

// errorDetail is the code and the client-safe message of an error.
type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers with err's status and its client-safe code and message
// (publicError). An internal or unavailable error is logged with its cause;
// a request whose client went away is logged at debug level and answered
// 503 (nobody reads it), never counted as a 500.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if clientGone(r, err) {
		s.log.Debug("server: client went away", "method", r.Method, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: errorDetail{Code: baton.EUNAVAILABLE, Message: "request cancelled"}})
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
	if code == baton.EUNAUTHORIZED { // every 401 says how to authenticate (RFC 9110)
		w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: msg}})
}

// writeJSON writes v as the JSON response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		slog.Error("server: encode response", "err", err)
		status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
