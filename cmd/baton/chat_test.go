package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestChat_HelloRunsToCompletion runs `baton chat hello` for real: the
// runtime on a fresh data dir (the examples extracted, the command tool run
// from disk), the streamed answer printed, the chat's cost at the end.
func TestChat_HelloRunsToCompletion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"chat", "--data-dir", t.TempDir(), "hello"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"Greeter: Hello! I checked the clock in UTC for you. Have a wonderful day!",
		"→ get_time {\"tz\":\"UTC\"}",
		"← ok:",
		"✓ chat complete (success: TerminateTarget reached)",
		"tokens: 290 in, 38 out",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestChat_ModelRetryShown runs `baton chat hello` against an
// OpenAI-compatible server whose first reply breaks off mid-stream: the
// terminal marks the printed part as discarded, shows the retry's notice,
// and prints the retried reply afresh.
func TestChat_ModelRetryShown(t *testing.T) {
	const answer = "Hello! It is noon in UTC."
	var calls atomic.Int32
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		text := func(s string) {
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", s)
		}
		if calls.Add(1) == 1 {
			text("Hello! It")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		}
		text(answer)
		fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer model.Close()
	t.Setenv("OPENAI_BASE_URL", model.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"chat", "--data-dir", t.TempDir(), "hello"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	want := "Greeter: Hello! It ✗ (broke off: connection_dropped; discarded)\n" +
		"  … the connection to the model dropped; retrying (2/4)\n\n" +
		"Greeter: " + answer + "\n"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks\n%s\nin:\n%s", want, out.String())
	}
}

func TestChat_Usage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"chat"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "Usage: baton chat") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if code := run(context.Background(), []string{"chat", "--data-dir", t.TempDir(), "no-such-workflow"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `workflow "no-such-workflow": not found`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestChat_GeneratorAsksForTheFormsSecrets runs `baton chat generator` with
// its answers on standard input: the masked form asks for each secret it
// lists by name, the value never shows, and the chat completes.
func TestChat_GeneratorAsksForTheFormsSecrets(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk-chat-test-5b1e"
	if _, err := w.WriteString("A newsletter.\n" + secret + "\napprove\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	stdin := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = stdin; r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"chat", "--data-dir", t.TempDir(), "generator"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"NEWSLETTER_API_KEY: ", "Secrets received: NEWSLETTER_API_KEY.", "✓ chat complete"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String()+errb.String(), secret) {
		t.Errorf("the secret was printed:\n%s\n%s", out.String(), errb.String())
	}
}

// TestChat_StructuredTextPrintsAsFields: an agent that answers with a
// structured output (not an auto-tool) is shown as fields, not as the JSON
// its model streamed.
func TestChat_StructuredTextPrintsAsFields(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "summary")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"workflow.json": `{"visual_agents": ["Summarizer"], "orchestration": {"initial_agent": "Summarizer", "initial_message": "Sum up.", "startup_mode": "AgentDriven", "max_turns": 3},
			"llm": {"model": "m"}}`,
		"agents.json":   `{"agents": {"Summarizer": {"system_message": "Sum up.", "structured_outputs_required": true}}}`,
		"handoffs.json": `{"handoff_rules": [{"source_agent": "Summarizer", "handoff_type": "after_work", "transition_target": "TerminateTarget"}]}`,
		"structured_outputs.json": `{"structured_outputs": {"models": {"Summary": {"type": "model", "fields": {
			"title": {"type": "str", "description": "t"}, "points": {"type": "list[str]", "description": "p"}}}},
			"registry": {"Summarizer": "Summary"}}}`,
		"scripted.json": `{"agents": {"Summarizer": [{"json": {"title": "Week 12", "points": ["shipped", "hired"]}}]}}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"chat", "--data-dir", t.TempDir(), "--workflows", root, "summary"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if want := "\nSummarizer:\n  title: Week 12\n  points: shipped, hired\n"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), `"title"`) {
		t.Errorf("the structured output shows as JSON:\n%s", out.String())
	}
}

// TestChat_Fork runs `baton chat hello`, then `baton chat --fork ID@2` on
// the same store: the copy goes on from event 2 to the end, the original's
// first events are replayed, and bad --fork values are refused.
func TestChat_Fork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"chat", "--data-dir", dir, "hello"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	var id string
	if _, err := fmt.Sscanf(out.String(), "chat %s of hello", &id); err != nil {
		t.Fatalf("no chat id in %q: %v", out.String(), err)
	}
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"chat", "--data-dir", dir, "--fork", id + "@2"}, &out, &errb); code != 0 {
		t.Fatalf("fork: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"forked from " + id + " at event 2", "✓ chat complete"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("fork output lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "Greeter: Hello!"); n != 1 {
		t.Errorf("the greeting is shown %d times, want once:\n%s", n, out.String())
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--fork", id + "@x"}, 1, "SEQ must be a sequence number"},
		{[]string{"--fork", id + "@0"}, 1, "SEQ must be a sequence number"},
		{[]string{"--fork", id + "@999"}, 1, "at_sequence: 999 is beyond"},
		{[]string{"--fork", "no-such-chat"}, 1, "not found"},
		{[]string{"--fork", id, "--resume", id}, 1, "give one"},
		{[]string{"--fork", id, "hello"}, 2, "Usage: baton chat"},
	} {
		out.Reset()
		errb.Reset()
		args := append([]string{"chat", "--data-dir", dir}, tc.args...)
		if code := run(ctx, args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
