package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/recorder"
)

// openMem opens a runtime on the memory store with the example workflows.
func openMem(t *testing.T) *Runtime {
	t.Helper()
	rt, err := Open(context.Background(), Config{StoreURL: "mem:", DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// segment ranges over seq to its end and returns what it yielded; the
// last event must be of type want.
func segment(t *testing.T, seq iter.Seq2[baton.Event, error], want string) []baton.Event {
	t.Helper()
	var evs []baton.Event
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("segment ending in %s: %v", want, err)
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != want {
		t.Fatalf("segment ended with %v, want %s", types(evs), want)
	}
	return evs
}

func types(evs []baton.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d %s", ev.Sequence, ev.Type)
	}
	return out
}

// pendingCall returns the ui_event_id of the segment's last event, a
// chat.tool_call awaiting the person with the given pending kind.
func pendingCall(t *testing.T, evs []baton.Event, kind string) string {
	t.Helper()
	last := evs[len(evs)-1]
	p, err := baton.DecodePayload[baton.ToolCallPayload](&last)
	if err != nil {
		t.Fatal(err)
	}
	if p.PendingKind != kind || p.UIEventID == "" {
		t.Fatalf("segment ended with %s pending %q (ui_event_id %q), want pending %q", p.ToolName, p.PendingKind, p.UIEventID, kind)
	}
	return p.UIEventID
}

// The generator, run through a Chat's iterators across its three pauses
// (the interview's input request, the secret form, the action plan UI
// tool), yields exactly the events the store recorded, in order, each
// once, plus the stream deltas of the turns before the text they build.
func TestChatIteratorsYieldTheRecordedEventsAndDeltas(t *testing.T) {
	rt := openMem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // catches a hang only
	defer cancel()
	scope := baton.Scope{App: "acme", User: "ada"}
	c := rt.Chat(scope, "generator")

	var all []baton.Event
	all = append(all, segment(t, c.Start(ctx, baton.StartOptions{}), baton.TypeChatInputRequest)...)
	evs := segment(t, c.Send(ctx, "A weekly newsletter from our team notes."), baton.TypeChatToolCall)
	all = append(all, evs...)
	secret := pendingCall(t, evs, baton.PendingSecret)
	evs = segment(t, c.RespondUI(ctx, secret, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"sk-test"}`)), baton.TypeChatToolCall)
	all = append(all, evs...)
	plan := pendingCall(t, evs, baton.PendingUITool)
	all = append(all, segment(t, c.RespondUI(ctx, plan, "success", json.RawMessage(`{"action":"approve"}`)), baton.TypeChatRunComplete)...)

	stored, err := rt.Store().Events(ctx, scope, c.ID(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []baton.Event
	deltas := map[string]string{} // stream.text deltas by message id, so far
	nDeltas := 0
	for _, ev := range all {
		switch {
		case ev.Type == baton.TypeStreamText:
			var p struct {
				MessageID string `json:"message_id"`
				Delta     string `json:"delta"`
			}
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			deltas[p.MessageID] += p.Delta
			nDeltas++
		case ev.Sequence > 0:
			recorded = append(recorded, ev)
			if ev.Type != baton.TypeChatText {
				break
			}
			p, err := baton.DecodePayload[baton.TextPayload](&ev)
			if err != nil {
				t.Fatal(err)
			}
			// Invariant 7: the deltas yielded before a streamed text
			// make it up.
			if got, ok := deltas[p.AgentMessageID]; ok && p.AgentMessageID != "" && !p.ToolOnly && got != p.Content {
				t.Fatalf("text %d: deltas yielded before it make %q, want %q", ev.Sequence, got, p.Content)
			}
		}
	}
	if nDeltas == 0 {
		t.Fatal("no stream.text delta was yielded")
	}
	if len(recorded) != len(stored) {
		t.Fatalf("yielded %d recorded events, the store holds %d:\n%v\n%v", len(recorded), len(stored), types(recorded), types(stored))
	}
	for i := range stored {
		if recorded[i].ID != stored[i].ID || recorded[i].Sequence != stored[i].Sequence || recorded[i].Type != stored[i].Type {
			t.Fatalf("recorded event %d: yielded %d %s %s, stored %d %s %s", i,
				recorded[i].Sequence, recorded[i].Type, recorded[i].ID, stored[i].Sequence, stored[i].Type, stored[i].ID)
		}
	}
	if c.LastSequence() != stored[len(stored)-1].Sequence {
		t.Fatalf("LastSequence = %d, want %d", c.LastSequence(), stored[len(stored)-1].Sequence)
	}
}

// hello needs no input: one segment, from the start to chat.run_complete.
func TestChatHelloRunsToRunComplete(t *testing.T) {
	rt := openMem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	evs := segment(t, rt.Chat(baton.Scope{App: "acme", User: "ada"}, "hello").Start(ctx, baton.StartOptions{}), baton.TypeChatRunComplete)
	if evs[0].Sequence != 1 {
		t.Fatalf("first event %d %s: the first recorded event was missed", evs[0].Sequence, evs[0].Type)
	}
}

// dropPublisher publishes every recorded event but those of the
// sequences in drop: the store holds them, the bus never delivers them.
type dropPublisher struct {
	next recorder.Publisher
	drop map[int64]bool
}

func (p dropPublisher) Publish(scope baton.Scope, chatID string, events []baton.Event) {
	var kept []baton.Event
	for _, ev := range events {
		if !p.drop[ev.Sequence] {
			kept = append(kept, ev)
		}
	}
	p.next.Publish(scope, chatID, kept)
}

// A gap in the live sequences (recorded events the bus never delivered)
// is filled from the store: every recorded event is yielded once, in
// order, the first and the last included.
func TestChatFillsAGapFromTheStore(t *testing.T) {
	drop := map[int64]bool{1: true, 3: true, 4: true}
	rt, err := Open(context.Background(), Config{StoreURL: "mem:", DataDir: t.TempDir(), Logger: quiet(),
		WrapPublisher: func(p recorder.Publisher) recorder.Publisher { return dropPublisher{next: p, drop: drop} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	scope := baton.Scope{App: "acme", User: "ada"}
	c := rt.Chat(scope, "hello")
	evs := segment(t, c.Start(ctx, baton.StartOptions{}), baton.TypeChatRunComplete)
	var seqs []int64
	for _, ev := range evs {
		if ev.Sequence > 0 {
			seqs = append(seqs, ev.Sequence)
		}
	}
	stored, err := rt.Store().Events(ctx, scope, c.ID(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != len(stored) {
		t.Fatalf("sequences yielded %v, the store holds %d events", seqs, len(stored))
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("sequences yielded %v, want 1, 2, 3, … %d", seqs, len(stored))
		}
	}
}

// A reader so slow that the bus drops its subscription loses no recorded
// event: the iterator subscribes again and reads what it missed from the
// store.
func TestChatSlowReaderIsDroppedAndCatchesUp(t *testing.T) {
	rt := openMem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	scope := baton.Scope{App: "acme", User: "ada"}
	c := rt.Chat(scope, "hello")
	c.buffer = 1
	var seqs []int64
	var end string
	for ev, err := range c.Start(ctx, baton.StartOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) == 0 && ev.Sequence > 0 {
			// Read nothing more until the run has ended: the bus drops
			// the subscription when its one-event buffer is full.
			testenv.Eventually(t, 20*time.Second, "the chat completes", func() error {
				chat, err := rt.Store().GetChat(ctx, scope, c.ID())
				if err != nil || chat.Status != baton.ChatCompleted {
					return fmt.Errorf("chat %v (%v)", chat.Status, err)
				}
				return nil
			})
		}
		if ev.Sequence > 0 {
			seqs = append(seqs, ev.Sequence)
		}
		end = ev.Type
	}
	if drops := rt.Bus().Stats().ObserverDrops; drops == 0 {
		t.Fatal("the subscription was never dropped: the test tests nothing")
	}
	stored, err := rt.Store().Events(ctx, scope, c.ID(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if end != baton.TypeChatRunComplete || len(seqs) != len(stored) {
		t.Fatalf("yielded sequences %v ending with %s; the store holds %d events", seqs, end, len(stored))
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("yielded sequences %v, want 1, 2, 3, …", seqs)
		}
	}
}

// Breaking out of the loop early closes the subscription and leaves no
// goroutine behind; the chat goes on without the reader.
func TestChatEarlyBreakLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	rt, err := Open(context.Background(), Config{StoreURL: "mem:", DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	c := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "hello")
	var subs []*bus.Subscription
	c.subscribed = func(s *bus.Subscription) { subs = append(subs, s) }
	n := 0
	for _, err := range c.Start(ctx, baton.StartOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 || len(subs) != 1 {
		t.Fatalf("yielded %d events on %d subscriptions, want 1 on 1", n, len(subs))
	}
	// A closed subscription's channel is closed once what it buffered
	// is read; an open one would block.
drain:
	for {
		select {
		case _, ok := <-subs[0].C():
			if !ok {
				break drain
			}
		default:
			t.Fatal("the subscription is still open after the loop was left")
		}
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A cancelled context ends the iterator with its error.
func TestChatEndsWithTheContextsError(t *testing.T) {
	rt := openMem(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "generator")
	var last error
	for _, err := range c.Start(ctx, baton.StartOptions{}) {
		if err != nil {
			last = err
			continue
		}
		cancel() // after the first event: the segment has not ended
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("iterator ended with %v, want context.Canceled", last)
	}
}

// An input the engine refuses ends the iterator with the error, naming
// the chat.
func TestChatSendErrorIsYielded(t *testing.T) {
	rt := openMem(t)
	c := rt.Chat(baton.Scope{App: "acme", User: "ada"}, "no-such-workflow")
	for _, err := range c.Start(context.Background(), baton.StartOptions{}) {
		if err == nil || !strings.Contains(err.Error(), c.ID()) || !strings.Contains(err.Error(), "no-such-workflow") {
			t.Fatalf("err = %v, want the start's error naming the chat and the workflow", err)
		}
	}
}
