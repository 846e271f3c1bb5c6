package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

const loopDir = "testdata/workflows"

// fakeProvider answers each model call with the deltas its function returns.
type fakeProvider func(req *baton.Request) ([]baton.Delta, error)

func (f fakeProvider) Stream(_ context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		ds, err := f(req)
		if err != nil {
			yield(baton.Delta{}, err)
			return
		}
		for _, d := range ds {
			if !yield(d, nil) {
				return
			}
		}
	}
}

func fake(f fakeProvider) harnessOption {
	return withProvider(func(*workflow.Workflow) (baton.Provider, error) { return f, nil })
}

func reply(text string) []baton.Delta {
	var ds []baton.Delta
	for _, w := range strings.SplitAfter(text, " ") {
		ds = append(ds, baton.Delta{Kind: baton.DeltaText, Text: w})
	}
	return append(ds, baton.Delta{Kind: baton.DeltaFinish, FinishReason: "stop"},
		baton.Delta{Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 10, CompletionTokens: 2}})
}

func callTool(id, name, args string) []baton.Delta {
	return []baton.Delta{
		{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{Index: 0, ID: id, Name: name}},
		{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{Index: 0, Arguments: args}},
		{Kind: baton.DeltaFinish, FinishReason: "tool_calls"},
		{Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 10, CompletionTokens: 5}},
	}
}

// bumpTool counts its calls.
func bumpTool(n *atomic.Int64) tool.Option {
	return tool.WithFuncs(tool.MustFunc("bump", "Count a bump.", func(_ context.Context, _ *baton.CallContext, _ struct{}) (string, error) {
		return fmt.Sprint("bump ", n.Add(1)), nil
	}))
}

func countType(evs []baton.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func payloadOf(t *testing.T, ev baton.Event) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func lastOfType(t *testing.T, evs []baton.Event, typ string) map[string]any {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			return payloadOf(t, evs[i])
		}
	}
	t.Fatalf("no %s event", typ)
	return nil
}

func TestMaxTurns(t *testing.T) {
	var bumps atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(&bumps)),
		fake(func(req *baton.Request) ([]baton.Delta, error) { return reply(req.Agent + " speaks"), nil }))
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatCompleted)
	evs := h.events(id)
	checkSequences(t, evs)
	done := lastOfType(t, evs, baton.TypeChatRunComplete)
	if done["status"] != "max_turns" || done["total_turns"] != float64(6) {
		t.Fatalf("run_complete = %v, want status max_turns after 6 turns", done)
	}
	if n := countType(evs, baton.TypeChatSelectSpeaker); n != 6 {
		t.Fatalf("%d turns, want 6", n)
	}
}

func TestMaxConsecutiveAutoReply(t *testing.T) {
	var bumps atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(&bumps)),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if req.Agent == "Ping" {
				return callTool("", "bump", `{}`), nil // Ping would call its tool forever
			}
			return reply("pong"), nil
		}))
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatCompleted)
	evs := h.events(id)
	// Ping's first turn: one model call plus max_consecutive_auto_reply (2) more.
	var firstTurn []string
	for _, ev := range evs[3:] { // after text(user), handoff(start), select(Ping)
		if ev.Type == baton.TypeChatHandoff {
			break
		}
		firstTurn = append(firstTurn, ev.Type)
	}
	if n := countType(evs[:3+len(firstTurn)], baton.TypeChatToolCall); n != 3 {
		t.Fatalf("first turn made %d tool calls, want 3: %v", n, firstTurn)
	}
	if bumps.Load() != 9 { // three Ping turns of three calls within max_turns 6
		t.Fatalf("bump ran %d times, want 9", bumps.Load())
	}
	if h := payloadOf(t, evs[3+len(firstTurn)]); h["to"] != "Pong" {
		t.Fatalf("after the auto-reply limit the turn should hand off to Pong, got %v", h)
	}
}

func TestConditionHandoffAndStartContext(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))))
	c, err := h.eng.Start(context.Background(), testScope, "loop", baton.StartOptions{Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitStatus(c.ID, baton.ChatCompleted)
	evs := h.events(c.ID)
	compareSummary(t, summarize(evs), []string{
		"chat.text user go [hidden]",
		"chat.handoff  user -> Ping AgentTarget (start)",
		"chat.select_speaker Ping native",
		"chat.text Ping Ping here.",
		"chat.usage_summary Ping",
		"chat.handoff  Ping ->  TerminateTarget (condition)",
		"chat.run_complete  success",
	})
	if _, err := h.eng.Start(context.Background(), testScope, "loop", baton.StartOptions{Context: map[string]json.RawMessage{"nope": json.RawMessage("1")}}); !errors.Is(err, baton.ErrInvalid) {
		t.Fatalf("unknown start variable: %v, want invalid", err)
	}
	if _, err := h.eng.Start(context.Background(), testScope, "missing", baton.StartOptions{}); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("unknown workflow: %v, want not found", err)
	}
}

func TestModelErrorThenRetry(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if calls.Add(1) == 1 {
				return nil, &baton.ProviderError{Kind: baton.ProviderRateLimit, Status: 429, Message: "slow down", Endpoint: "http://fake", Model: "m"}
			}
			return reply("fine now"), nil
		}))
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatFailed)
	evs := h.events(id)
	e := lastOfType(t, evs, baton.TypeChatError)
	// The person sees the kind, not the provider's text nor its endpoint
	// (they are in the log).
	if e["code"] != "rate_limit" || e["retryable"] != true || e["message"] != `model "m": rate_limit (HTTP 429)` {
		t.Fatalf("chat.error = %v", e)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "slow down") || !strings.Contains(logs, "http://fake") {
		t.Fatalf("the log lacks the provider's error: %s", logs)
	}
	// The person writes: the failed turn goes on with their message.
	if err := h.eng.Submit(context.Background(), testScope, id, "please try again", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	evs = h.events(id)
	checkSequences(t, evs)
	var after []string
	for i, ev := range evs {
		if ev.Type == baton.TypeChatError {
			for _, next := range evs[i+1 : i+4] {
				s := next.Type + "/" + next.Metadata.TriggerAgentName
				if next.Type == baton.TypeChatSelectSpeaker {
					s += "/" + payloadOf(t, next)["source"].(string)
				}
				after = append(after, s)
			}
		}
	}
	// The person's text (no synthetic event: the failed turn had no text, so
	// the person spoke last), then the SAME turn goes on: Ping's text comes
	// with a synthetic select_speaker, not a new native turn.
	want := "chat.text/user,chat.select_speaker/Ping/synthetic,chat.text/Ping"
	if strings.Join(after, ",") != want {
		t.Fatalf("after the error: %v, want %s", after, want)
	}
	// A retry by run.resume works the same way.
	calls.Store(0)
	id2 := start(t, h, "loop")
	h.waitStatus(id2, baton.ChatFailed)
	if err := h.eng.Resume(context.Background(), testScope, id2); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id2, baton.ChatCompleted)
}

func TestUnknownToolGoesBackToTheModel(t *testing.T) {
	var n atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if req.Agent == "Ping" && n.Add(1) == 1 {
				return callTool("c1", "no_such_tool", `{}`), nil
			}
			return reply("ok"), nil
		}))
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatCompleted)
	evs := h.events(id)
	resp := lastOfType(t, evs[:10], baton.TypeChatToolResponse)
	if resp["status"] != "error" || !strings.Contains(resp["content"].(string), "no_such_tool") {
		t.Fatalf("tool_response = %v", resp)
	}
}

// TestResumeEquivalence_Generator drops every in-memory object at every
// pause of the generator — new store handle, new bus, new engine — and
// checks that what a fresh engine rebuilds from the store equals what the
// running one had, and that the finished chat is the same as a run that
// never restarted (the golden file).
func TestResumeEquivalence_Generator(t *testing.T) {
	h := newHarness(t)
	var pauses int
	h, id := driveGenerator(t, h, func(h *harness) *harness {
		pauses++
		chats, err := h.store.ListChats(context.Background(), testScope, baton.ListOptions{Limit: 1})
		if err != nil || len(chats) != 1 {
			t.Fatalf("list chats: %v %v", chats, err)
		}
		before, err := h.eng.Inspect(context.Background(), testScope, chats[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		h2 := h.restart()
		after, err := h2.eng.Inspect(context.Background(), testScope, chats[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		after.Chat.UpdatedAt = before.Chat.UpdatedAt
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("state after restart differs:\nbefore %+v\nafter  %+v", before, after)
		}
		if before.NextSpeaker == "" && !before.Done {
			t.Fatalf("a paused chat must know who speaks next: %+v", before)
		}
		return h2
	})
	if pauses != 3 {
		t.Fatalf("%d pauses, want 3", pauses)
	}
	wantRaw, err := os.ReadFile("testdata/generator.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dump(h.events(id)), string(wantRaw); got != want {
		t.Fatalf("restarted run differs from the golden run:\n--- got\n%s--- want\n%s", got, want)
	}
}

// TestThousandConcurrentChats runs 1,000 chats at once with the scripted
// provider: every one completes with its own events in order.
func TestThousandConcurrentChats(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))))
	const n = 1000
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.eng.Start(context.Background(), testScope, "loop", baton.StartOptions{Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = c.ID
		}()
	}
	wg.Wait()
	want := []string{baton.TypeChatText, baton.TypeChatHandoff, baton.TypeChatSelectSpeaker, baton.TypeChatText,
		baton.TypeChatUsageSummary, baton.TypeChatHandoff, baton.TypeChatRunComplete}
	for _, id := range ids {
		h.waitStatusFor(2*time.Minute, id, baton.ChatCompleted) // generous: -race on two shared cores
		evs := h.events(id)
		checkSequences(t, evs)
		var got []string
		for _, ev := range evs {
			if ev.ChatID() != id {
				t.Fatalf("chat %s holds an event of chat %s", id, ev.ChatID())
			}
			got = append(got, ev.Type)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("chat %s: %v", id, got)
		}
	}
}

func TestBudgetEndsTheRunBeforeTheNextModelCall(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) { calls.Add(1); return reply("spend"), nil }),
		withBudget(func(context.Context, baton.Scope, baton.Chat, *workflow.Workflow) (bool, string, error) {
			return calls.Load() >= 2, "token budget of the test reached", nil
		}))
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatCompleted)
	done := lastOfType(t, h.events(id), baton.TypeChatRunComplete)
	if done["status"] != "budget_exceeded" || calls.Load() != 2 || done["reason"] != "token budget of the test reached" {
		t.Fatalf("run_complete = %v after %d calls, want budget_exceeded after 2", done, calls.Load())
	}
}

// TestInput_RetriedPublishIsHandledOnce: the same user_query (same event
// id) published again after a restart — a client retrying through another
// instance, or after the bus's idempotency window — is recorded once: the
// chat's state remembers the inputs it recorded.
func TestInput_RetriedPublishIsHandledOnce(t *testing.T) {
	h := newHarness(t)
	id := start(t, h, "generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	raw, _ := json.Marshal(map[string]string{"content": "A newsletter, please.", "source": "ws"})
	input := baton.NewInput(testScope, baton.TypeUserQuery, id, raw)
	if err := h.bus.Publish(context.Background(), input); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	h = h.restart() // a new bus: its idempotency window has never seen the id
	if err := h.bus.Publish(context.Background(), input); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	n := 0
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatText && payloadOf(t, ev)["content"] == "A newsletter, please." {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the retried input was recorded %d times", n)
	}
	if !strings.Contains(h.logs.String(), "input already recorded") {
		t.Fatal("the skip was not logged")
	}
}
