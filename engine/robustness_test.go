package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// TestLLMRule_ConditionGatesTheTransferTool: an llm rule with a condition is
// offered, and honoured, only while the condition holds.
func TestLLMRule_ConditionGatesTheTransferTool(t *testing.T) {
	var offered atomic.Bool
	h := newHarness(t, withWorkflows("testdata/llmcond"),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if req.Agent == "Ping" {
				for _, d := range req.Tools {
					if d.Name == "transfer_to_Pong" {
						offered.Store(true)
					}
				}
				if last := req.Messages[len(req.Messages)-1]; last.Role != baton.RoleTool {
					return callTool("c1", "transfer_to_Pong", `{}`), nil // called although not offered
				}
			}
			return reply("done"), nil
		}))
	id := start(t, h, "llmcond")
	h.waitStatus(id, baton.ChatCompleted, baton.ChatWaitingInput)
	if offered.Load() {
		t.Error("transfer_to_Pong was offered while approved == false")
	}
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatHandoff && strings.Contains(string(ev.Payload), `"to":"Pong"`) {
			t.Errorf("the llm handoff to Pong fired although its condition is false: %s", ev.Payload)
		}
	}
}

// TestEvent_DoesNotRetryAFailedChat: an environment event for a chat paused
// after a model error is recorded, but does not call the model again: only
// the person (a message) or a resume retries.
func TestEvent_DoesNotRetryAFailedChat(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			calls.Add(1)
			return nil, &baton.ProviderError{Kind: baton.ProviderAuth, Status: 401, Message: "bad key", Endpoint: "http://fake", Model: "m"}
		}))
	for _, r := range h.eng.DefaultRules() {
		mustRule(t, h.bus, r)
	}
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatFailed)
	before := calls.Load()
	if err := h.bus.Publish(context.Background(), baton.NewInput(testScope, "webhook.received", id, json.RawMessage(`{"x":1}`))); err != nil {
		t.Fatal(err)
	}
	h.settle()
	c := h.waitStatus(id, baton.ChatFailed)
	if after := calls.Load(); after != before {
		t.Fatalf("the model was called %d more time(s) for a failed chat nobody retried", after-before)
	}
	if countType(h.events(id), baton.TypeChatError) != 1 || c.Status != baton.ChatFailed {
		t.Fatalf("status %s, %d errors: the event must leave the chat failed", c.Status, countType(h.events(id), baton.TypeChatError))
	}
}

// failNth fails the nth append through the recorder (withFaults(f.fail)),
// counted from the first; n is set to arm it.
type failNth struct {
	n, i atomic.Int64
}

func (f *failNth) fail([]baton.Event) error {
	if f.i.Add(1) == f.n.Load() {
		return errors.New("injected: the store did not answer")
	}
	return nil
}

// TestRun_FailedAppendPausesTheChatAsFailed: a run whose append fails
// midway (the store briefly unreachable) records chat.error and pauses the
// chat as failed and resumable — not running with its turn open, ignoring
// the person — and the person's next message goes on.
func TestRun_FailedAppendPausesTheChatAsFailed(t *testing.T) {
	fr := &failNth{}
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider(),
		withFaults(fr.fail))
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	fr.n.Store(fr.i.Load() + 3) // the turn's last append: text, usage, handoff, input request
	if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatFailed)
	if err := h.eng.Submit(context.Background(), testScope, id, "hello? anyone?", "api"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	evs := h.events(id)
	checkSequences(t, evs)
	if countType(evs, baton.TypeChatError) != 1 || countType(evs, baton.TypeChatInputRequest) < 2 {
		t.Fatalf("want the error recorded and the chat going on after the next message:\n%s", dump(evs))
	}
	// The model call whose append failed was billed: its usage is counted
	// all the same, beside the calls the transcript reports.
	total, _, err := h.store.ChatUsage(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	if reported := countType(evs, baton.TypeChatUsageSummary); total.Calls != int64(reported)+1 {
		t.Fatalf("%d usage rows for %d reported calls and one whose append failed", total.Calls, reported)
	}
}

// validOrder reports how msgs break the rule that an assistant message with
// tool calls is followed at once by the tool messages answering them (""
// when they keep it).
func validOrder(msgs []baton.Message) string {
	for i, m := range msgs {
		if m.Role != baton.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		want := map[string]bool{}
		for _, tc := range m.ToolCalls {
			want[tc.ID] = true
		}
		j := i + 1
		for ; j < len(msgs) && msgs[j].Role == baton.RoleTool; j++ {
			delete(want, msgs[j].ToolCallID)
		}
		if len(want) > 0 {
			next := msgs[min(j, len(msgs)-1)]
			return "the tool calls of " + m.Name + " are not answered at once; next comes " + string(next.Role) + ": " + next.Content
		}
	}
	return ""
}

// TestEvent_DuringAUIToolKeepsToolAnswersNextToTheirCalls: an environment
// event observed while a UI tool waits for the person is shown to the model
// after the tool's answer, not between the call and its answer (which an
// OpenAI-compatible endpoint refuses) — live and after a resume alike.
func TestEvent_DuringAUIToolKeepsToolAnswersNextToTheirCalls(t *testing.T) {
	var bad atomic.Value
	var n atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if s := validOrder(req.Messages); s != "" {
				bad.Store(s)
			}
			if req.Agent == "Ping" && n.Add(1) == 1 {
				return callTool("c1", "confirm", `{"question":"ok?"}`), nil
			}
			return reply("fine"), nil
		}))
	for _, r := range h.eng.DefaultRules() {
		mustRule(t, h.bus, r)
	}
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatWaitingUITool)
	if err := h.bus.Publish(context.Background(), baton.NewInput(testScope, "webhook.received", id, json.RawMessage(`{"x":1}`))); err != nil {
		t.Fatal(err)
	}
	h.settle()
	c := h.waitStatus(id, baton.ChatWaitingUITool)
	in, err := h.eng.Inspect(context.Background(), testScope, id) // rebuilt from the store alone
	if err != nil {
		t.Fatal(err)
	}
	// The call waits for the person: nothing may follow it yet.
	if last := in.Messages[len(in.Messages)-1]; len(last.ToolCalls) != 1 || last.ToolCalls[0].Name != "confirm" {
		t.Fatalf("rebuilt from the store, the open call is followed by %+v", last)
	}
	if err := h.eng.RespondUI(context.Background(), testScope, id, c.Pending[0].UIEventID, "success", json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted, baton.ChatWaitingInput)
	if n.Load() < 2 {
		t.Fatal("the model was not called after the response")
	}
	if s, _ := bad.Load().(string); s != "" {
		t.Fatalf("the model got: %s", s)
	}
}

// TestResume_AFailedChatRunsAgainBeforeTheModelCall: a resume of a failed
// chat records the chat as running before it calls the model, so that a
// crash during the call leaves a running chat, which a restart resumes.
func TestResume_AFailedChatRunsAgainBeforeTheModelCall(t *testing.T) {
	var calls atomic.Int64
	inCall := make(chan struct{})
	release := make(chan struct{})
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			switch calls.Add(1) {
			case 1:
				return nil, &baton.ProviderError{Kind: baton.ProviderRateLimit, Status: 429, Message: "slow down", Endpoint: "http://fake", Model: "m"}
			case 2:
				close(inCall)
				<-release
			}
			return reply("ok"), nil
		}))
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatFailed)
	if err := h.eng.Resume(context.Background(), testScope, id); err != nil {
		t.Fatal(err)
	}
	<-inCall
	c, err := h.store.GetChat(context.Background(), testScope, id)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	if c.Status != baton.ChatRunning {
		t.Fatalf("during the retried model call the stored status is %q, not running", c.Status)
	}
}

// TestToolCall_WhitespaceTextIsToolOnly: a reply of only whitespace with a
// tool call is recorded as tool-only: the fallback text shown to people is
// never sent back to the model as the agent's words.
func TestToolCall_WhitespaceTextIsToolOnly(t *testing.T) {
	var seen atomic.Value
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			last := req.Messages[len(req.Messages)-1]
			if last.Role == baton.RoleUser {
				return append([]baton.Delta{{Kind: baton.DeltaText, Text: "\n"}}, callTool("c1", "lookup", `{"word":"x"}`)...), nil
			}
			for _, m := range req.Messages {
				if m.Role == baton.RoleAssistant && strings.Contains(m.Content, "Action completed") {
					seen.Store(m.Content)
				}
			}
			return reply("done"), nil
		}))
	id := start(t, h, "assistant")
	first := h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "hi", "api"); err != nil {
		t.Fatal(err)
	}
	for c := first; c.LastSequence == first.LastSequence || c.Status != baton.ChatWaitingInput; {
		c = h.waitStatus(id, baton.ChatWaitingInput, baton.ChatRunning)
	}
	if s, _ := seen.Load().(string); s != "" {
		t.Fatalf("the model was sent the fallback as its own text: %q", s)
	}
}

// TestRun_MessageAfterAStopWithAnOpenCallFollowsItsAnswer: a run that
// stopped on a store error after a tool call was recorded, before its
// answer, pauses as failed with the call open; the person's next message is
// shown to the model after the call's answer, never between the two.
func TestRun_MessageAfterAStopWithAnOpenCallFollowsItsAnswer(t *testing.T) {
	fr := &failNth{}
	var bad atomic.Value
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool),
		withFaults(fr.fail),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if s := validOrder(req.Messages); s != "" {
				bad.Store(s)
			}
			last := req.Messages[len(req.Messages)-1]
			if last.Role == baton.RoleUser && last.Content == "What is a baton?" {
				return callTool("c1", "get_event_info", `{"event_ids":["x"]}`), nil
			}
			return reply("ok"), nil
		}))
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	fr.n.Store(fr.i.Load() + 3)
	if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatFailed)
	if err := h.eng.Submit(context.Background(), testScope, id, "hello? anyone?", "api"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput, baton.ChatFailed)
	h.settle()
	if s, _ := bad.Load().(string); s != "" {
		t.Fatalf("the model got: %s", s)
	}
}

// TestTool_ContextUpdateTheStoreCannotKeepIsAToolError: a tool that sets a
// context variable to a string with a NUL character (which no store keeps)
// gets an error result the model reads; the chat goes on rather than fail
// the append on every retry.
func TestTool_ContextUpdateTheStoreCannotKeepIsAToolError(t *testing.T) {
	noteTool := tool.WithFuncs(tool.MustFunc("lookup", "Look a word up.", func(_ context.Context, cc *baton.CallContext, in struct {
		Word string `json:"word"`
	}) (string, error) {
		_ = cc.Vars.Set("note", "raw bytes: \x00\x01")
		return "noted", nil
	}))
	h := newHarness(t, withWorkflows(loopDir), withTools(noteTool), turnProvider())
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
		t.Fatal(err)
	}
	c := h.waitStatus(id, baton.ChatWaitingInput, baton.ChatFailed)
	if c.Status == baton.ChatFailed {
		t.Fatalf("a tool's context update made the append fail:\n%s", dump(h.events(id)))
	}
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolResponse && !strings.Contains(string(ev.Payload), "cannot be kept") {
			t.Fatalf("the tool's result does not say its update was refused: %s", ev.Payload)
		}
	}
}

// TestRun_StartHandledAgainAfterAStoreErrorKeepsTheFirstMessage: a run.start
// whose first append fails records nothing (no chat.error either), so the
// same input handled again — redelivered by the input router — starts the
// chat with the person's first message, which only run.start carries.
func TestRun_StartHandledAgainAfterAStoreErrorKeepsTheFirstMessage(t *testing.T) {
	fr := &failNth{}
	fr.n.Store(1)
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider(),
		withFaults(fr.fail))
	c, err := h.eng.Start(context.Background(), testScope, "assistant", baton.StartOptions{Message: "first words"})
	if err != nil {
		t.Fatal(err)
	}
	h.settle()
	// The bridge hands the same input again (PublishAgain).
	payload, _ := json.Marshal(map[string]string{"message": "first words"})
	if err := h.bus.Publish(context.Background(), baton.NewInput(testScope, baton.TypeRunStart, c.ID, payload)); err != nil {
		t.Fatal(err)
	}
	h.settle()
	evs := h.events(c.ID)
	for _, ev := range evs {
		if ev.Type == baton.TypeChatText && strings.Contains(string(ev.Payload), "first words") {
			return
		}
	}
	t.Fatalf("the person's first message was never recorded:\n%s", dump(evs))
}

// TestTool_ContextUpdatesOnlyForDeclaredVariables: a tool (steerable by
// whoever talks to the model) sets a derived gate, __secrets, an undeclared
// variable and a declared int to a string, and one declared variable
// rightly: only that one reaches the chat's context; the result the model
// reads names the others.
func TestTool_ContextUpdatesOnlyForDeclaredVariables(t *testing.T) {
	setTool := tool.WithFuncs(tool.MustFunc("lookup", "Look a word up.", func(_ context.Context, cc *baton.CallContext, in struct {
		Word string `json:"word"`
	}) (string, error) {
		for k, v := range map[string]any{"gate_passed": true, "__secrets": map[string]string{"K": "x"}, "undeclared": 1, "count": "many", "note": "kept"} {
			_ = cc.Vars.Set(k, v)
		}
		return "set", nil
	}))
	h := newHarness(t, withWorkflows(loopDir), withTools(setTool), turnProvider())
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
		t.Fatal(err)
	}
	c := h.waitStatus(id, baton.ChatWaitingInput, baton.ChatFailed)
	var vars map[string]any
	if err := json.Unmarshal(c.Context, &vars); err != nil {
		t.Fatal(err)
	}
	if vars["note"] != "kept" || vars["gate_passed"] != false || vars["count"] != float64(0) {
		t.Errorf("context after the tool: %v", vars)
	}
	for _, k := range []string{"__secrets", "undeclared"} {
		if _, ok := vars[k]; ok {
			t.Errorf("the tool set %s: %v", k, vars)
		}
	}
	var said bool
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolResponse {
			said = true
			for _, k := range []string{"gate_passed", "__secrets", "undeclared", "count"} {
				if !strings.Contains(string(ev.Payload), "context_updates."+k) {
					t.Errorf("the tool's result does not name %s: %s", k, ev.Payload)
				}
			}
		}
	}
	if !said {
		t.Fatalf("no tool response:\n%s", dump(h.events(id)))
	}
}
