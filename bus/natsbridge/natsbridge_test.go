package natsbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runNATS runs an embedded NATS server with JetStream keeping its data in
// dir (a restart on the same port and dir keeps the streams).
func runNATS(t *testing.T, port int, dir string) *natsserver.Server {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Port = port
	opts.NoLog, opts.NoSigs = true, true
	opts.JetStream, opts.StoreDir = true, dir
	ns := natstest.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	return ns
}

// runStamp tells this test process's namespaces from earlier runs' on the
// shared NATS server.
var runStamp = time.Now().UnixNano()

// namespace is a test's own NATS namespace — the same for every instance
// of the test — so that tests sharing the real NATS server never see each
// other's streams; its inputs stream is deleted when the test ends.
func namespace(t testing.TB, natsURL string) string {
	ns := "t" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name()) + fmt.Sprint("_", runStamp)
	t.Cleanup(func() {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = js.DeleteStream(ctx, natsbridge.InputStream(ns))
		}
	})
	return ns
}

// jetStream connects to NATS at url, closed when the test ends, and returns
// its JetStream API, for a test that plays with the bridges' streams.
func jetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func startBridge(t *testing.T, url, instance string, b *bus.Bus, onReconnect func()) *natsbridge.Bridge {
	t.Helper()
	br, err := natsbridge.Start(natsbridge.Config{URL: url, Bus: b, Instance: instance, Logger: quiet(), OnReconnect: onReconnect})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close(context.Background()) })
	return br
}

func TestBridge_CarriesEventsBetweenInstances(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	a, b := bus.New(bus.WithLogger(quiet())), bus.New(bus.WithLogger(quiet()))
	defer a.Close(context.Background())
	defer b.Close(context.Background())
	startBridge(t, ns.ClientURL(), "A", a, nil)
	brB := startBridge(t, ns.ClientURL(), "B", b, nil)
	onB, _ := b.Subscribe([]string{"chat.*", "stream.*"}, bus.ForChat("c1"), bus.Buffer(10))
	onA, _ := a.Subscribe([]string{"chat.*"}, bus.ForChat("c1"), bus.Buffer(10))

	ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c1", Source: baton.SourceSystem}, json.RawMessage(`{"kind":"text","agent":"A1","content":"hi"}`))
	ev.Sequence = 7
	_ = a.Broadcast(ev)
	_ = a.Broadcast(baton.NewEvent(baton.TypeStreamText, baton.Metadata{TriggerSessionID: "c1", Source: baton.SourceLLM}, json.RawMessage(`{"delta":"h"}`)))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := onB.Wait(ctx, func(e baton.Event) bool { return e.Type == baton.TypeChatText })
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != ev.ID || got.Sequence != 7 || string(got.Payload) != string(ev.Payload) {
		t.Fatalf("B got %+v, want the event with its sequence", got)
	}
	if _, err := onB.Wait(ctx, func(e baton.Event) bool { return e.Type == baton.TypeStreamText }); err != nil {
		t.Fatalf("stream delta did not cross: %v", err)
	}
	// No echo: B publishes a marker after anything it could have sent
	// back; NATS keeps one publisher's order, so an echo would reach A first.
	_ = b.Broadcast(baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c1"}, json.RawMessage(`{"content":"marker"}`)))
	n := 0
	if _, err := onA.Wait(ctx, func(e baton.Event) bool {
		if e.ID == ev.ID {
			n++
		}
		return strings.Contains(string(e.Payload), "marker")
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("A's observer saw its own event %d times, want 1 (no echo)", n)
	}
	// The bridge counts a publish after NATS took it: A may hold the marker
	// a moment before B's count moves.
	testenv.Eventually(t, 10*time.Second, "B's bridge to count 1 event sent (the marker) and 2 received", func() error {
		sent, received := brB.Stats()
		if sent > 1 || received > 2 {
			t.Fatalf("B's bridge sent %d and received %d, want 1 (the marker) and 2", sent, received)
		}
		if sent != 1 || received != 2 {
			return fmt.Errorf("sent %d, received %d", sent, received)
		}
		return nil
	})
}

// TestBridge_PerChatReceivesOnlyWatchedChats: with PerChat, an instance
// receives the events of the chats watched there and no other; watches of
// one chat share one subscription, dropped with the last.
func TestBridge_PerChatReceivesOnlyWatchedChats(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	a, b := bus.New(bus.WithLogger(quiet())), bus.New(bus.WithLogger(quiet()))
	defer a.Close(context.Background())
	defer b.Close(context.Background())
	startBridge(t, ns.ClientURL(), "A", a, nil)
	brB, err := natsbridge.Start(natsbridge.Config{URL: ns.ClientURL(), Bus: b, Instance: "B", Logger: quiet(), PerChat: true})
	if err != nil {
		t.Fatal(err)
	}
	defer brB.Close(context.Background())
	onB, _ := b.Subscribe([]string{"chat.*"}, bus.Buffer(100))
	text := func(chat, content string) baton.Event {
		return baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: chat}, json.RawMessage(`{"content":"`+content+`"}`))
	}
	base := brB.Subscriptions()
	release1 := brB.Watch("watched")
	release2 := brB.Watch("watched")
	if brB.Watched() != 1 {
		t.Fatalf("%d subscriptions for one chat watched twice, want 1", brB.Watched())
	}
	_ = a.Broadcast(text("other", "not for B"))
	_ = a.Broadcast(text("watched", "for B"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := onB.Wait(ctx, func(baton.Event) bool { return true })
	if err != nil || got.ChatID() != "watched" {
		t.Fatalf("B received %s (%v) first, want the watched chat's event (NATS keeps A's order)", got.ChatID(), err)
	}
	release1()
	release1() // idempotent
	if brB.Watched() != 1 {
		t.Fatal("the subscription went with the first of two watches")
	}
	release2()
	if brB.Watched() != 0 {
		t.Fatal("the subscription outlived its last watch")
	}
	// Release hands the NATS unsubscription to a goroutine; wait for it.
	if err := brB.WaitSubscriptions(ctx, base); err != nil {
		t.Fatalf("the released watch's subscription was not dropped: %v", err)
	}
	// Unwatched now: a marker on a chat watched anew arrives, the old chat's event does not.
	defer brB.Watch("marker")()
	_ = a.Broadcast(text("watched", "too late"))
	_ = a.Broadcast(text("marker", "end"))
	got, err = onB.Wait(ctx, func(baton.Event) bool { return true })
	if err != nil || got.ChatID() != "marker" {
		t.Fatalf("after release B received %s (%v), want only the marker", got.ChatID(), err)
	}
}

func TestBridge_ReconnectAfterNATSRestart(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	url := ns.ClientURL()
	var reconnects atomic.Int64
	b := bus.New(bus.WithLogger(quiet()))
	defer b.Close(context.Background())
	startBridge(t, url, "A", b, func() { reconnects.Add(1) })
	ns.Shutdown()
	ns.WaitForShutdown()
	runNATS(t, portOf(url), t.TempDir())
	testenv.Eventually(t, 10*time.Second, "a reconnect after NATS came back", func() error {
		if reconnects.Load() == 0 {
			return errors.New("no reconnect yet")
		}
		return nil
	})
}

func portOf(url string) int {
	i := strings.LastIndex(url, ":")
	n := 0
	for _, c := range url[i+1:] {
		n = n*10 + int(c-'0')
	}
	return n
}

// instance is a baton process: its own bus, recorder, engine and server on
// a shared store file, and a bridge to NATS.
type instance struct {
	id     string
	store  baton.Store
	bus    *bus.Bus
	eng    *engine.Engine
	srv    *server.Server
	ts     *httptest.Server
	bridge *natsbridge.Bridge
	kill   func() // stops the instance (idempotent)
}

func newInstance(t *testing.T, id, dbPath, natsURL string) *instance {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	return newInstanceOn(t, id, st, natsURL)
}

func newInstanceOn(t *testing.T, id string, st baton.Store, natsURL string) *instance {
	t.Helper()
	return newInstanceIn(t, id, st, natsURL, "../../workflows")
}

// ttlFor is the instances' lease TTL: long enough that no renewal comes
// late on a loaded CI machine, so a run that loses its lease shows a bug.
const ttlFor = 5 * time.Second

// newInstanceIn is an instance running the workflows of dir, routing inputs
// to chats' owners through JetStream.
func newInstanceIn(t testing.TB, id string, st baton.Store, natsURL, dir string) *instance {
	t.Helper()
	return newInstanceWith(t, id, st, natsURL, dir, instanceOptions{leaseTTL: ttlFor, inactiveAfter: 3 * time.Second})
}

// instanceOptions are an instance's timings: its chat leases' TTL, and how
// long NATS keeps its input consumer once it stops asking.
type instanceOptions struct {
	leaseTTL, inactiveAfter time.Duration
}

// newInstanceWith is newInstanceIn with the timings of opts.
func newInstanceWith(t testing.TB, id string, st baton.Store, natsURL, dir string, opts instanceOptions) *instance {
	t.Helper()
	rt, err := runtime.Open(context.Background(), runtime.Config{
		Store: st, WorkflowsDir: dir, Logger: quiet(),
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
		SecretKey:  []byte("0123456789abcdef0123456789abcdef"),
		InstanceID: id, LeaseTTL: opts.leaseTTL, BusURL: natsURL, BusNamespace: namespace(t, natsURL),
		Bridge: func(c *natsbridge.Config) { c.Inputs.InactiveAfter = opts.inactiveAfter },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: st, Keys: st, Bus: rt.Bus(), Engine: rt.Engine(), Logger: quiet(), Dev: true,
		Watch: rt.Watch()})
	if err != nil {
		_ = rt.Close(context.Background())
		t.Fatal(err)
	}
	rt.OnReconnect(srv.Resync)
	in := &instance{id: id, store: st, bus: rt.Bus(), eng: rt.Engine(), srv: srv, ts: httptest.NewServer(srv.Handler()), bridge: rt.Bridge()}
	var once sync.Once
	in.kill = func() {
		once.Do(func() {
			in.ts.Close()
			srv.Close()
			_ = rt.Close(context.Background()) // inputs stop, the bus drains, the bridge and the engine close
			_ = st.Close()
		})
	}
	t.Cleanup(in.kill)
	return in
}

// TestBridge_ClientOnAnotherInstance: a chat runs on instance A; a
// WebSocket client connected to instance B sees every one of its events,
// live, exactly once and in order, equal to the chat's history.
func TestBridge_ClientOnAnotherInstance(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	db := filepath.Join(t.TempDir(), "baton.db")
	a := newInstance(t, "A", db, ns.ClientURL())
	b := newInstance(t, "B", db, ns.ClientURL())
	scope := baton.Scope{App: "acme", User: server.DevUser}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	chatID := baton.NewID()
	// The client connects to B before the chat exists on A's side of the
	// world; it must be created first so that B can authorise the stream.
	c, err := a.eng.Start(ctx, scope, "hello", baton.StartOptions{ChatID: chatID})
	if err != nil {
		t.Fatal(err)
	}
	u := "ws" + strings.TrimPrefix(b.ts.URL, "http") + "/ws/acme/" + c.ID + "?last_sequence=0"
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	var seqs []int64
	for {
		_, raw, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (sequences so far %v)", err, seqs)
		}
		var env struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		_ = json.Unmarshal(raw, &env)
		if s, ok := env.Data["sequence"].(float64); ok {
			seqs = append(seqs, int64(s))
		}
		if env.Type == baton.TypeChatRunComplete {
			break
		}
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("client on B saw sequences %v: gap, repeat or disorder", seqs)
		}
	}
	if len(seqs) != 12 {
		t.Fatalf("client on B saw %d events, want the hello chat's 12", len(seqs))
	}
}

// TestBridge_FallsBehindSubscribesAgainAndAsksForResync: a burst larger
// than the bridge's buffer makes the bus drop its subscription. The bridge
// subscribes again — later events still reach NATS — and asks the other
// instances to resync, since some of its events never reached them.
func TestBridge_FallsBehindSubscribesAgainAndAsksForResync(t *testing.T) {
	ns := runNATS(t, -1, t.TempDir())
	a := bus.New(bus.WithLogger(quiet()))
	defer a.Close(context.Background())
	b := bus.New(bus.WithLogger(quiet()))
	defer b.Close(context.Background())
	startBridge(t, ns.ClientURL(), "A", a, nil)
	var resyncs atomic.Int32
	startBridge(t, ns.ClientURL(), "B", b, func() { resyncs.Add(1) })
	// Small deltas: the bridge drains what its subscription buffered
	// (65,536 events) before it subscribes again and asks for the resync,
	// and 2 KB ones took 20 s and more to encode and publish under -race
	// on a slow, busy machine.
	delta := json.RawMessage(`{"delta":"` + strings.Repeat("x", 100) + `"}`)
	for i := 0; i < 200_000; i++ {
		_ = a.Broadcast(baton.NewEvent(baton.TypeStreamText, baton.Metadata{TriggerSessionID: "c1", Source: baton.SourceLLM}, delta))
	}
	if a.Stats().ObserverDrops == 0 {
		t.Fatal("the burst did not make the bus drop the bridge's subscription: the test tests nothing")
	}
	// A bound on a hang, not a measure: under -race on a busy 2-core
	// machine the burst and its drain take 10 s and more.
	testenv.Eventually(t, 60*time.Second, "the other instance to be asked to resync", func() error {
		if resyncs.Load() == 0 {
			return errors.New("no resync yet")
		}
		return nil
	})
	// One more recorded event, after the bridge fell behind, must still
	// reach the other instance, whatever of the backlog is still on its way.
	onB, err := b.Subscribe([]string{"chat.*"}, bus.Buffer(16))
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c2", Source: baton.SourceSystem}, json.RawMessage(`{"kind":"text","agent":"A1","content":"later"}`))
	ev.Sequence = 1
	_ = a.Broadcast(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := onB.Wait(ctx, func(got baton.Event) bool { return got.ID == ev.ID }); err != nil {
		t.Fatalf("a recorded event after the bridge fell behind did not reach the other instance: %v", err)
	}
}
