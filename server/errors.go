package server

import (
	"encoding/json"
	"errors"
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

// errStatus maps an error to its HTTP status through baton.HTTPStatus, the
// one place where codes meet statuses.
func errStatus(err error) int { return baton.HTTPStatus(baton.ErrorCode(err)) }

// errorBody is the JSON of every error response: {"error": {"code", "message"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers with err's status and its client-safe code and
// message. An internal error is logged with its cause and shown as
// "internal error", never with details.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := errStatus(err)
	code := baton.ErrorCode(err)
	if status >= 500 && code == baton.EINTERNAL {
		s.log.Error("server: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	} else if status >= 500 {
		s.log.Warn("server: unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if errors.Is(err, errUnauthorized) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: baton.ErrorMessage(err)}})
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
