package natsbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/workflow"
)

// echoDir holds the echo workflow: one agent answers each message and
// waits for the next.
const echoDir = "testdata/workflows"

var devScope = baton.Scope{App: "acme", User: server.DevUser}

// input is a person's message to a chat with a fixed event id, as a client
// retrying a request would send it again.
func input(chatID, id, content string) baton.Event {
	payload, _ := json.Marshal(map[string]string{"content": content, "source": "api"})
	ev := baton.NewInput(devScope, baton.TypeUserQuery, chatID, payload)
	ev.ID = id
	return ev
}

// userMessages returns the contents of a chat's recorded user messages.
func userMessages(t *testing.T, in *instance, chatID string) []string {
	t.Helper()
	evs, err := in.store.Events(context.Background(), devScope, chatID, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		var p struct {
			Agent   string `json:"agent"`
			Content string `json:"content"`
		}
		if ev.Type == baton.TypeChatText && json.Unmarshal(ev.Payload, &p) == nil && p.Agent == workflow.UserAgent {
			out = append(out, p.Content)
		}
	}
	return out
}

// waitMessages waits until the chat has recorded want user messages and
// is waiting for the next.
func waitMessages(t *testing.T, in *instance, chatID string, want []string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("chat %s to record the user messages %q and wait for input", chatID, want), func() error {
		got := userMessages(t, in, chatID)
		c, err := in.store.GetChat(context.Background(), devScope, chatID)
		if len(got) > len(want) {
			t.Fatalf("chat %s: user messages %q (status %s), want %q", chatID, got, c.Status, want)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") || err != nil || c.Status != baton.ChatWaitingInput {
			return fmt.Errorf("user messages %q, status %s (err %v)", got, c.Status, err)
		}
		return nil
	})
}

// quiesce waits until every input routed has been delivered and handled
// and no run is active, so that a lease the test takes for an instance is
// not released under it by a late run of that instance.
func quiesce(t *testing.T, ins ...*instance) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the instances to settle", func() error {
		var routed, delivered, dup, active int64
		for _, in := range ins {
			st := in.bridge.InputStats()
			routed += st.Routed
			dup += st.Duplicate
			delivered += st.Delivered
			active += in.eng.Active() + int64(in.bus.Pending())
		}
		if delivered >= routed-dup && active == 0 {
			return nil
		}
		return fmt.Errorf("%d inputs routed, %d duplicates, %d delivered, %d active", routed, dup, delivered, active)
	})
}

// TestInputs_RoutedToTheOwnerAndDeduplicated: instance A holds a chat's
// lease; a message submitted through B is handled by A (B routes it to A's
// subject), and the same message retried through A and through C (one
// event id) is dropped by JetStream: the chat records it once.
func TestInputs_RoutedToTheOwnerAndDeduplicated(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	stores := pgStores(t, 3)
	a := newInstanceIn(t, "A", stores[0], natsURL, echoDir)
	b := newInstanceIn(t, "B", stores[1], natsURL, echoDir)
	c := newInstanceIn(t, "C", stores[2], natsURL, echoDir)
	ctx := context.Background()
	chat, err := a.eng.Start(ctx, devScope, "echo", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, a, chat.ID, baton.ChatWaitingInput)
	quiesce(t, a, b, c)

	// A owns the chat now (as it would while running it).
	if _, err := a.store.AcquireLease(ctx, chat.ID, "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	before := [3]int64{a.bridge.InputStats().Delivered, b.bridge.InputStats().Delivered, c.bridge.InputStats().Delivered}
	first := input(chat.ID, baton.NewID(), "first")
	if err := b.bus.Publish(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitMessages(t, a, chat.ID, []string{"first"})
	if got := a.bridge.InputStats().Delivered - before[0]; got != 1 {
		t.Fatalf("the owner took %d inputs from the stream, want 1", got)
	}
	if b.bridge.InputStats().Delivered != before[1] || c.bridge.InputStats().Delivered != before[2] {
		t.Fatal("an instance that does not own the chat handled its input")
	}

	// A retried publish, through two instances: handled once.
	quiesce(t, a, b, c)
	if _, err := a.store.AcquireLease(ctx, chat.ID, "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	retry := input(chat.ID, baton.NewID(), "second")
	if err := a.bus.Publish(ctx, retry); err != nil {
		t.Fatal(err)
	}
	if err := c.bus.Publish(ctx, retry); err != nil {
		t.Fatal(err)
	}
	waitMessages(t, a, chat.ID, []string{"first", "second"})
	if d := c.bridge.InputStats().Duplicate + a.bridge.InputStats().Duplicate; d != 1 {
		t.Fatalf("JetStream dropped %d retried publishes, want 1", d)
	}
	// Settled: every copy routed was delivered once, to the owner.
	quiesce(t, a, b, c)
	if got := a.bridge.InputStats().Delivered - before[0]; got != 2 {
		t.Fatalf("the owner took %d inputs from the stream, want 2", got)
	}
	if b.bridge.InputStats().Delivered != before[1] || c.bridge.InputStats().Delivered != before[2] {
		t.Fatal("an instance that does not own the chat was delivered an input")
	}
	waitMessages(t, a, chat.ID, []string{"first", "second"})
}

// TestInputs_DeadOwnersInputsDrained: the owner dies with an input routed to
// it and not yet taken; once its consumer is gone, another instance drains
// its subjects and handles the input; the chat records it once.
func TestInputs_DeadOwnersInputsDrained(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	stores := pgStores(t, 2)
	a := newInstanceIn(t, "A", stores[0], natsURL, echoDir)
	b := newInstanceIn(t, "B", stores[1], natsURL, echoDir)
	ctx := context.Background()
	chat, err := b.eng.Start(ctx, devScope, "echo", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b, chat.ID, baton.ChatWaitingInput)
	quiesce(t, a, b) // B's run has released the chat's lease
	// A takes the chat's lease, then dies before it consumes anything. The
	// lease outlives the kill, so that B routes the input to A's subject;
	// B's engine waits for it to expire before it handles the input.
	if _, err := stores[0].AcquireLease(ctx, chat.ID, "A", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	a.kill()
	msg := input(chat.ID, baton.NewID(), "are you there?")
	if err := b.bus.Publish(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if st := b.bridge.InputStats(); st.Local != 0 {
		t.Fatalf("B's routing: %+v; want the input sent to the stream", st)
	}
	waitMessages(t, b, chat.ID, []string{"are you there?"})
	if st := b.bridge.InputStats(); st.Drained != 1 {
		t.Fatalf("B drained %d inputs of the dead owner, want 1 (%+v)", st.Drained, st)
	}
}

// TestInputs_NATSDownHandledLocally: with NATS unreachable an input is
// handled by the instance that received it.
func TestInputs_NATSDownHandledLocally(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	stores := pgStores(t, 1)
	a := newInstanceIn(t, "A", stores[0], ns.ClientURL(), echoDir)
	ctx := context.Background()
	chat, err := a.eng.Start(ctx, devScope, "echo", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, a, chat.ID, baton.ChatWaitingInput)
	ns.Shutdown()
	ns.WaitForShutdown()
	pubCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.bus.Publish(pubCtx, input(chat.ID, baton.NewID(), "offline")); err != nil {
		t.Fatal(err)
	}
	waitMessages(t, a, chat.ID, []string{"offline"})
	if st := a.bridge.InputStats(); st.Local != 1 {
		t.Fatalf("routing stats %+v; want the input handled locally", st)
	}
}

// ownerIs is a LeaseReader that says one instance owns every chat.
type ownerIs string

func (o ownerIs) GetLease(context.Context, string) (baton.Lease, error) {
	return baton.Lease{Owner: string(o), Token: 1, Expires: time.Now().Add(time.Hour)}, nil
}

// TestInputs_FailedHandlingIsDeliveredAgain: an input whose handler fails
// on the owner is not acknowledged away: JetStream delivers it again and
// the owner handles it — even though its bus has seen the id.
func TestInputs_FailedHandlingIsDeliveredAgain(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	a, b := bus.New(bus.WithLogger(quiet())), bus.New(bus.WithLogger(quiet()))
	defer a.Close(context.Background())
	defer b.Close(context.Background())
	var calls atomic.Int32
	done := make(chan struct{})
	if err := b.RegisterRule(bus.Rule{Name: "owner", Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
		if calls.Add(1) == 1 {
			return errors.New("the store is briefly unreachable")
		}
		close(done)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterRule(bus.Rule{Name: "not-owner", Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
		t.Error("the input was handled by an instance that does not own the chat")
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	cfg := func(id string, b *bus.Bus) natsbridge.Config {
		return natsbridge.Config{URL: ns.ClientURL(), Bus: b, Instance: id, Logger: quiet(), PerChat: true,
			Inputs: &natsbridge.InputsConfig{Leases: ownerIs("B"), IsInput: engine.IsInput}}
	}
	brA, err := natsbridge.Start(cfg("A", a))
	if err != nil {
		t.Fatal(err)
	}
	defer brA.Close(context.Background())
	brB, err := natsbridge.Start(cfg("B", b))
	if err != nil {
		t.Fatal(err)
	}
	defer brB.Close(context.Background())
	if err := a.Publish(context.Background(), input("chat-1", baton.NewID(), "hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the failed input was not delivered again (handled %d times)", calls.Load())
	}
	if st := brB.InputStats(); st.Delivered != 2 {
		t.Fatalf("B was delivered the input %d times, want 2 (the failure, then the retry)", st.Delivered)
	}
}

// TestInputs_FailedInputHandledByAConsumerMadeAnew: an input whose handling
// failed (given back for a retry) comes again through a consumer made anew
// after NATS removed the old one — whose delivery count starts again at 1 —
// and is handled, not acknowledged as a duplicate the bus remembers.
func TestInputs_FailedInputHandledByAConsumerMadeAnew(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	b := bus.New(bus.WithLogger(quiet()))
	defer b.Close(context.Background())
	var calls atomic.Int32
	failed := make(chan struct{})
	if err := b.RegisterRule(bus.Rule{Name: "owner", Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
		if calls.Add(1) == 1 {
			defer close(failed)
			return errors.New("the store is briefly unreachable")
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	br := ownerBridge(t, ns.ClientURL(), b)
	if err := b.Publish(context.Background(), input("chat-1", baton.NewID(), "hello")); err != nil {
		t.Fatal(err)
	}
	<-failed
	// NATS removes B's consumer, as it does one it takes for idle (a
	// partition, a lane blocked past the pull expiry); B makes it anew.
	js := jetStream(t, ns.ClientURL())
	testenv.Eventually(t, 5*time.Second, "B's input consumer to be deleted (the NAK may still be on its way)", func() error {
		return js.DeleteConsumer(context.Background(), natsbridge.InputStream(""), "inputs-B")
	})
	testenv.Eventually(t, 15*time.Second, "the failed input to be handled twice (the failure, then the retry)", func() error {
		if n := calls.Load(); n < 2 {
			return fmt.Errorf("handled %d times; stats %+v", n, br.InputStats())
		}
		return nil
	})
}

// TestInputs_SameIDInTwoChats: two chats' inputs with the same event id (a
// client-chosen id, as POST /api/events takes) are two inputs, each handled
// once — also while the first is still being handled.
func TestInputs_SameIDInTwoChats(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	b := bus.New(bus.WithLogger(quiet()))
	defer b.Close(context.Background())
	release := make(chan struct{})
	started := make(chan struct{})
	var calls [2]atomic.Int32
	if err := b.RegisterRule(bus.Rule{Name: "owner", Types: []string{"*"}, Handler: func(_ context.Context, ev baton.Event) error {
		if ev.ChatID() == "chat-1" {
			calls[0].Add(1)
			close(started)
			<-release // still being handled when chat-2's input arrives
		} else {
			calls[1].Add(1)
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	br := ownerBridge(t, ns.ClientURL(), b)
	if err := b.Publish(context.Background(), input("chat-1", "evt-42", "hello")); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := b.Publish(context.Background(), input("chat-2", "evt-42", "hi")); err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	releaseHandler := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseHandler() // a failed wait must not leave the handler blocked
	testenv.Eventually(t, 10*time.Second, "chat-2's input to be handled", func() error {
		if calls[1].Load() == 0 {
			return fmt.Errorf("not handled; stats %+v", br.InputStats())
		}
		return nil
	})
	releaseHandler()
	if calls[0].Load() != 1 || calls[1].Load() != 1 {
		t.Fatalf("handled %d and %d times, want once each", calls[0].Load(), calls[1].Load())
	}
}

// ownerBridge starts instance B's bridge with input routing on b, B owning
// every chat; the test's cleanup closes it.
func ownerBridge(t *testing.T, url string, b *bus.Bus) *natsbridge.Bridge {
	t.Helper()
	br, err := natsbridge.Start(natsbridge.Config{URL: url, Bus: b, Instance: "B", Logger: quiet(), PerChat: true,
		Inputs: &natsbridge.InputsConfig{Leases: ownerIs("B"), IsInput: engine.IsInput, InactiveAfter: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close(context.Background()) })
	return br
}
