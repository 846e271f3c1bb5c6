package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// Start hands a new chat to its run, whose first append creates it: the
// chat, the person's first message and the run's first events are one
// commit, and the first turn of a workflow that answers at once commits
// twice (the start, then the answer and the pause), where it committed
// three times when Start created the chat alone. The message is taken, not
// left waiting, and Start returns the chat as created.
func TestStart_TheRunsFirstAppendCreatesTheChat(t *testing.T) {
	h, _ := newCountingHarness(t, &historyModel{})
	ctx := context.Background()
	before := h.store.Stats()
	c, err := h.eng.Start(ctx, testScope, "queue", baton.StartOptions{Message: "m0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == "" || c.Status != baton.ChatRunning || c.LastSequence != 0 || c.CreatedAt.IsZero() || c.App != testScope.App {
		t.Errorf("Start returned %+v, want the chat as created", c)
	}
	// Durable when Start returns: the message is in the store.
	evs := h.events(c.ID)
	if users, _ := texts(evs, "user"); len(users) != 1 || users[0] != "m0" {
		t.Fatalf("when Start returned the chat held %q, want the person's message", users)
	}
	h.waitAnswers(c.ID, 1)
	if n := h.store.Stats().Commits - before.Commits; n != 2 {
		t.Errorf("the first turn committed %d times, want 2", n)
	}
	if ins, err := h.store.Inputs(ctx, testScope, c.ID); err != nil || len(ins) != 0 {
		t.Errorf("inbox %+v %v, want the first message taken", ins, err)
	}
	checkSequences(t, h.events(c.ID))

	// A chat id in use: ECONFLICT, and the chat is left as it was.
	last := len(h.events(c.ID))
	if _, err := h.eng.Start(ctx, testScope, "queue", baton.StartOptions{ChatID: c.ID, Message: "again"}); !errors.Is(err, baton.ErrConflict) {
		t.Fatalf("Start with the id of a chat: %v, want ECONFLICT", err)
	}
	h.settle()
	if n := len(h.events(c.ID)); n != last {
		t.Fatalf("a refused Start wrote into the chat: %d events, were %d", n, last)
	}
}

// A run that cannot start the chat (its workflow's model provider cannot
// be made) writes nothing: Start returns the run's error and no chat
// exists.
func TestStart_RunFailsBeforeItsFirstAppend(t *testing.T) {
	h := newHarness(t, withWorkflows(inboxDir), withProvider(func(*workflow.Workflow) (baton.Provider, error) {
		return nil, fmt.Errorf("no key for the model")
	}))
	ctx := context.Background()
	_, err := h.eng.Start(ctx, testScope, "queue", baton.StartOptions{ChatID: "never-made", Message: "m0"})
	if err == nil || !strings.Contains(err.Error(), "no key for the model") {
		t.Fatalf("Start: %v, want the provider's error", err)
	}
	if _, err := h.store.GetChat(ctx, testScope, "never-made"); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("the chat: %v, want none", err)
	}
	// The id is free again.
	h2, _ := newCountingHarness(t, &historyModel{}, withDB(h.dbPath))
	h.close()
	if _, err := h2.eng.Start(ctx, testScope, "queue", baton.StartOptions{ChatID: "never-made", Message: "m0"}); err != nil {
		t.Fatalf("Start again: %v", err)
	}
	h2.waitAnswers("never-made", 1)
}

// A run that created its chat before a model call is parked until its
// run.wake; an event handled on the chat's lane before it (here an
// event-handler agent on session.created, which the creating commit
// publishes) takes the parked state and goes on from it, and the run.wake
// then finds the chat as that event left it: one model call and one input
// request for the turn, not a second run from the parked state.
func TestStart_AnEventBeforeTheHandOverTakesTheParkedRun(t *testing.T) {
	eh := newEnvHarness(t)
	mustRule(t, eh.bus, eh.eng.AgentRule("greet", []string{baton.TypeSessionCreated}, 60, "A chat started.", "", 0))
	c, err := eh.eng.Start(context.Background(), testScope, "assistant", baton.StartOptions{Message: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	eh.waitStatus(c.ID, baton.ChatWaitingInput)
	evs := eh.events(c.ID)
	checkSequences(t, evs)
	reqs := 0
	for _, ev := range evs {
		if ev.Type == baton.TypeChatInputRequest {
			reqs++
		}
	}
	eh.mu.Lock()
	n := len(eh.requests)
	eh.mu.Unlock()
	if n != 1 || reqs != 1 {
		t.Fatalf("%d model calls and %d chat.input_request for one turn, want 1 and 1: the parked run went on from a state the store had moved past", n, reqs)
	}
}

// preludeDir returns a folder with the loop test workflow again as
// "prelude", with a before_chat lifecycle tool that has side effects (the
// Go function bump): its effect-ledger claim needs the chat stored.
func preludeDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dst := filepath.Join(root, "prelude")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(loopDir, "loop"))); err != nil {
		t.Fatal(err)
	}
	edit := func(name string, fn func(map[string]any)) {
		raw, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		fn(m)
		raw, _ = json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dst, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("workflow.json", func(m map[string]any) { m["name"] = "prelude" })
	edit("tools.json", func(m map[string]any) {
		m["tools"] = append(m["tools"].([]any), map[string]any{"name": "prelude_bump", "function": "bump", "description": "Count a bump before the chat.",
			"tool_type": "Lifecycle_Tool", "kind": "go", "trigger": "before_chat", "side_effects": true})
	})
	return root
}

// A before_chat lifecycle tool runs after the chat it belongs to is
// stored: the creating run's flush before the tool creates the chat with
// nothing else in it, and the tool's effect is claimed in its ledger.
func TestStart_BeforeChatToolRunsOnceTheChatExists(t *testing.T) {
	var n atomic.Int64
	h := newHarness(t, withWorkflows(preludeDir(t)), withTools(bumpTool(&n)))
	c, err := h.eng.Start(context.Background(), testScope, "prelude", baton.StartOptions{Message: "hello",
		Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitStatus(c.ID, baton.ChatCompleted)
	if n.Load() != 1 {
		for _, ev := range h.events(c.ID) {
			t.Logf("%d %s %s", ev.Sequence, ev.Type, ev.Payload)
		}
		t.Fatalf("the before_chat tool ran %d times, want 1", n.Load())
	}
	if users, _ := texts(h.events(c.ID), "user"); len(users) != 1 || users[0] != "hello" {
		t.Fatalf("the person's message: %q, want it once, after the tool", users)
	}
}

// A message to a chat id that does not exist yet is refused, and leaves
// nothing behind that a later Start of that id would trip on.
func TestStart_AfterAMessageToItsIDWasRefused(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))))
	ctx := context.Background()
	if err := h.eng.Submit(ctx, testScope, "preset-id", "too early", "api"); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("a message to a chat that does not exist: %v, want not found", err)
	}
	c, err := h.eng.Start(ctx, testScope, "loop", baton.StartOptions{ChatID: "preset-id", Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.waitStatus(c.ID, baton.ChatCompleted)
}

// refuseHandOver is a bus router that refuses the run.wake of a hand-over
// (a run.wake without a payload) and routes nothing.
type refuseHandOver struct{}

func (refuseHandOver) Route(_ context.Context, ev baton.Event) (bool, error) {
	if ev.Type == baton.TypeRunWake && len(ev.Payload) == 0 {
		return false, errors.New("the test's bus refuses the hand-over")
	}
	return false, nil
}

type refuseRunStart struct{}

func (refuseRunStart) Route(_ context.Context, ev baton.Event) (bool, error) {
	if ev.Type == baton.TypeRunStart {
		return false, errors.New("the test's bus refuses run.start")
	}
	return false, nil
}

// TestStart_PublishFailsAfterTheChatIsStored: where Start stores the chat
// itself (here, a recorder that cannot create chats with their first
// events), a run.start the bus refuses leaves the chat and its first
// message committed. Start's error says so and names the chat, rather
// than look like a start that wrote nothing, and the recovery at the
// service's next start runs the chat, which takes the message.
func TestStart_PublishFailsAfterTheChatIsStored(t *testing.T) {
	h := newHarness(t, withWorkflows(inboxDir), withFaults(func([]baton.Event) error { return nil }))
	h.bus.SetRouter(refuseRunStart{})
	ctx := context.Background()
	c, err := h.eng.Start(ctx, testScope, "queue", baton.StartOptions{ChatID: "orphan", Message: "m0"})
	if err == nil {
		t.Fatal("Start succeeded though its run.start was refused")
	}
	if c.ID != "orphan" || baton.ErrorCode(err) != baton.EUNAVAILABLE || !strings.Contains(err.Error(), "chat orphan was created") {
		t.Fatalf("Start: chat %q, %v; want the chat, and an error that says it was created", c.ID, err)
	}
	h.bus.SetRouter(nil)
	stored, err := h.store.GetChat(ctx, testScope, "orphan")
	if err != nil {
		t.Fatalf("the chat Start said it created: %v", err)
	}
	if n, err := h.eng.Recover(ctx, []baton.Chat{stored}); err != nil || n != 1 {
		t.Fatalf("recover: %d, %v", n, err)
	}
	h.waitStatus("orphan", baton.ChatWaitingInput)
	h.waitInboxEmpty("orphan")
	if users, _ := texts(h.events("orphan"), "user"); !slices.Equal(users, []string{"m0"}) {
		t.Fatalf("person's texts %q, want [m0]", users)
	}
}

// When the hand-over cannot be published, the run goes on in the handling
// of its run.start; Start is still answered once the chat is created, not
// after the turn: here the model call waits until Start has returned.
func TestStart_AFailedHandOverStillAnswersStart(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, withWorkflows(loopDir), fake(func(req *baton.Request) ([]baton.Delta, error) {
		<-release
		return reply("ok"), nil
	}))
	h.bus.SetRouter(refuseHandOver{})
	defer h.bus.SetRouter(nil)
	type result struct {
		chat baton.Chat
		err  error
	}
	got := make(chan result, 1)
	go func() {
		c, err := h.eng.Start(context.Background(), testScope, "loop", baton.StartOptions{Message: "hi"})
		got <- result{c, err}
	}()
	var res result
	select {
	case res = <-got:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("Start has not returned after 20 s while the run's first model call waits: it waits for the whole turn")
	}
	close(release)
	if res.err != nil {
		t.Fatal(res.err)
	}
	h.waitStatus(res.chat.ID, baton.ChatWaitingInput, baton.ChatCompleted)
	checkSequences(t, h.events(res.chat.ID))
}

// A StartOnce retried while its chat's before_chat tool runs (the chat is
// stored, with no event yet) finds the first request's message kept and
// keeps it no second time: the person's message is recorded once.
func TestStartOnce_ARetryDuringTheBeforeChatToolKeepsTheMessageOnce(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	blocking := tool.WithFuncs(tool.MustFunc("bump", "Count a bump.", func(ctx context.Context, _ *baton.CallContext, _ struct{}) (string, error) {
		if once.CompareAndSwap(false, true) {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "bumped", nil
	}))
	h := newHarness(t, withWorkflows(preludeDir(t)), withTools(blocking))
	ctx := context.Background()
	opts := baton.StartOptions{ChatID: "once-" + baton.NewID(), Message: "hello", Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}}
	type result struct {
		chat baton.Chat
		err  error
	}
	first := make(chan result, 1)
	go func() {
		c, _, err := h.eng.StartOnce(ctx, testScope, "prelude", "key-1", opts)
		first <- result{c, err}
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("the before_chat tool did not run within 20 s")
	}
	// Start returns once the chat is stored, before the tool ends; then
	// the client's connection drops and it sends the request again.
	select {
	case r := <-first:
		if r.err != nil {
			close(release)
			t.Fatal(r.err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the first StartOnce has not returned while the before_chat tool runs")
	}
	if _, created, err := h.eng.StartOnce(ctx, testScope, "prelude", "key-1", opts); err != nil || created {
		close(release)
		t.Fatalf("the retry: created %v, %v; want the first's chat", created, err)
	}
	close(release)
	h.waitStatus(opts.ChatID, baton.ChatCompleted)
	if users, _ := texts(h.events(opts.ChatID), "user"); len(users) != 1 || users[0] != "hello" {
		t.Fatalf("the person's message in history: %q, want it once", users)
	}
	if ins, err := h.store.Inputs(ctx, testScope, opts.ChatID); err != nil || len(ins) != 0 {
		for _, in := range ins {
			t.Logf("waiting: %s %s %s", in.Event.ID, in.Event.Type, in.Event.Payload)
		}
		t.Fatalf("inputs still waiting: %d, %v; want none", len(ins), err)
	}
}

// holdRunStart takes every run.start off the bus and hands it to the test,
// which delivers it (PublishLocal) when it chooses: until then Start waits
// for a run that has not taken its chat.
type holdRunStart struct{ held chan baton.Event }

func newHoldRunStart() holdRunStart { return holdRunStart{held: make(chan baton.Event, 4)} }

func (r holdRunStart) Route(_ context.Context, ev baton.Event) (bool, error) {
	if ev.Type != baton.TypeRunStart {
		return false, nil
	}
	r.held <- ev
	return true, nil
}

// next returns the run.start the router took next.
func (r holdRunStart) next(t *testing.T) baton.Event {
	t.Helper()
	return nextHeld(t, r.held, "run.start")
}

// nextHeld returns the next event a test's router took off the bus.
func nextHeld(t *testing.T, held <-chan baton.Event, what string) baton.Event {
	t.Helper()
	select {
	case ev := <-held:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s was published within 10 s", what)
		return baton.Event{}
	}
}

// deliver hands the held run.start to the bus, as it would have been, and
// waits until it is handled.
func (h *harness) deliver(ev baton.Event) {
	h.t.Helper()
	h.bus.SetRouter(nil)
	if ok, err := h.bus.PublishLocal(context.Background(), ev); err != nil || !ok {
		h.t.Fatalf("deliver %s: accepted %v, %v", ev.Type, ok, err)
	}
	h.settle()
}

type startResult struct {
	chat baton.Chat
	err  error
}

// startAsync runs Start in a goroutine and returns where its result comes.
func (h *harness) startAsync(ctx context.Context, opts baton.StartOptions) <-chan startResult {
	got := make(chan startResult, 1)
	go func() {
		c, err := h.eng.Start(ctx, testScope, "queue", opts)
		got <- startResult{c, err}
	}()
	return got
}

func awaitStart(t *testing.T, got <-chan startResult) startResult {
	t.Helper()
	select {
	case res := <-got:
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("Start has not returned within 10 s")
		return startResult{}
	}
}

// noChat checks that chat id was not created.
func (h *harness) noChat(id string) {
	h.t.Helper()
	if c, err := h.store.GetChat(context.Background(), testScope, id); !errors.Is(err, baton.ErrNotFound) {
		h.t.Fatalf("chat %s: %+v, %v; want none", id, c, err)
	}
}

// A Start whose context ends before a run took its chat writes nothing:
// it returns the context's error, the run.start delivered afterwards
// creates nothing, and the id is free for the next Start.
func TestStart_CancelledBeforeItsRunTakesTheChat(t *testing.T) {
	h, _ := newCountingHarness(t, &historyModel{})
	hold := newHoldRunStart()
	h.bus.SetRouter(hold)
	ctx, cancel := context.WithCancel(context.Background())
	got := h.startAsync(ctx, baton.StartOptions{ChatID: "cancelled", Message: "m0"})
	ev := hold.next(t)
	cancel()
	res := awaitStart(t, got)
	if !errors.Is(res.err, context.Canceled) || strings.Contains(res.err.Error(), "may still") {
		t.Fatalf("Start: %v; want the context's error, nothing created", res.err)
	}
	h.deliver(ev)
	h.noChat("cancelled")
	c, err := h.eng.Start(context.Background(), testScope, "queue", baton.StartOptions{ChatID: "cancelled", Message: "m1"})
	if err != nil {
		t.Fatalf("Start again: %v", err)
	}
	h.waitAnswers(c.ID, 1)
	if users, _ := texts(h.events(c.ID), "user"); len(users) != 1 || users[0] != "m1" {
		t.Fatalf("the chat holds %q; want only the second Start's message", users)
	}
}

// A Start whose run does not take the chat within the wait answers
// EUNAVAILABLE, saying nothing was created, and nothing is.
func TestStart_NoRunWithinTheWaitIsUnavailable(t *testing.T) {
	h, _ := newCountingHarness(t, &historyModel{})
	defer engine.SetCreateWait(50 * time.Millisecond)()
	hold := newHoldRunStart()
	h.bus.SetRouter(hold)
	got := h.startAsync(context.Background(), baton.StartOptions{ChatID: "late", Message: "m0"})
	ev := hold.next(t)
	res := awaitStart(t, got)
	if baton.ErrorCode(res.err) != baton.EUNAVAILABLE || !strings.Contains(res.err.Error(), "nothing was created") {
		t.Fatalf("Start: %v; want EUNAVAILABLE, nothing created", res.err)
	}
	h.deliver(ev)
	h.noChat("late")
}

// Two Starts of one chat id at once: the second is told to retry while the
// first is on its way (EUNAVAILABLE), the first creates the chat, and a
// third finds it made (ECONFLICT). The chat holds the first's message only.
func TestStart_TwoStartsOfOneIDAtOnce(t *testing.T) {
	h, _ := newCountingHarness(t, &historyModel{})
	hold := newHoldRunStart()
	h.bus.SetRouter(hold)
	got := h.startAsync(context.Background(), baton.StartOptions{ChatID: "twin", Message: "first"})
	ev := hold.next(t)
	if _, err := h.eng.Start(context.Background(), testScope, "queue", baton.StartOptions{ChatID: "twin", Message: "second"}); baton.ErrorCode(err) != baton.EUNAVAILABLE {
		t.Fatalf("a second Start while the first waits: %v; want EUNAVAILABLE", err)
	}
	h.deliver(ev)
	if res := awaitStart(t, got); res.err != nil || res.chat.ID != "twin" {
		t.Fatalf("the first Start: %+v, %v", res.chat, res.err)
	}
	if _, err := h.eng.Start(context.Background(), testScope, "queue", baton.StartOptions{ChatID: "twin", Message: "third"}); !errors.Is(err, baton.ErrConflict) {
		t.Fatalf("a Start once the chat exists: %v; want ECONFLICT", err)
	}
	h.waitAnswers("twin", 1)
	h.settle()
	if users, _ := texts(h.events("twin"), "user"); len(users) != 1 || users[0] != "first" {
		t.Fatalf("the chat holds %q; want the first Start's message only", users)
	}
}

// Closing the engine answers a Start still waiting for its run (ErrClosed,
// nothing created) and refuses the next at once.
func TestStart_CloseAnswersAWaitingStart(t *testing.T) {
	h, _ := newCountingHarness(t, &historyModel{})
	hold := newHoldRunStart()
	h.bus.SetRouter(hold)
	got := h.startAsync(context.Background(), baton.StartOptions{ChatID: "closing", Message: "m0"})
	hold.next(t)
	if err := h.eng.Close(); err != nil {
		t.Fatal(err)
	}
	if res := awaitStart(t, got); !errors.Is(res.err, baton.ErrClosed) {
		t.Fatalf("the waiting Start: %v; want ErrClosed", res.err)
	}
	if _, err := h.eng.Start(context.Background(), testScope, "queue", baton.StartOptions{ChatID: "after", Message: "m1"}); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("a Start after Close: %v; want ErrClosed", err)
	}
	h.noChat("closing")
	h.noChat("after")
}
