package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
	"github.com/coder/websocket"
)

// The tests run the real engine with the scripted provider on a real SQLite
// file, behind a real httptest.Server, with real WebSocket and HTTP clients.

const (
	examplesDir = "../workflows"
	benchDir    = "testdata/workflows"
	testSecret  = "sk-live-DO-NOT-LEAK-4242"
)

// Scopes and their keys: ada of acme owns the chats; bob is another user of
// acme; mallory is a user of another app.
var (
	scopeAda     = baton.Scope{App: "acme", User: "ada"}
	scopeBob     = baton.Scope{App: "acme", User: "bob"}
	scopeMallory = baton.Scope{App: "umbrella", User: "ada"}
)

type env struct {
	t      *testing.T
	store  *sqlite.Store
	bus    *bus.Bus
	eng    *engine.Engine
	rt     *runtime.Runtime // nil withoutEngine
	rec    baton.Recorder
	srv    *Server
	ts     *httptest.Server
	keys   map[baton.Scope]string
	noEng  bool
	cfg    Config
	wfRoot string
	stamp  *stampPublisher
	// readTimeout is the http.Server's ReadTimeout (0: none).
	readTimeout time.Duration
	// wrapStore, if set, wraps the store the server reads (not the
	// engine's, nor the key store).
	wrapStore func(baton.Store) baton.Store
	// metrics gives the server the runtime's metrics collector (withoutEngine:
	// one not started).
	metrics bool
	// sndBuf, if set, is the send buffer of the server's connections:
	// small, a client that stops reading blocks the server's writes at
	// once instead of filling loopback's megabytes first.
	sndBuf int
	// prov, if set, replaces the scripted provider of the workflows.
	prov engine.ProviderFunc
}

type envOption func(*env)

func withConfig(f func(*Config)) envOption { return func(e *env) { f(&e.cfg) } }

// withoutEngine builds a server that cannot run chats (seed: no session support).
func withoutEngine() envOption { return func(e *env) { e.noEng = true } }

// withPublisher puts p between the recorder and the bus.
func withPublisher(p *stampPublisher) envOption { return func(e *env) { e.stamp = p } }

// withServerStore makes the server read the store through wrap.
func withServerStore(wrap func(baton.Store) baton.Store) envOption {
	return func(e *env) { e.wrapStore = wrap }
}

// withMetrics gives the server a metrics collector, so that /metrics and
// /metrics/perf/* answer.
func withMetrics() envOption { return func(e *env) { e.metrics = true } }

// withSmallSocketBuffers gives the server's connections a send buffer of n
// bytes (dial with dialSmall for a small receive buffer too).
func withSmallSocketBuffers(n int) envOption { return func(e *env) { e.sndBuf = n } }

// smallBufListener sets each accepted connection's send buffer.
type smallBufListener struct {
	net.Listener
	n int
}

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(l.n)
	}
	return c, err
}

// smallBufClient is an HTTP client whose connections' TCP receive buffer
// is n bytes.
func smallBufClient(t testing.TB, n int) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(n)
		}
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// dialSmall opens a WebSocket whose TCP receive buffer is n bytes.
func (e *env) dialSmall(ctx context.Context, t testing.TB, chatID string, lastSeq int64, n int) *websocket.Conn {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+e.keys[scopeAda])
	u := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/ws/acme/" + chatID + "?last_sequence=" + itoa(lastSeq)
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h, HTTPClient: smallBufClient(t, n)})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(8 << 20)
	return c
}

// withModel gives the engine prov instead of the workflows' scripted
// providers.
func withModel(prov engine.ProviderFunc) envOption { return func(e *env) { e.prov = prov } }

// withProvider replaces the workflows' scripted providers.
func withProvider(p engine.ProviderFunc) envOption { return func(e *env) { e.prov = p } }

// withWorkflows loads the workflows from dir instead of the examples.
func withWorkflows(dir string) envOption { return func(e *env) { e.wfRoot = dir } }

func quietLogger() *slog.Logger {
	if os.Getenv("BATON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	e := &env{keys: map[baton.Scope]string{}, wfRoot: examplesDir}
	if tt, ok := t.(*testing.T); ok {
		e.t = tt
	}
	for _, o := range opts {
		o(e)
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "baton.db"), sqlite.WithSynchronous("NORMAL"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	e.store = st
	log := quietLogger()
	if e.noEng {
		e.bus = bus.New(bus.WithLogger(log))
		e.rec = recorder.New(st, engine.ObserverPublisher{Bus: e.bus})
	} else {
		prov := e.prov
		if prov == nil {
			prov = func(wf *workflow.Workflow) (baton.Provider, error) {
				return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
			}
		}
		rc := runtime.Config{
			Store: st, WorkflowsDir: e.wfRoot, Providers: prov, Logger: log,
			SecretKey: []byte("0123456789abcdef0123456789abcdef"),
		}
		if e.stamp != nil {
			rc.WrapPublisher = func(next recorder.Publisher) recorder.Publisher { e.stamp.next = next; return e.stamp }
		}
		if e.rt, err = runtime.Open(ctx, rc); err != nil {
			t.Fatalf("runtime: %v", err)
		}
		e.bus, e.eng, e.rec = e.rt.Bus(), e.rt.Engine(), e.rt.Recorder()
	}
	cfg := e.cfg
	cfg.Store, cfg.Keys, cfg.Bus, cfg.Logger = st, st, e.bus, log
	if e.eng != nil { // a nil *engine.Engine would be a non-nil Runner
		cfg.Engine = e.eng
	}
	if e.wrapStore != nil {
		cfg.Store = e.wrapStore(st)
	}
	if e.metrics {
		if e.rt != nil {
			cfg.Metrics = e.rt.Metrics()
		} else if cfg.Metrics, err = metrics.New(metrics.Options{Bus: e.bus, Chats: st.GetChat, Usage: st, Logger: log}); err != nil {
			t.Fatalf("metrics: %v", err)
		}
	}
	e.srv, err = New(cfg)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	e.ts = httptest.NewUnstartedServer(e.srv.Handler())
	e.ts.Config.ReadTimeout = e.readTimeout
	if e.sndBuf > 0 {
		e.ts.Listener = smallBufListener{Listener: e.ts.Listener, n: e.sndBuf}
	}
	e.ts.Start()
	for _, sc := range []baton.Scope{scopeAda, scopeBob, scopeMallory} {
		key, hash, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateKey(ctx, baton.APIKey{Hash: hash, App: sc.App, User: sc.User, Name: "test"}); err != nil {
			t.Fatalf("create key: %v", err)
		}
		e.keys[sc] = key
	}
	t.Cleanup(func() {
		e.ts.CloseClientConnections()
		e.ts.Close()
		e.srv.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if e.rt != nil {
			_ = e.rt.Close(cctx) // the bus drains, then the collector and the engine close
		} else {
			_ = e.bus.Close(cctx)
		}
		_ = st.Close()
	})
	return e
}

// response is an HTTP answer.
type response struct {
	status int
	body   []byte
	header http.Header
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not JSON: %v: %s", r.status, err, r.body)
	}
	return m
}

// errorMessage returns the error message of an error response.
func (r response) errorMessage() string {
	var b errorBody
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Message
}

// do sends a request with key (none when "") and an optional JSON or raw body.
func (e *env) do(t testing.TB, method, p, key string, body any, hdr ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.ts.URL+p, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, p, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: raw, header: resp.Header}
}

// start starts a chat of workflow for ada and returns its id.
func (e *env) start(t testing.TB, wf string, body any) string {
	t.Helper()
	r := e.do(t, "POST", "/api/chats/acme/"+wf+"/start", e.keys[scopeAda], body)
	if r.status != http.StatusCreated {
		t.Fatalf("start %s: %d %s", wf, r.status, r.body)
	}
	id, _ := r.json(t)["chat_id"].(string)
	if id == "" {
		t.Fatalf("start %s: no chat_id in %s", wf, r.body)
	}
	return id
}

// waitStatus polls the store until the chat has one of the statuses and
// the bus is idle.
func (e *env) waitStatus(t testing.TB, chatID string, want ...baton.ChatStatus) baton.Chat {
	t.Helper()
	var c baton.Chat
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("chat %s to reach one of %v with the bus idle", chatID, want), func() error {
		var err error
		if c, err = e.store.GetChat(context.Background(), scopeAda, chatID); err != nil {
			return err
		}
		st := e.bus.Stats()
		if !slices.Contains(want, c.Status) || st.Published != st.Handled+st.Unmatched || e.eng.Active() != 0 {
			return fmt.Errorf("status %q, bus stats %+v, %d runs active", c.Status, st, e.eng.Active())
		}
		return nil
	})
	return c
}

// history returns the chat's envelopes from the events endpoint.
func (e *env) history(t testing.TB, chatID string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	after := int64(0)
	for {
		r := e.do(t, "GET", "/api/chats/acme/"+chatID+"/events?after="+itoa(after), e.keys[scopeAda], nil)
		if r.status != 200 {
			t.Fatalf("events: %d %s", r.status, r.body)
		}
		var page historyPage
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Events...)
		after = page.LastSequence
		if !page.More {
			return out
		}
	}
}

// dial opens a WebSocket to the chat as scope, after lastSeq.
func (e *env) dial(ctx context.Context, t testing.TB, chatID string, lastSeq int64, key string) *websocket.Conn {
	t.Helper()
	c, err := e.tryDial(ctx, chatID, lastSeq, key)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

func (e *env) tryDial(ctx context.Context, chatID string, lastSeq int64, key string) (*websocket.Conn, error) {
	return e.tryDialQuery(ctx, chatID, "last_sequence="+itoa(lastSeq), key)
}

// tryDialQuery opens a WebSocket to the chat with a query string of its own.
func (e *env) tryDialQuery(ctx context.Context, chatID, query, key string) (*websocket.Conn, error) {
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	u := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/ws/acme/" + chatID + "?" + query
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(8 << 20)
	return c, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// envelope is a received envelope, decoded.
type envelope struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
	raw  []byte
}

func (v envelope) seq() int64 {
	f, _ := v.Data["sequence"].(float64)
	return int64(f)
}

func (v envelope) str(k string) string { s, _ := v.Data[k].(string); return s }

func decodeEnvelope(t testing.TB, raw []byte) envelope {
	t.Helper()
	var v envelope
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("envelope is not JSON: %v: %s", err, raw)
	}
	v.raw = raw
	return v
}

// bearerTransport adds an API key (if any) to every request of an SDK's
// client (a2a-go's, the MCP go-sdk's), then sends it with next (nil:
// http.DefaultTransport).
type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	next := b.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// nodeWith returns the node binary, with the npm package pkg installed in
// dir (its package.json; .ci/run installs them). Without either a test
// skips, but never in CI, where they must be there.
func nodeWith(t *testing.T, dir, pkg string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("node and the npm package %s in server/%s are needed in CI (npm install --prefix server/%s; .ci/run does): %v", pkg, dir, dir, err)
		}
		t.Skipf("node or the npm package %s is missing (npm install --prefix server/%s): %v", pkg, dir, err)
	}
	return node
}
