package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/workflow"
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

// systemPrompts records the system message of every model call per agent.
type systemPrompts struct {
	mu      sync.Mutex
	prompts map[string][]string
}

func (s *systemPrompts) wrap(next engine.ProviderFunc) engine.ProviderFunc {
	return func(wf *workflow.Workflow) (baton.Provider, error) {
		p, err := next(wf)
		if err != nil {
			return nil, err
		}
		return recordingProvider{next: p, rec: s}, nil
	}
}

func (s *systemPrompts) of(agent string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.prompts[agent])
}

type recordingProvider struct {
	next baton.Provider
	rec  *systemPrompts
}

func (p recordingProvider) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	p.rec.mu.Lock()
	for _, m := range req.Messages {
		if m.Role == baton.RoleSystem {
			p.rec.prompts[req.Agent] = append(p.rec.prompts[req.Agent], m.Content)
			break
		}
	}
	p.rec.mu.Unlock()
	return p.next.Stream(ctx, req)
}

// TestGenerator_ConceptOverviewReachesThePlanner: ContextVariablesAgent's
// "CONCEPT_OVERVIEW: …" line sets concept_overview (an agent_text_prefix
// derived variable), so ActionPlanAgent's system prompt says what the
// person wants instead of an empty ${concept_overview}.
func TestGenerator_ConceptOverviewReachesThePlanner(t *testing.T) {
	rec := &systemPrompts{prompts: map[string][]string{}}
	h := newHarness(t, withProvider(rec.wrap(scriptedProviders)))
	h, id := driveGenerator(t, h, nil)
	const overview = "a weekly newsletter drafted from the team's notes and sent to subscribers."
	prompts := rec.of("ActionPlanAgent")
	if len(prompts) == 0 {
		t.Fatal("ActionPlanAgent was never called")
	}
	if want := "The person wants: " + overview + "\n"; !strings.Contains(prompts[0], want) {
		t.Errorf("ActionPlanAgent's system prompt lacks %q:\n%s", want, prompts[0])
	}
	c, err := h.store.GetChat(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	var vars map[string]any
	if err := json.Unmarshal(c.Context, &vars); err != nil {
		t.Fatal(err)
	}
	if got := vars["concept_overview"]; got != overview {
		t.Errorf("context concept_overview = %#v, want %q", got, overview)
	}
}

// TestGenerator_RequestChangesLeadsToARevision: the scripted generator
// follows the person — after "Request changes" on the plan the reviewer
// asks what to change (it does not hand over to delivery), the person's
// answer brings a revised plan, and approving that one completes the chat.
func TestGenerator_RequestChangesLeadsToARevision(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := start(t, h, "generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(ctx, testScope, id, "A weekly newsletter from our team notes.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	if err := h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingSecret).UIEventID, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"`+testSecret+`"}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingUITool)
	if err := h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingUITool).UIEventID, "success", json.RawMessage(`{"action":"revise","feedback":"Send it on Fridays"}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	evs := h.events(id)
	text := dump(evs)
	if strings.Contains(text, "DeliveryAgent") || !strings.Contains(text, "ReviewAgent            You asked for changes") {
		t.Fatalf("after Request changes:\n%s", text)
	}
	if err := h.eng.Submit(ctx, testScope, id, "Fridays at nine, please.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingUITool)
	if text := dump(h.events(id)); !strings.Contains(text, "revised as you asked") {
		t.Fatalf("no revised plan:\n%s", text)
	}
	if err := h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingUITool).UIEventID, "success", json.RawMessage(`{"action":"approve"}`)); err != nil {
		t.Fatal(err)
	}
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("ended %s:\n%s", c.Status, dump(h.events(id)))
	}
	if text := dump(h.events(id)); !strings.Contains(text, "DeliveryAgent          Your Weekly Newsletter workflow is approved") {
		t.Fatalf("no delivery after the approval:\n%s", text)
	}
}
