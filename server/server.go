// Package server is baton's HTTP API: chats started, resumed, answered,
// listed, read and deleted over HTTP; their events streamed over WebSocket
// and Server-Sent Events with gap-free replay; API-key authentication with
// tenant isolation; and the seed's session prompt route.
//
// Every event a client sees goes through one door: the hub receives the
// bus's chat.* and stream.* events through a single subscription, builds
// each chat's filtered envelope once (envelope.go), and queues it to the
// chat's streams, each through a bounded queue. A stream first subscribes,
// then replays from the store everything after the client's last sequence,
// then goes live, skipping sequences it already sent: nothing recorded
// before a client connects is lost (it is in the store), and nothing is
// sent twice (invariant 3). A stream that falls behind is closed with a
// code that tells the client to reconnect and replay; it never holds up the
// run or the other streams (invariant 9).
//
// The API is described in docs/api.md and, as OpenAPI 3.1, at
// /api/openapi.json.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/workflow"
)

// Runner runs chats: what the server asks of the engine (*engine.Engine is
// one). The server depends on this interface, not on package engine, so
// that it can be built and tested without the engine's internals.
type Runner interface {
	// Workflows returns the workflows chats can be started of.
	Workflows() []*workflow.Workflow
	// Workflow returns the named workflow, or nil.
	Workflow(name string) *workflow.Workflow
	// Start creates a chat in scope and starts its run.
	Start(ctx context.Context, scope baton.Scope, workflow string, opts baton.StartOptions) (baton.Chat, error)
	// StartOnce is Start under an idempotency key: created is false when
	// the key started the chat before.
	StartOnce(ctx context.Context, scope baton.Scope, workflow, key string, opts baton.StartOptions) (chat baton.Chat, created bool, err error)
	// Resume goes on with a chat after an error.
	Resume(ctx context.Context, scope baton.Scope, chatID string) error
	// Cancel asks the chat's run in progress to stop (run.cancel).
	Cancel(ctx context.Context, scope baton.Scope, chatID string) error
	// SubmitOnce keeps a person's message in the chat's inbox and
	// publishes it; eventID (empty: a fresh one) makes retries one input.
	SubmitOnce(ctx context.Context, scope baton.Scope, chatID, eventID, content, source string) error
	// RespondUI answers a UI tool or form the chat waits for.
	RespondUI(ctx context.Context, scope baton.Scope, chatID, uiEventID, status string, data json.RawMessage) error
	// RespondUIOnce is RespondUI under the response's event id.
	RespondUIOnce(ctx context.Context, scope baton.Scope, chatID, eventID, uiEventID, status string, data json.RawMessage) error
	// CheckClientTools checks the tools a client offers a chat of a
	// workflow (AG-UI, Chat Completions), naming tools[i].name on error.
	CheckClientTools(workflow string, tools []baton.ClientTool) error
	// SubmitWithTools is SubmitOnce for a message that comes with the
	// client's tools, which replace the chat's set.
	SubmitWithTools(ctx context.Context, scope baton.Scope, chatID, eventID, content, source string, tools []baton.ClientTool) error
	// RespondUIWithTools is RespondUIOnce for a response that comes with
	// the client's tools.
	RespondUIWithTools(ctx context.Context, scope baton.Scope, chatID, eventID, uiEventID, status string, data json.RawMessage, tools []baton.ClientTool) error
	// Fork creates a chat of scope whose history is chatID's up to event
	// at, and continues it from there (engine.Engine.Fork).
	Fork(ctx context.Context, scope baton.Scope, chatID string, at int64) (baton.Chat, error)
	// PublishEvent publishes an environment event for a chat (kept in the
	// inbox first when an event-handler agent observes it).
	PublishEvent(ctx context.Context, scope baton.Scope, ev baton.Event) error
}

// Config is what a Server is made of. Store, Keys and Bus are required;
// without Engine the server reads and streams chats but cannot run them
// (start, input and prompt answer 503).
type Config struct {
	Store baton.Store
	Keys  baton.KeyStore
	Bus   *bus.Bus
	// Engine runs chats; nil (an untyped nil: not a nil *engine.Engine)
	// for a server that only reads and streams them.
	Engine Runner
	Logger *slog.Logger

	// Dev allows requests without a key, as user "dev" of the app the URL
	// names. The caller must allow it only on a loopback listener.
	Dev bool
	// FullExport lets GET …/export write every event the engine recorded
	// (hidden messages and internal agents' texts included, secrets never),
	// which baton replay needs; without it an export holds what the chat's
	// person sees, as the history does. Meant for the workflow author's
	// server (baton serve turns it on in --dev mode, or with --export-full).
	FullExport bool
	// AllowedOrigins are the browser origins, besides the server's own
	// host, that may call the API and open streams (patterns as in
	// coder/websocket's OriginPatterns: "app.example.com",
	// "https://*.example.com"). They also get CORS headers; no other origin does.
	AllowedOrigins []string
	// MaxBody limits an HTTP request body (default DefaultMaxBody).
	MaxBody int64
	// MaxMessage limits one WebSocket message (default DefaultMaxMessage).
	MaxMessage int64
	// RateLimit is each key's sustained requests (and WebSocket messages)
	// per second, RateBurst its bucket; 0 disables the limit.
	RateLimit float64
	RateBurst int
	// QueueLen is how many recorded envelopes may wait in a stream's queue
	// (default 256): a stream with more is cut off and told to replay.
	// Deltas are merged while QueueLen/8 envelopes wait, and the queue
	// holds 4×QueueLen envelopes in all (see queue).
	QueueLen int
	// HubBuffer is the hub's bus subscription buffer (default 65536).
	HubBuffer int
	// WriteTimeout bounds one write to a stream (default 10s).
	WriteTimeout time.Duration
	// Heartbeat is the SSE comment heartbeat interval (default 15s).
	Heartbeat time.Duration
	// AuthTimeout is how long a WebSocket without an Authorization header
	// has to send its auth message (default 10s).
	AuthTimeout time.Duration
	// MaxPendingAuth bounds the WebSockets that wait, all at once, for
	// their first-message auth (default 1024): each holds a connection and
	// a goroutine for up to AuthTimeout before anyone is known. Beyond it a
	// handshake is answered 429.
	MaxPendingAuth int
	// MaxPendingAuthPerAddr bounds the WebSockets of one client address
	// (an IPv4 address, an IPv6 /64) waiting for their auth message
	// (default 16), and HandshakeRate and HandshakeBurst rate-limit the
	// handshakes of such sockets per address (default 2 per second, burst
	// 32), so that nobody without a key can fill MaxPendingAuth and keep
	// every browser out. Beyond them a handshake is answered 429.
	MaxPendingAuthPerAddr int
	HandshakeRate         float64
	HandshakeBurst        int
	// AuthFailRate and AuthFailBurst bound the wrong API keys one client
	// address may present (default 1 per second, burst 20): beyond them
	// its requests with a key are answered 429 before any lookup.
	AuthFailRate  float64
	AuthFailBurst int
	// MaxStreamsPerKey bounds the open WebSocket and SSE streams of one key
	// (dev mode without a key has no bound: one developer on loopback); default 64,
	// negative for no bound. Beyond it a stream is refused with 429.
	MaxStreamsPerKey int
	// KeyRecheck is how often an open stream re-checks that its key is
	// still live (default 30s); a revoked key's stream is closed (WebSocket
	// 1008, SSE ends). Inputs over a WebSocket re-check it each time.
	KeyRecheck time.Duration
	// KeyCacheTTL is how long a key found live by a re-check is not looked
	// up again (default 5s).
	KeyCacheTTL time.Duration
	// PingInterval is how often a WebSocket is pinged (default 30s); a peer
	// that does not answer within WriteTimeout is disconnected, so dead
	// connections behind proxies and NATs do not linger.
	PingInterval time.Duration
	// UI, when set, serves the browser UI: every GET or HEAD of a path
	// outside /api/, /ws/ and /sessions/ that is not a route (the page at
	// "/" and its assets). It needs no key; the page asks for one.
	UI http.Handler
	// Health adds figures to GET /healthz (say, the instance id and the
	// chat leases it holds); it must answer at once.
	Health func() map[string]any
	// Metrics serves /metrics and /metrics/perf/* and counts WebSocket
	// streams; nil answers those routes with 503.
	Metrics *metrics.Collector
	// MetricsToken is the bearer token a Prometheus scraper presents at
	// GET /metrics and /metrics/prometheus. Those series add up every
	// tenant's turns, tokens and cost, so a tenant's API key does not open
	// them. Empty: they answer 403 (in dev mode a request without any
	// bearer is let in).
	MetricsToken string
	// Watch, if set, is called when this server's streams start following
	// a chat (its first stream here) and returns what to call when they
	// stop (its last stream ends), before the stream replays from the
	// store: with several instances, natsbridge.Bridge.Watch, so that an
	// instance receives only the chats its clients follow.
	Watch func(chatID string) (release func())
	// TracerProvider, if set, makes a server span of every request but
	// health checks and scrapes, the child of the caller's W3C traceparent
	// when it sends one; nil: no spans (tracing off).
	TracerProvider trace.TracerProvider
}

// Server serves the API. Create it with New and stop it with Close.
type Server struct {
	cfg     Config
	log     *slog.Logger
	hub     *hub
	limiter *limiter
	mux     *http.ServeMux
	routes  []route

	ctx    context.Context // done when Close is called: streams end
	cancel context.CancelFunc
	wg     sync.WaitGroup

	keysMu   sync.Mutex
	liveKeys map[string]time.Time // key hash → when a re-check last found it live (keyLive)

	streamsMu   sync.Mutex
	openStreams map[string]int // principal bucket → open streams (acquireStream)

	pendingAuth atomic.Int64 // WebSockets waiting for their auth message
	wsWrites    atomic.Int64 // WebSockets' writes to the network (batchConn), for the tests
	sseWrites   atomic.Int64 // SSE streams' writes of events (handleSSE), for the tests

	authFails     *limiter // wrong API keys, per client address
	handshakes    *limiter // unauthenticated WebSocket handshakes, per client address
	pendingMu     sync.Mutex
	pendingByAddr map[string]int // WebSockets waiting for their auth message, per client address

	mcpHTTP mcpEndpoint // the /mcp handler (mcp.go)
	// mcpElicitTimeout bounds one elicitation/create (mcp.go).
	mcpElicitTimeout time.Duration
	// mcpMaxSessions bounds the open /mcp sessions of one key (mcp.go).
	mcpMaxSessions int
}

// route is one endpoint of the API.
type route struct {
	method, pattern string
	handler         http.HandlerFunc
}

// New returns a server whose hub is subscribed to cfg.Bus. Close stops it.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Keys == nil || cfg.Bus == nil {
		return nil, errors.New("server: Store, Keys and Bus are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxMessage <= 0 {
		cfg.MaxMessage = DefaultMaxMessage
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 256
	}
	if cfg.HubBuffer <= 0 {
		cfg.HubBuffer = 1 << 16
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = 10 * time.Second
	}
	if cfg.MaxPendingAuth <= 0 {
		cfg.MaxPendingAuth = 1024
	}
	if cfg.MaxPendingAuthPerAddr <= 0 {
		cfg.MaxPendingAuthPerAddr = 16
	}
	if cfg.HandshakeRate <= 0 {
		cfg.HandshakeRate, cfg.HandshakeBurst = 2, max(cfg.HandshakeBurst, 32)
	}
	if cfg.AuthFailRate <= 0 {
		cfg.AuthFailRate, cfg.AuthFailBurst = 1, max(cfg.AuthFailBurst, 20)
	}
	if cfg.MaxStreamsPerKey == 0 {
		cfg.MaxStreamsPerKey = 64
	}
	if cfg.KeyRecheck <= 0 {
		cfg.KeyRecheck = 30 * time.Second
	}
	if cfg.KeyCacheTTL <= 0 {
		cfg.KeyCacheTTL = 5 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, limiter: newLimiter(cfg.RateLimit, cfg.RateBurst),
		authFails: newLimiter(cfg.AuthFailRate, cfg.AuthFailBurst), handshakes: newLimiter(cfg.HandshakeRate, cfg.HandshakeBurst),
		liveKeys: map[string]time.Time{}, openStreams: map[string]int{}, pendingByAddr: map[string]int{},
		mcpElicitTimeout: mcpElicitTimeout, mcpMaxSessions: mcpMaxSessions,
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hub = newHub(cfg.Bus, cfg.Logger, cfg.HubBuffer, cfg.QueueLen)
	s.hub.watch = cfg.Watch
	ready := make(chan error, 1)
	s.wg.Go(func() { s.hub.run(s.ctx, ready) })
	if err := <-ready; err != nil {
		s.cancel()
		s.wg.Wait()
		return nil, err
	}
	s.routes = []route{
		{"GET", "/healthz", s.handleHealth},
		{"GET", "/readyz", s.handleReady},
		{"GET", "/api/openapi.json", s.handleOpenAPI},
		{"GET", "/api/workflows", s.handleWorkflows},
		{"POST", "/api/chats/{app}/{workflow}/start", s.handleStart},
		{"POST", "/api/chats/{app}/{chat_id}/resume", s.handleResume},
		{"POST", "/api/chats/{app}/{chat_id}/cancel", s.handleCancel},
		{"POST", "/api/chats/{app}/{chat_id}/fork", s.handleFork},
		{"GET", "/api/me", s.handleMe},
		{"GET", "/api/chats/{app}", s.handleList},
		{"GET", "/api/chats/{app}/{chat_id}", s.handleGet},
		{"DELETE", "/api/chats/{app}/{chat_id}", s.handleDelete},
		{"GET", "/api/chats/{app}/{chat_id}/events", s.handleEvents},
		{"GET", "/api/chats/{app}/{chat_id}/stream", s.handleSSE},
		{"GET", "/api/chats/{app}/{chat_id}/export", s.handleExport},
		{"POST", "/api/input/submit", s.handleSubmit},
		{"POST", "/api/events", s.handleExternalEvent},
		{"POST", "/sessions/{id}/prompt", s.handlePrompt},
		{"GET", "/ws/{app}/{chat_id}", s.handleWS},
		{"POST", "/v1/chat/completions", s.handleChatCompletions},
		{"GET", "/v1/models", s.handleOAIModels},
		{"GET", "/v1/models/{model}", s.handleOAIModel},
		{"POST", "/mcp", s.handleMCP},
		{"GET", "/mcp", s.handleMCP},
		{"DELETE", "/mcp", s.handleMCP},
		{"GET", "/a2a/{app}/{workflow}/.well-known/agent-card.json", s.handleA2ACard},
		{"POST", "/a2a/{app}/{workflow}", s.handleA2A},
		{"POST", "/agui/{app}/{workflow}", s.handleAGUI},
		{"GET", "/metrics/perf/aggregate", s.aggregateHandler()},
		{"GET", "/metrics/perf/chats/{chat_id}", s.perfHandler((*metrics.Collector).ChatHandler)},
		{"GET", "/metrics/prometheus", s.metricsHandler(prometheusHandler(s))},
		{"GET", "/metrics", s.metricsHandler(prometheusHandler(s))},
	}
	s.mux = http.NewServeMux()
	for _, rt := range s.routes {
		s.mux.HandleFunc(rt.method+" "+rt.pattern, rt.handler)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if cfg.UI != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) && !apiPath(r.URL.Path) {
			cfg.UI.ServeHTTP(w, r)
			return
		}
		s.writeError(w, r, baton.Errorf(baton.ENOTFOUND, "no such endpoint: %s %s", r.Method, truncate(r.URL.Path, 200)))
	})
	return s, nil
}

// apiPath reports whether path belongs to the API, whose unknown paths are
// JSON 404s rather than the UI's.
func apiPath(path string) bool {
	for _, p := range []string{"/api/", "/ws/", "/sessions/", "/metrics", "/v1/", "/mcp", "/a2a/", "/agui/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Handler returns the server's http.Handler: the routes, behind the Origin
// check and CORS, and in dev mode behind the loopback Host check.
//
// With Config.TracerProvider each request gets a server span; with
// Config.Metrics its duration is measured by route and status (instrument).
func (s *Server) Handler() http.Handler {
	return s.instrument(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Dev && !devHostAllowed(r) {
			s.writeError(w, r, baton.Errorf(codeForbidden, "dev mode serves only localhost: Host %q and Origin %q must be localhost, 127.0.0.0/8 or [::1]",
				truncate(r.Host, 200), truncate(r.Header.Get("Origin"), 200)))
			return
		}
		if !originAllowed(r, s.cfg.AllowedOrigins) {
			s.writeError(w, r, baton.Errorf(codeForbidden, "origin %q is not allowed", truncate(r.Header.Get("Origin"), 200)))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && len(s.cfg.AllowedOrigins) > 0 {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", o)
			h.Add("Vary", "Origin")
			// What browser clients of the protocol routes read: the chat an
			// OpenAI-compatible answer continues, the MCP session.
			h.Set("Access-Control-Expose-Headers", "X-Baton-Chat-Id, Mcp-Session-Id")
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
				h.Set("Access-Control-Allow-Headers", corsAllowHeaders(r))
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		s.mux.ServeHTTP(w, r)
	}))
}

// corsHeaders are the request headers baton's own clients and the protocol
// clients send: the API's, the OpenAI-compatible route's, the MCP
// transport's.
const corsHeaders = "Authorization, Content-Type, Last-Event-ID, Idempotency-Key, X-Baton-App, X-Baton-Chat-Id, X-Baton-Agent-Prefix, Mcp-Session-Id, Mcp-Protocol-Version"

// corsAllowHeaders answers a preflight of an allowed origin: corsHeaders,
// and the x-stainless-* headers the OpenAI SDKs for JavaScript add to
// every request (their names vary by version, so they are allowed as
// asked, and nothing else is).
func corsAllowHeaders(r *http.Request) string {
	allow := corsHeaders
	for _, f := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if strings.HasPrefix(f, "x-stainless-") && len(f) <= 64 && !strings.ContainsAny(f, " \t\r\n;:") {
			allow += ", " + f
		}
	}
	return allow
}

// Close ends every stream (WebSockets close with 1012, "service restart":
// reconnect and replay) and stops the hub. It does not stop the engine or
// the bus. It is idempotent.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// Delivered returns how many envelopes the hub has queued to streams.
func (s *Server) Delivered() int64 { return s.hub.delivered.Load() }

// Streams returns the number of open streams.
func (s *Server) Streams() int { return s.hub.subscribers() }

// principal authenticates r for app and takes a token from its rate bucket.
func (s *Server) principal(r *http.Request, app string) (principal, error) {
	p, err := s.authenticate(r.Context(), r, bearer(r), app)
	if err != nil {
		return principal{}, err
	}
	if !s.limiter.allow(p.limit) {
		return principal{}, errRateLimited
	}
	return p, nil
}

// workflowOf returns the workflow of a chat, nil when the engine does not
// have it (no engine, or the workflow was removed): the filter then fails
// closed and shows only what it may show of any workflow (visible).
func (s *Server) workflowOf(name string) *workflow.Workflow {
	if s.cfg.Engine == nil {
		return nil
	}
	return s.cfg.Engine.Workflow(name)
}

// chatIn returns the chat of scope, or ENOTFOUND.
func (s *Server) chatIn(ctx context.Context, scope baton.Scope, chatID string) (baton.Chat, error) {
	if chatID == "" {
		return baton.Chat{}, baton.Errorf(baton.EINVALID, "chat_id: required")
	}
	c, err := s.cfg.Store.GetChat(ctx, scope, chatID)
	if err != nil {
		if baton.ErrorCode(err) == baton.ENOTFOUND {
			return baton.Chat{}, baton.Errorf(baton.ENOTFOUND, "chat %q not found", truncate(chatID, baton.MaxEventIDLen))
		}
		return baton.Chat{}, err
	}
	return c, nil
}

// Resync tells every open stream to reconnect and replay from its last
// sequence (WebSocket close code 4000; SSE streams end). Call it when this
// instance may have missed events recorded elsewhere — the NATS bridge
// does, after a reconnect.
func (s *Server) Resync() { s.hub.kickAll(kickResync) }
