package baton

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes. The code, not the message, decides what a client sees: the
// server maps each code to one HTTP status in [HTTPStatus], and an error with
// no code is internal, whose details never leave the process.
const (
	ENOTFOUND     = "not_found"    // the thing does not exist, or the caller may not know it does
	EINVALID      = "invalid"      // the request or input is malformed; the message names what is wrong
	ECONFLICT     = "conflict"     // the request conflicts with the current state (a duplicate, a stale owner)
	EUNAUTHORIZED = "unauthorized" // no or bad credentials
	EUNAVAILABLE  = "unavailable"  // a dependency is down or the component is closed; retrying later may work
	EINTERNAL     = "internal"     // a bug or an unexpected failure; details are logged, not shown
	EFORBIDDEN    = "forbidden"    // the request comes from where it may not (an Origin that is not allowed)
	ERATELIMITED  = "rate_limited" // the caller sent too much too fast; retrying later works
	ETOOLARGE     = "too_large"    // the request is larger than the limit
)

// Error is baton's application error: a code from the list above, a message
// safe to show a client, and an optional cause kept for logs.
type Error struct {
	Code    string
	Message string
	Err     error // the cause; logged, never shown to clients
}

// Error returns the message with the cause, for logs.
func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	if e.Err != nil {
		return msg + ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the code sentinel for e's code (for example
// errors.Is(err, ErrNotFound) for any not-found error) or e itself.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t == e {
		return true
	}
	// Code sentinels carry no message and no cause; they match every error of their code.
	return t.Message == "" && t.Err == nil && t.Code == e.Code
}

// Code sentinels: errors.Is(err, baton.ErrNotFound) is true for every error
// whose code is ENOTFOUND.
var (
	ErrNotFound     = &Error{Code: ENOTFOUND}
	ErrInvalid      = &Error{Code: EINVALID}
	ErrConflict     = &Error{Code: ECONFLICT}
	ErrUnauthorized = &Error{Code: EUNAUTHORIZED}
	ErrUnavailable  = &Error{Code: EUNAVAILABLE}
	ErrInternal     = &Error{Code: EINTERNAL}
)

// ErrFenced is the cause of an append refused because the caller's lease
// on the chat was taken over (ChatUpdate.Fence is stale). Its code is
// ECONFLICT; errors.Is(err, ErrFenced) tells it from other conflicts.
var ErrFenced = &Error{Code: ECONFLICT, Message: "stale lease"}

// ErrStale is the cause of an append refused because the chat's last
// sequence is not the one the caller expected (ChatUpdate.ExpectNext): the
// caller's view of the chat is behind the store. Its code is ECONFLICT;
// errors.Is(err, ErrStale) tells it from other conflicts.
var ErrStale = &Error{Code: ECONFLICT, Message: "stale chat state"}

// StaleNext returns the error of an append whose ChatUpdate.ExpectNext
// does not follow the chat's last sequence, for stores.
func StaleNext(chatID string, expect, last int64) error {
	return Errorf(ECONFLICT, "chat %q: expected to append at sequence %d, the chat is at %d: %w", chatID, expect, last, ErrStale)
}

// ErrClosed is returned by a component used after Close. Its code is EUNAVAILABLE.
var ErrClosed = &Error{Code: EUNAVAILABLE, Message: "closed"}

// Errorf returns an *Error with the given code and a formatted message. A %w
// verb in format wraps the cause as with fmt.Errorf.
func Errorf(code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), Err: errors.Unwrap(err)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the client-safe message of err: the message of the
// first *Error in its chain, or a generic text for internal errors, so that
// internal details never leak.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) && e.Code != EINTERNAL {
		if e.Message != "" {
			return e.Message
		}
		return e.Code
	}
	return "internal error"
}

// HTTPStatus maps an error code to its HTTP status. It is the one place where
// that mapping lives.
func HTTPStatus(code string) int {
	switch code {
	case "":
		return http.StatusOK
	case ENOTFOUND:
		return http.StatusNotFound
	case EINVALID:
		return http.StatusBadRequest
	case ECONFLICT:
		return http.StatusConflict
	case EUNAUTHORIZED:
		return http.StatusUnauthorized
	case EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case EFORBIDDEN:
		return http.StatusForbidden
	case ERATELIMITED:
		return http.StatusTooManyRequests
	case ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}
