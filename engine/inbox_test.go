package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/workflow"
)

// inboxDir holds the workflows of the inbox tests: queue (enqueue), strict
// (reject), cut (interrupt) and short (the run ends after one answer).
const inboxDir = "testdata/inbox"

// gate is a model that streams "partial " and then holds the call until
// the test opens the gate (or the call's context ends: an interrupt), then
// ends it with "answer.". Every call signals started once it has streamed
// its first delta.
type gate struct {
	started chan struct{}
	open    chan struct{}
	once    sync.Once
	first   []baton.Delta // what a call streams before it holds; "partial " when nil
}

func newGate() *gate { return &gate{started: make(chan struct{}, 16), open: make(chan struct{})} }

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) Stream(ctx context.Context, _ *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		first := g.first
		if first == nil {
			first = []baton.Delta{{Kind: baton.DeltaText, Text: "partial "}}
		}
		for _, d := range first {
			if !yield(d, nil) {
				return
			}
		}
		g.started <- struct{}{}
		select {
		case <-ctx.Done():
			yield(baton.Delta{}, ctx.Err())
			return
		case <-g.open:
		}
		if err := ctx.Err(); err != nil {
			// Cut before the gate opened: so it ends, whichever of the two
			// the select saw first.
			yield(baton.Delta{}, err)
			return
		}
		yield(baton.Delta{Kind: baton.DeltaText, Text: "answer."}, nil)
	}
}

// waitStarted waits until the gate's next model call has streamed its
// first delta (and is held).
func (g *gate) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no model call started")
	}
}

func newInboxHarness(t *testing.T, g *gate) *harness {
	return newHarness(t, withWorkflows(inboxDir), withProvider(func(*workflow.Workflow) (baton.Provider, error) { return g, nil }))
}

// texts returns the contents of a chat's chat.text events of agent, with
// their payloads.
func texts(evs []baton.Event, agent string) (contents []string, payloads []map[string]any) {
	for _, ev := range evs {
		if ev.Type != baton.TypeChatText {
			continue
		}
		var p map[string]any
		_ = json.Unmarshal(ev.Payload, &p)
		if p["agent"] == agent {
			c, _ := p["content"].(string)
			contents = append(contents, c)
			payloads = append(payloads, p)
		}
	}
	return contents, payloads
}

// waitInboxEmpty waits until the chat's inbox holds nothing and the bus
// has handled everything.
func (h *harness) waitInboxEmpty(chatID string) {
	h.t.Helper()
	testenv.Eventually(h.t, 10*time.Second, fmt.Sprintf("chat %s's inbox to empty and the bus to settle", chatID), func() error {
		ins, err := h.store.Inputs(context.Background(), testScope, chatID)
		if err != nil {
			return err
		}
		if len(ins) != 0 || !h.settled() {
			return fmt.Errorf("%d inputs still waiting, settled %v", len(ins), h.settled())
		}
		return nil
	})
}

func startWith(t *testing.T, h *harness, wf, message string) string {
	t.Helper()
	c, err := h.eng.Start(context.Background(), testScope, wf, baton.StartOptions{Message: message})
	if err != nil {
		t.Fatalf("start %s: %v", wf, err)
	}
	return c.ID
}

// TestDoubleTexting_Enqueue sends two messages while the agent answers the
// first: both are acknowledged and kept in the inbox (not recorded yet:
// the turn goes on), and the run takes them, in order, once each, at its
// next input point.
func TestDoubleTexting_Enqueue(t *testing.T) {
	g := newGate()
	h := newInboxHarness(t, g)
	ctx := context.Background()
	id := startWith(t, h, "queue", "m0")
	g.waitStarted(t)
	for _, m := range []string{"m1", "m2"} {
		if err := h.eng.SubmitOnce(ctx, testScope, id, "id-"+m, m, "http"); err != nil {
			t.Fatalf("submit %s while the run goes: %v", m, err)
		}
	}
	if err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http"); err != nil { // a retry
		t.Fatalf("retry m1: %v", err)
	}
	ins, err := h.store.Inputs(ctx, testScope, id)
	if err != nil || len(ins) != 2 {
		t.Fatalf("inbox while the run goes: %d inputs (err %v), want 2", len(ins), err)
	}
	if users, _ := texts(h.events(id), "user"); !slices.Equal(users, []string{"m0"}) {
		t.Fatalf("recorded during the turn: %q, want only m0 (a text mid-turn would break the model's message order)", users)
	}
	g.release()
	h.waitStatus(id, baton.ChatWaitingInput)
	h.waitInboxEmpty(id)
	evs := h.events(id)
	checkSequences(t, evs)
	users, ps := texts(evs, "user")
	if !slices.Equal(users, []string{"m0", "m1", "m2"}) {
		t.Fatalf("person's texts %q, want [m0 m1 m2] once each, in order", users)
	}
	if ps[1]["input_id"] != "id-m1" || ps[2]["input_id"] != "id-m2" {
		t.Errorf("input ids %v %v, want id-m1 id-m2", ps[1]["input_id"], ps[2]["input_id"])
	}
	if answers, _ := texts(evs, "Echo"); len(answers) != 3 {
		t.Errorf("Echo answered %d times, want 3: %q", len(answers), answers)
	}
}

// TestDoubleTexting_MessageAfterTheEndStartsTheNextRun sends a message
// while the run of a workflow that ends after one answer goes: the run
// completes first, and the message, acknowledged, starts the next run
// instead of vanishing.
func TestDoubleTexting_MessageAfterTheEndStartsTheNextRun(t *testing.T) {
	g := newGate()
	h := newInboxHarness(t, g)
	ctx := context.Background()
	id := startWith(t, h, "short", "m0")
	g.waitStarted(t)
	if err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http"); err != nil {
		t.Fatal(err)
	}
	g.release()
	h.waitStatus(id, baton.ChatCompleted)
	h.waitInboxEmpty(id)
	evs := h.events(id)
	checkSequences(t, evs)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0", "m1"}) {
		t.Fatalf("person's texts %q, want [m0 m1]", users)
	}
	completes := 0
	for _, ev := range evs {
		if ev.Type == baton.TypeChatRunComplete {
			completes++
		}
	}
	if answers, _ := texts(evs, "Echo"); len(answers) != 2 || completes != 2 {
		t.Errorf("%d answers and %d run_complete, want 2 and 2: the message starts a second run", len(answers), completes)
	}
	if last := evs[len(evs)-1]; last.Type != baton.TypeChatRunComplete {
		t.Errorf("last event %s, want chat.run_complete", last.Type)
	}
}

// TestDoubleTexting_Reject refuses a message while the run goes
// (ECONFLICT, nothing kept or recorded) and takes it once the chat waits.
func TestDoubleTexting_Reject(t *testing.T) {
	g := newGate()
	h := newInboxHarness(t, g)
	ctx := context.Background()
	id := startWith(t, h, "strict", "m0")
	g.waitStarted(t)
	err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http")
	if !errors.Is(err, baton.ErrConflict) {
		t.Fatalf("submit while the run goes: %v, want ECONFLICT", err)
	}
	if ins, _ := h.store.Inputs(ctx, testScope, id); len(ins) != 0 {
		t.Errorf("a refused message is in the inbox: %d inputs", len(ins))
	}
	g.release()
	h.waitStatus(id, baton.ChatWaitingInput)
	if users, _ := texts(h.events(id), "user"); !slices.Equal(users, []string{"m0"}) {
		t.Fatalf("person's texts after a refusal %q, want [m0]", users)
	}
	if err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http"); err != nil {
		t.Fatalf("submit while the chat waits: %v", err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	h.waitInboxEmpty(id)
	if users, _ := texts(h.events(id), "user"); !slices.Equal(users, []string{"m0", "m1"}) {
		t.Fatalf("person's texts %q, want [m0 m1]", users)
	}
}

// TestDoubleTexting_Interrupt sends a message while the model streams: the
// call stops at once, the text streamed so far is recorded once (marked
// interrupted), and the run takes the message and answers it.
func TestDoubleTexting_Interrupt(t *testing.T) {
	g := newGate()
	h := newInboxHarness(t, g)
	ctx := context.Background()
	id := startWith(t, h, "cut", "m0")
	g.waitStarted(t)
	if err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http"); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t) // the answer to m1 has begun: the first call was cut
	g.release()
	h.waitStatus(id, baton.ChatWaitingInput)
	h.waitInboxEmpty(id)
	evs := h.events(id)
	checkSequences(t, evs)
	checkSpeakers(t, evs)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0", "m1"}) {
		t.Fatalf("person's texts %q, want [m0 m1]", users)
	}
	answers, ps := texts(evs, "Echo")
	if !slices.Equal(answers, []string{"partial ", "partial answer."}) {
		t.Fatalf("Echo's texts %q, want the cut text once, then the answer to m1", answers)
	}
	if ps[0]["interrupted"] != true || ps[1]["interrupted"] != nil {
		t.Errorf("interrupted marks %v %v, want true on the cut text only", ps[0]["interrupted"], ps[1]["interrupted"])
	}
}

// TestDoubleTexting_InterruptRetry: a retry of a message (the same
// idempotency key) is acknowledged and interrupts nothing: neither the
// answer to itself nor the answer to a later message.
func TestDoubleTexting_InterruptRetry(t *testing.T) {
	g := newGate()
	h := newInboxHarness(t, g)
	ctx := context.Background()
	id := startWith(t, h, "cut", "m0")
	g.waitStarted(t)
	submit := func(key, content string) {
		t.Helper()
		if err := h.eng.SubmitOnce(ctx, testScope, id, key, content, "http"); err != nil {
			t.Fatalf("submit %s: %v", content, err)
		}
	}
	submit("id-m1", "m1")
	g.waitStarted(t) // the answer to m1 has begun: the first call was cut
	submit("id-m1", "m1")
	submit("id-m2", "m2")
	g.waitStarted(t) // the answer to m2 has begun: the answer to m1 was cut
	submit("id-m1", "m1")
	g.release() // a call a retry cut ends cut (gate)
	h.waitStatus(id, baton.ChatWaitingInput)
	h.waitInboxEmpty(id)
	evs := h.events(id)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0", "m1", "m2"}) {
		t.Fatalf("person's texts %q, want [m0 m1 m2]", users)
	}
	if answers, _ := texts(evs, "Echo"); !slices.Equal(answers, []string{"partial ", "partial ", "partial answer."}) {
		t.Fatalf("Echo's texts %q, want two cut texts, then the whole answer to m2", answers)
	}
}

// TestDoubleTexting_InterruptedTextHidden: a reply cut by a message is
// hidden by the rules a whole one is. Cut while the gate holds "NEX" (it
// might have become the ui_hidden NEXT), the text is recorded hidden and
// never streamed, so nothing is retracted; cut after "[internal] plan"
// streamed (an agent_text_contains ui_hidden trigger), it is recorded
// hidden and retracts the streamed message. The usage the provider
// reported before the cut is recorded.
func TestDoubleTexting_InterruptedTextHidden(t *testing.T) {
	cases := []struct {
		name, text     string
		retract, usage bool
	}{
		{"held trigger prefix", "NEX", false, false},
		{"contains trigger", "[internal] plan", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			g.first = []baton.Delta{{Kind: baton.DeltaText, Text: tc.text}}
			if tc.usage {
				g.first = append(g.first, baton.Delta{Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 11, CompletionTokens: 3}})
			}
			h := newInboxHarness(t, g)
			ctx := context.Background()
			id := startWith(t, h, "cuthide", "m0")
			g.waitStarted(t)
			if err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http"); err != nil {
				t.Fatal(err)
			}
			g.waitStarted(t) // the answer to m1 has begun: the first call was cut
			g.release()
			h.waitStatus(id, baton.ChatWaitingInput)
			h.waitInboxEmpty(id)
			evs := h.events(id)
			answers, ps := texts(evs, "Echo")
			if len(answers) != 2 || answers[0] != tc.text || ps[0]["interrupted"] != true {
				t.Fatalf("Echo's texts %q, want the cut %q first, marked interrupted", answers, tc.text)
			}
			if ps[0]["ui_hidden"] != true {
				t.Errorf("the cut text %q is not ui_hidden: %v", tc.text, ps[0])
			}
			if got := ps[0]["retract_message_id"]; (got != nil && got != "") != tc.retract || (tc.retract && got != ps[0]["agent_message_id"]) {
				t.Errorf("retract_message_id %v, want the streamed message's id: %v", got, tc.retract)
			}
			var usage []float64
			for _, ev := range evs {
				var p map[string]any
				_ = json.Unmarshal(ev.Payload, &p)
				if ev.Type == baton.TypeChatUsageSummary && p["agent_message_id"] == ps[0]["agent_message_id"] {
					usage = append(usage, p["prompt_tokens"].(float64))
				}
			}
			if tc.usage && !slices.Equal(usage, []float64{11}) {
				t.Errorf("usage of the cut call %v, want [11] recorded once", usage)
			}
			if !tc.usage && len(usage) != 0 {
				t.Errorf("usage of a cut call that reported none: %v", usage)
			}
		})
	}
}

// TestInbox_StartMessageSurvivesARestart: the process dies after Start
// returned (the client has its 201) and before the run recorded anything
// (here every append fails, as if the process died before it). After the
// restart, recovery starts the chat with the person's first message,
// recorded once — not without it.
func TestInbox_StartMessageSurvivesARestart(t *testing.T) {
	h := newHarness(t, withWorkflows(inboxDir), withFaults(func([]baton.Event) error {
		return baton.Errorf(baton.EUNAVAILABLE, "the process is dying")
	}))
	id := startWith(t, h, "queue", "m0")
	h.settle()
	if c, _ := h.store.GetChat(context.Background(), testScope, id); c.LastSequence != 0 || c.Status != baton.ChatRunning {
		t.Fatalf("before the restart: %d events, status %s; want none, running", c.LastSequence, c.Status)
	}
	h = h.restart() // without the faults
	ctx := context.Background()
	running, err := h.store.ChatsByStatus(ctx, baton.ChatRunning, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Recover(ctx, running); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.RecoverInputs(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	h.waitInboxEmpty(id)
	evs := h.events(id)
	checkSequences(t, evs)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0"}) {
		t.Fatalf("person's texts %q, want [m0] once", users)
	}
	if answers, _ := texts(evs, "Echo"); len(answers) != 1 {
		t.Errorf("Echo answered %d times, want once", len(answers))
	}
}

// TestInbox_EnvironmentEventSurvivesARestart: an environment event for a
// chat, published with PublishEvent (POST /api/events) and acknowledged,
// whose recording the process did not live to make (every append fails
// here), is observed once after the restart: it was kept in the inbox.
func TestInbox_EnvironmentEventSurvivesARestart(t *testing.T) {
	h := newHarness(t, withWorkflows(inboxDir))
	id := startWith(t, h, "queue", "m0")
	h.waitStatus(id, baton.ChatWaitingInput)
	h.close()
	h = newHarness(t, withDB(h.dbPath), withWorkflows(inboxDir), withFaults(func([]baton.Event) error {
		return baton.Errorf(baton.EUNAVAILABLE, "the process is dying")
	}))
	for _, r := range h.eng.DefaultRules() {
		mustRule(t, h.bus, r)
	}
	ctx := context.Background()
	ev := baton.NewInput(testScope, "webhook.received", id, json.RawMessage(`{"order":42}`))
	ev.Metadata.Source = baton.SourceEnv
	if err := h.eng.PublishEvent(ctx, testScope, ev); err != nil {
		t.Fatal(err)
	}
	h.settle()
	before := len(h.events(id))
	h = h.restart() // without the faults
	for _, r := range h.eng.DefaultRules() {
		mustRule(t, h.bus, r)
	}
	if _, err := h.eng.RecoverInputs(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitInboxEmpty(id)
	// The agent woken by the event then fails: the scripted Echo has no
	// answer after a tool result. The event is what this test is about.
	h.waitStatus(id, baton.ChatWaitingInput, baton.ChatFailed)
	evs := h.events(id)
	checkSequences(t, evs)
	observed := 0
	for _, e := range evs[before:] {
		if e.Type == baton.TypeChatToolResponse && strings.Contains(string(e.Payload), `\"order\":42`) {
			observed++
		}
	}
	if observed != 1 {
		t.Fatalf("the event is observed %d times after the restart, want once", observed)
	}
}

// TestInbox_MessageToACutShortTurn: a chat's turn was cut short (its
// process stopped before recording the answer: the chat is running with
// the turn open) and a message arrives before anything resumes it — as
// JetStream redelivers a queued message to a restarted instance. The
// message is not dropped as "input ignored": the run goes on with the
// turn, then takes the message.
func TestInbox_MessageToACutShortTurn(t *testing.T) {
	var dying atomic.Bool
	dying.Store(true)
	h := newHarness(t, withWorkflows(inboxDir), withFaults(func(evs []baton.Event) error {
		for _, ev := range evs {
			if dying.Load() && ev.Type == baton.TypeChatText && strings.Contains(string(ev.Payload), `"agent":"Echo"`) {
				return baton.ErrClosed // the store went away with the process: nothing recorded
			}
		}
		return nil
	}))
	ctx := context.Background()
	id := startWith(t, h, "queue", "m0")
	h.settle()
	c, err := h.store.GetChat(ctx, testScope, id)
	if err != nil || c.Status != baton.ChatRunning {
		t.Fatalf("after the cut: status %q (err %v), want running with the turn open", c.Status, err)
	}
	dying.Store(false)
	if err := h.eng.SubmitOnce(ctx, testScope, id, "id-m1", "m1", "http"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	h.waitInboxEmpty(id)
	evs := h.events(id)
	checkSequences(t, evs)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0", "m1"}) {
		t.Fatalf("person's texts %q, want [m0 m1]", users)
	}
	if answers, _ := texts(evs, "Echo"); len(answers) != 2 {
		t.Errorf("Echo answered %d times, want 2 (the cut turn, then m1)", len(answers))
	}
}

// creatingFaulty fails the appends fail chooses and still creates chats
// with their first events (the engine's path without leases), where
// withFaults's recorder cannot.
type creatingFaulty struct {
	*recorder.Recorder
	fail func([]baton.Event) error
}

func (f *creatingFaulty) Record(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	if err := f.fail(events); err != nil {
		return nil, err
	}
	return f.Recorder.Record(ctx, scope, chatID, events, u)
}

// TestInbox_FirstMessageOfAChatThatFailedBeforeItsStart: a chat whose
// start was never recorded (a before_chat form answered, then the append
// that records the start failed, and the chat failed) keeps its first
// message in the inbox, with its run.start. The person's next message
// finds the chat failed and not started: the first message is taken
// first, then this one — on both paths, Start storing the chat itself
// and the run creating it.
func TestInbox_FirstMessageOfAChatThatFailedBeforeItsStart(t *testing.T) {
	for _, creates := range []bool{false, true} {
		t.Run(fmt.Sprintf("run creates the chat %v", creates), func(t *testing.T) {
			var failed atomic.Bool
			fail := func(evs []baton.Event) error {
				for _, ev := range evs {
					if ev.Type == baton.TypeChatText && strings.Contains(string(ev.Payload), `"m0"`) && failed.CompareAndSwap(false, true) {
						return baton.Errorf(baton.EUNAVAILABLE, "the store blinked")
					}
				}
				return nil
			}
			opts := []harnessOption{withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64)))}
			if creates {
				opts = append(opts, withRecorder(func(r baton.Recorder) baton.Recorder {
					return &creatingFaulty{Recorder: r.(*recorder.Recorder), fail: fail}
				}))
			} else {
				opts = append(opts, withFaults(fail))
			}
			h := newHarness(t, opts...)
			ctx := context.Background()
			c, err := h.eng.Start(ctx, testScope, "consent", baton.StartOptions{Message: "m0", Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
			if err != nil {
				t.Fatal(err)
			}
			h.waitStatus(c.ID, baton.ChatWaitingUITool)
			if err := h.eng.RespondUI(ctx, testScope, c.ID, h.pending(c.ID, baton.PendingUITool).UIEventID, "success", json.RawMessage(`{"agree":true}`)); err != nil {
				t.Fatal(err)
			}
			h.waitStatus(c.ID, baton.ChatFailed)
			if !failed.Load() {
				t.Fatal("the start's append did not fail")
			}
			if err := h.eng.Submit(ctx, testScope, c.ID, "m1", "http"); err != nil {
				t.Fatal(err)
			}
			h.waitInboxEmpty(c.ID) // (the workflow's script answers once: m1's run fails)
			if users, _ := texts(h.events(c.ID), "user"); !slices.Equal(users, []string{"m0", "m1"}) {
				t.Fatalf("person's texts %q, want [m0 m1]: the first message Start acknowledged, then the next", users)
			}
		})
	}
}
