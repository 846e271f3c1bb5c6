package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/replay"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/workflows"
)

// secretCanary is the secret the recorded person types into the
// generator's masked form: no export may hold it.
const secretCanary = "sk-canary-7f3a9c1e5b"

// recordGenerator runs a generator chat to its end on the SQLite store
// under dataDir, as `baton chat` would: the person's answer to the
// interview, the secret form (answered with the canary) and the action
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
	out, err := replay.Drive(ctx, rt, baton.Scope{App: server.DefaultApp, User: server.DevUser}, "generator", replay.Script{Inputs: []replay.Input{
		{Message: &msg},
		{Secrets: map[string]string{"NEWSLETTER_API_KEY": secretCanary}},
		{UI: &replay.UIInput{Status: "success", Data: json.RawMessage(`{"action":"approve"}`)}},
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
	if !strings.Contains(out.String(), "no divergence") {
		t.Fatalf("replay output:\n%s", out.String())
	}
	t.Log(out.String())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
