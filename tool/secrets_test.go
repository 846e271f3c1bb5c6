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
