package tool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// lockedBuffer is a log sink written by the registry and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecrets_RedactedAndOnlyDeclared: a command tool that echoes its
// secret to stdout and stderr puts "[redacted]" into its result, its error
// and the log, never the value; it gets only the secrets its env declares;
// and its BATON_CONTEXT does not carry the sealed __secrets.
func TestSecrets_RedactedAndOnlyDeclared(t *testing.T) {
	const mine, other = "sk-live-MINE-0001", "sk-live-OTHER-0002"
	var logs lockedBuffer
	var events []baton.Event
	var mu sync.Mutex
	pub := publisherFunc(func(ev baton.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	r := newRegistry(t, []tool.Spec{{Agent: "A", Name: "leak", File: "leak.sh", Env: []string{"MY_SECRET"}}},
		tool.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), tool.WithPublisher(pub))
	cc := callCtx("l1")
	cc.Secrets = map[string]string{"MY_SECRET": mine, "OTHER_SECRET": other}
	cc.Vars = baton.NewContextVars(map[string]json.RawMessage{"__secrets": json.RawMessage(`{"MY_SECRET":"c2VhbGVk"}`), "plan": json.RawMessage(`1`)})
	ok := mustCall(t, lookup(t, r, "A", "leak"), cc, `{}`)
	cc.ToolCallID = "l2"
	failed := mustCall(t, lookup(t, r, "A", "leak"), cc, `{"x":"fail"}`)
	if failed.Status != baton.ToolStatusError {
		t.Fatalf("the failing call: %+v", failed)
	}
	if !strings.Contains(ok.Content, "my=[redacted]") || !strings.Contains(failed.Content, "key is [redacted]") {
		t.Errorf("results do not show the redaction marker:\n%s\n%s", ok.Content, failed.Content)
	}
	if !strings.Contains(ok.Content, "other=none") {
		t.Errorf("the tool got a secret it does not declare: %s", ok.Content)
	}
	if strings.Contains(ok.Content, "__secrets") || strings.Contains(ok.Content, "c2VhbGVk") || !strings.Contains(ok.Content, `"plan":1`) {
		t.Errorf("BATON_CONTEXT: %s", ok.Content)
	}
	if !strings.Contains(logs.String(), "key is [redacted]") {
		t.Errorf("stderr was not logged redacted:\n%s", logs.String())
	}
	mu.Lock()
	evs, _ := json.Marshal(events)
	mu.Unlock()
	for _, where := range []string{ok.Content, failed.Content, logs.String(), string(evs)} {
		if strings.Contains(where, mine) || strings.Contains(where, other) {
			t.Fatalf("a secret leaked:\n%s", where)
		}
	}
}

// publisherFunc collects the registry's tool events.
type publisherFunc func(baton.Event)

func (f publisherFunc) Publish(_ context.Context, ev baton.Event) error {
	f(ev)
	return nil
}

// TestSecrets_CutOutputRedacted: output cut at the cap in the middle of a
// secret shows no piece of it.
func TestSecrets_CutOutputRedacted(t *testing.T) {
	const secret = "sk-live-ABCDEFGHIJKLMNOP"
	r := newRegistry(t, []tool.Spec{{Agent: "A", Name: "leak", File: "leak.sh", Env: []string{"MY_SECRET"}}}, tool.WithMaxOutput(12))
	cc := callCtx("cut")
	cc.Secrets = map[string]string{"MY_SECRET": secret}
	res := mustCall(t, lookup(t, r, "A", "leak"), cc, `{}`)
	// "my=" and the first 9 bytes of the secret fit in 12 bytes.
	if !strings.Contains(res.Content, "[output truncated") || strings.Contains(res.Content, secret[:minPiece]) {
		t.Fatalf("cut output: %q", res.Content)
	}
}

// minPiece is the shortest piece of a secret the cut output must not show.
const minPiece = 4

// TestSecrets_UIAndUpdatesRedactedInAnyEncoding: a tool whose result object
// echoes secrets in its ui and context_updates, encoded as Python (& and <
// raw, é as \u00e9) or PHP (/ as \/) write them, and in a map key, keeps
// none of them in the result.
func TestSecrets_UIAndUpdatesRedactedInAnyEncoding(t *testing.T) {
	secrets := map[string]string{"PW": "p&ss<w0rd>", "FR": "clé-secrète", "B64": "QUJD/REVG+SElK=="}
	r := newRegistry(t, []tool.Spec{{Agent: "A", Name: "raw", File: "raw.sh", Env: []string{"PW", "FR", "B64"}}})
	cc := callCtx("enc")
	cc.Secrets = secrets
	out := `{"content": {"note": "cl\u00e9-secr\u00e8te"}, ` +
		`"ui": {"component": "card", "props": {"pw": "p&ss<w0rd>", "list": ["QUJD\/REVG+SElK=="], "cl\u00e9-secr\u00e8te": 1}}, ` +
		`"context_updates": {"py": {"v": "cl\u00e9-secr\u00e8te", "pw": "p&ss<w0rd>"}, "php": "QUJD\/REVG+SElK==", "n": 7}}`
	res := mustCall(t, lookup(t, r, "A", "raw"), cc, out)
	all, _ := json.Marshal(res)
	var decoded any
	_ = json.Unmarshal(all, &decoded)
	plain, _ := json.Marshal(decoded) // every string as Go spells it
	var texts []string
	var content any
	if json.Unmarshal([]byte(res.Content), &content) == nil { // the content's strings as the model reads them
		c, _ := json.Marshal(content)
		texts = append(texts, string(c))
	}
	texts = append(texts, res.Content, string(res.UI), string(all))
	for _, u := range res.Updates {
		texts = append(texts, string(u))
	}
	for _, where := range texts {
		for name, v := range secrets {
			enc, _ := json.Marshal(v)
			if strings.Contains(where, v) || strings.Contains(where, string(enc[1:len(enc)-1])) || strings.Contains(string(plain), v) {
				t.Errorf("secret %s survives in %s", name, where)
			}
		}
	}
	if !strings.Contains(string(res.UI), `"pw":"[redacted]"`) || string(res.Updates["n"]) != "7" {
		t.Errorf("ui %s, updates %v: the redaction lost the rest", res.UI, res.Updates)
	}
	for _, u := range res.Updates {
		if !json.Valid(u) {
			t.Errorf("update not JSON after redaction: %s", u)
		}
	}
}
