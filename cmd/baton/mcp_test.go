package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpStdio runs `baton mcp` (this test binary as baton) on dataDir and
// connects the go-sdk client to it over stdin/stdout, speaking version
// ("" for the latest). Its stderr is returned for the test to read: the
// logs go there, never into the protocol.
func mcpStdio(t *testing.T, dataDir, version string, opts *mcp.ClientOptions) (*mcp.ClientSession, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "mcp", "--data-dir", dataDir, "--app", "acme", "--user", "ada",
		"--web-url", "http://127.0.0.1:8080", "--log-level", "debug")
	cmd.Env = append(os.Environ(), envRunMain+"=1", "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "baton-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to baton mcp: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess, stderr
}

// syncBuffer is a bytes.Buffer a child process's output is copied into
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mcpCall(t *testing.T, sess *mcp.ClientSession, tool string, args map[string]any) (text string, sc map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	p.SetProgressToken("tok")
	res, err := sess.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &sc)
	if res.IsError {
		t.Fatalf("call %s: error result %q", tool, strings.Join(parts, "\n"))
	}
	return strings.Join(parts, "\n"), sc
}

// TestMCP_Stdio runs `baton mcp` for real: the go-sdk client lists the
// workflows, calls hello with progress; a client without elicitation
// starts generator and gets the chat id; a second process continues the
// chat by id, from the store, and a client that takes elicitation is
// asked nothing more until the secret form, which it is sent to the web
// UI for.
func TestMCP_Stdio(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var progress []string
	sess, stderr := mcpStdio(t, dir, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, r.Params.Message)
			mu.Unlock()
		},
	})
	ctx := context.Background()
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "hello") || !strings.Contains(strings.Join(names, ","), "generator") {
		t.Fatalf("tools %v: want the example workflows", names)
	}
	text, sc := mcpCall(t, sess, "hello", map[string]any{"input": "What time is it?"})
	if !strings.Contains(text, "Hello! I checked the clock in UTC") || sc["status"] != "completed" {
		t.Fatalf("hello: %q %v\nstderr:\n%s", text, sc, stderr.String())
	}
	mu.Lock()
	got := strings.Join(progress, "|")
	mu.Unlock()
	if !strings.Contains(got, "Greeter is working") {
		t.Errorf("progress %q: want the speaker", got)
	}

	// No elicitation: the question comes back with the chat id.
	text, sc = mcpCall(t, sess, "generator", nil)
	id, _ := sc["chat_id"].(string)
	if sc["status"] != "waiting_input" || id == "" || !strings.Contains(text, "What would you like to automate?") {
		t.Fatalf("generator: %q %v", text, sc)
	}
	if err := sess.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	// Another process, on the same store, with elicitation on the
	// 2025-11-25 protocol (elicitation/create during the call).
	var asked []string
	sess2, stderr2 := mcpStdio(t, dir, "2025-11-25", &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	text, sc = mcpCall(t, sess2, "generator", map[string]any{"chat_id": id, "input": "a weekly newsletter"})
	if sc["status"] != "waiting_secret" || sc["chat_id"] != id {
		t.Fatalf("continued: %q %v\nstderr:\n%s", text, sc, stderr2.String())
	}
	if !strings.Contains(text, "http://127.0.0.1:8080/?app=acme#chat="+id) {
		t.Errorf("secret form result %q: want the web UI link", text)
	}
	if len(asked) != 0 {
		t.Errorf("elicited %q: a secret form is never elicited", asked)
	}
}
