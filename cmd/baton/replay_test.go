package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/chatlog"
	"github.com/batonhq/baton/replay"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/workflows"
)

// secretCanary is the secret the recorded person types into the
// generator's masked form: no export may hold it.
const secretCanary = "sk-canary-7f3a9c1e5b"

// recordGenerator runs a generator chat to its end on the SQLite store
// under dataDir, as `baton chat` would: started with a message and a
// client-set variable, the person's answer to the interview, the secret form (answered with the canary) and the action
// plan approved. It returns the chat's id.
func recordGenerator(t *testing.T, dataDir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	rt, err := runtime.Open(ctx, runtime.Config{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	msg := "A weekly newsletter from our notes"
	out, err := replay.Drive(ctx, rt, baton.Scope{App: server.DefaultApp, User: server.DevUser}, "generator", replay.Script{Message: "I want to automate our newsletter.", Context: map[string]json.RawMessage{"audience": json.RawMessage(`"marketing"`)}, Inputs: []chatlog.Input{
		{Message: &msg},
		{Secrets: map[string]string{"NEWSLETTER_API_KEY": secretCanary}},
		{UI: &chatlog.UIInput{Status: "success", Data: json.RawMessage(`{"action":"approve"}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Chat.Status != baton.ChatCompleted || out.Used != 3 || out.Stuck != "" {
		t.Fatalf("recorded chat: status %s, %d inputs used, stuck %q", out.Chat.Status, out.Used, out.Stuck)
	}
	return out.ChatID
}

// copyGenerator writes the embedded generator workflow into a new folder
// named generator and returns its path.
func copyGenerator(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "generator")
	sub, err := fs.Sub(workflows.FS, "generator")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestExportReplay_Generator records a generator chat (SQLite, the UI
// tool and the secret form answered), exports it, turns it into a
// scripted.json, and replays it against a copy of the workflow whose
// scripted.json is the exported one: the replay records the same steps,
// exit status 0, and neither file holds the secret.
func TestExportReplay_Generator(t *testing.T) {
	dataDir := t.TempDir()
	chatID := recordGenerator(t, dataDir)
	ctx := context.Background()
	dir := t.TempDir()
	export, scriptedFile := filepath.Join(dir, "chat.jsonl"), filepath.Join(dir, "scripted.json")
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"export", chatID, "--data-dir", dataDir, "-o", export}, &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	if code := run(ctx, []string{"export", "--data-dir", dataDir, chatID, "--scripted", "-o", scriptedFile}, &out, &errb); code != 0 {
		t.Fatalf("export --scripted: exit %d: %s", code, errb.String())
	}
	for _, f := range []string{export, scriptedFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secretCanary)) {
			t.Fatalf("%s holds the secret", filepath.Base(f))
		}
		if bytes.Contains(b, []byte("__secrets")) {
			t.Fatalf("%s holds the sealed secrets' variable", filepath.Base(f))
		}
	}
	wf := copyGenerator(t)
	if err := os.WriteFile(filepath.Join(wf, "scripted.json"), must(os.ReadFile(scriptedFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code := run(ctx, []string{"replay", export, "--workflow", wf, "--timeout", "60s"}, &out, &errb)
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "no divergence") || !strings.Contains(out.String(), "model calls: 6 of 6 answered from the recording") {
		t.Fatalf("replay output:\n%s", out.String())
	}
	// Without --workflow, the built-in example the export names.
	out.Reset()
	if code := run(ctx, []string{"replay", export, "--timeout", "60s"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "no divergence") {
		t.Fatalf("replay against the built-in generator: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	// The start is replayed too: the first message and the client-set variable.
	fh, err := os.Open(export)
	if err != nil {
		t.Fatal(err)
	}
	f, err := chatlog.Read(fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	if start, _ := f.Inputs(); start != "I want to automate our newsletter." || string(f.Header.StartContext["audience"]) != `"marketing"` {
		t.Fatalf("the export's start: %q, start_context %s", start, f.Header.StartContext)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// seqOf returns the sequence of the first recorded event of type typ
// whose payload's agent is agent, in an export file.
func seqOf(t *testing.T, export, typ, agent string) int64 {
	t.Helper()
	fh, err := os.Open(export)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := chatlog.Read(fh)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Records {
		var p struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal(r.Payload, &p)
		if r.Type == typ && p.Agent == agent {
			return r.Sequence
		}
	}
	t.Fatalf("no %s of %s in the export", typ, agent)
	return 0
}

// editFile replaces old with new in a file of a workflow folder, failing
// the test when old is not there.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s lacks %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReplay_EditedPromptDiverges edits DeliveryAgent's prompt in a copy
// of the generator workflow: the replay reports the first divergence at
// DeliveryAgent's model call (its request is not the recorded one), with
// exit status 1. When the scripted model then answers something else too,
// the first divergence is DeliveryAgent's text, expected against got.
func TestReplay_EditedPromptDiverges(t *testing.T) {
	dataDir := t.TempDir()
	chatID := recordGenerator(t, dataDir)
	ctx := context.Background()
	export := filepath.Join(t.TempDir(), "chat.jsonl")
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"export", chatID, "--data-dir", dataDir, "-o", export}, &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	callSeq := seqOf(t, export, "chat.usage_summary", "DeliveryAgent")
	textSeq := seqOf(t, export, "chat.text", "DeliveryAgent")

	wf := copyGenerator(t)
	editFile(t, filepath.Join(wf, "agents.json"), "Confirm in two sentences", "Confirm in one cheerful sentence")
	out.Reset()
	errb.Reset()
	code := run(ctx, []string{"replay", export, "--workflow", wf, "--timeout", "60s"}, &out, &errb)
	if code != 1 {
		t.Fatalf("replay of an edited prompt: exit %d, want 1\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"model calls: 5 of 6 answered from the recording; from recorded call 6 on (DeliveryAgent)",
		fmt.Sprintf("first divergence:\n  expected #%d model_call DeliveryAgent\n  got      #%d model_call DeliveryAgent\n", callSeq, callSeq),
		"the model was asked something else",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("replay output lacks %q:\n%s", want, out.String())
		}
	}

	editFile(t, filepath.Join(wf, "scripted.json"), "Thanks, and goodbye!", "Bye now!")
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"replay", export, "--workflow", wf, "--timeout", "60s"}, &out, &errb); code != 1 {
		t.Fatalf("replay with another reply: exit %d, want 1\n%s\n%s", code, out.String(), errb.String())
	}
	want := fmt.Sprintf("first divergence:\n  expected #%d text DeliveryAgent: Your Weekly Newsletter workflow is approved and ready to run. Thanks, and goodbye!\n"+
		"  got      #%d text DeliveryAgent: Your Weekly Newsletter workflow is approved and ready to run. Bye now!\n", textSeq, textSeq)
	if !strings.Contains(out.String(), want) {
		t.Errorf("replay output lacks\n%s\nin:\n%s", want, out.String())
	}
	t.Log(out.String())
}

// TestReplay_Usage: a missing file, a file that is no export and a bad
// flag exit with status 2.
func TestReplay_Usage(t *testing.T) {
	ctx := context.Background()
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"format\":\"baton.chat\",\"version\":1,\"view\":\"full\",\"workflow\":\"generator\"}\n{\"type\":\"chat.text\",\"data\":{}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "Usage: baton replay"},
		{[]string{"replay", filepath.Join(t.TempDir(), "missing.jsonl")}, "no such file"},
		{[]string{"replay", bad}, "line 2: data.sequence: required"},
		{[]string{"replay", bad, "--model", "gpt"}, `--model "gpt"`},
	} {
		var out, errb bytes.Buffer
		if code := run(ctx, tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestReplay_LiveFallback: with --model live, the calls that leave the
// recording go to the workflow's OpenAI-compatible model (a fake server
// here): DeliveryAgent's edited prompt reaches it, and its answer is the
// first divergence.
func TestReplay_LiveFallback(t *testing.T) {
	dataDir := t.TempDir()
	chatID := recordGenerator(t, dataDir)
	var calls atomic.Int32
	var sawPrompt atomic.Bool
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		sawPrompt.Store(bytes.Contains(body, []byte("one cheerful sentence")))
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Live goodbye."},"finish_reason":null}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer model.Close()
	ctx := context.Background()
	export := filepath.Join(t.TempDir(), "chat.jsonl")
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"export", chatID, "--data-dir", dataDir, "-o", export}, &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	wf := copyGenerator(t)
	editFile(t, filepath.Join(wf, "agents.json"), "Confirm in two sentences", "Confirm in one cheerful sentence")
	t.Setenv("OPENAI_BASE_URL", model.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	out.Reset()
	if code := run(ctx, []string{"replay", export, "--workflow", wf, "--model", "live", "--timeout", "60s"}, &out, &errb); code != 1 {
		t.Fatalf("replay --model live: exit %d, want 1\n%s\n%s", code, out.String(), errb.String())
	}
	if calls.Load() != 1 || !sawPrompt.Load() {
		t.Fatalf("the live model got %d calls (want 1, DeliveryAgent's, with the edited prompt: %v)", calls.Load(), sawPrompt.Load())
	}
	if want := fmt.Sprintf("got      #%d text DeliveryAgent: Live goodbye.", seqOf(t, export, "chat.text", "DeliveryAgent")); !strings.Contains(out.String(), want) {
		t.Fatalf("replay output lacks %q:\n%s", want, out.String())
	}
}
