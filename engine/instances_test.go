package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
)

// instance is one baton engine sharing a PostgreSQL schema with others, as
// a separate process would: its own pool, bus, recorder and engine.
type instance struct {
	store baton.Store
	bus   *bus.Bus
	eng   *engine.Engine
	stop  func()
}

// settled reports whether the instance's bus has handled (or found no rule
// for) every event it accepted and no run is active. A bus counts an event
// handled only once its handler returned, retries after a lost lease
// included, so unlike Active() alone it has no gap between a failed attempt
// and the next.
func (in *instance) settled() bool {
	s := in.bus.Stats()
	return s.Published == s.Handled+s.Unmatched && in.eng.Active() == 0
}

func pgSchema(t testing.TB) (dsn, schema string) {
	dsn = testenv.PostgresDSN(t)
	schema = fmt.Sprintf("inst_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), dsn); err == nil {
			_, _ = conn.Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`)
			_ = conn.Close(context.Background())
		}
	})
	return dsn, schema
}

func newInstance(t testing.TB, dsn, schema, id string, wrap func(baton.Store) baton.Store, prov fakeProvider) *instance {
	t.Helper()
	return newInstanceWith(t, dsn, schema, id, wrap, prov)
}

// newInstanceWith is newInstance with any provider.
func newInstanceWith(t testing.TB, dsn, schema, id string, wrap func(baton.Store) baton.Store, prov baton.Provider) *instance {
	t.Helper()
	ctx := context.Background()
	pg, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	var st baton.Store = pg
	if wrap != nil {
		st = wrap(st)
	}
	wfs, err := workflow.LoadAll(os.DirFS(loopDir))
	if err != nil {
		t.Fatal(err)
	}
	b := bus.New(bus.WithLogger(discardLogger()))
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b, Workflows: wfs, WorkflowRoot: loopDir,
		Providers:   func(*workflow.Workflow) (baton.Provider, error) { return prov, nil },
		ToolOptions: stubFuncs(wfs, bumpTool(new(atomic.Int64)), lookupTool), Logger: discardLogger(),
		InstanceID: id, LeaseTTL: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(runCtx) }()
	in := &instance{store: st, bus: b, eng: eng}
	var once sync.Once
	in.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			ctx, c := context.WithTimeout(context.Background(), 10*time.Second)
			defer c()
			_ = b.Close(ctx)
			_ = eng.Close()
			_ = pg.Close()
		})
	}
	t.Cleanup(in.stop)
	return in
}

// stallingStore stalls lease renewals while stalled is open: the owner's
// process is paused, so its lease runs out.
type stallingStore struct {
	baton.Store
	stalled chan struct{} // closed when the stall ends
}

func (s *stallingStore) RenewLease(ctx context.Context, chatID, instanceID string, token int64, ttl time.Duration) (baton.Lease, error) {
	select {
	case <-s.stalled:
	case <-ctx.Done():
		return baton.Lease{}, ctx.Err()
	}
	return s.Store.RenewLease(ctx, chatID, instanceID, token, ttl)
}

func waitChat(t *testing.T, st baton.Store, id string, want baton.ChatStatus, d time.Duration) baton.Chat {
	t.Helper()
	var c baton.Chat
	testenv.Eventually(t, d, fmt.Sprintf("chat %s to be %s", id, want), func() error {
		var err error
		if c, err = st.GetChat(context.Background(), testScope, id); err != nil {
			return err
		}
		if c.Status != want {
			return fmt.Errorf("status %q", c.Status)
		}
		return nil
	})
	return c
}

// TestInstances_FencingAndTakeover: instance A runs a chat and stalls (its
// model call and its lease renewals hang) past its lease; instance B takes
// the chat over, runs it to the end; when A wakes up, the store refuses its
// append (stale fencing token), so nothing A does lands.
func TestInstances_FencingAndTakeover(t *testing.T) {
	dsn, schema := pgSchema(t)
	wake := make(chan struct{})
	var aCalls atomic.Int64
	a := newInstance(t, dsn, schema, "A", func(s baton.Store) baton.Store { return &stallingStore{Store: s, stalled: wake} },
		func(req *baton.Request) ([]baton.Delta, error) {
			aCalls.Add(1)
			<-wake // A's process is paused mid-turn
			return reply("A speaks late"), nil
		})
	b := newInstance(t, dsn, schema, "B", nil, func(req *baton.Request) ([]baton.Delta, error) { return reply("B speaks"), nil })

	c, err := a.eng.Start(context.Background(), testScope, "loop", baton.StartOptions{Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "A to be mid-turn (its model called)", func() error {
		if aCalls.Load() == 0 {
			return errors.New("A's model not called")
		}
		return nil
	})
	// B's sweeper finds the chat running with an expired lease and takes over.
	waitChat(t, b.store, c.ID, baton.ChatCompleted, 15*time.Second)
	if b.eng.Takeovers() < 1 {
		t.Fatalf("B took over %d chats", b.eng.Takeovers())
	}
	close(wake) // A wakes up and tries to record its reply
	testenv.Eventually(t, 10*time.Second, "A's stale run to fail and its event to be handled again", func() error {
		if n := a.eng.LeaseLosses(); n == 0 || !a.settled() {
			return fmt.Errorf("%d lease losses, settled %v", n, a.settled())
		}
		return nil
	})
	// Handled again under a new lease, A's run.start found the chat done.
	if a.eng.Active() != 0 || a.bus.Stats().HandlerErrors != 0 {
		t.Fatalf("A: %d runs still active, %d handler errors", a.eng.Active(), a.bus.Stats().HandlerErrors)
	}
	// Whatever A still holds, the store refuses an append fenced with A's
	// token (the first one; B's takeover raised it).
	stale := baton.NewEvent(baton.TypeChatText, baton.Metadata{}, json.RawMessage(`{"kind":"text","agent":"Ping","content":"stale"}`))
	if _, err := a.store.Append(context.Background(), testScope, c.ID, []baton.Event{stale}, &baton.ChatUpdate{Fence: 1}); !errors.Is(err, baton.ErrConflict) {
		t.Fatalf("append with the stale fencing token: %v, want conflict", err)
	}
	evs, err := b.store.Events(context.Background(), testScope, c.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs)
	texts := 0
	for _, ev := range evs {
		var p struct{ Agent, Content string }
		_ = json.Unmarshal(ev.Payload, &p)
		if ev.Type == baton.TypeChatText && p.Agent == "Ping" {
			texts++
			if p.Content != "B speaks" {
				t.Fatalf("a stale owner's text landed: %q", p.Content)
			}
		}
	}
	if texts != 1 || evs[len(evs)-1].Type != baton.TypeChatRunComplete {
		t.Fatalf("%d texts; last event %s", texts, evs[len(evs)-1].Type)
	}
}

// stallingProvider answers "A speaks late" to a model call made while
// stall is set, once released is closed, or the call's context error if the
// run was stopped meanwhile; other calls it answers at once.
type stallingProvider struct {
	stall    atomic.Bool
	calls    atomic.Int64 // stalled calls made
	released chan struct{}
}

func (p *stallingProvider) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		if p.stall.Load() {
			p.calls.Add(1)
			<-p.released // the process is paused mid-call
			if err := ctx.Err(); err != nil {
				yield(baton.Delta{}, err)
				return
			}
			yield(baton.Delta{Kind: baton.DeltaText, Text: "A speaks late"}, nil)
			return
		}
		yield(baton.Delta{Kind: baton.DeltaText, Text: "A speaks"}, nil)
	}
}

// TestInstances_EventAgentRetriesAfterLosingTheLease: instance A's
// event-handler agent records an environment event in a chat and runs the
// chat's agent, whose model call stalls with A's lease renewals. A's
// stalled renewal gives up when the lease runs out, which cancels A's run,
// and B takes the chat over and answers; the agent handles the event again
// under a new lease and finds it recorded. The event is observed once, no
// handler error is left, and A's late text never lands.
func TestInstances_EventAgentRetriesAfterLosingTheLease(t *testing.T) {
	dsn, schema := pgSchema(t)
	renewals := make(chan struct{})
	prov := &stallingProvider{released: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(prov.released) }) }
	a := newInstanceWith(t, dsn, schema, "A", func(s baton.Store) baton.Store {
		return &stallingStore{Store: s, stalled: renewals}
	}, prov)
	t.Cleanup(release) // before A stops (cleanups run last first): a stalled call would keep A's bus from draining
	b := newInstance(t, dsn, schema, "B", nil, func(req *baton.Request) ([]baton.Delta, error) { return reply("B speaks"), nil })
	if err := a.bus.RegisterRule(a.eng.AgentRule("sensors", []string{"sensor.*"}, 90, "Summarise the reading.", "", 0)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := a.eng.Start(ctx, testScope, "assistant", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitChat(t, a.store, c.ID, baton.ChatWaitingInput, 10*time.Second)

	prov.stall.Store(true)
	ev := baton.NewInput(testScope, "sensor.reading", c.ID, json.RawMessage(`{"celsius":21}`))
	ev.Metadata.Source = baton.SourceEnv
	if err := a.bus.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "A's event-handler agent to call the model", func() error {
		if prov.calls.Load() == 0 {
			return errors.New("no model call")
		}
		return nil
	})
	// B's sweeper finds the chat running with an expired lease, takes it
	// over and answers.
	waitChat(t, b.store, c.ID, baton.ChatWaitingInput, 15*time.Second)
	if b.eng.Takeovers() < 1 {
		t.Fatalf("B took over %d chats", b.eng.Takeovers())
	}
	close(renewals) // A's renewals answer again, for the lease it takes next
	release()       // A's model call returns into a run stopped (or fenced: B holds the lease)
	testenv.Eventually(t, 10*time.Second, "A's event-handler agent to handle the event again after losing the lease", func() error {
		if n := a.eng.LeaseLosses(); n == 0 || !a.settled() {
			return fmt.Errorf("%d lease losses, settled %v", n, a.settled())
		}
		return nil
	})
	if a.eng.Active() != 0 {
		t.Fatalf("A: %d runs still active", a.eng.Active())
	}
	a.stop() // drains A's bus, so that every handler's outcome is counted
	if n := a.bus.Stats().HandlerErrors; n != 0 {
		t.Fatalf("A: %d handler errors; want the event handled again, cleanly", n)
	}
	evs, err := b.store.Events(ctx, testScope, c.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs)
	observed, answers := 0, 0
	for _, e := range evs {
		var p struct{ Agent, Content string }
		_ = json.Unmarshal(e.Payload, &p)
		if e.Type != baton.TypeChatText {
			continue
		}
		switch {
		case strings.HasPrefix(p.Content, "Observed event: sensor.reading"):
			observed++
		case p.Content == "A speaks late":
			t.Fatal("a stale owner's text landed")
		case p.Content == "B speaks":
			answers++
		}
	}
	if observed != 1 || answers != 1 {
		t.Fatalf("the event was observed %d times and answered %d times; want once each", observed, answers)
	}
}

// TestInstances_OneOwnerAtATime: both instances are told to run the same
// chats at once; each chat's turns are recorded once, with gapless
// sequences, whichever instance ran them.
func TestInstances_OneOwnerAtATime(t *testing.T) {
	dsn, schema := pgSchema(t)
	slow := func(req *baton.Request) ([]baton.Delta, error) {
		time.Sleep(5 * time.Millisecond) // a model call takes a moment
		return reply(req.Agent + " speaks"), nil
	}
	a := newInstance(t, dsn, schema, "A", nil, slow)
	b := newInstance(t, dsn, schema, "B", nil, slow)
	var ids []string
	for i := 0; i < 20; i++ {
		c, err := a.eng.Start(context.Background(), testScope, "loop", baton.StartOptions{Context: map[string]json.RawMessage{"stop": json.RawMessage("true")}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
		for j := 0; j < 3; j++ { // B is told to run it too, at the same time
			if err := b.eng.Resume(context.Background(), testScope, c.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		waitChat(t, a.store, id, baton.ChatCompleted, 20*time.Second)
	}
	for _, inst := range []*instance{a, b} {
		testenv.Eventually(t, 10*time.Second, "every resume to be handled", func() error {
			if s := inst.bus.Stats(); s.Published != s.Handled+s.Unmatched {
				return fmt.Errorf("bus stats %+v", s)
			}
			return nil
		})
	}
	for _, id := range ids {
		evs, err := a.store.Events(context.Background(), testScope, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs)
		if n := countType(evs, baton.TypeChatSelectSpeaker); n != 1 || countType(evs, baton.TypeChatRunComplete) != 1 {
			t.Fatalf("chat %s: %d turns and %d run_complete, want 1 and 1:\n%s", id, n, countType(evs, baton.TypeChatRunComplete), dump(evs))
		}
	}
	if s := a.bus.Stats().HandlerErrors + b.bus.Stats().HandlerErrors; s != 0 {
		t.Fatalf("%d handler errors", s)
	}
}

// ownerChildEnv makes the test binary run as instance A of
// TestInstances_ThreeProcessesOwnerKilled: it starts OWNER_CHATS chats of
// the effects workflow on the shared PostgreSQL schema and runs them until
// it is killed.
const ownerChildEnv = "BATON_ENGINE_OWNER_CHILD"

func runOwnerChild() int {
	ctx := context.Background()
	st, err := postgres.Open(ctx, os.Getenv("CRASH_STORE"), postgres.WithSchema(os.Getenv("CRASH_PG_SCHEMA")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "owner: open store:", err)
		return 1
	}
	eng, b, err := effectsEngine(st, "A")
	if err != nil {
		fmt.Fprintln(os.Stderr, "owner:", err)
		return 1
	}
	if os.Getenv("NATS_URL") != "" { // one of three processes: inputs go through JetStream
		if _, err := childBridge(st, b, "A"); err != nil {
			fmt.Fprintln(os.Stderr, "owner:", err)
			return 1
		}
	}
	n, _ := strconv.Atoi(os.Getenv("OWNER_CHATS"))
	wf := os.Getenv("CRASH_WORKFLOW")
	if wf == "" {
		wf = "effects"
	}
	for i := 0; i < n; i++ {
		if _, err := eng.Start(ctx, testScope, wf, baton.StartOptions{ChatID: fmt.Sprint("owned-", i)}); err != nil {
			fmt.Fprintln(os.Stderr, "owner: start:", err)
			return 1
		}
	}
	fmt.Println("child: running")
	select {} // runs until killed
}

// effectsEngine is an engine on st running the effects workflow with its
// scripted provider, as instance id, with a short lease.
func effectsEngine(st baton.Store, id string) (*engine.Engine, *bus.Bus, error) {
	wfs, err := workflow.LoadAll(os.DirFS(loopDir))
	if err != nil {
		return nil, nil, err
	}
	b := bus.New(bus.WithLogger(discardLogger()))
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b, Workflows: wfs, WorkflowRoot: loopDir,
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
		Logger: discardLogger(), InstanceID: id, LeaseTTL: 500 * time.Millisecond, StateCache: -1,
		ToolOptions: stubFuncs(wfs, bumpTool(new(atomic.Int64))),
	})
	return eng, b, err
}

// checkOwnedChats checks the chats owned-0… after a takeover: each has
// gapless sequences and ends with run_complete, and every tool call's
// effect is in the file exactly once.
func checkOwnedChats(t *testing.T, st baton.Store, chats int, effects string) {
	t.Helper()
	ctx := context.Background()
	calls := 0
	for i := 0; i < chats; i++ {
		evs, err := st.Events(ctx, testScope, fmt.Sprint("owned-", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs)
		if evs[len(evs)-1].Type != baton.TypeChatRunComplete {
			t.Fatalf("chat %d ends with %s", i, evs[len(evs)-1].Type)
		}
		calls += countType(evs, baton.TypeChatToolCall)
	}
	data, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		key, text, _ := strings.Cut(l, " ")
		if seen[key] || text == "" {
			t.Fatalf("effect %q is in the file twice or incomplete", l)
		}
		seen[key] = true
	}
	if calls != 4*chats || len(lines) != calls {
		t.Fatalf("%d tool calls recorded (want %d), %d effects in the file", calls, 4*chats, len(lines))
	}
}

// flakyRenewals fails the first lease renewal as a store that briefly does
// not answer would (a pool timeout, a network blip).
type flakyRenewals struct {
	*sqlite.Store
	failed atomic.Int32
}

func (s *flakyRenewals) RenewLease(ctx context.Context, chatID, instanceID string, token int64, ttl time.Duration) (baton.Lease, error) {
	if s.failed.Add(1) == 1 {
		return baton.Lease{}, baton.Errorf(baton.EUNAVAILABLE, "renew lease: connection reset")
	}
	return s.Store.RenewLease(ctx, chatID, instanceID, token, ttl)
}

// TestInstances_TransientRenewalFailureKeepsTheRun: one failed renewal while
// the lease still runs does not stop the run (it might be inside a tool
// call); the next renewal keeps the lease, and no lease is counted lost.
func TestInstances_TransientRenewalFailureKeepsTheRun(t *testing.T) {
	const ttl = 300 * time.Millisecond // renewals every 100 ms
	var flaky *flakyRenewals
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), withInstance("A", ttl),
		withStoreWrap(func(s *sqlite.Store) engine.Store { flaky = &flakyRenewals{Store: s}; return flaky }),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			time.Sleep(250 * time.Millisecond) // past the first renewal (fails) and the second (succeeds)
			return reply("done"), nil
		}))
	id := start(t, h, "assistant")
	first := h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "take your time", "api"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the answer to be recorded", func() error {
		c, err := h.store.GetChat(context.Background(), testScope, id)
		if err != nil {
			return err
		}
		if c.LastSequence == first.LastSequence || c.Status != baton.ChatWaitingInput || !h.settled() {
			return fmt.Errorf("last sequence %d (%d before), status %s, settled %v", c.LastSequence, first.LastSequence, c.Status, h.settled())
		}
		return nil
	})
	if flaky.failed.Load() < 2 {
		t.Fatalf("%d renewals: the run was not long enough to test a failed one", flaky.failed.Load())
	}
	if n := h.eng.LeaseLosses(); n != 0 {
		t.Fatalf("a transient renewal failure stopped the run: %d lease losses", n)
	}
}
