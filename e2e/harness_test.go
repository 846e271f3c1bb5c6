//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/web"
	"github.com/batonhq/baton/workflow"
)

// app is the tenant the page acts for (its default; dev mode needs no key).
const app = "default"

// backend is one life of the real server: the runtime (store, bus,
// recorder, engine, metrics) and the API with the UI, listening on addr.
// kill ends it abruptly, as a crash would: every connection is cut before
// anything is shut down.
type backend struct {
	addr   string
	ln     *trackingListener
	hs     *http.Server
	api    *server.Server
	eng    *engine.Engine
	bus    *bus.Bus
	st     *sqlite.Store
	rt     *runtime.Runtime
	served chan struct{}
	once   sync.Once
}

// testWorkflows loads this package's test workflows (the examples come
// from ../workflows).
func testWorkflows(t *testing.T) []*workflow.Workflow {
	t.Helper()
	own, err := workflow.LoadAll(os.DirFS("testdata/workflows"))
	if err != nil {
		t.Fatalf("load testdata workflows: %v", err)
	}
	return own
}

// reportLine is one line of long_report's result; the result has 40.
const reportLine = "Line %02d of the report on %s: nothing unusual was seen.\n"

// longReport is the slow workflow's Go tool: a result long enough that the
// page shows only its start until the person asks for all of it.
func longReport(_ context.Context, _ *baton.CallContext, in struct {
	Topic string `json:"topic"`
}) (string, error) {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, reportLine, i, in.Topic)
	}
	return b.String(), nil
}

// setup is what the options change: by default dev mode (no key) and no
// metrics.
type setup struct {
	dev, metrics bool
}

// option changes the setup.
type option func(*setup)

// withKeys turns dev mode off: every request needs an API key.
func withKeys(s *setup) { s.dev = false }

// withMetrics mounts the metrics collector (GET /metrics/perf/chats/{id}).
func withMetrics(s *setup) { s.metrics = true }

// startBackend starts a server on addr ("127.0.0.1:0" for a new port) over
// the SQLite file dbPath, resuming the chats that were running.
func startBackend(t *testing.T, dbPath, addr string, opts ...option) *backend {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := sqlite.Open(ctx, dbPath, sqlite.WithSynchronous("NORMAL"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	b := &backend{st: st, served: make(chan struct{})}
	// The runtime's standard wiring on this test's store: the examples
	// generator and hello, this package's workflows, the long_report and
	// book_trip tools.
	b.rt, err = runtime.Open(ctx, runtime.Config{
		Store: st, WorkflowsDir: "../workflows", Workflows: testWorkflows(t), Logger: log,
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
		SecretKey: []byte("0123456789abcdef0123456789abcdef"),
		Funcs:     []baton.Tool{tool.MustFunc("long_report", "Return a long report about a topic.", longReport), bookTrip{}},
	})
	if err != nil {
		_ = st.Close()
		t.Fatalf("runtime: %v", err)
	}
	b.eng, b.bus = b.rt.Engine(), b.rt.Bus()
	if err := b.rt.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	su := setup{dev: true}
	for _, o := range opts {
		o(&su)
	}
	cfg := server.Config{Store: st, Keys: st, Bus: b.bus, Engine: b.eng, Logger: log, Dev: su.dev, UI: web.Handler()}
	if su.metrics {
		cfg.Metrics = b.rt.Metrics()
	}
	b.api, err = server.New(cfg)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	ln, err := listen(ctx, addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	b.ln = &trackingListener{Listener: ln, conns: map[net.Conn]struct{}{}}
	b.addr = ln.Addr().String()
	b.hs = &http.Server{Handler: b.api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(b.served)
		_ = b.hs.Serve(b.ln)
	}()
	t.Cleanup(b.kill)
	return b
}

// listen listens on addr, retrying briefly when a restart finds the port
// not yet released.
func listen(ctx context.Context, addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// url is the page's address.
func (b *backend) url() string { return "http://" + b.addr + "/" }

// kill cuts every connection (WebSockets included: they are hijacked, so
// http.Server.Close would not), then stops the API, the engine, the bus and
// the store. It is idempotent.
func (b *backend) kill() {
	b.once.Do(func() {
		_ = b.ln.Close()
		b.ln.closeAll()
		_ = b.hs.Close()
		<-b.served
		b.api.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.rt.Close(ctx) // the bus drains, then the collector and the engine close
		_ = b.st.Close()
	})
}

// trackingListener remembers the connections it accepted so that kill can
// cut them all.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, errors.New("listener closed")
	}
	l.conns[c] = struct{}{}
	return c, nil
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for c := range l.conns {
		_ = c.Close()
	}
	clear(l.conns)
}
