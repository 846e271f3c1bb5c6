// Package chatlog is a chat's recorded events as a portable file: Export
// writes one (JSON lines in the envelope shape, after a header line), Read
// decodes one, and a File gives what a replay needs of it: the person's
// inputs, the model's calls and replies, and a scripted.json (Scripted)
// that turns a real chat into an offline fixture. Package replay runs what
// it reads; docs/replay.md describes the format.
package chatlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/batonhq/baton"
)

// FormatVersion is the version of the export format Export writes and
// Read accepts.
const FormatVersion = 1

// Views of an export: what part of the chat's recorded events it holds.
const (
	// ViewFull holds every event the engine recorded, hidden messages and
	// internal agents' texts included: what a replay needs, since the model
	// saw them. Secrets are never in it (see Export).
	ViewFull = "full"
	// ViewClient holds what the chat's person may see, filtered as the
	// history API filters it. It cannot be replayed: the model's view of
	// the conversation is missing from it.
	ViewClient = "client"
)

// MaxLine is the longest line Read accepts, in bytes.
const MaxLine = 16 << 20

// Header is the first line of an export file.
type Header struct {
	// Format is "baton.chat"; Version is FormatVersion.
	Format  string `json:"format"`
	Version int    `json:"version"`
	// View is ViewFull or ViewClient.
	View     string `json:"view"`
	App      string `json:"app"`
	Workflow string `json:"workflow"`
	ChatID   string `json:"chat_id"`
	// Status is the chat's status when it was exported.
	Status string `json:"status,omitempty"`
	// CreatedAt is when the chat was created; ExportedAt when the file was
	// written. RFC 3339 in UTC.
	CreatedAt  string `json:"created_at"`
	ExportedAt string `json:"exported_at,omitempty"`
	// LastSequence is the sequence of the chat's last recorded event.
	LastSequence int64 `json:"last_sequence"`
	// StartContext holds the context variables the chat still had with the
	// values it began with (none of its events changed them), the reserved
	// ones ("__" prefix, the sealed secrets) left out: a replay starts
	// with those of them its workflow lets a client set.
	StartContext map[string]json.RawMessage `json:"start_context,omitempty"`
}

// formatName is Header.Format.
const formatName = "baton.chat"

// Record is one recorded event of an export, decoded from its envelope.
type Record struct {
	// Line is the line of the file it was read from (0 for one not read
	// from a file).
	Line     int
	Sequence int64
	Type     string
	// Payload is the event's payload: the envelope's data without the
	// agent flags and the sequence.
	Payload json.RawMessage
	Flags   baton.AgentFlags
	// Timestamp is the envelope's, RFC 3339.
	Timestamp string
}

// File is a decoded export.
type File struct {
	Header  Header
	Records []Record
}

// envelopeKeys are the keys of an envelope's data that are not payload.
var envelopeKeys = []string{"is_visual", "is_structured_capable", "is_tool_agent", "sequence"}

// Read decodes an export file: a header line, then one envelope per line,
// chat.* events only, with sequences strictly increasing. It never panics
// on any input; an error is an EINVALID *baton.Error naming the line and
// the field.
func Read(r io.Reader) (*File, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	f := &File{}
	line := 0
	sawHeader := false
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if !sawHeader {
			h, err := decodeHeader(b)
			if err != nil {
				return nil, baton.Errorf(baton.EINVALID, "line %d: header: %s", line, baton.ErrorMessage(err))
			}
			f.Header, sawHeader = h, true
			continue
		}
		rec, err := decodeRecord(b)
		if err != nil {
			return nil, baton.Errorf(baton.EINVALID, "line %d: %s", line, baton.ErrorMessage(err))
		}
		rec.Line = line
		if n := len(f.Records); n > 0 && rec.Sequence <= f.Records[n-1].Sequence {
			return nil, baton.Errorf(baton.EINVALID, "line %d: data.sequence: %d does not follow %d (sequences must increase)", line, rec.Sequence, f.Records[n-1].Sequence)
		}
		f.Records = append(f.Records, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, baton.Errorf(baton.EINVALID, "line %d: longer than %d bytes", line+1, MaxLine)
		}
		return nil, fmt.Errorf("read export: %w", err)
	}
	if !sawHeader {
		return nil, baton.Errorf(baton.EINVALID, "empty file: an export starts with a header line")
	}
	return f, nil
}

func decodeHeader(b []byte) (Header, error) {
	var h Header
	if err := strictUnmarshal(b, &h); err != nil {
		return h, err
	}
	switch {
	case h.Format != formatName:
		return h, baton.Errorf(baton.EINVALID, "format: %q, want %q (is this a baton export?)", h.Format, formatName)
	case h.Version != FormatVersion:
		return h, baton.Errorf(baton.EINVALID, "version: %d, this baton reads version %d", h.Version, FormatVersion)
	case h.View != ViewFull && h.View != ViewClient:
		return h, baton.Errorf(baton.EINVALID, "view: %q, want %q or %q", h.View, ViewFull, ViewClient)
	case h.Workflow == "":
		return h, baton.Errorf(baton.EINVALID, "workflow: required")
	case h.LastSequence < 0:
		return h, baton.Errorf(baton.EINVALID, "last_sequence: must not be negative")
	}
	if h.CreatedAt != "" {
		if _, err := time.Parse(time.RFC3339, h.CreatedAt); err != nil {
			return h, baton.Errorf(baton.EINVALID, "created_at: not an RFC 3339 time")
		}
	}
	for k, v := range h.StartContext {
		if !json.Valid(v) {
			return h, baton.Errorf(baton.EINVALID, "start_context.%s: not JSON", k)
		}
	}
	return h, nil
}

func decodeRecord(b []byte) (Record, error) {
	var env baton.Envelope
	if err := strictUnmarshal(b, &env); err != nil {
		return Record{}, err
	}
	if err := baton.ValidateType(env.Type); err != nil {
		return Record{}, err
	}
	if !baton.IsChatType(env.Type) {
		return Record{}, baton.Errorf(baton.EINVALID, "type: %q is not a recorded chat.* event", env.Type)
	}
	var data map[string]json.RawMessage
	if err := json.Unmarshal(env.Data, &data); err != nil || data == nil {
		return Record{}, baton.Errorf(baton.EINVALID, "data: must be a JSON object")
	}
	rec := Record{Type: env.Type, Timestamp: env.Timestamp}
	seq, ok := data["sequence"]
	if !ok {
		return Record{}, baton.Errorf(baton.EINVALID, "data.sequence: required")
	}
	if err := json.Unmarshal(seq, &rec.Sequence); err != nil || rec.Sequence < 1 {
		return Record{}, baton.Errorf(baton.EINVALID, "data.sequence: must be a whole number from 1")
	}
	for _, f := range []struct {
		key string
		dst *bool
	}{{"is_visual", &rec.Flags.Visual}, {"is_structured_capable", &rec.Flags.StructuredCapable}, {"is_tool_agent", &rec.Flags.ToolAgent}} {
		if v, ok := data[f.key]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return Record{}, baton.Errorf(baton.EINVALID, "data.%s: must be true or false", f.key)
			}
		}
	}
	for _, k := range envelopeKeys {
		delete(data, k)
	}
	payload, err := json.Marshal(data)
	if err != nil {
		return Record{}, baton.Errorf(baton.EINVALID, "data: %v", err)
	}
	rec.Payload = payload
	return rec, nil
}

// strictUnmarshal decodes one JSON value into v, refusing unknown fields
// and trailing data, with errors that name the field.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return baton.Errorf(baton.EINVALID, "malformed JSON at byte %d: %v", se.Offset, se)
		case errors.As(err, &te):
			return baton.Errorf(baton.EINVALID, "%s: must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return baton.Errorf(baton.EINVALID, "%s", trimJSONPrefix(err.Error()))
	}
	if dec.More() {
		return baton.Errorf(baton.EINVALID, "unexpected data after the JSON value")
	}
	return nil
}

func trimJSONPrefix(s string) string {
	if len(s) > 6 && s[:6] == "json: " {
		return s[6:]
	}
	return s
}

// Event returns the record as a baton.Event of chat chatID (its id and
// metadata are not in an export).
func (r *Record) Event(chatID string) baton.Event {
	ts, _ := time.Parse(time.RFC3339Nano, r.Timestamp)
	return baton.Event{
		ID: "rec-" + strconv.FormatInt(r.Sequence, 10), Type: r.Type, Timestamp: ts.UnixMilli(),
		Metadata: baton.Metadata{TriggerSessionID: chatID}, Payload: r.Payload, Sequence: r.Sequence,
	}
}
