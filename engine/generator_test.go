package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

var update = flag.Bool("update", false, "rewrite golden files")

// pending returns the chat's one pending request of kind.
func (h *harness) pending(chatID, kind string) baton.PendingRequest {
	h.t.Helper()
	c, err := h.store.GetChat(context.Background(), testScope, chatID)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range c.Pending {
		if p.Kind == kind {
			return p
		}
	}
	h.t.Fatalf("chat %s has no pending %s request: %+v", chatID, kind, c.Pending)
	return baton.PendingRequest{}
}

const testSecret = "sk-live-DO-NOT-LEAK-4242"

// driveGenerator runs the generator workflow from start to run_complete as
// the person would: answer the interview, give the API key, approve the plan.
// step, when set, is called after every pause (to restart the engine there).
func driveGenerator(t *testing.T, h *harness, step func(h *harness) *harness) (*harness, string) {
	t.Helper()
	if step == nil {
		step = func(h *harness) *harness { return h }
	}
	ctx := context.Background()
	id := start(t, h, "generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	h = step(h)
	if err := h.eng.Submit(ctx, testScope, id, "A weekly newsletter from our team notes.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	h = step(h)
	secret := h.pending(id, baton.PendingSecret)
	if err := h.eng.RespondUI(ctx, testScope, id, secret.UIEventID, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"`+testSecret+`"}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingUITool)
	h = step(h)
	plan := h.pending(id, baton.PendingUITool)
	if err := h.eng.RespondUI(ctx, testScope, id, plan.UIEventID, "success", json.RawMessage(`{"action":"approve"}`)); err != nil {
		t.Fatal(err)
	}
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("generator ended %s:\n%s", c.Status, dump(h.events(id)))
	}
	return h, id
}

func dump(evs []baton.Event) string {
	var b strings.Builder
	for _, s := range summarize(evs) {
		fmt.Fprintf(&b, "%3d %-30s %-22s %s\n", s.Seq, s.Type, s.Agent, s.Detail)
	}
	return b.String()
}

// TestGenerator_Golden runs the seeds' flow end to end and compares the
// recorded event sequence — types, agents, sequences 1..N, ui_hidden on
// NEXT, the conditional handoff, the lifecycle pause, the synthetic speaker
// events, the auto-tool, the llm handoff, terminate — with a golden file.
func TestGenerator_Golden(t *testing.T) {
	h := newHarness(t)
	h, id := driveGenerator(t, h, nil)
	evs := h.events(id)
	checkSequences(t, evs)
	got := dump(evs)
	golden := filepath.Join("testdata", "generator.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("recorded events differ from %s:\n--- got\n%s--- want\n%s", golden, got, want)
	}
	// The secret is nowhere in what was recorded.
	for _, ev := range evs {
		raw, _ := json.Marshal(ev)
		if bytes.Contains(raw, []byte(testSecret)) {
			t.Fatalf("event %d carries the secret: %s", ev.Sequence, raw)
		}
	}
}
