package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
)

// readCounter counts the engine's reads of a chat's row and of its inbox.
type readCounter struct {
	*sqlite.Store
	getChat, inputs atomic.Int64
}

func (s *readCounter) GetChat(ctx context.Context, scope baton.Scope, id string) (baton.Chat, error) {
	s.getChat.Add(1)
	return s.Store.GetChat(ctx, scope, id)
}

func (s *readCounter) Inputs(ctx context.Context, scope baton.Scope, chatID string) ([]baton.Input, error) {
	s.inputs.Add(1)
	return s.Store.Inputs(ctx, scope, chatID)
}

// historyModel answers every call at once, and keeps the texts of the
// conversation each call was given.
type historyModel struct {
	mu    sync.Mutex
	calls [][]string
}

func (m *historyModel) Stream(_ context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	var seen []string
	for _, msg := range req.Messages {
		if msg.Role != baton.RoleSystem {
			seen = append(seen, msg.Content)
		}
	}
	m.mu.Lock()
	m.calls = append(m.calls, seen)
	m.mu.Unlock()
	return func(yield func(baton.Delta, error) bool) {
		yield(baton.Delta{Kind: baton.DeltaText, Text: "answer."}, nil)
	}
}

func (m *historyModel) last() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.calls) == 0 {
		return nil
	}
	return m.calls[len(m.calls)-1]
}

// newCountingHarness runs the inbox tests' queue workflow alone (with a
// workflow of another double_texting policy loaded, every Submit reads the
// chat for its policy) on model m, and counts the engine's reads.
func newCountingHarness(t *testing.T, m baton.Provider, opts ...harnessOption) (*harness, *readCounter) {
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "queue"), os.DirFS(filepath.Join(inboxDir, "queue"))); err != nil {
		t.Fatal(err)
	}
	var rc *readCounter
	opts = append([]harnessOption{
		withWorkflows(root),
		withProvider(func(*workflow.Workflow) (baton.Provider, error) { return m, nil }),
		withStoreWrap(func(s *sqlite.Store) engine.Store { rc = &readCounter{Store: s}; return rc }),
	}, opts...)
	h := newHarness(t, opts...)
	return h, rc
}

// waitAnswers waits until Echo has answered n times and the bus is settled.
func (h *harness) waitAnswers(chatID string, n int) {
	h.t.Helper()
	testenv.Eventually(h.t, 10*time.Second, fmt.Sprintf("Echo to answer %d times in chat %s", n, chatID), func() error {
		answers, _ := texts(h.events(chatID), "Echo")
		if len(answers) != n || !h.settled() {
			return fmt.Errorf("%d answers, settled %v", len(answers), h.settled())
		}
		return nil
	})
}

// Without leases the engine runs its chats from the state it holds: a
// chat's first turn reads nothing back of what Start wrote, and each next
// turn reads the inbox once (for the message) and the chat row never. The
// reads were a fifth of a production turn's CPU on SQLite.
func TestCachedState_ATurnReadsNoChatRow(t *testing.T) {
	h, rc := newCountingHarness(t, &historyModel{})
	ctx := context.Background()
	id := startWith(t, h, "queue", "m0")
	h.waitAnswers(id, 1)
	if g, in := rc.getChat.Load(), rc.inputs.Load(); g != 0 || in != 0 {
		t.Errorf("the first turn read the chat %d times and its inbox %d times, want neither", g, in)
	}
	for i := 1; i <= 3; i++ {
		rc.getChat.Store(0)
		rc.inputs.Store(0)
		if err := h.eng.Submit(ctx, testScope, id, fmt.Sprintf("m%d", i), "http"); err != nil {
			t.Fatal(err)
		}
		h.waitAnswers(id, i+1)
		if g, in := rc.getChat.Load(), rc.inputs.Load(); g != 0 || in != 1 {
			t.Errorf("turn %d read the chat %d times and its inbox %d times, want 0 and 1", i+1, g, in)
		}
	}
	evs := h.events(id)
	checkSequences(t, evs)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0", "m1", "m2", "m3"}) {
		t.Fatalf("person's texts %q", users)
	}
	if n := h.eng.StaleStates(); n != 0 {
		t.Errorf("%d stale states, want 0", n)
	}

	// A chat started without a message waits for it; the message is read
	// from the inbox once, and nothing else is read.
	rc.getChat.Store(0)
	rc.inputs.Store(0)
	c, err := h.eng.Start(ctx, testScope, "queue", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.waitStatus(c.ID, baton.ChatWaitingInput)
	if err := h.eng.Submit(ctx, testScope, c.ID, "hello", "http"); err != nil {
		t.Fatal(err)
	}
	h.waitAnswers(c.ID, 1)
	if g, in := rc.getChat.Load(), rc.inputs.Load(); g != 0 || in != 1 {
		t.Errorf("a chat started without a message read the chat %d times and its inbox %d times over its first turn, want 0 and 1", g, in)
	}

	// With leases (instances sharing a store) the chat row is read at every
	// run, as another instance may have run the chat meanwhile.
	h2, rc2 := newCountingHarness(t, &historyModel{}, withInstance("i1", time.Minute))
	id2 := startWith(t, h2, "queue", "m0")
	h2.waitAnswers(id2, 1)
	if g := rc2.getChat.Load(); g == 0 {
		t.Error("with leases the run did not read the chat")
	}
}

// A chat whose state this engine holds is written by someone else (another
// process on the same store, which the single-owner rule forbids): the
// run's first append expects the sequence the state knows, the store
// refuses it, and the event is handled again from the store — the other
// writer's event is in the model's history, the chat's sequences have no
// gap, and nothing is recorded twice.
func TestCachedState_BehindTheStore_HandledAgainFromTheStore(t *testing.T) {
	m := &historyModel{}
	h, _ := newCountingHarness(t, m)
	ctx := context.Background()
	id := startWith(t, h, "queue", "m0")
	h.waitAnswers(id, 1)
	before := len(h.events(id))

	// The other writer: the person's message and the hand-over to Echo, as
	// another engine would record them, and its answer.
	other := []baton.Event{
		baton.NewChatEvent(baton.TypeChatText, id, "user", baton.TextPayload{Kind: "text", Agent: "user", Content: "written elsewhere", Index: 2}),
		baton.NewChatEvent(baton.TypeChatHandoff, id, "user", baton.HandoffPayload{Kind: "handoff", From: "user", To: "Echo", HandoffType: "after_work", TransitionTarget: workflow.AgentTarget}),
		baton.NewChatEvent(baton.TypeChatSelectSpeaker, id, "Echo", baton.SelectSpeakerPayload{Kind: "select_speaker", Agent: "Echo", Source: "handoff"}),
		baton.NewChatEvent(baton.TypeChatText, id, "Echo", baton.TextPayload{Kind: "text", Agent: "Echo", Content: "answered elsewhere", Index: 3}),
		baton.NewChatEvent(baton.TypeChatHandoff, id, "Echo", baton.HandoffPayload{Kind: "handoff", From: "Echo", To: "user", HandoffType: "after_work", TransitionTarget: "RevertToUserTarget"}),
	}
	if _, err := h.store.Append(ctx, testScope, id, other, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Submit(ctx, testScope, id, "m1", "http"); err != nil {
		t.Fatal(err)
	}
	h.waitAnswers(id, 3) // the first, the other writer's, and m1's
	if n := h.eng.StaleStates(); n != 1 {
		t.Fatalf("%d stale states, want 1", n)
	}
	evs := h.events(id)
	checkSequences(t, evs)
	if users, _ := texts(evs, "user"); !slices.Equal(users, []string{"m0", "written elsewhere", "m1"}) {
		t.Fatalf("person's texts %q, want [m0, written elsewhere, m1] once each", users)
	}
	if len(evs) <= before+len(other) {
		t.Fatalf("%d events, want the run's after the other writer's %d", len(evs), before+len(other))
	}
	if hist := strings.Join(m.last(), "|"); !strings.Contains(hist, "written elsewhere|answered elsewhere") || !strings.HasSuffix(hist, "m1") {
		t.Errorf("the model was not given the chat as the store holds it: %q", hist)
	}
	var stale int
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "cached state was behind the store") {
			stale++
		}
	}
	if stale != 1 {
		t.Errorf("logged the stale state %d times, want once", stale)
	}
}

// An input naming a chat of another tenant does not touch the state this
// engine holds for it: the store refuses it (its tenant check), and the
// chat's own next turn still runs from the cached state, reading no chat
// row (a foreign event that took the state out of the cache would cost the
// owner a rebuild from the store).
func TestCachedState_AnotherTenantsInputLeavesItAlone(t *testing.T) {
	h, rc := newCountingHarness(t, &historyModel{})
	ctx := context.Background()
	id := startWith(t, h, "queue", "m0")
	h.waitAnswers(id, 1)
	intruder := baton.Scope{App: testScope.App, User: "mallory"}
	payload, _ := json.Marshal(baton.UserQueryPayload{Content: "not yours"})
	if err := h.bus.Publish(ctx, baton.NewInput(intruder, baton.TypeUserQuery, id, payload)); err != nil {
		t.Fatal(err)
	}
	h.settle()
	rc.getChat.Store(0)
	if err := h.eng.Submit(ctx, testScope, id, "m1", "http"); err != nil {
		t.Fatal(err)
	}
	h.waitAnswers(id, 2)
	if g := rc.getChat.Load(); g != 0 {
		t.Errorf("the owner's next turn read the chat %d times, want 0: the foreign input took its cached state", g)
	}
	if users, _ := texts(h.events(id), "user"); !slices.Equal(users, []string{"m0", "m1"}) {
		t.Fatalf("person's texts %q, want [m0 m1]", users)
	}
}

// holdQueries takes the user_query events whose content it names off the
// bus and hands them to the test, which delivers them when it chooses:
// their messages are kept, their handling waits.
type holdQueries struct {
	contents map[string]bool
	held     chan baton.Event
}

func (r holdQueries) Route(_ context.Context, ev baton.Event) (bool, error) {
	if ev.Type != baton.TypeUserQuery {
		return false, nil
	}
	var q baton.UserQueryPayload
	if err := json.Unmarshal(ev.Payload, &q); err != nil || !r.contents[q.Content] {
		return false, nil
	}
	r.held <- ev
	return true, nil
}

// A message dropped by a run's read (blank: taken, recorded nowhere) whose
// own handling comes late — after the next message was answered and a
// third was kept — takes nothing again: the third message is answered,
// nothing is left waiting, and the chat records no error. (A version that
// took the handled message "from its hand" when one input was counted took
// the dropped one again here: the store refused it and the chat erred.)
func TestInbox_ADroppedMessageHandledLateErrsNothing(t *testing.T) {
	h, _ := newCountingHarness(t, &historyModel{})
	ctx := context.Background()
	id := startWith(t, h, "queue", "m0")
	h.waitAnswers(id, 1)
	h.settle()
	hold := holdQueries{contents: map[string]bool{" ": true, "third": true}, held: make(chan baton.Event, 4)}
	h.bus.SetRouter(hold)
	defer h.bus.SetRouter(nil)
	next := func() baton.Event {
		t.Helper()
		return nextHeld(t, hold.held, "held user_query")
	}
	if err := h.eng.Submit(ctx, testScope, id, " ", "http"); err != nil {
		t.Fatal(err)
	}
	empty := next()
	if err := h.eng.Submit(ctx, testScope, id, "second", "http"); err != nil {
		t.Fatal(err)
	}
	h.waitAnswers(id, 2)
	h.settle()
	if err := h.eng.Submit(ctx, testScope, id, "third", "http"); err != nil {
		t.Fatal(err)
	}
	third := next()
	for _, ev := range []baton.Event{empty, third} {
		if ok, err := h.bus.PublishLocal(ctx, ev); err != nil || !ok {
			t.Fatalf("deliver: %v %v", ok, err)
		}
	}
	h.waitAnswers(id, 3)
	h.settle()
	if users, _ := texts(h.events(id), "user"); !slices.Equal(users, []string{"m0", "second", "third"}) {
		t.Fatalf("person's texts %q", users)
	}
	if ins, err := h.store.Inputs(ctx, testScope, id); err != nil || len(ins) != 0 {
		t.Fatalf("inputs still waiting: %+v, %v", ins, err)
	}
	// Taking the dropped message again would fail its run (the store
	// refuses to take an input twice) and the chat would err.
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatError {
			t.Fatalf("the chat recorded an error: %s", ev.Payload)
		}
	}
	if strings.Contains(h.logs.String(), "engine: run failed") {
		t.Fatalf("a run failed:\n%s", h.logs.String())
	}
	checkSequences(t, h.events(id))
}
