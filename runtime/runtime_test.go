package runtime

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
)

// countingStore counts the calls of Close on the store it wraps.
type countingStore struct {
	baton.Store
	closes atomic.Int32
}

func (s *countingStore) Close() error {
	s.closes.Add(1)
	return s.Store.Close()
}

// steps are the steps of Open that Config.fail can fail, in order.
var steps = []string{"workflows", "store", "bus", "metrics", "tracing", "engine", "tracer", "collector", "rules", "nats", "run"}

// quiet is a logger for tests: the runtime's lines would bury the test's.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runHello starts a chat of the hello workflow and waits for its
// chat.run_complete on the bus: the whole path (engine, recorder, its
// publisher, the store) works.
func runHello(t *testing.T, rt *Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // catches a hang only
	defer cancel()
	chatID := baton.NewID()
	sub, err := rt.Bus().Subscribe([]string{baton.TypeChatRunComplete}, bus.ForChat(chatID))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	scope := baton.Scope{App: "acme", User: "ada"}
	if _, err := rt.Engine().Start(ctx, scope, "hello", baton.StartOptions{ChatID: chatID}); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Wait(ctx, func(baton.Event) bool { return true }); err != nil {
		t.Fatalf("waiting for chat.run_complete: %v", err)
	}
	// Persist before send: the store holds what the bus delivered.
	evs, err := rt.Store().Events(ctx, scope, chatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != baton.TypeChatRunComplete {
		t.Fatalf("the store's last event of the chat is not chat.run_complete: %d events", len(evs))
	}
}

// TestOpenClose opens a runtime on each store, runs the hello workflow to
// its end, closes it, and finds the store closed and no goroutine left.
func TestOpenClose(t *testing.T) {
	stores := []struct{ name, url string }{
		{"mem", "mem:"},
		{"sqlite", "sqlite:" + filepath.Join(t.TempDir(), "baton.db")},
		{"postgres", os.Getenv("BATON_TEST_POSTGRES_DSN")},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			if s.url == "" {
				t.Skip("BATON_TEST_POSTGRES_DSN is not set")
			}
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var st *countingStore
			rt, err := Open(context.Background(), Config{
				StoreURL: s.url, DataDir: t.TempDir(), Logger: quiet(),
				WrapStore: func(inner baton.Store) baton.Store { st = &countingStore{Store: inner}; return st },
			})
			if err != nil {
				t.Fatal(err)
			}
			runHello(t, rt)
			if err := rt.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if n := st.closes.Load(); n != 1 {
				t.Errorf("the store was closed %d times, want 1", n)
			}
			if err := rt.Close(context.Background()); err != nil {
				t.Errorf("a second Close: %v", err)
			}
			if n := st.closes.Load(); n != 1 {
				t.Errorf("after a second Close the store was closed %d times, want 1", n)
			}
		})
	}
}

// TestOpenCloseOverNATS opens an instance of a deployment (PostgreSQL
// shared, events carried over NATS), runs hello on it, and closes it: the
// NATS bridge, its inputs queue and the lease sweeper leave no goroutine.
func TestOpenCloseOverNATS(t *testing.T) {
	dsn, natsURL := os.Getenv("BATON_TEST_POSTGRES_DSN"), os.Getenv("BATON_TEST_NATS_URL")
	if dsn == "" || natsURL == "" {
		t.Skip("needs BATON_TEST_POSTGRES_DSN and BATON_TEST_NATS_URL")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ns := "rt" + strings.ReplaceAll(baton.NewID(), "-", "")[:12] // this test's own subjects and stream
	rt, err := Open(context.Background(), Config{
		StoreURL: dsn, DataDir: t.TempDir(), Logger: quiet(),
		BusURL: natsURL, BusNamespace: ns, InstanceID: "a-" + ns,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Watch() == nil || rt.Health()["instance"] != "a-"+ns {
		t.Errorf("an instance over NATS has no Watch or no instance in its Health: %v", rt.Health())
	}
	runHello(t, rt)
	if err := rt.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A step failing after the bridge connected closes the bridge too.
	injected := errors.New("injected after the bridge")
	_, err = Open(context.Background(), Config{
		StoreURL: dsn, DataDir: t.TempDir(), Logger: quiet(),
		BusURL: natsURL, BusNamespace: ns, InstanceID: "b-" + ns,
		fail: func(step string) error {
			if step == "run" {
				return injected
			}
			return nil
		},
	})
	if !errors.Is(err, injected) {
		t.Fatalf("Open: %v, want the injected error", err)
	}
}

// TestOpenFailureClosesWhatWasOpened fails each step of Open in turn: Open
// returns that step's error, the store is closed once if it was opened, and
// no goroutine of the bus, the collector, the tracer, the engine or its
// runner is left.
func TestOpenFailureClosesWhatWasOpened(t *testing.T) {
	dataDir := t.TempDir()
	// Tracing on, so the tracer provider's batcher and the tracer's
	// goroutine are among what must be closed; nothing is exported.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
	for i, failing := range steps {
		t.Run(failing, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			injected := errors.New("injected at " + failing)
			var st *countingStore
			rt, err := Open(context.Background(), Config{
				StoreURL: "mem:", DataDir: dataDir, Logger: quiet(), TracesFromEnv: true,
				WrapStore: func(inner baton.Store) baton.Store { st = &countingStore{Store: inner}; return st },
				fail: func(step string) error {
					if step == failing {
						return injected
					}
					return nil
				},
			})
			if !errors.Is(err, injected) {
				if rt != nil {
					_ = rt.Close(context.Background())
				}
				t.Fatalf("Open: %v, want the injected error", err)
			}
			opened := i > slices.Index(steps, "store")
			switch {
			case !opened && st != nil:
				t.Errorf("the store was opened before its step")
			case opened && st == nil:
				t.Fatalf("the store was not opened before step %s", failing)
			case opened && st.closes.Load() != 1:
				t.Errorf("the store was closed %d times, want 1", st.closes.Load())
			}
		})
	}
}

// A real failure of a step (not an injected one) closes what was opened
// too: here the engine refuses a workflow whose go tool has no function.
func TestOpenFailureOfTheEngineClosesTheStore(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var st *countingStore
	_, err := Open(context.Background(), Config{
		StoreURL: "mem:", Workflows: []*workflow.Workflow{goToolWorkflow(t)}, Logger: quiet(),
		WrapStore: func(inner baton.Store) baton.Store { st = &countingStore{Store: inner}; return st },
	})
	if err == nil || !strings.Contains(err.Error(), `go function "find_order" is not registered`) {
		t.Fatalf("Open: %v, want the unregistered go function named", err)
	}
	if st == nil || st.closes.Load() != 1 {
		t.Fatalf("the store was not closed once after the engine failed")
	}
}

// A store given in Config.Store is the caller's: Close leaves it open.
func TestGivenStoreStaysOpen(t *testing.T) {
	given := &countingStore{Store: memStore(t)}
	rt, err := Open(context.Background(), Config{Store: given, DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	runHello(t, rt)
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := given.closes.Load(); n != 0 {
		t.Errorf("Close closed the caller's store %d times", n)
	}
}

// Settings that cannot work are refused before anything opens, naming the
// setting.
func TestOpenRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{WorkflowsDir: "wf"}, "no store"},
		{Config{StoreURL: "mem:"}, "no workflows"},
		{Config{StoreURL: "mem:", DataDir: "d", InstanceID: "a"}, "InstanceID needs a store the instances share"},
		{Config{StoreURL: "mem:", DataDir: "d", BusURL: "nats://127.0.0.1:4222"}, "BusURL needs InstanceID"},
		{Config{StoreURL: "mem:", DataDir: "d", MaxChats: -1}, "MaxChats"},
		{Config{StoreURL: "mem:", DataDir: t.TempDir(), SecretKey: []byte("short")}, "SecretKey has 5 bytes"},
	} {
		rt, err := Open(context.Background(), c.cfg)
		if err == nil {
			_ = rt.Close(context.Background())
			t.Errorf("%+v: opened", c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %q does not say %q", c.cfg, err, c.want)
		}
	}
}

// TestOpenSQLiteCommitDelay: Config.SQLiteCommitDelay reaches the SQLite
// store runtime.Open opens (0: the default, negative: none).
func TestOpenSQLiteCommitDelay(t *testing.T) {
	for _, tc := range []struct {
		set, want time.Duration
	}{
		{0, sqlite.DefaultCommitDelay},
		{-1, 0},
		{5 * time.Millisecond, 5 * time.Millisecond},
	} {
		dir := t.TempDir()
		rt, err := Open(context.Background(), Config{DataDir: dir, Logger: quiet(), SQLiteCommitDelay: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		got := rt.Store().(*sqlite.Store).CommitDelay()
		if err := rt.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("SQLiteCommitDelay %v: the store's commit delay is %v; want %v", tc.set, got, tc.want)
		}
	}
}
