package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// override answers the model calls of one agent with a function, and every
// other call with the workflow's scripted provider. n counts the agent's
// calls, from 1.
func override(agent string, f func(n int64, req *baton.Request) []baton.Delta) harnessOption {
	var n atomic.Int64
	return withProvider(func(wf *workflow.Workflow) (baton.Provider, error) {
		sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		if err != nil {
			return nil, err
		}
		return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
			if req.Agent != agent {
				return sp.Stream(ctx, req)
			}
			return fakeProvider(func(req *baton.Request) ([]baton.Delta, error) { return f(n.Add(1), req), nil }).Stream(ctx, req)
		}), nil
	})
}

type providerFunc func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error]

func (f providerFunc) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return f(ctx, req)
}

const validPlan = `{"ActionPlan":{"workflow":{"name":"Plan B","description":"d","trigger":"manual","phases":[],"integrations":[],"estimated_minutes_saved":1}},"agent_message":"Look."}`

// runToSecretForm drives the generator to its masked form and returns the
// chat and the form's ui_event_id.
func runToSecretForm(t *testing.T, h *harness) (id, uiEventID string) {
	t.Helper()
	id = start(t, h, "generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "A newsletter.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	return id, h.pending(id, baton.PendingSecret).UIEventID
}

// runToPlan drives the generator to the ActionPlan pause (or to one of
// the statuses given).
func runToPlan(t *testing.T, h *harness, until ...baton.ChatStatus) string {
	t.Helper()
	ctx := context.Background()
	id, uid := runToSecretForm(t, h)
	if err := h.eng.RespondUI(ctx, testScope, id, uid, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"`+testSecret+`"}`)); err != nil {
		t.Fatal(err)
	}
	if len(until) == 0 {
		until = []baton.ChatStatus{baton.ChatWaitingUITool, baton.ChatFailed}
	}
	h.waitStatus(id, until...)
	return id
}

func autoToolCalls(t *testing.T, evs []baton.Event) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev.Type == baton.TypeChatToolCall {
			if p := payloadOf(t, ev); p["interaction_type"] == "auto_tool" {
				out = append(out, p)
			}
		}
	}
	return out
}

// ---- spec/synthetic-events.md ----------------------------------------------------

// Scenario 2 and the resume signal: after the lifecycle pause the runtime
// resumes with [SYSTEM_RESUME_SIGNAL], shown as agent "system", and the
// agent's text gets a synthetic select_speaker.
func TestSynthetic_ResumeSignalShowsAsSystem(t *testing.T) {
	h := newHarness(t)
	h, id := driveGenerator(t, h, nil)
	evs := h.events(id)
	checkSpeakers(t, evs)
	var seq []string
	for _, s := range summarize(evs) {
		if s.Seq >= 20 && s.Seq <= 24 {
			seq = append(seq, s.Type+" "+s.Agent+" "+s.Detail)
		}
	}
	want := []string{
		"chat.workflow_resumed ContextVariablesAgent ",
		"chat.select_speaker system synthetic",
		"chat.text system [SYSTEM_RESUME_SIGNAL] [hidden]",
		"chat.select_speaker ContextVariablesAgent synthetic",
	}
	if strings.Join(seq[:4], "\n") != strings.Join(want, "\n") {
		t.Fatalf("around the resume:\n%s", strings.Join(seq, "\n"))
	}
	for _, ev := range evs {
		if ev.Type == baton.TypeChatSelectSpeaker {
			if p := payloadOf(t, ev); p["source"] == "synthetic" && p["_synthetic"] != true {
				t.Fatalf("synthetic select_speaker without _synthetic: %v", p)
			}
		}
	}
	if !strings.Contains(h.logs.String(), "[SYNTHETIC_SPEAKER]") {
		t.Fatal("synthetic events are not logged with [SYNTHETIC_SPEAKER]")
	}
	if got := h.eng.SyntheticCount("generator"); got != 3 {
		t.Fatalf("synthetic count = %d, want 3 (user, system, ContextVariablesAgent)", got)
	}
}

// Edge case 1: consecutive speaker changes each get their own synthetic event.
func TestSynthetic_ConsecutiveChangesEachGetOne(t *testing.T) {
	h := newHarness(t)
	h, id := driveGenerator(t, h, nil)
	evs := h.events(id)
	n := 0
	for i := 0; i+1 < len(evs); i++ {
		if evs[i].Type == baton.TypeChatSelectSpeaker && payloadOf(t, evs[i])["source"] == "synthetic" {
			n++
			next := evs[i+1]
			if next.Type != baton.TypeChatText || payloadOf(t, next)["agent"] != payloadOf(t, evs[i])["agent"] {
				t.Fatalf("synthetic select_speaker %d is not followed by its speaker's text", evs[i].Sequence)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d synthetic events, want one for each of the 3 unannounced changes", n)
	}
}

// Edge case 2: in baton the synthetic event and the text are one atomic
// append, so the one cannot go out without the other; the text always does.
func TestSynthetic_RecordedAtomicallyWithTheText(t *testing.T) {
	h := newHarness(t)
	h, id := driveGenerator(t, h, nil)
	evs := h.events(id)
	for i, ev := range evs {
		if ev.Type == baton.TypeChatSelectSpeaker && payloadOf(t, ev)["source"] == "synthetic" {
			if evs[i+1].Sequence != ev.Sequence+1 || evs[i+1].Type != baton.TypeChatText {
				t.Fatalf("synthetic event %d is not immediately followed by its text", ev.Sequence)
			}
		}
	}
}

// Edge case 3: the person's real text after a pause shows as "user", not "system".
func TestSynthetic_UserContentShowsAsUser(t *testing.T) {
	h := newHarness(t)
	id := start(t, h, "generator")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "Here is what I want.", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	evs := h.events(id)
	for i, ev := range evs {
		if ev.Type == baton.TypeChatText && payloadOf(t, ev)["agent"] == "user" && payloadOf(t, ev)["content"] == "Here is what I want." {
			prev := payloadOf(t, evs[i-1])
			if evs[i-1].Type != baton.TypeChatSelectSpeaker || prev["agent"] != "user" || prev["source"] != "synthetic" {
				t.Fatalf("the person's text is preceded by %s %v, want a synthetic select_speaker for user", evs[i-1].Type, prev)
			}
			return
		}
	}
	t.Fatal("the person's text was not recorded")
}

// Edge case 4: the same agent speaking again (a tool loop) gets no synthetic event.
func TestSynthetic_NoEventWithoutSpeakerChange(t *testing.T) {
	h := newHarness(t)
	id := start(t, h, "hello")
	h.waitStatus(id, baton.ChatCompleted)
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatSelectSpeaker && payloadOf(t, ev)["source"] == "synthetic" {
			t.Fatalf("synthetic select_speaker %d although Greeter kept speaking", ev.Sequence)
		}
	}
}

// ---- spec/auto-tool-execution.md ---------------------------------------------------

func TestAutoTool_ValidOutputFiresExactlyOneToolCall(t *testing.T) {
	h := newHarness(t)
	id := runToPlan(t, h)
	evs := h.events(id)
	calls := autoToolCalls(t, evs)
	if len(calls) != 1 {
		t.Fatalf("%d auto-tool calls, want 1", len(calls))
	}
	c := calls[0]
	if c["tool_name"] != "action_plan" || c["awaiting_response"] != false || c["component_type"] != "ActionPlan" || c["ui_event_id"] == "" {
		t.Fatalf("auto-tool call = %v", c)
	}
	payload := c["payload"].(map[string]any)
	if payload["interaction_type"] != "auto_tool" || payload["tool_args"].(map[string]any)["ActionPlan"] == nil {
		t.Fatalf("payload.tool_args must hold the structured output: %v", payload)
	}
	args := c["arguments"].(map[string]any)
	if args["workflow"] == nil || args["agent_message"] == nil || args["ActionPlan"] != nil {
		t.Fatalf("arguments must promote the nested model key: %v", args)
	}
	if !strings.HasPrefix(c["corr"].(string), "turn_"+id+"_ActionPlanAgent_") {
		t.Fatalf("corr %v is not the turn idempotency key", c["corr"])
	}
	ready := lastOfType(t, evs, baton.TypeChatStructuredOutputReady)
	if ready["model_name"] != "ActionPlanOutput" || ready["auto_tool_mode"] != true || ready["turn_idempotency_key"] != c["corr"] {
		t.Fatalf("structured_output_ready = %v", ready)
	}
}

func TestAutoTool_InvalidOutputGetsFeedbackThenRetry(t *testing.T) {
	h := newHarness(t, override("ActionPlanAgent", func(n int64, req *baton.Request) []baton.Delta {
		if n == 1 {
			return reply(`{"ActionPlan":{"workflow":{"name":"x"}}}`) // no agent_message, workflow incomplete
		}
		if req.ResponseFormat == nil || req.ResponseFormat.Name != "ActionPlanOutput" || len(req.ResponseFormat.Schema) == 0 {
			t.Errorf("structured agent called without its json_schema response format: %+v", req.ResponseFormat)
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Name != "system" || !strings.Contains(last.Content, "did not match the required schema") {
			t.Errorf("the retry does not carry the validation feedback: %+v", last)
		}
		return reply(validPlan)
	}))
	id := runToPlan(t, h)
	evs := h.events(id)
	var texts []string
	for _, s := range summarize(evs) {
		if s.Type == baton.TypeChatText && (s.Agent == "ActionPlanAgent" || s.Agent == "system") {
			texts = append(texts, s.Agent)
		}
	}
	if strings.Join(texts, ",") != "system,ActionPlanAgent,system,ActionPlanAgent" { // resume signal, bad output, feedback, good output
		t.Fatalf("texts: %v", texts)
	}
	if n := len(autoToolCalls(t, evs)); n != 1 {
		t.Fatalf("%d auto-tool calls, want 1 (only for the valid output)", n)
	}
	checkSpeakers(t, evs)
}

func TestAutoTool_InvalidOutputTooOftenIsAnError(t *testing.T) {
	h := newHarness(t, override("ActionPlanAgent", func(int64, *baton.Request) []baton.Delta { return reply(`not json`) }))
	id := runToPlan(t, h)
	c := h.waitStatus(id, baton.ChatFailed)
	evs := h.events(id)
	e := lastOfType(t, evs, baton.TypeChatError)
	if e["code"] != "invalid_structured_output" || c.Status != baton.ChatFailed {
		t.Fatalf("chat.error = %v", e)
	}
	if n := len(autoToolCalls(t, evs)); n != 0 {
		t.Fatalf("an invalid output fired %d auto-tools", n)
	}
}

// A duplicate: the engine is rebuilt from the store and told to resume
// while the auto-tool waits for the person; it does not fire again.
func TestAutoTool_DuplicateIsSkipped(t *testing.T) {
	h := newHarness(t)
	id := runToPlan(t, h)
	h = h.restart()
	for i := 0; i < 3; i++ {
		if err := h.eng.Resume(context.Background(), testScope, id); err != nil {
			t.Fatal(err)
		}
	}
	h.waitStatus(id, baton.ChatWaitingUITool)
	if n := len(autoToolCalls(t, h.events(id))); n != 1 {
		t.Fatalf("%d auto-tool calls after duplicates, want 1", n)
	}
}

func TestAutoTool_RestartBetweenOutputAndToolCallFiresOnce(t *testing.T) {
	// The first record of an auto-tool call fails, and every record after
	// it, as if the process died between recording the structured output
	// and the tool call: nothing more is recorded until the restart.
	var failed atomic.Bool
	h := newHarness(t, withFaults(func(events []baton.Event) error {
		if failed.Load() {
			return errors.New("injected: the process is dead")
		}
		for _, ev := range events {
			if ev.Type == baton.TypeChatToolCall && bytes.Contains(ev.Payload, []byte(`"interaction_type":"auto_tool"`)) && failed.CompareAndSwap(false, true) {
				return errors.New("injected: the process died here")
			}
		}
		return nil
	}))
	id := runToPlan(t, h, baton.ChatRunning) // the auto-tool's record fails; the chat stays running
	if !failed.Load() {
		t.Fatal("the failure was not injected")
	}
	evs := h.events(id)
	if countType(evs, baton.TypeChatStructuredOutputReady) != 1 || len(autoToolCalls(t, evs)) != 0 {
		t.Fatalf("before the restart the structured output is recorded and the tool call is not:\n%s", dump(evs))
	}
	// Restart: new store handle, new engine; recover running chats.
	h = h.restart()
	running, err := h.store.ChatsByStatus(context.Background(), baton.ChatRunning, 10)
	if err != nil || len(running) != 1 {
		t.Fatalf("running chats: %v %v", running, err)
	}
	if _, err := h.eng.Recover(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingUITool)
	evs = h.events(id)
	checkSequences(t, evs)
	if n := len(autoToolCalls(t, evs)); n != 1 {
		t.Fatalf("%d auto-tool calls after the restart, want exactly 1", n)
	}
	eff, err := h.store.ClaimEffect(context.Background(), testScope, id, "auto_tool/"+id+":"+autoToolCalls(t, evs)[0]["corr"].(string), baton.EffectHolder{})
	if err != nil || eff.State != baton.EffectDone {
		t.Fatalf("the ledger does not hold the auto-tool as done: %+v %v", eff, err)
	}
}

func TestAutoTool_ErrorReachesThePerson(t *testing.T) {
	h := newHarness(t)
	id := runToPlan(t, h)
	plan := h.pending(id, baton.PendingUITool)
	if err := h.eng.RespondUI(context.Background(), testScope, id, plan.UIEventID, "error", json.RawMessage(`{"message":"the component crashed"}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput, baton.ChatCompleted, baton.ChatFailed)
	var resp map[string]any
	for _, ev := range h.events(id) {
		if p := payloadOf(t, ev); ev.Type == baton.TypeChatToolResponse && p["interaction_type"] == "auto_tool" {
			resp = p
		}
	}
	if resp == nil || resp["success"] != false || resp["status"] != "error" || !strings.Contains(resp["content"].(string), "reported status error") {
		t.Fatalf("auto-tool error response = %v", resp)
	}
}

// ---- UI tools, secrets ------------------------------------------------------------

func TestUIResponse_UnknownOrAnsweredIsRefused(t *testing.T) {
	h := newHarness(t)
	id := runToPlan(t, h)
	before := len(h.events(id))
	ctx := context.Background()
	if err := h.eng.RespondUI(ctx, testScope, id, "ui_nope", "success", nil); !errors.Is(err, baton.ErrNotFound) || !strings.Contains(err.Error(), "ui_nope") {
		t.Fatalf("unknown ui_event_id: %v, want not found naming it", err)
	}
	other := baton.Scope{App: "other", User: "eve"}
	plan := h.pending(id, baton.PendingUITool)
	if err := h.eng.RespondUI(ctx, other, id, plan.UIEventID, "success", nil); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("another tenant's response: %v, want not found", err)
	}
	if err := h.eng.RespondUI(ctx, testScope, id, plan.UIEventID, "success", json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	after := len(h.events(id))
	if err := h.eng.RespondUI(ctx, testScope, id, plan.UIEventID, "success", json.RawMessage(`{"ok":2}`)); !errors.Is(err, baton.ErrNotFound) { // already answered
		t.Fatalf("answered ui_event_id: %v, want not found", err)
	}
	// Even published directly to the bus, a response that fits no pending
	// request changes nothing.
	raw, _ := json.Marshal(map[string]string{"ui_event_id": plan.UIEventID, "status": "success"})
	if err := h.bus.Publish(ctx, baton.NewInput(testScope, baton.TypeUIToolResponse, id, raw)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	if len(h.events(id)) != after || after <= before {
		t.Fatalf("events %d → %d → %d: an unknown or answered ui_event_id must change nothing", before, after, len(h.events(id)))
	}
	if !strings.Contains(h.logs.String(), "is not pending in this chat") {
		t.Fatalf("refusal not logged:\n%s", h.logs)
	}
}

// TestUIResponse_OnceByEventID: a response published with RespondUIOnce
// is applied once however often it is sent with its event id; a retry after
// it was applied succeeds and changes nothing (AnsweredBy knows the event
// that answered the request), while another response to the answered
// request is refused, as with RespondUI.
func TestUIResponse_OnceByEventID(t *testing.T) {
	h := newHarness(t)
	id := runToPlan(t, h)
	ctx := context.Background()
	plan := h.pending(id, baton.PendingUITool)
	const eventID = "0b7c9e1e-6a52-4c55-9d6e-4f1f4c0d2f11"
	for range 2 { // the second while the first may still be on its way
		if err := h.eng.RespondUIOnce(ctx, testScope, id, eventID, plan.UIEventID, "success", json.RawMessage(`{"ok":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	h.waitStatus(id, baton.ChatCompleted)
	after := len(h.events(id))
	if ok, err := h.eng.AnsweredBy(ctx, testScope, id, plan.UIEventID, eventID); !ok || err != nil {
		t.Fatalf("AnsweredBy the response's own event id: %v %v, want true", ok, err)
	}
	if ok, err := h.eng.AnsweredBy(ctx, testScope, id, plan.UIEventID, "another"); ok || err != nil {
		t.Fatalf("AnsweredBy another event id: %v %v, want false", ok, err)
	}
	if err := h.eng.RespondUIOnce(ctx, testScope, id, eventID, plan.UIEventID, "success", json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatalf("a retry of the applied response: %v, want success", err)
	}
	for _, tc := range []struct {
		what    string
		scope   baton.Scope
		eventID string
	}{
		{"another response", testScope, "another"},
		{"another tenant's retry", baton.Scope{App: "other", User: "eve"}, eventID},
	} {
		if err := h.eng.RespondUIOnce(ctx, tc.scope, id, tc.eventID, plan.UIEventID, "success", json.RawMessage(`{"ok":2}`)); !errors.Is(err, baton.ErrNotFound) {
			t.Fatalf("%s to the answered request: %v, want not found", tc.what, err)
		}
	}
	if err := h.eng.RespondUI(ctx, testScope, id, plan.UIEventID, "success", json.RawMessage(`{"ok":2}`)); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("a response without an event id to the answered request: %v, want not found", err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	responses := 0
	for _, ev := range h.events(id) {
		if p := payloadOf(t, ev); ev.Type == baton.TypeChatToolResponse && p["ui_event_id"] == plan.UIEventID {
			responses++
			if p["input_id"] != eventID {
				t.Errorf("the response's input_id is %v, want %s", p["input_id"], eventID)
			}
		}
	}
	if responses != 1 || len(h.events(id)) != after {
		t.Fatalf("%d responses recorded, events %d → %d: want one, and nothing after", responses, after, len(h.events(id)))
	}
}

// countingStore counts the events Events returns.
type countingStore struct {
	*sqlite.Store
	read atomic.Int64
}

func (s *countingStore) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	evs, err := s.Store.Events(ctx, scope, chatID, after, limit)
	s.read.Add(int64(len(evs)))
	return evs, err
}

// A keyed response to a request the chat does not wait for — any string at
// all — makes AnsweredBy look for the response that answered it. It reads
// the chat's last 1,000 events, not the whole chat: a refusal must not cost
// a replay of a long chat, at the rate limit's pace, on a shared store.
func TestUIResponse_AnsweredByReadsABoundedWindow(t *testing.T) {
	var st *countingStore
	h := newHarness(t, withStoreWrap(func(s *sqlite.Store) engine.Store { st = &countingStore{Store: s}; return st }))
	id := runToPlan(t, h)
	ctx := context.Background()
	for range 10 { // 5,000 more events
		batch := make([]baton.Event, 500)
		for i := range batch {
			batch[i] = baton.NewEvent(baton.TypeChatText, baton.Metadata{Source: baton.SourceUser},
				json.RawMessage(`{"kind":"text","agent":"user","content":"a message of the person's"}`))
		}
		if _, err := h.store.Append(ctx, testScope, id, batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	st.read.Store(0)
	const requests = 5
	for i := range requests {
		err := h.eng.RespondUIOnce(ctx, testScope, id, fmt.Sprintf("0b7c9e1e-6a52-4c55-9d6e-4f1f4c0d2f1%d", i), "no-such-request", "success", json.RawMessage(`{}`))
		if !errors.Is(err, baton.ErrNotFound) {
			t.Fatalf("a keyed response to an unknown request: %v, want not found", err)
		}
	}
	if per := st.read.Load() / requests; per > 1000 {
		t.Fatalf("a keyed response to an unknown ui_event_id read %d events of the chat before it was refused, want at most 1,000", per)
	}
}

// TestSecrets_NeverStoredOrLoggedInTheClear searches everything the run
// left behind for the secret's value: the SQLite database and its WAL, the
// logs at debug level, and every event any observer saw.
func TestSecrets_NeverStoredOrLoggedInTheClear(t *testing.T) {
	h := newHarness(t)
	sub, err := h.bus.Subscribe(nil, bus.Buffer(100000))
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	leak := make(chan string, 1)
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for ev := range sub.C() {
			seen.Add(1)
			raw, _ := json.Marshal(ev)
			if bytes.Contains(raw, []byte(testSecret)) {
				select {
				case leak <- string(raw):
				default:
				}
			}
		}
	}()
	h, id := driveGenerator(t, h, nil)
	// The secret reached the tools' call context, sealed in the snapshot.
	in, err := h.eng.Inspect(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := in.Variables["__secrets"]; ok {
		t.Fatal("Inspect shows the sealed secrets")
	}
	h.close()
	<-observed // closing the bus ends the subscription: every event was searched
	select {
	case ev := <-leak:
		t.Fatalf("an observer saw the secret: %s", ev)
	default:
	}
	if seen.Load() == 0 {
		t.Fatal("the observer saw no events")
	}
	for _, f := range []string{h.dbPath, h.dbPath + "-wal"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if bytes.Contains(data, []byte(testSecret)) {
			t.Fatalf("%s holds the secret in the clear", f)
		}
	}
	if strings.Contains(h.logs.String(), testSecret) {
		t.Fatal("the logs hold the secret")
	}
}

// TestSecrets_OnlyTheFormsNames: the person answering a masked form gives
// the values of the names the form asks for, never other variables (a tool
// gets them in its environment: BASH_ENV or a URL's ${CRM_URL} would be
// theirs to set). An answer with another name is refused whole: nothing is
// recorded and the chat still waits for the form.
func TestSecrets_OnlyTheFormsNames(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id, uid := runToSecretForm(t, h)
	h.settle()
	before := len(h.events(id))
	for _, data := range []string{`{"BASH_ENV":"$(touch /tmp/owned)"}`, `{"NEWSLETTER_API_KEY":"k","CRM_URL":"https://evil.example"}`} {
		err := h.eng.RespondUI(ctx, testScope, id, uid, "success", json.RawMessage(data))
		if !errors.Is(err, baton.ErrInvalid) || !strings.Contains(err.Error(), "it asks for NEWSLETTER_API_KEY") {
			t.Errorf("an answer of %s: %v, want invalid, naming what the form asks for", data, err)
		}
	}
	h.settle()
	if n := len(h.events(id)); n != before {
		t.Fatalf("refused answers recorded %d events:\n%s", n-before, dump(h.events(id)[before:]))
	}
	h.waitStatus(id, baton.ChatWaitingSecret)
	if err := h.eng.RespondUI(ctx, testScope, id, uid, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"`+testSecret+`"}`)); err != nil {
		t.Fatalf("the form's own name: %v", err)
	}
	if c := h.waitStatus(id, baton.ChatWaitingUITool, baton.ChatFailed); c.Status != baton.ChatWaitingUITool {
		t.Fatalf("after the form's answer the chat is %s, want it at the action plan:\n%s", c.Status, dump(h.events(id)))
	}
}

// TestSecrets_ReachTheToolThatUsesThem: the value the person typed into
// the masked form is, opened, in the call context of the agent's Go tool,
// under the name the form lists, and nothing else is.
func TestSecrets_ReachTheToolThatUsesThem(t *testing.T) {
	var got atomic.Value
	useKey := tool.WithFuncs(tool.MustFunc("use_key", "Open the vault.", func(_ context.Context, cc *baton.CallContext, _ struct{}) (string, error) {
		got.Store(maps.Clone(cc.Secrets))
		return "opened", nil
	}), tool.MustFunc("peek", "Look around.", func(context.Context, *baton.CallContext, struct{}) (string, error) { return "", nil }))
	h := newHarness(t, withWorkflows(loopDir), withTools(useKey), fake(func(req *baton.Request) ([]baton.Delta, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == baton.RoleTool {
			return reply("The vault is open."), nil
		}
		return callTool("c1", "use_key", `{}`), nil
	}))
	ctx := context.Background()
	id := start(t, h, "vault")
	h.waitStatus(id, baton.ChatWaitingSecret)
	if err := h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingSecret).UIEventID, "success", json.RawMessage(`{"VAULT_KEY":"`+testSecret+`"}`)); err != nil {
		t.Fatal(err)
	}
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("status %s:\n%s", c.Status, dump(h.events(id)))
	}
	secrets, _ := got.Load().(map[string]string)
	if want := map[string]string{"VAULT_KEY": testSecret}; !maps.Equal(secrets, want) {
		t.Fatalf("the tool got secrets %v, want %v", secrets, want)
	}
}

// A UI tool nobody answers within its timeout_seconds gives the model a
// "timed out" tool error, and the run goes on.
func TestUITool_TimeoutGivesTheModelAnError(t *testing.T) {
	var n atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if req.Agent == "Ping" && n.Add(1) == 1 {
				return callTool("c1", "confirm", `{"question":"sure?"}`), nil
			}
			return reply("going on"), nil
		}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.eng.Run(ctx) }()
	defer func() { cancel(); <-done }()
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatCompleted)
	var call, resp map[string]any
	for _, ev := range h.events(id) {
		p := payloadOf(t, ev)
		switch {
		case ev.Type == baton.TypeChatToolCall && p["tool_name"] == "confirm":
			call = p
		case ev.Type == baton.TypeChatToolResponse && p["tool_name"] == "confirm":
			resp = p
		}
	}
	// The model's call of a UI tool is a pending ui_tool request
	// (pending_kind), as an auto-tool's and a lifecycle tool's are: the
	// AG-UI and Chat Completions adapters send only such calls to their
	// clients.
	if call == nil || call["awaiting_response"] != true || call["pending_kind"] != baton.PendingUITool {
		t.Fatalf("confirm's call = %v, want awaiting_response and pending_kind %q", call, baton.PendingUITool)
	}
	if resp == nil || resp["status"] != "error" || !strings.Contains(resp["content"].(string), "Timed out") {
		t.Fatalf("confirm's response = %v, want a timed-out tool error", resp)
	}
}

// A before_chat UI lifecycle tool pauses the chat before anything else; the
// person's answer resumes it with the resume signal, and the chat starts.
func TestLifecycle_BeforeChatFormThenStart(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))))
	c, err := h.eng.Start(context.Background(), testScope, "consent", baton.StartOptions{Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitStatus(c.ID, baton.ChatWaitingUITool)
	if err := h.eng.RespondUI(context.Background(), testScope, c.ID, h.pending(c.ID, baton.PendingUITool).UIEventID, "success", json.RawMessage(`{"agree":true}`)); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(c.ID, baton.ChatCompleted)
	evs := h.events(c.ID)
	checkSequences(t, evs)
	checkSpeakers(t, evs)
	if lastOfType(t, evs, baton.TypeChatRunComplete)["status"] != "success" || countType(evs, baton.TypeChatSelectSpeaker) < 2 {
		t.Fatalf("the chat did not start after the form:\n%s", dump(evs))
	}
}

// TestSecrets_RedactedFromToolOutput: a Go tool that echoes the key it
// declares puts "[redacted]" into the recorded tool response, never the
// value; a tool that declares no secret gets none.
func TestSecrets_RedactedFromToolOutput(t *testing.T) {
	var peeked atomic.Value
	tools := tool.WithFuncs(
		tool.MustFunc("use_key", "Open the vault.", func(_ context.Context, cc *baton.CallContext, _ struct{}) (string, error) {
			return "opened with " + cc.Secrets["VAULT_KEY"], nil
		}),
		tool.MustFunc("peek", "Look around.", func(_ context.Context, cc *baton.CallContext, _ struct{}) (string, error) {
			peeked.Store(maps.Clone(cc.Secrets))
			return "nothing here", nil
		}),
	)
	h := newHarness(t, withWorkflows(loopDir), withTools(tools), fake(func(req *baton.Request) ([]baton.Delta, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == baton.RoleTool {
			return reply("Done."), nil
		}
		return append(callTool("c1", "use_key", `{}`), callTool("c2", "peek", `{}`)...), nil
	}))
	id := start(t, h, "vault")
	h.waitStatus(id, baton.ChatWaitingSecret)
	if err := h.eng.RespondUI(context.Background(), testScope, id, h.pending(id, baton.PendingSecret).UIEventID, "success", json.RawMessage(`{"VAULT_KEY":"`+testSecret+`"}`)); err != nil {
		t.Fatal(err)
	}
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("status %s:\n%s", c.Status, dump(h.events(id)))
	}
	raw, _ := json.Marshal(h.events(id))
	all := string(raw)
	if strings.Contains(all, testSecret) {
		t.Fatalf("the secret is in the recorded events:\n%s", all)
	}
	if !strings.Contains(all, "opened with [redacted]") {
		t.Fatalf("the tool response is not recorded redacted:\n%s", all)
	}
	if got, _ := peeked.Load().(map[string]string); len(got) != 0 {
		t.Fatalf("a tool that declares no secret got %v", got)
	}
}

// TestUIResponse_LeftInTheInboxIsTakenByTheNextRun: the first handling of a
// kept UI response fails (a store error), so it stays in the inbox; its
// retry with the same event id is dropped by the bus as a duplicate. The
// next event that runs the chat (here a resume) takes the response from
// the inbox, records it once, and the chat goes on.
func TestUIResponse_LeftInTheInboxIsTakenByTheNextRun(t *testing.T) {
	var armed, failed atomic.Bool
	h := newHarness(t, withFaults(func(evs []baton.Event) error {
		for _, ev := range evs {
			if armed.Load() && ev.Type == baton.TypeChatToolResponse && !failed.Swap(true) {
				return baton.Errorf(baton.EUNAVAILABLE, "the store is down for a moment")
			}
		}
		return nil
	}))
	id := runToPlan(t, h)
	ctx := context.Background()
	plan := h.pending(id, baton.PendingUITool)
	const eventID = "0b7c9e1e-6a52-4c55-9d6e-4f1f4c0d2f77"
	armed.Store(true)
	for range 2 { // the first fails to record; the retry is a duplicate on the bus
		if err := h.eng.RespondUIOnce(ctx, testScope, id, eventID, plan.UIEventID, "success", json.RawMessage(`{"ok":1}`)); err != nil {
			t.Fatal(err)
		}
		h.settle()
	}
	if !failed.Load() {
		t.Fatal("the first handling did not fail: the test injects nothing")
	}
	if c, _ := h.store.GetChat(ctx, testScope, id); c.Status != baton.ChatWaitingUITool {
		t.Fatalf("after the failure the chat is %s, want still waiting_ui_tool", c.Status)
	}
	if err := h.eng.Resume(ctx, testScope, id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	h.waitInboxEmpty(id)
	n := 0
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolResponse && payloadOf(t, ev)["ui_event_id"] == plan.UIEventID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d responses to %s recorded, want 1", n, plan.UIEventID)
	}
}
