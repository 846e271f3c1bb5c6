package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/batonhq/baton"
)

// Limits on what a client may send.
const (
	// DefaultMaxBody is the default limit of an HTTP request body.
	DefaultMaxBody = 1 << 20
	// DefaultMaxMessage is the default limit of one WebSocket message.
	DefaultMaxMessage = 1 << 20
	// maxContent bounds a person's message.
	maxContent = 256 << 10
)

// decodeBody reads r's JSON body into dst strictly: unknown fields, wrong
// types, trailing data and bodies over the limit are errors that name what
// is wrong. An empty body is allowed when optional is true.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, dst any, optional bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return baton.Errorf(codeTooLarge, "body: larger than %d bytes", mbe.Limit)
		}
		return baton.Errorf(baton.EINVALID, "body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return baton.Errorf(baton.EINVALID, "body: required (a JSON object)")
	}
	return decodeStrict("body", body, dst)
}

// decodeStrict decodes one JSON object into dst, naming the field at fault.
func decodeStrict(what string, data []byte, dst any) error {
	if !utf8.Valid(data) {
		return baton.Errorf(baton.EINVALID, "%s: not valid UTF-8", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(what, data, err)
	}
	if dec.More() {
		return baton.Errorf(baton.EINVALID, "%s: unexpected data after the JSON object", what)
	}
	if _, err := dec.Token(); err != io.EOF {
		return baton.Errorf(baton.EINVALID, "%s: unexpected data after the JSON object", what)
	}
	return nil
}

// jsonError turns an encoding/json error into an EINVALID error naming the
// field or the place.
func jsonError(what string, data []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line, col := baton.LineCol(data, max(se.Offset-1, 0))
		return baton.Errorf(baton.EINVALID, "%s: malformed JSON at line %d, column %d", what, line, col)
	case errors.As(err, &te):
		if te.Field == "" {
			return baton.Errorf(baton.EINVALID, "%s: must be a JSON object, not %s", what, te.Value)
		}
		return baton.Errorf(baton.EINVALID, "%s: must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return baton.Errorf(baton.EINVALID, "%s: incomplete JSON", what)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return baton.Errorf(baton.EINVALID, "%s: unknown field", strings.Trim(f, `"`))
	}
	return baton.Errorf(baton.EINVALID, "%s: %s", what, strings.TrimPrefix(msg, "json: "))
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	}
	return "a " + k
}

// clientMessage is a message a WebSocket client sends. Which fields apply
// depends on Type:
//
//	{"type": "user.input.submit", "chat_id"?: "…", "content": "…"}
//	{"type": "ui.tool.response", "chat_id"?: "…", "ui_event_id": "…", "status"?: "success", "data": {…}}
//	{"type": "resume", "last_sequence": 42}
//	{"type": "ping"}
//	{"type": "auth", "token": "bk_…"}   (the first message, for browsers)
//
// Any message may carry an "id" that the server's ack or error echoes. The
// id of an input — a user.input.submit or a ui.tool.response — is also its
// idempotency key (1–128 characters of A–Z, a–z, 0–9, '_', '.', ':', '-'):
// sent again with the same id, the input is recorded once, and a retry that
// comes after it was applied gets the same ack (publishInput).
type clientMessage struct {
	Type         string          `json:"type"`
	ID           string          `json:"id,omitempty"`
	ChatID       string          `json:"chat_id,omitempty"`
	Content      *string         `json:"content,omitempty"`
	UIEventID    string          `json:"ui_event_id,omitempty"`
	Status       string          `json:"status,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	LastSequence *int64          `json:"last_sequence,omitempty"`
	Token        string          `json:"token,omitempty"`

	// offers says that the input comes with the client's tools (AG-UI,
	// Chat Completions): tools, possibly none, replace the chat's set.
	// The WebSocket protocol never sets it.
	offers bool
	tools  []baton.ClientTool
}

// Client message types.
const (
	msgSubmit     = "user.input.submit"
	msgUIResponse = "ui.tool.response"
	msgResume     = "resume"
	msgPing       = "ping"
	msgAuth       = "auth"
	msgCancel     = "run.cancel"
)

// decodeClientMessage parses and checks a WebSocket client message. Every
// error is EINVALID and names the field at fault. It never panics.
func decodeClientMessage(data []byte) (clientMessage, error) {
	var m clientMessage
	if err := decodeStrict("message", data, &m); err != nil {
		return clientMessage{}, err
	}
	if m.ID != "" && (m.Type == msgSubmit || m.Type == msgUIResponse) {
		// The id of an input is its idempotency key; other messages' ids
		// are only echoed, whatever their characters.
		if err := checkIdempotencyKey("id", m.ID); err != nil {
			return clientMessage{}, err
		}
	}
	allowed := map[string]bool{"type": true, "id": true}
	switch m.Type {
	case "":
		return clientMessage{}, baton.Errorf(baton.EINVALID, "type: required (one of user.input.submit, ui.tool.response, run.cancel, resume, ping, auth)")
	case msgSubmit:
		if m.Content == nil {
			return clientMessage{}, baton.Errorf(baton.EINVALID, "content: required")
		}
		allowed["chat_id"], allowed["content"] = true, true
	case msgUIResponse:
		if m.UIEventID == "" {
			return clientMessage{}, baton.Errorf(baton.EINVALID, "ui_event_id: required")
		}
		allowed["chat_id"], allowed["ui_event_id"], allowed["status"], allowed["data"] = true, true, true, true
	case msgResume:
		if m.LastSequence == nil {
			return clientMessage{}, baton.Errorf(baton.EINVALID, "last_sequence: required")
		}
		if *m.LastSequence < 0 {
			return clientMessage{}, baton.Errorf(baton.EINVALID, "last_sequence: must not be negative")
		}
		allowed["last_sequence"] = true
	case msgPing:
	case msgCancel:
		allowed["chat_id"] = true
	case msgAuth:
		if m.Token == "" {
			return clientMessage{}, baton.Errorf(baton.EINVALID, "token: required")
		}
		allowed["token"] = true
	default:
		return clientMessage{}, baton.Errorf(baton.EINVALID, "type: unknown message type %q (use user.input.submit, ui.tool.response, run.cancel, resume, ping or auth)", truncate(m.Type, 64))
	}
	for field, set := range map[string]bool{
		"chat_id": m.ChatID != "", "content": m.Content != nil, "ui_event_id": m.UIEventID != "",
		"status": m.Status != "", "data": m.Data != nil, "last_sequence": m.LastSequence != nil, "token": m.Token != "",
	} {
		if set && !allowed[field] {
			return clientMessage{}, baton.Errorf(baton.EINVALID, "%s: not a field of %s", field, m.Type)
		}
	}
	return m, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
