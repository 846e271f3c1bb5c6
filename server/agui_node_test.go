package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// The AG-UI reference checks: @ag-ui/core's zod schemas and @ag-ui/client's
// HttpAgent (its event verification), run by node on
// testdata/agui/check.mjs. .ci/run installs the packages; without node or
// them a test skips, but never in CI.

const aguiNodeDir = "testdata/agui"

// aguiNode returns the node binary with the AG-UI packages installed next
// to check.mjs.
func aguiNode(t *testing.T) string {
	t.Helper()
	return nodeWith(t, aguiNodeDir, "@ag-ui/client")
}

// runNode runs check.mjs with args and stdin, failing the test on a
// non-zero exit with its stderr.
func runNode(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	node := aguiNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"check.mjs"}, args...)...)
	cmd.Dir = aguiNodeDir
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node check.mjs %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// checkAGUISchema validates every event of res against @ag-ui/core.
func checkAGUISchema(t *testing.T, res aguiResult) {
	t.Helper()
	raw := append([]byte{'['}, bytes.Join(res.raw, []byte{','})...)
	raw = append(raw, ']')
	out := runNode(t, raw, "schema")
	var got struct{ Checked int }
	if err := json.Unmarshal(out, &got); err != nil || got.Checked != len(res.raw) {
		t.Fatalf("schema check: %s (%v), want %d events checked", out, err, len(res.raw))
	}
}

// clientRun is what check.mjs's client mode reports.
type clientRun struct {
	ThreadID string `json:"threadId"`
	Runs     []struct {
		Label  string         `json:"label"`
		Types  []string       `json:"types"`
		Result map[string]any `json:"result"`
	} `json:"runs"`
	Messages []map[string]any `json:"messages"`
	State    map[string]any   `json:"state"`
}

// TestAGUI_HttpAgent runs hello and generator through @ag-ui/client's own
// HttpAgent against the live server: its event verification and its
// schema enforcement (a warning about an unknown field fails too) accept
// every run, and its messages and state end as the chat's.
func TestAGUI_HttpAgent(t *testing.T) {
	aguiNode(t)
	e := newEnv(t)
	t.Run("hello", func(t *testing.T) {
		var got clientRun
		if err := json.Unmarshal(runNode(t, nil, "client", e.ts.URL, e.keys[scopeAda], "hello"), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Runs) != 1 || got.Runs[0].Result["status"] != "success" {
			t.Fatalf("runs %+v", got.Runs)
		}
		if n := len(got.Messages); n != 3 || got.Messages[2]["role"] != "assistant" || !strings.Contains(got.Messages[2]["content"].(string), "Hello!") {
			t.Fatalf("the client's messages: %v", got.Messages)
		}
		if got.State["time_told"] != true {
			t.Fatalf("the client's state %v: want the snapshot with the delta applied", got.State)
		}
	})
	t.Run("generator", func(t *testing.T) {
		var got clientRun
		if err := json.Unmarshal(runNode(t, nil, "client", e.ts.URL, e.keys[scopeAda], "generator"), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Runs) != 4 || got.Runs[3].Result["status"] != "success" {
			t.Fatalf("runs %+v", got.Runs)
		}
		chatID := aguiChatID(scopeAda, "generator", got.ThreadID)
		e.waitStatus(t, chatID, baton.ChatCompleted)
		// The client's transcript: the person's answer once, the plan's
		// call and its result, the delivery, and no secret.
		users := 0
		for _, m := range got.Messages {
			if m["role"] == "user" {
				users++
				if m["id"] != "u-answer" {
					t.Errorf("the person's message is %v, want the client's id", m)
				}
			}
		}
		raw, _ := json.Marshal(got.Messages)
		if users != 1 || !bytes.Contains(raw, []byte("approved and ready")) || bytes.Contains(raw, []byte("sk-agui-test")) {
			t.Fatalf("the client's messages: %s", raw)
		}
		if got.State["plan_name"] != "Weekly Newsletter" {
			t.Fatalf("the client's state %v", got.State)
		}
	})
	// desk: the HttpAgent offers its own tool; Desk calls it, the run ends
	// with the call pending, the client's tool message answers it.
	t.Run("desk", func(t *testing.T) {
		de := newEnv(t, withWorkflows(clientToolsDir))
		var got clientRun
		if err := json.Unmarshal(runNode(t, nil, "client", de.ts.URL, de.keys[scopeAda], "desk"), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Runs) != 2 || got.Runs[1].Result["waiting"] != "input" {
			t.Fatalf("runs %+v", got.Runs)
		}
		chatID := aguiChatID(scopeAda, "desk", got.ThreadID)
		de.waitStatus(t, chatID, baton.ChatWaitingInput)
		if resp := de.toolResponses(t, chatID); len(resp) != 1 || resp[0].Content != "Paris (city)" {
			t.Fatalf("tool responses %+v, want the client's result as given", resp)
		}
		raw, _ := json.Marshal(got.Messages)
		if !bytes.Contains(raw, []byte("Noted where you are.")) || !bytes.Contains(raw, []byte("Filed.")) {
			t.Fatalf("the client's messages: %s", raw)
		}
	})
}
