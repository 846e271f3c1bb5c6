package baton

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Scope is the tenant a call acts for: an app (the spec's enterprise) and a
// user within it. Every store call takes one, and a chat of another scope is
// ErrNotFound, never forbidden-with-details (invariant 8).
type Scope struct {
	App  string
	User string
}

// EffectState is where an effect stands in the ledger.
type EffectState int

const (
	// EffectNew means the claim is the first: the caller owns the effect,
	// must perform it, and then record its result.
	EffectNew EffectState = iota
	// EffectPending means the key was claimed before but no result was
	// recorded: a process died between claiming and recording. Whether the
	// effect happened is unknown; the caller decides (see the tools docs).
	EffectPending
	// EffectDone means a result was recorded; Result holds it and the
	// effect must not be performed again.
	EffectDone
)

// Effect is one entry of the effect ledger.
type Effect struct {
	Key       string
	State     EffectState
	Result    json.RawMessage // set when State is EffectDone
	ClaimedAt time.Time
	Holder    EffectHolder // the process that claimed it (or took the claim over last)
}

// EffectHolder names the process that holds an effect's claim, so that a
// claim left by a process that is gone (it was killed, or its instance lost
// the chat's lease) is recovered at once rather than after the claim's age.
type EffectHolder struct {
	// Instance is the engine's instance id (engine.Config.InstanceID); empty
	// for a single process that owns its store.
	Instance string
	// Boot is a random id drawn at every process start: the same instance
	// with another boot is a process that died or was restarted.
	Boot string
}

// EffectLedger makes side effects happen at most once per key across
// retries, replays, restarts and instances (invariant 5). The key for a tool
// call is (chat, turn key, tool-call id).
type EffectLedger interface {
	// ClaimEffect claims key for the chat on behalf of holder. Exactly one of
	// any number of concurrent claims of a key gets EffectNew, and holder is
	// recorded with the claim; the others get the entry as it is.
	ClaimEffect(ctx context.Context, scope Scope, chatID, key string, holder EffectHolder) (Effect, error)
	// TakeOverEffect moves the pending claim prev (as ClaimEffect returned
	// it) to holder, claimed now. It reports false, changing nothing, when
	// the entry is no longer prev: another process took it over first, or
	// its result was recorded. Exactly one of concurrent take-overs of one
	// claim gets true.
	TakeOverEffect(ctx context.Context, scope Scope, chatID string, prev Effect, holder EffectHolder) (bool, error)
	// RecordEffect stores the result of a claimed effect. A later claim
	// returns it with EffectDone.
	RecordEffect(ctx context.Context, scope Scope, chatID, key string, result json.RawMessage) error
}

// maxScopeName is the longest app or user name, in bytes.
const maxScopeName = 128

// Validate checks a scope as every store and every way in (API keys, dev
// mode) takes it: app and user are required, at most 128 bytes, valid
// UTF-8 and free of control characters (NUL among them). PostgreSQL
// refuses invalid UTF-8 and NUL where SQLite keeps them; checking before
// either is reached makes both accept and refuse the same scopes. The
// error is EINVALID and names the field.
func (s Scope) Validate() error {
	for _, f := range []struct{ name, v string }{{"app", s.App}, {"user", s.User}} {
		switch {
		case f.v == "":
			return Errorf(EINVALID, "%s: required", f.name)
		case len(f.v) > maxScopeName:
			return Errorf(EINVALID, "%s: longer than %d bytes", f.name, maxScopeName)
		case !utf8.ValidString(f.v):
			return Errorf(EINVALID, "%s: not valid UTF-8", f.name)
		case strings.IndexFunc(f.v, unicode.IsControl) >= 0:
			return Errorf(EINVALID, "%s: control characters not allowed", f.name)
		}
	}
	return nil
}

// JSON keys of Metadata.App and Metadata.User. Before those fields existed
// the engine kept the scope in Extra under these keys; keeping the keys
// means events already in stores, inboxes and JetStream streams decode into
// the named fields (UnmarshalJSON, SetExtraJSON) with nothing to migrate.
const (
	metaApp  = "app"
	metaUser = "user"
)

// metaTraceParent is the JSON key of Metadata.TraceParent.
const metaTraceParent = "traceparent"

// InboxKey is the metadata key (in Extra) that marks an input event kept in
// its chat's inbox before it was published. It is the runtime's own: a
// server refuses it from a client.
const InboxKey = "inbox"

// SetScope puts the tenant scope of an input event into its metadata.
func (m *Metadata) SetScope(s Scope) { m.App, m.User = s.App, s.User }

// Scope returns the tenant scope an input event carries. An event a Go
// caller built the old way, with the scope as JSON strings in Extra, is
// read too.
func (m *Metadata) Scope() Scope {
	s := Scope{App: m.App, User: m.User}
	if s.App == "" && m.extraScopeKey(metaApp) {
		_ = json.Unmarshal(m.Extra[metaApp], &s.App)
	}
	if s.User == "" && m.extraScopeKey(metaUser) {
		_ = json.Unmarshal(m.Extra[metaUser], &s.User)
	}
	return s
}

// extraScopeKey reports whether Extra holds k, a scope key, whose named
// field is empty: a Go caller set the scope the old way. That value is
// encoded (and decodes into the named field), not dropped.
func (m *Metadata) extraScopeKey(k string) bool {
	if _, ok := m.Extra[k]; !ok {
		return false
	}
	switch k {
	case metaApp:
		return m.App == ""
	case metaUser:
		return m.User == ""
	}
	return false
}

// ExtraJSON encodes what a store keeps beside its columns for the named
// fields trigger_agent_id, trigger_agent_name, env_name and source (the
// chat id is the row's chat): the scope (app, user), the traceparent and the Extra keys, as
// one JSON object, or nil when there are none. SetExtraJSON reads it back.
func (m *Metadata) ExtraJSON() ([]byte, error) {
	n := 0
	for k := range m.Extra {
		if !isNamedMetadataKey(k) || m.extraScopeKey(k) {
			n++
		}
	}
	if n == 0 && m.App == "" && m.User == "" && m.TraceParent == "" {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, n+2)
	for k, v := range m.Extra {
		if isNamedMetadataKey(k) && !m.extraScopeKey(k) {
			continue // the named field wins, as in MarshalJSON
		}
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		out[k] = v
	}
	for k, v := range map[string]string{metaApp: m.App, metaUser: m.User, metaTraceParent: m.TraceParent} {
		if v != "" {
			out[k], _ = json.Marshal(v) // a string always marshals
		}
	}
	return json.Marshal(out)
}

// SetExtraJSON reads what ExtraJSON wrote (or, for rows written before the
// scope had named fields, the same keys kept as Extra): "app", "user" and
// "traceparent" go to their named fields, every other key to Extra.
func (m *Metadata) SetExtraJSON(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var extra map[string]json.RawMessage
	if err := json.Unmarshal(b, &extra); err != nil {
		return fmt.Errorf("metadata extra: %w", err)
	}
	for k, dst := range map[string]*string{metaApp: &m.App, metaUser: &m.User, metaTraceParent: &m.TraceParent} {
		v, ok := extra[k]
		if !ok {
			continue
		}
		if err := decodeString("metadata."+k, v, dst); err != nil {
			return err
		}
		delete(extra, k)
	}
	if len(extra) > 0 {
		m.Extra = extra
	}
	return nil
}
