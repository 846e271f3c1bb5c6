package tool

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"

	"github.com/batonhq/baton"
)

// redactedSecret stands in for a secret's value in a tool's output, errors
// and logged stderr. It is the same marker the engine records for a
// secret form's answer.
const redactedSecret = "[redacted]"

// minRedact is the shortest secret value that is redacted: replacing a one-
// or two-letter value everywhere would garble every result while hiding
// nothing a guess would not find.
const minRedact = 4

// declaredSecrets returns the names of the chat's secrets the tool declares
// it uses: those its env lists (command and go tools), and those its url,
// headers and headers_from_env refer to (http tools), and an a2a tool's
// card url and token_from. A tool gets no other
// secret, so a tool that does not need a key cannot leak it.
func (s *Spec) declaredSecrets() []string {
	names := slices.Clone(s.Env)
	refs := func(v string) {
		os.Expand(v, func(k string) string {
			names = append(names, k)
			return ""
		})
	}
	refs(s.URL)
	for _, v := range s.Headers {
		refs(v)
	}
	for _, v := range s.HeadersFromEnv {
		names = append(names, v)
	}
	// An a2a tool's card url and token are documented to come from the
	// chat's secrets too.
	refs(s.A2A.CardURL)
	if s.A2A.TokenFrom != "" {
		names = append(names, s.A2A.TokenFrom)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// secretsFor returns the part of secrets the spec declares, nil when none.
func secretsFor(declared []string, secrets map[string]string) map[string]string {
	var out map[string]string
	for _, name := range declared {
		if v, ok := secrets[name]; ok {
			if out == nil {
				out = make(map[string]string, len(declared))
			}
			out[name] = v
		}
	}
	return out
}

// redactor replaces secret values in text with redactedSecret, the longest
// first so that a value containing another is replaced whole.
type redactor []string

func newRedactor(secrets map[string]string) redactor {
	var r redactor
	for _, v := range secrets {
		if len(v) >= minRedact {
			r = append(r, v)
		}
	}
	slices.SortFunc(r, func(a, b string) int { return len(b) - len(a) })
	return r
}

func (r redactor) string(s string) string {
	for _, v := range r {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, redactedSecret)
		}
	}
	return s
}

// truncatedMarker starts the note capText and parseOutput put after output
// they cut.
const truncatedMarker = "\n[output truncated"

// cutEnd redacts the start of a secret left at the end of s, which was cut
// there (more was not kept); for a result, at the end of what precedes its
// truncation note, if it has one. Pieces shorter than minRedact are left:
// they say too little to matter.
func (r redactor) cutEnd(s string) string {
	if i := strings.Index(s, truncatedMarker); i >= 0 {
		return r.cutEnd(s[:i]) + s[i:]
	}
	for _, v := range r {
		for k := len(v) - 1; k >= minRedact; k-- {
			if strings.HasSuffix(s, v[:k]) {
				s = s[:len(s)-k] + redactedSecret
				break
			}
		}
	}
	return s
}

// cutStart redacts the end of a secret left at the start of s, whose front
// was dropped.
func (r redactor) cutStart(s string) string {
	for _, v := range r {
		for k := len(v) - 1; k >= minRedact; k-- {
			if strings.HasPrefix(s, v[len(v)-k:]) {
				s = redactedSecret + s[k:]
				break
			}
		}
	}
	return s
}

// error returns err, or when its message carries a secret, an error of the
// same code with the secret redacted. The chain is kept (for errors.Is)
// only when nothing had to be redacted.
func (r redactor) error(err error) error {
	if err == nil || len(r) == 0 {
		return err
	}
	msg := err.Error()
	if red := r.string(msg); red != msg {
		return baton.Errorf(baton.ErrorCode(err), "%s", red)
	}
	return err
}

// result redacts a tool result's content (JSON content as JSON), the values of its context updates
// and its ui object.
func (r redactor) result(res baton.ToolResult) baton.ToolResult {
	if len(r) == 0 {
		return res
	}
	if c := []byte(res.Content); json.Valid(c) {
		// A JSON content (not a string) reaches the model as it is: its
		// escaped secrets are secrets too.
		res.Content = string(r.json(c))
	} else {
		res.Content = r.string(res.Content)
	}
	if strings.Contains(res.Content, truncatedMarker) {
		res.Content = r.cutEnd(res.Content)
	}
	for k, raw := range res.Updates {
		res.Updates[k] = r.json(raw)
	}
	if len(res.UI) > 0 {
		res.UI = r.json(res.UI)
	}
	return res
}

// json redacts secrets from a JSON value however its producer escaped them:
// Python writes & raw and é as \u00e9, PHP writes / as \/, Go writes & as
// \u0026 — so matching the encoded text alone misses some. The value is
// decoded, every string (map keys too) redacted, and re-encoded; the
// encoded text is then redacted as well, the raw secret and its Go
// spelling. Text that is not JSON is redacted as text. raw is returned
// unchanged when it held no secret.
func (r redactor) json(raw json.RawMessage) json.RawMessage {
	out := raw
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil {
		if red, changed := r.value(v); changed {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(red); err == nil {
				out = json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n"))
			}
		}
	}
	s := r.string(string(out))
	for _, v := range r {
		enc, _ := json.Marshal(v) // a string always marshals
		if inner := string(enc[1 : len(enc)-1]); strings.Contains(s, inner) {
			s = strings.ReplaceAll(s, inner, redactedSecret)
		}
	}
	if s != string(out) {
		out = json.RawMessage(s)
	}
	return out
}

// value redacts every string in a decoded JSON value, map keys included,
// and reports whether anything changed.
func (r redactor) value(v any) (any, bool) {
	switch t := v.(type) {
	case string:
		red := r.string(t)
		return red, red != t
	case []any:
		changed := false
		for i, e := range t {
			var c bool
			t[i], c = r.value(e)
			changed = changed || c
		}
		return t, changed
	case map[string]any:
		changed := false
		out := make(map[string]any, len(t))
		for k, e := range t {
			red, c := r.value(e)
			rk := r.string(k)
			changed = changed || c || rk != k
			out[rk] = red
		}
		return out, changed
	}
	return v, false
}
