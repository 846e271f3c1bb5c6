package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestBus returns a bus whose logs go to the returned buffer and which
// is closed when the test ends.
func newTestBus(t *testing.T, opts ...Option) (*Bus, *testenv.LogBuffer) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	b := New(opts...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b, logs
}

func event(typ, chat string) baton.Event {
	return baton.NewEvent(typ, baton.Metadata{TriggerSessionID: chat, Source: baton.SourceUser}, nil)
}

// collector records the events a handler saw, and lets a test wait for n of them.
type collector struct {
	mu     sync.Mutex
	events []baton.Event
	signal chan struct{}
}

func newCollector() *collector { return &collector{signal: make(chan struct{}, 1)} }

func (c *collector) handle(_ context.Context, ev baton.Event) error {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
	return nil
}

func (c *collector) wait(t *testing.T, n int) []baton.Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.events)
		c.mu.Unlock()
		if got >= n {
			c.mu.Lock()
			defer c.mu.Unlock()
			return append([]baton.Event(nil), c.events...)
		}
		select {
		case <-c.signal:
		case <-deadline:
			t.Fatalf("timed out waiting for %d events, have %d", n, got)
		}
	}
}

func (c *collector) types() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.events))
	for i, ev := range c.events {
		out[i] = ev.Type
	}
	return out
}

// drain closes the bus, which returns once every accepted event is handled.
func drain(t *testing.T, b *Bus) {
	t.Helper()
	// A bound for a hung bus, not a timing check: on a loaded two-core CI
	// machine under -race, draining a few hundred sleeping handlers can
	// take seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func mustRegister(t *testing.T, b *Bus, r Rule) {
	t.Helper()
	if err := b.RegisterRule(r); err != nil {
		t.Fatalf("register %q: %v", r.Name, err)
	}
}

// --- seed 004 §7.1 ---------------------------------------------------------

func TestPublish_Success(t *testing.T) {
	b, _ := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Name: "all", Types: []string{"*"}, Handler: c.handle})
	ev := event(baton.TypeUserQuery, "chat-1")
	ev.Payload = json.RawMessage(`{"content":"hi"}`)
	if err := b.Publish(context.Background(), ev); err != nil {
		t.Fatalf("publish: %v", err)
	}
	got := c.wait(t, 1)
	if got[0].ID != ev.ID || string(got[0].Payload) != `{"content":"hi"}` {
		t.Fatalf("handler got %+v, want %+v", got[0], ev)
	}
	if s := b.Stats(); s.Published != 1 {
		t.Fatalf("published = %d, want 1", s.Published)
	}
}

func TestPublish_Idempotency(t *testing.T) {
	b, _ := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: c.handle})
	ev := event(baton.TypeUserQuery, "chat-1")
	for i := 0; i < 3; i++ {
		if err := b.Publish(context.Background(), ev); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	drain(t, b)
	if got := len(c.types()); got != 1 {
		t.Fatalf("handled %d times, want 1", got)
	}
	if s := b.Stats(); s.Duplicates != 2 || s.Published != 1 {
		t.Fatalf("stats = %+v, want 1 published and 2 duplicates", s)
	}
}

// TestPublish_IdempotencyIsPerChat: the same event id in two chats is two
// events (ids may come from clients, and chats belong to different
// tenants: one tenant's id must not drop another's event).
func TestPublish_IdempotencyIsPerChat(t *testing.T) {
	b, _ := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: c.handle})
	one, other := event(baton.TypeUserQuery, "chat-1"), event(baton.TypeUserQuery, "chat-2")
	other.ID = one.ID
	for _, ev := range []baton.Event{one, other, one} {
		if err := b.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	if got, s := len(c.types()), b.Stats(); got != 2 || s.Duplicates != 1 {
		t.Fatalf("handled %d, %d duplicates; want each chat's event handled once and the repeat dropped", got, s.Duplicates)
	}
}

func TestPublish_UnknownType(t *testing.T) {
	b, logs := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"session.*"}, Handler: c.handle})
	if err := b.Publish(context.Background(), event("webhook.received", "chat-1")); err != nil {
		t.Fatalf("publish of an unmatched type must not fail: %v", err)
	}
	drain(t, b)
	if s := b.Stats(); s.Unmatched != 1 {
		t.Fatalf("unmatched = %d, want 1", s.Unmatched)
	}
	if !strings.Contains(logs.String(), "no rule matched") || !strings.Contains(logs.String(), "webhook.received") {
		t.Fatalf("no warning naming the type in logs:\n%s", logs)
	}
	if len(c.types()) != 0 {
		t.Fatalf("handler was called for an unmatched event")
	}
}

func TestRuleMatching_Exact(t *testing.T) {
	b, _ := newTestBus(t)
	exact, other := newCollector(), newCollector()
	mustRegister(t, b, Rule{Name: "exact", Types: []string{baton.TypeUserQuery}, Handler: exact.handle})
	mustRegister(t, b, Rule{Name: "other", Types: []string{"user_query_extra"}, Handler: other.handle})
	for _, typ := range []string{baton.TypeUserQuery, "user_query_extra", "user_quer"} {
		if err := b.Publish(context.Background(), event(typ, "c")); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	if got := exact.types(); len(got) != 1 || got[0] != baton.TypeUserQuery {
		t.Fatalf("exact rule saw %v", got)
	}
	if got := other.types(); len(got) != 1 || got[0] != "user_query_extra" {
		t.Fatalf("other rule saw %v", got)
	}
}

func TestRuleMatching_Array(t *testing.T) {
	b, _ := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{baton.TypeSessionCreated, baton.TypeSessionUpdated, baton.TypeSessionDeleted}, Handler: c.handle})
	for _, typ := range []string{baton.TypeSessionCreated, baton.TypeSessionDeleted, "session.archived"} {
		if err := b.Publish(context.Background(), event(typ, "")); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	got := c.types()
	if len(got) != 2 || got[0] != baton.TypeSessionCreated || got[1] != baton.TypeSessionDeleted {
		t.Fatalf("list rule saw %v", got)
	}
}

func TestRuleMatching_Glob(t *testing.T) {
	b, _ := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"background_task.*"}, Handler: c.handle})
	for _, typ := range []string{baton.TypeBackgroundTaskCompleted, baton.TypeBackgroundTaskFailed, "background_taskX", "background_task"} {
		if err := b.Publish(context.Background(), event(typ, "c")); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	if got := c.types(); len(got) != 2 {
		t.Fatalf("glob rule saw %v, want the two background_task.* events", got)
	}
}

func TestRuleMatching_Wildcard(t *testing.T) {
	b, _ := newTestBus(t)
	specific, fallback := newCollector(), newCollector()
	mustRegister(t, b, Rule{Name: "fallback", Types: []string{"*"}, Priority: 10, Handler: fallback.handle})
	mustRegister(t, b, Rule{Name: "user", Types: []string{baton.TypeUserQuery}, Priority: 100, Handler: specific.handle})
	for _, typ := range []string{baton.TypeUserQuery, "file.changed", "webhook.received"} {
		if err := b.Publish(context.Background(), event(typ, "c")); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	if got := specific.types(); len(got) != 1 {
		t.Fatalf("specific rule saw %v", got)
	}
	if got := fallback.types(); len(got) != 2 || got[0] != "file.changed" || got[1] != "webhook.received" {
		t.Fatalf("fallback saw %v", got)
	}
}

func TestRulePriority(t *testing.T) {
	b, _ := newTestBus(t)
	var winner atomic.Value
	named := func(name string) Handler {
		return func(context.Context, baton.Event) error { winner.Store(name); return nil }
	}
	// Registered low to high, so order of registration cannot explain the result.
	mustRegister(t, b, Rule{Name: "p10", Types: []string{"*"}, Priority: 10, Handler: named("p10")})
	mustRegister(t, b, Rule{Name: "p50", Types: []string{"session.*"}, Priority: 50, Handler: named("p50")})
	mustRegister(t, b, Rule{Name: "p80", Types: []string{baton.TypeSessionCreated}, Priority: 80, Handler: named("p80")})
	mustRegister(t, b, Rule{Name: "p80-later", Types: []string{baton.TypeSessionCreated}, Priority: 80, Handler: named("p80-later")})

	if r, ok := b.Match(baton.TypeSessionCreated); !ok || r.Name != "p80" {
		t.Fatalf("Match(session.created) = %q, want p80 (highest priority, registered first)", r.Name)
	}
	if r, _ := b.Match(baton.TypeSessionDeleted); r.Name != "p50" {
		t.Fatalf("Match(session.deleted) = %q, want p50", r.Name)
	}
	if err := b.Publish(context.Background(), event(baton.TypeSessionCreated, "c")); err != nil {
		t.Fatal(err)
	}
	drain(t, b)
	if w := winner.Load(); w != "p80" {
		t.Fatalf("handled by %v, want p80", w)
	}
	rules := b.Rules()
	var order []string
	for _, r := range rules {
		order = append(order, r.Name)
	}
	if strings.Join(order, ",") != "p80,p80-later,p50,p10" {
		t.Fatalf("rule order %v", order)
	}
}

func TestRule_Disabled(t *testing.T) {
	b, _ := newTestBus(t)
	high, low := newCollector(), newCollector()
	mustRegister(t, b, Rule{Name: "high", Types: []string{"*"}, Priority: 100, Handler: high.handle, Disabled: true})
	mustRegister(t, b, Rule{Name: "low", Types: []string{"*"}, Priority: 1, Handler: low.handle})
	if err := b.Publish(context.Background(), event("x", "c")); err != nil {
		t.Fatal(err)
	}
	low.wait(t, 1)
	if err := b.EnableRule("high", true); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), event("x", "c")); err != nil {
		t.Fatal(err)
	}
	high.wait(t, 1)
	if err := b.EnableRule("missing", true); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("EnableRule(missing) = %v, want not found", err)
	}
}

func TestRegisterRule_Invalid(t *testing.T) {
	b, _ := newTestBus(t)
	noop := func(context.Context, baton.Event) error { return nil }
	cases := []struct {
		rule Rule
		want string
	}{
		{Rule{Name: "r", Handler: noop}, "types: at least one"},
		{Rule{Name: "r", Types: []string{""}, Handler: noop}, "types[0]: empty"},
		{Rule{Name: "r", Types: []string{"a", "[bad"}, Handler: noop}, "types[1]: bad pattern"},
		{Rule{Name: "r", Types: []string{"has space"}, Handler: noop}, "types[0]: type: character ' '"},
		{Rule{Name: "r", Types: []string{"x"}}, "handler is required"},
	}
	for _, tc := range cases {
		err := b.RegisterRule(tc.rule)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("RegisterRule(%v) = %v, want an invalid error containing %q", tc.rule.Types, err, tc.want)
		}
	}
	mustRegister(t, b, Rule{Name: "dup", Types: []string{"x"}, Handler: noop})
	if err := b.RegisterRule(Rule{Name: "dup", Types: []string{"y"}, Handler: noop}); !errors.Is(err, baton.ErrConflict) {
		t.Errorf("duplicate name: %v, want conflict", err)
	}
}

func TestFunctionHandler(t *testing.T) {
	b, _ := newTestBus(t)
	got := make(chan baton.Event, 1)
	mustRegister(t, b, Rule{Types: []string{baton.TypeUserQuery}, Handler: func(ctx context.Context, ev baton.Event) error {
		if ctx == nil {
			t.Error("handler got a nil context")
		}
		got <- ev
		return nil
	}})
	ev := event(baton.TypeUserQuery, "chat-9")
	if err := b.Publish(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h.ID != ev.ID || h.ChatID() != "chat-9" {
			t.Fatalf("handler called with %+v", h)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called")
	}
}

// testAgent records each instance it creates and the events it handled.
type testAgent struct {
	prompt string
	seen   []string
}

func (a *testAgent) Handle(_ context.Context, ev baton.Event) error {
	a.seen = append(a.seen, ev.ID)
	return nil
}

func TestAgentHandler(t *testing.T) {
	b, _ := newTestBus(t)
	var mu sync.Mutex
	var agents []*testAgent
	h := AgentHandler("analyse the event", "system", func(prompt, system string) EventAgent {
		a := &testAgent{prompt: prompt + "|" + system}
		mu.Lock()
		agents = append(agents, a)
		mu.Unlock()
		return a
	})
	mustRegister(t, b, Rule{Types: []string{"*"}, Priority: 10, Handler: h})
	e1, e2 := event("file.changed", "c"), event("file.changed", "c")
	for _, ev := range []baton.Event{e1, e2} {
		if err := b.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	if len(agents) != 2 {
		t.Fatalf("created %d agents, want one fresh agent per event", len(agents))
	}
	for i, want := range []string{e1.ID, e2.ID} {
		if a := agents[i]; a.prompt != "analyse the event|system" || len(a.seen) != 1 || a.seen[0] != want {
			t.Fatalf("agent %d = %+v, want prompt and one event %s", i, a, want)
		}
	}
}

func TestQueue_Processing(t *testing.T) {
	b, _ := newTestBus(t)
	var got []int
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(_ context.Context, ev baton.Event) error {
		var n int
		if err := json.Unmarshal(ev.Payload, &n); err != nil {
			return err
		}
		got = append(got, n) // one chat: never concurrent, so no lock
		return nil
	}})
	const n = 500
	for i := 0; i < n; i++ {
		ev := event("tick", "chat-1")
		ev.Payload = json.RawMessage(fmt.Sprint(i))
		if err := b.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b)
	if len(got) != n {
		t.Fatalf("handled %d, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("event %d handled at position %d: order broken", v, i)
		}
	}
}

func TestQueue_PreventsConcurrent(t *testing.T) {
	b, _ := newTestBus(t, WithConcurrency(64))
	var inFlight, maxInFlight atomic.Int32
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(50 * time.Microsecond) // widen the window in which a second handler could overlap
		inFlight.Add(-1)
		return nil
	}})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := b.Publish(context.Background(), event("tick", "one-chat")); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	drain(t, b)
	if m := maxInFlight.Load(); m != 1 {
		t.Fatalf("%d handlers of one chat ran at once, want 1", m)
	}
}

// --- beyond the seed ---------------------------------------------------------

func TestOrder_ThousandChatsConcurrent(t *testing.T) {
	b, _ := newTestBus(t, WithConcurrency(128))
	const chats, perChat, publishers = 1000, 20, 16
	var mu sync.Mutex
	last := make(map[string]int, chats)
	var broken atomic.Int32
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(_ context.Context, ev baton.Event) error {
		var n int
		_ = json.Unmarshal(ev.Payload, &n)
		mu.Lock()
		prev, ok := last[ev.ChatID()]
		if (!ok && n != 0) || (ok && n != prev+1) {
			broken.Add(1)
		}
		last[ev.ChatID()] = n
		mu.Unlock()
		return nil
	}})
	var wg sync.WaitGroup
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each chat has exactly one publisher, so "publish order" is well defined;
			// the publishers interleave their chats.
			for i := 0; i < perChat; i++ {
				for c := p; c < chats; c += publishers {
					ev := event("tick", fmt.Sprintf("chat-%d", c))
					ev.Payload = json.RawMessage(fmt.Sprint(i))
					if err := b.Publish(context.Background(), ev); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	drain(t, b)
	if n := broken.Load(); n != 0 {
		t.Fatalf("%d events handled out of order", n)
	}
	if len(last) != chats {
		t.Fatalf("%d chats handled, want %d", len(last), chats)
	}
	for chat, n := range last {
		if n != perChat-1 {
			t.Fatalf("%s: last event %d, want %d", chat, n, perChat-1)
		}
	}
}

func TestBlockedChatDoesNotDelayOthers(t *testing.T) {
	b, _ := newTestBus(t)
	release := make(chan struct{})
	blocked := make(chan struct{})
	otherDone := make(chan struct{})
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(ctx context.Context, ev baton.Event) error {
		switch ev.ChatID() {
		case "A":
			close(blocked)
			<-release
		case "B":
			close(otherDone)
		}
		return nil
	}})
	defer close(release)
	if err := b.Publish(context.Background(), event("tick", "A")); err != nil {
		t.Fatal(err)
	}
	<-blocked
	if err := b.Publish(context.Background(), event("tick", "B")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-otherDone:
	case <-time.After(5 * time.Second):
		t.Fatal("chat B waited for chat A's blocked handler")
	}
}

func TestPanicDoesNotStopChat(t *testing.T) {
	b, logs := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(ctx context.Context, ev baton.Event) error {
		if ev.Type == "boom" {
			panic("handler exploded")
		}
		if ev.Type == "fail" {
			return errors.New("handler failed on purpose")
		}
		return c.handle(ctx, ev)
	}})
	boom, fail, next := event("boom", "chat-1"), event("fail", "chat-1"), event("next", "chat-1")
	for _, ev := range []baton.Event{boom, fail, next} {
		if err := b.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	got := c.wait(t, 1)
	if got[0].ID != next.ID {
		t.Fatalf("after a panic and an error the chat's next event was not handled")
	}
	s := b.Stats()
	if s.Panics != 1 || s.HandlerErrors != 1 {
		t.Fatalf("stats = %+v, want 1 panic and 1 error", s)
	}
	out := logs.String()
	for _, want := range []string{"handler panicked", boom.ID, "handler exploded", "handler failed", fail.ID, "event_type=fail"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

func TestIdempotencyWindow_EvictsByCount(t *testing.T) {
	// A window of 3 remembers an id for at least 3 and at most 6 further ids.
	b, _ := newTestBus(t, WithIdempotencyWindow(3, time.Hour))
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: c.handle})
	publish := func(ev baton.Event) {
		t.Helper()
		if err := b.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	first := event("t", "c")
	publish(first)
	for i := 0; i < 3; i++ {
		publish(event("t", "c"))
	}
	publish(first) // 3 ids later: still remembered
	if s := b.Stats(); s.Duplicates != 1 {
		t.Fatalf("duplicates = %d, want 1: an id must be remembered for at least count further ids", s.Duplicates)
	}
	for i := 0; i < 3; i++ {
		publish(event("t", "c"))
	}
	publish(first) // 6 ids later: forgotten, accepted again
	drain(t, b)
	if got, s := len(c.types()), b.Stats(); got != 8 || s.Duplicates != 1 {
		t.Fatalf("handled %d with %d duplicates, want 8 and 1: past 2×count the id is accepted again", got, s.Duplicates)
	}
}

func TestIdempotencyWindow_EvictsByAge(t *testing.T) {
	// A window of one minute remembers an id for at least one and at most two minutes.
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b, _ := newTestBus(t, WithIdempotencyWindow(100, time.Minute), WithClock(clock))
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: c.handle})
	ev := event("t", "c")
	_ = b.Publish(context.Background(), ev)
	now.Add(int64(59 * time.Second))
	_ = b.Publish(context.Background(), ev) // within a minute: dropped
	_ = b.Publish(context.Background(), event("t", "c"))
	now.Add(int64(62 * time.Second))
	_ = b.Publish(context.Background(), event("t", "c"))
	now.Add(int64(60 * time.Second))
	_ = b.Publish(context.Background(), ev) // over two minutes after it was seen: accepted again
	drain(t, b)
	if got, s := len(c.types()), b.Stats(); got != 4 || s.Duplicates != 1 {
		t.Fatalf("handled %d with %d duplicates, want 4 and 1", got, s.Duplicates)
	}
}

func TestWindow_Bounds(t *testing.T) {
	w := newWindow(100, int64(time.Hour))
	for i := 0; i < 10_000; i++ {
		id := fmt.Sprint(i)
		if w.contains("c", id, 0) {
			t.Fatalf("fresh id %s reported as seen", id)
		}
		w.add("c", id, 0)
		if w.len() > 200 {
			t.Fatalf("window holds %d ids, bound is 2×count = 200", w.len())
		}
		if i >= 100 && !w.contains("c", fmt.Sprint(i-100), 0) {
			t.Fatalf("id %d forgotten after only 100 further ids", i-100)
		}
	}
}

func TestIdempotencyWindow_Off(t *testing.T) {
	b, _ := newTestBus(t, WithIdempotencyWindow(0, 0))
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: c.handle})
	ev := event("t", "c")
	_ = b.Publish(context.Background(), ev)
	_ = b.Publish(context.Background(), ev)
	drain(t, b)
	if got := len(c.types()); got != 2 {
		t.Fatalf("handled %d, want 2 with de-duplication off", got)
	}
}

func TestBackpressure_PublishWaitsForRoom(t *testing.T) {
	b, _ := newTestBus(t, WithLaneCapacity(2))
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
		started <- struct{}{}
		<-release
		return nil
	}})
	// The first event is taken by the worker; two more fill the lane.
	if err := b.Publish(context.Background(), event("t", "c")); err != nil {
		t.Fatal(err)
	}
	<-started
	for i := 0; i < 2; i++ {
		if err := b.Publish(context.Background(), event("t", "c")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	full := event("t", "c")
	if err := b.Publish(ctx, full); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish to a full lane = %v, want the context's deadline error", err)
	}
	// Room appears once the handler returns; the same event can now be
	// published (the failed attempt did not mark its id as seen).
	done := make(chan error, 1)
	go func() { done <- b.Publish(context.Background(), full) }()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("publish after room was made: %v", err)
	}
	drain(t, b)
	if s := b.Stats(); s.Handled != 4 || s.PublishWaits < 1 {
		t.Fatalf("stats = %+v, want 4 handled and at least 1 wait", s)
	}
}

func TestClose_DuringPublishingLosesNothing(t *testing.T) {
	b := New(WithLogger(slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))), WithLaneCapacity(8))
	var handled sync.Map
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(_ context.Context, ev baton.Event) error {
		handled.Store(ev.ID, true)
		return nil
	}})
	var accepted sync.Map
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; ; i++ {
				ev := event("t", fmt.Sprintf("chat-%d", i%7))
				err := b.Publish(context.Background(), ev)
				if errors.Is(err, baton.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				accepted.Store(ev.ID, true)
			}
		}()
	}
	close(start)
	// Close while publishing is in full swing; Close must cope with any moment.
	testenv.Eventually(t, 10*time.Second, "the publishers to get going (200 events accepted)", func() error {
		if n := b.Stats().Published; n < 200 {
			return fmt.Errorf("%d accepted", n)
		}
		return nil
	})
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	n := 0
	accepted.Range(func(id, _ any) bool {
		n++
		if _, ok := handled.Load(id); !ok {
			t.Errorf("accepted event %v was never handled", id)
		}
		return true
	})
	if n == 0 {
		t.Fatal("no event was accepted before Close")
	}
	if err := b.Publish(context.Background(), event("t", "c")); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("publish after close = %v, want ErrClosed", err)
	}
}

func TestClose_DeadlineAbandonsQueued(t *testing.T) {
	b := New(WithLogger(slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))))
	started := make(chan struct{})
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(ctx context.Context, ev baton.Event) error {
		if ev.Type == "block" {
			close(started)
			<-ctx.Done() // returns only when Close's deadline cancels handlers
		}
		return nil
	}})
	_ = b.Publish(context.Background(), event("block", "c"))
	<-started
	for i := 0; i < 5; i++ {
		_ = b.Publish(context.Background(), event("t", "c"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close = %v, want deadline exceeded", err)
	}
	if s := b.Stats(); s.Abandoned != 5 {
		t.Fatalf("abandoned = %d, want 5", s.Abandoned)
	}
}

func TestNoChatEventsHaveTheirOwnOrderedLane(t *testing.T) {
	b, _ := newTestBus(t)
	var got []int
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(_ context.Context, ev baton.Event) error {
		if ev.ChatID() == "" {
			var n int
			_ = json.Unmarshal(ev.Payload, &n)
			got = append(got, n)
		}
		return nil
	}})
	for i := 0; i < 100; i++ {
		ev := event("session.created", "")
		ev.Payload = json.RawMessage(fmt.Sprint(i))
		_ = b.Publish(context.Background(), ev)
		_ = b.Publish(context.Background(), event("t", fmt.Sprint("chat-", i)))
	}
	drain(t, b)
	for i, v := range got {
		if v != i {
			t.Fatalf("no-chat events out of order at %d: %v", i, got)
		}
	}
	if len(got) != 100 {
		t.Fatalf("handled %d no-chat events, want 100", len(got))
	}
}

func TestPublish_RequiresIDAndType(t *testing.T) {
	b, _ := newTestBus(t)
	if err := b.Publish(context.Background(), baton.Event{Type: "x"}); !errors.Is(err, baton.ErrInvalid) {
		t.Fatalf("publish without id = %v, want invalid", err)
	}
	if err := b.Publish(context.Background(), baton.Event{ID: "x"}); !errors.Is(err, baton.ErrInvalid) {
		t.Fatalf("publish without type = %v, want invalid", err)
	}
}

func TestSubscribe_SlowObserverIsDroppedNotWaitedFor(t *testing.T) {
	b, logs := newTestBus(t)
	c := newCollector()
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: c.handle})
	slow, err := b.Subscribe(nil, Buffer(2)) // never read
	if err != nil {
		t.Fatal(err)
	}
	fast, err := b.Subscribe([]string{"tick"}, Buffer(100))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := b.Publish(context.Background(), event("tick", "c")); err != nil {
			t.Fatal(err)
		}
	}
	c.wait(t, 10) // the bus went on although the slow observer stopped reading
	if len(fast.C()) != 10 {
		t.Fatalf("fast observer has %d events, want 10", len(fast.C()))
	}
	n := 0
	for range slow.C() { // closed after its buffer: drains 2 then ends
		n++
	}
	if n != 2 || !errors.Is(slow.Err(), ErrSlowSubscriber) {
		t.Fatalf("slow observer got %d events and err %v, want 2 and ErrSlowSubscriber", n, slow.Err())
	}
	if s := b.Stats(); s.ObserverDrops != 1 {
		t.Fatalf("observer drops = %d, want 1", s.ObserverDrops)
	}
	if !strings.Contains(logs.String(), "dropped slow subscriber") {
		t.Fatalf("drop not logged:\n%s", logs)
	}
}

func TestSubscribe_PatternsChatAndClose(t *testing.T) {
	b := New(WithLogger(slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))))
	sub, err := b.Subscribe([]string{"chat.*", baton.TypeStreamText}, ForChat("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe([]string{"[bad"}); !errors.Is(err, baton.ErrInvalid) {
		t.Fatalf("bad pattern: %v", err)
	}
	_ = b.Broadcast(event(baton.TypeStreamText, "c1"))
	_ = b.Broadcast(event(baton.TypeStreamText, "c2"))                   // other chat
	_ = b.Broadcast(event(baton.TypeStreamStart, "c1"))                  // other type
	_ = b.Publish(context.Background(), event(baton.TypeChatText, "c1")) // unmatched by rules, still observed
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev := range sub.C() {
		got = append(got, ev.Type+"@"+ev.ChatID())
	}
	if strings.Join(got, ",") != "stream.text@c1,chat.text@c1" {
		t.Fatalf("observed %v", got)
	}
	if !errors.Is(sub.Err(), baton.ErrClosed) {
		t.Fatalf("err after bus close = %v, want ErrClosed", sub.Err())
	}
	if err := b.Broadcast(event("x", "")); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("broadcast after close = %v", err)
	}
	if _, err := b.Subscribe(nil); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("subscribe after close = %v", err)
	}
}

// With far more chats blocked in handlers than the bus runs workers for at
// once, a new chat is still handled: the watchdog starts workers in place of
// stuck ones.
func TestManyBlockedChatsDoNotDelayOthers(t *testing.T) {
	b, _ := newTestBus(t)
	const blockedChats = 50
	release := make(chan struct{})
	var blocked sync.WaitGroup
	blocked.Add(blockedChats)
	done := make(chan struct{})
	mustRegister(t, b, Rule{Types: []string{"*"}, Handler: func(ctx context.Context, ev baton.Event) error {
		if ev.Type == "block" {
			blocked.Done()
			<-release
			return nil
		}
		close(done)
		return nil
	}})
	defer close(release)
	for i := 0; i < blockedChats; i++ {
		if err := b.Publish(context.Background(), event("block", fmt.Sprint("blocked-", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitAll := make(chan struct{})
	go func() { blocked.Wait(); close(waitAll) }()
	select {
	case <-waitAll: // every blocked chat got a worker of its own
	case <-time.After(5 * time.Second):
		t.Fatal("not every chat's handler started while others were blocked")
	}
	if err := b.Publish(context.Background(), event("free", "free-chat")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a free chat waited behind blocked ones")
	}
}

// routeOdd takes the events whose type ends in "odd", as a router sending
// them to another instance would.
type routeOdd struct {
	mu     sync.Mutex
	routed []string
}

func (r *routeOdd) Route(_ context.Context, ev baton.Event) (bool, error) {
	if !strings.HasSuffix(ev.Type, "odd") {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routed = append(r.routed, ev.ID)
	return true, nil
}

// TestRouter_TakesEventsAndPublishLocalBypassesIt: events the router takes
// never reach a handler here; PublishLocal delivers them (the owner's side)
// and says whether it accepted them; the handled hook runs after each handler.
func TestRouter_TakesEventsAndPublishLocalBypassesIt(t *testing.T) {
	b, _ := newTestBus(t)
	c := newCollector()
	if err := b.RegisterRule(Rule{Name: "all", Types: []string{"*"}, Handler: c.handle}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var hooked []string
	b.SetHandledHook(func(ev baton.Event, _ error) {
		c.mu.Lock() // the handler has returned and recorded the event
		seen := slices.ContainsFunc(c.events, func(h baton.Event) bool { return h.ID == ev.ID })
		c.mu.Unlock()
		if !seen {
			t.Errorf("handled hook for %s ran before its handler", ev.ID)
		}
		mu.Lock()
		hooked = append(hooked, ev.ID)
		mu.Unlock()
	})
	r := &routeOdd{}
	b.SetRouter(r)
	ctx := context.Background()
	odd, even := event("x.odd", "c1"), event("x.even", "c1")
	if err := b.Publish(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, even); err != nil {
		t.Fatal(err)
	}
	got := c.wait(t, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if got[0].ID != even.ID || len(r.routed) != 1 || r.routed[0] != odd.ID {
		t.Fatalf("handled %v, routed %v; want the even one handled, the odd one routed", c.types(), r.routed)
	}
	if ok, err := b.PublishLocal(ctx, odd); !ok || err != nil {
		t.Fatalf("PublishLocal = %v, %v; want accepted", ok, err)
	}
	c.wait(t, 2)
	if ok, err := b.PublishLocal(ctx, odd); ok || err != nil {
		t.Fatalf("PublishLocal of a duplicate = %v, %v; want not accepted", ok, err)
	}
	testenv.Eventually(t, 5*time.Second, "the handled hook to run for both events", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(hooked) != 2 {
			return fmt.Errorf("it ran for %v", hooked)
		}
		return nil
	})
}

// TestHandledHook_GetsTheOutcomeAndPublishAgainRetries: the handled hook
// learns whether the handler failed (or panicked), and PublishAgain has the
// bus handle an event whose id it has already seen — a router's retry of
// an input whose handling failed.
func TestHandledHook_GetsTheOutcomeAndPublishAgainRetries(t *testing.T) {
	b, _ := newTestBus(t)
	var calls atomic.Int32
	if err := b.RegisterRule(Rule{Name: "flaky", Types: []string{"*"}, Handler: func(context.Context, baton.Event) error {
		switch calls.Add(1) {
		case 1:
			return errors.New("store unavailable")
		case 2:
			panic("boom")
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	outcomes := make(chan error, 4)
	b.SetHandledHook(func(_ baton.Event, err error) { outcomes <- err })
	ctx := context.Background()
	ev := event("x", "c1")
	if ok, err := b.PublishLocal(ctx, ev); !ok || err != nil {
		t.Fatalf("PublishLocal = %v, %v", ok, err)
	}
	if err := <-outcomes; err == nil || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("first outcome %v, want the handler's error", err)
	}
	if ok, _ := b.PublishLocal(ctx, ev); ok {
		t.Fatal("PublishLocal accepted a duplicate")
	}
	if err := b.PublishAgain(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := <-outcomes; err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("second outcome %v, want the panic as an error", err)
	}
	if err := b.PublishAgain(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := <-outcomes; err != nil {
		t.Fatalf("third outcome %v, want success", err)
	}
}

// TestClose_DrainAcceptsWhatHandlersPublish: a handler still running when
// Close begins (a tool that finishes during a shutdown's drain) publishes
// its tool.executed with its context: the event is accepted, handled and
// seen by observers before Close returns. Others' publishes are refused.
func TestClose_DrainAcceptsWhatHandlersPublish(t *testing.T) {
	b := New(WithLogger(slog.New(slog.NewTextHandler(&testenv.LogBuffer{}, nil))))
	sub, err := b.Subscribe([]string{"tool.*"})
	if err != nil {
		t.Fatal(err)
	}
	finish := make(chan struct{})
	started := make(chan struct{})
	published := make(chan error, 1)
	var executed atomic.Int32
	mustRegister(t, b, Rule{Types: []string{"tool.*"}, Handler: func(context.Context, baton.Event) error {
		executed.Add(1)
		return nil
	}})
	mustRegister(t, b, Rule{Types: []string{"run"}, Handler: func(ctx context.Context, ev baton.Event) error {
		close(started)
		<-finish // the tool runs on while the drain begins
		// As the tool registry does: detached from cancellation, bounded.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		published <- b.Publish(pctx, event("tool.executed", ev.ChatID()))
		return nil
	}})
	mustRegister(t, b, Rule{Types: []string{"probe"}, Handler: func(context.Context, baton.Event) error { return nil }})
	if err := b.Publish(context.Background(), event("run", "c1")); err != nil {
		t.Fatal(err)
	}
	<-started
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	// Wait until Close has begun: a publish from outside a handler is refused.
	testenv.Eventually(t, 10*time.Second, "Close to begin (a publish from outside a handler refused)", func() error {
		err := b.Publish(context.Background(), event("probe", "c2"))
		if errors.Is(err, baton.ErrClosed) {
			return nil
		}
		return fmt.Errorf("publish = %v", err)
	})
	close(finish)
	if err := <-published; err != nil {
		t.Fatalf("tool.executed published during the drain: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := executed.Load(); n != 1 {
		t.Fatalf("tool.executed handled %d times, want 1 before Close returned", n)
	}
	if ev, ok := <-sub.C(); !ok || ev.Type != "tool.executed" {
		t.Fatalf("observer got %v %v, want the tool.executed", ev.Type, ok)
	}
	// After the drain nothing is accepted, even with a handler's context.
	if err := b.Publish(b.ctx, event("tool.executed", "c1")); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("publish after the drain = %v, want ErrClosed", err)
	}
}
