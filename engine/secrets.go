package engine

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/batonhq/baton"
)

// Secrets the person gives a secret-collecting lifecycle tool (a masked
// form, such as the generator's collect_api_keys) are kept only sealed:
// AES-256-GCM with the server's key, bound to the chat and the secret's name
// (additional data), in the chat's context snapshot under secretsVar. They
// never appear in events, logs, model messages or the history API: the
// recorded tool response says which secrets were received, with the marker
// RedactedSecret for each value. Tools get them, opened, in their call
// context (baton.CallContext.Secrets).

// secretsVar is the reserved context variable holding sealed secrets. It is
// never shown to models, system messages, conditions or clients.
const secretsVar = "__secrets"

// RedactedSecret stands in for a secret's value wherever it would be shown.
const RedactedSecret = "[redacted]"

// SecretKeyEnv names the environment variable that may hold the key
// (base64 or hex of 32 bytes).
const SecretKeyEnv = "BATON_SECRET_KEY"

type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("secret key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(chatID, name, value string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal secret: %w", err)
	}
	out := s.aead.Seal(nonce, nonce, []byte(value), []byte(chatID+"/"+name))
	return base64.StdEncoding.EncodeToString(out), nil
}

func (s *sealer) open(chatID, name, sealed string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", errors.New("open secret: malformed")
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(chatID+"/"+name))
	if err != nil {
		return "", errors.New("open secret: wrong key or tampered value")
	}
	return string(plain), nil
}

// sealForm seals the string values of a secret form's data (name → value).
// Only the names the form asks for (declared, from its arguments.keys) are
// taken: the person chooses the values, never which variables a tool gets.
func (s *sealer) sealForm(chatID string, data json.RawMessage, declared []string) (map[string]string, error) {
	var form map[string]any
	if err := json.Unmarshal(data, &form); err != nil || form == nil {
		return nil, baton.Errorf(baton.EINVALID, "data: a secret form's response must be an object of name to value")
	}
	sealed := make(map[string]string, len(form))
	for name, v := range form {
		if !slices.Contains(declared, name) {
			if len(name) > 64 {
				name = name[:64] + "…"
			}
			return nil, baton.Errorf(baton.EINVALID, "data.%q: not a secret this form asks for (it asks for %s)", name, strings.Join(declared, ", "))
		}
		str, ok := v.(string)
		if !ok {
			return nil, baton.Errorf(baton.EINVALID, "data.%s: a secret must be a string", name)
		}
		if str == "" { // it would hide the server's variable of that name from http tools
			return nil, baton.Errorf(baton.EINVALID, "data.%s: empty (leave a secret out rather than send it empty)", name)
		}
		if strings.ContainsRune(str, 0) { // no environment variable can hold it: every command tool would fail
			return nil, baton.Errorf(baton.EINVALID, "data.%s: contains a NUL byte", name)
		}
		var err error
		if sealed[name], err = s.seal(chatID, name, str); err != nil {
			return nil, err
		}
	}
	return sealed, nil
}

// mergeSealed merges newly sealed secrets over a chat's existing ones and
// returns the new box, the redacted form for the record, and the names.
func mergeSealed(existing json.RawMessage, sealed map[string]string) (box, redacted json.RawMessage, names []string) {
	all := map[string]string{}
	if len(existing) > 0 {
		_ = json.Unmarshal(existing, &all)
	}
	red := make(map[string]string, len(sealed))
	for name, v := range sealed {
		all[name] = v
		red[name] = RedactedSecret
		names = append(names, name)
	}
	slices.Sort(names)
	box, _ = json.Marshal(all)
	redacted, _ = json.Marshal(red)
	return box, redacted, names
}

// openAll opens a chat's sealed secrets for a tool call: those the
// workflow's masked forms still ask for (declared), so a secret stored
// under another name — before the form changed, say — reaches no tool.
func (s *sealer) openAll(chatID string, sealed json.RawMessage, declared func(name string) bool) map[string]string {
	if s == nil || len(sealed) == 0 {
		return nil
	}
	var box map[string]string
	if json.Unmarshal(sealed, &box) != nil {
		return nil
	}
	out := make(map[string]string, len(box))
	for name, v := range box {
		if !declared(name) {
			continue
		}
		bound, sealed := binding(chatID, v)
		if plain, err := s.open(bound, name, sealed); err == nil {
			out[name] = plain
		}
	}
	return out
}

// LoadSecretKey returns the key for sealing secrets: from BATON_SECRET_KEY
// (base64 or hex of 32 bytes) when set, else from the key file at path,
// which is created with a fresh random key and mode 0600 when missing.
func LoadSecretKey(path string) ([]byte, error) {
	if v := strings.TrimSpace(os.Getenv(SecretKeyEnv)); v != "" {
		if k, err := base64.StdEncoding.DecodeString(v); err == nil && len(k) == 32 {
			return k, nil
		}
		if k, err := hex.DecodeString(v); err == nil && len(k) == 32 {
			return k, nil
		}
		return nil, fmt.Errorf("%s: want 32 bytes as base64 or hex", SecretKeyEnv)
	}
	if raw, err := os.ReadFile(path); err == nil {
		k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("secret key file %s: want 32 bytes as base64", path)
		}
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	return k, nil
}

// boundSecrets returns the sealed secrets of box (a chat's secretsVar)
// named in names, for a copy of the chat (Fork): each stays sealed as it
// is, marked with the chat it is bound to (the additional data it was
// sealed with), so that the copy's tools can open it without the value
// ever being opened to copy it. nil when none is left.
func boundSecrets(chatID string, box json.RawMessage, names []string) json.RawMessage {
	if len(box) == 0 || len(names) == 0 {
		return nil
	}
	var all map[string]string
	if json.Unmarshal(box, &all) != nil {
		return nil
	}
	out := map[string]string{}
	for _, name := range names {
		v, ok := all[name]
		if !ok {
			continue
		}
		if !strings.Contains(v, boundSep) { // a fork's fork keeps the first binding
			v = chatID + boundSep + v
		}
		out[name] = v
	}
	if len(out) == 0 {
		return nil
	}
	raw, _ := json.Marshal(out)
	return raw
}

// boundSep separates, in a copied secret, the chat it was sealed for from
// the sealed value (base64, which never holds it).
const boundSep = "|"

// binding splits a stored secret into the chat its seal is bound to and
// the sealed value: chatID and the value itself for one sealed in this
// chat.
func binding(chatID, stored string) (string, string) {
	if i := strings.LastIndex(stored, boundSep); i >= 0 {
		return stored[:i], stored[i+len(boundSep):]
	}
	return chatID, stored
}
