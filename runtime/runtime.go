// Package runtime opens a whole baton runtime with one call: the store, the
// bus (in-process, or carried between instances over NATS), the engine, the
// recorder with its publisher, the metrics collector, the tracer, the
// workflows and their model providers, and Go function tools.
//
// Open opens the parts one after the other, each after those it needs, and
// Close closes them in reverse (the bus drains first, so that running turns
// reach a recorded point), so a program that embeds baton (a custom server
// with Go tools, a batch job, a test) wires nothing by hand. When any step of Open fails, everything it
// had already opened is closed before it returns the error.
//
// The recorder is always built with the bus's observer publisher
// (engine.ObserverPublisher; Config.WrapPublisher may wrap it, never drop
// it): without it no subscriber would ever see a recorded chat.* event.
package runtime

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/llm/openai"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// Config says where a runtime's parts come from. The zero value (with a
// DataDir) opens what `baton serve` opens by default: SQLite under DataDir,
// the embedded example workflows, the in-process bus.
type Config struct {
	// StoreURL is sqlite:PATH, postgres://… or mem: (in memory, lost when
	// the process exits). Empty: sqlite:DataDir/baton.db. Ignored when
	// Store is set.
	StoreURL string
	// Store, when set, is used instead of opening StoreURL. It belongs to
	// the caller: Close leaves it open.
	Store baton.Store
	// WrapStore, when set, wraps the store (opened or given) before any
	// part sees it: a test's fault injection, a cache, a metrics layer.
	// When the runtime opened the store, Close closes what WrapStore
	// returned, which must close the store it wraps.
	WrapStore func(baton.Store) baton.Store

	// WorkflowsDir is a folder of workflow folders. When it is empty and
	// Workflows is empty too, the embedded example workflows (hello,
	// generator) are written under DataDir/workflows and loaded from there
	// (command tools run from files on disk).
	WorkflowsDir string
	// Workflows are workflows built in Go (workflow.Build), run besides
	// those of WorkflowsDir. Their command tools, if any, run from
	// WorkflowsDir (or the current directory) joined with their Dir.
	Workflows []*workflow.Workflow
	// Funcs are the Go function tools the workflows' "go" tools are bound
	// to by name (tool.WithFuncs). A go tool naming a function missing here
	// fails Open, naming the tool and its workflow.
	Funcs []baton.Tool
	// ToolOptions are passed to every workflow's tool registry, after
	// Funcs (timeouts, HTTP client, limits).
	ToolOptions []tool.Option
	// Providers picks each workflow's model provider. Nil: the
	// OpenAI-compatible provider when the workflow's API key or base URL
	// variable is set (llm.api_key_env, default OPENAI_API_KEY;
	// llm.base_url_env, default OPENAI_BASE_URL), else the scripted
	// provider with the workflow's scripted.json, which runs offline.
	Providers engine.ProviderFunc

	// DataDir is where the runtime keeps its files: the default SQLite
	// store, the extracted example workflows and the secret key file.
	// Empty: nothing is written; then StoreURL (or Store) must be set,
	// workflows must come from WorkflowsDir or Workflows, and the secret
	// key is random for this Open unless SecretKey or BATON_SECRET_KEY is
	// set (secrets sealed by an earlier process cannot be opened).
	DataDir string
	// SecretKey seals the secrets people give secret-collecting tools (32
	// bytes). Empty: BATON_SECRET_KEY, else DataDir/secret.key (created
	// when missing).
	SecretKey []byte
	// RulesFile is a rules file for environment events
	// (engine.LoadRules); empty: the engine's and the default rules only.
	RulesFile string

	// BusURL, when set (nats://…), carries events between the instances
	// of a deployment over NATS JetStream; it needs InstanceID.
	BusURL string
	// BusNamespace is the first token of every NATS subject and the inputs
	// stream's name (default natsbridge.DefaultNamespace).
	BusNamespace string
	// InstanceID names this instance when several share one store: chats
	// are leased, appends fenced, dead instances' chats taken over. It
	// needs a store the instances share (postgres://…).
	InstanceID string
	// Bridge, when set, edits the NATS bridge's configuration just before
	// natsbridge.Start (timings of the inputs queue, say).
	Bridge func(*natsbridge.Config)
	// LeaseTTL is how long a chat's lease lasts without renewal (default
	// engine.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// StateCache is how many chat states stay in memory between inputs:
	// 0 means engine.DefaultStateCache, a negative number none.
	StateCache int
	// SQLiteCommitDelay is how long a SQLite store opened from StoreURL
	// waits for more writes before a commit under load (see
	// sqlite.WithCommitDelay): 0 means sqlite.DefaultCommitDelay, a
	// negative duration none.
	SQLiteCommitDelay time.Duration

	// Budget is the token and cost budget of chats whose workflow sets
	// none, and of each app.
	Budget metrics.BudgetConfig
	// MaxChats bounds the chats whose metrics (and trace spans) stay in
	// memory (default metrics.DefaultMaxChats).
	MaxChats int
	// TracesFromEnv exports OpenTelemetry traces when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set (metrics.OTLPFromEnv).
	TracesFromEnv bool
	// TracerProvider, when set, is the provider the runtime's tracer makes
	// spans with, instead of one from the environment. It belongs to the
	// caller: Close leaves it to the caller to shut down.
	TracerProvider *sdktrace.TracerProvider
	// Metrics, when set, edits the collector's options just before
	// metrics.New (flush interval, registry, a wrapped StatsStore); the
	// bus, the store's parts and the engine's counters are already in.
	Metrics func(*metrics.Options)

	// WrapPublisher, when set, wraps what the recorder publishes recorded
	// events through (engine.ObserverPublisher on the bus): a test stamps
	// when each event was persisted, say. The wrapper must pass every
	// event on, or no subscriber sees it.
	WrapPublisher func(recorder.Publisher) recorder.Publisher
	// WrapRecorder, when set, wraps the recorder the engine records
	// through (a test's faulty recorder, say). The recorder it is given
	// appends to the store and then publishes on the bus.
	WrapRecorder func(baton.Recorder) baton.Recorder
	// Engine, when set, edits the engine's configuration just before
	// engine.New (tasks, timeouts, rule priority).
	Engine func(*engine.Config)

	// Logger receives every part's log; nil: slog.Default().
	Logger *slog.Logger

	// fail, in this package's tests, makes the step it names fail.
	fail func(step string) error
}

// Runtime is an open baton runtime. Its methods are safe for concurrent
// use; Close it once.
type Runtime struct {
	store     baton.Store
	ownStore  bool // opened here: Close closes it
	bus       *bus.Bus
	recorder  baton.Recorder
	engine    *engine.Engine
	metrics   *metrics.Collector
	tracer    *metrics.Tracer          // nil unless tracing is on
	traces    *sdktrace.TracerProvider // likewise
	ownTraces bool                     // made here: Close shuts it down
	workflows []*workflow.Workflow
	root      string
	log       *slog.Logger

	shared     bool               // several instances share the store
	bridge     *natsbridge.Bridge // nil without BusURL
	reconnect  atomic.Pointer[func()]
	stopEngine context.CancelFunc // stops engine.Run
	engineDone chan struct{}
	closed     atomic.Bool
}

// Open opens a runtime: it checks cfg, loads the workflows, opens the store,
// the bus, the metrics collector, the recorder, the tracer and the engine,
// registers the bus rules, connects to NATS when asked, and starts the
// engine's background work. The caller closes it. When a step fails, what
// was opened is closed and the error names the step's setting.
func Open(ctx context.Context, cfg Config) (_ *Runtime, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := check(&cfg); err != nil {
		return nil, err
	}
	rt := &Runtime{log: log, shared: cfg.InstanceID != ""}
	defer func() {
		if err != nil {
			// Everything opened so far is closed, in reverse.
			_ = rt.close(context.WithoutCancel(ctx))
		}
	}()
	step := func(name string) error {
		if cfg.fail != nil {
			return cfg.fail(name)
		}
		return nil
	}

	if err := step("workflows"); err != nil {
		return nil, err
	}
	if rt.workflows, rt.root, err = loadWorkflows(cfg); err != nil {
		return nil, err
	}
	key, err := secretKey(cfg)
	if err != nil {
		return nil, err
	}
	var ruleSpecs []engine.RuleSpec
	if cfg.RulesFile != "" {
		if ruleSpecs, err = engine.LoadRules(cfg.RulesFile); err != nil {
			return nil, err
		}
	}

	if err := step("store"); err != nil {
		return nil, err
	}
	if rt.store = cfg.Store; rt.store == nil {
		opts := []store.Option{store.WithLogger(log)}
		if cfg.SQLiteCommitDelay != 0 {
			opts = append(opts, store.WithSQLiteCommitDelay(max(cfg.SQLiteCommitDelay, 0)))
		}
		if rt.store, err = store.Open(ctx, cfg.StoreURL, opts...); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		rt.ownStore = true
	}
	if cfg.WrapStore != nil {
		rt.store = cfg.WrapStore(rt.store)
	}
	st := rt.store

	if err := step("bus"); err != nil {
		return nil, err
	}
	rt.bus = bus.New(bus.WithLogger(log))

	if err := step("metrics"); err != nil {
		return nil, err
	}
	// Metrics observe the bus (never the run path); the recorder is timed.
	// The engine does not exist yet: Active and ActiveIn read it when asked.
	stats, _ := st.(baton.StatsStore)
	opts := metrics.Options{Bus: rt.bus, Stats: stats, Chats: st.GetChat, Usage: st, Logger: log,
		Active: func() int64 { return rt.engine.Active() }, ActiveIn: func(s baton.Scope) int64 { return rt.engine.ActiveIn(s) },
		MaxChats: cfg.MaxChats}
	if cfg.Metrics != nil {
		cfg.Metrics(&opts)
	}
	col, err := metrics.New(opts)
	if err != nil {
		return nil, err
	}
	rt.metrics = col
	if err := col.RegisterRuntime(); err != nil {
		return nil, err
	}
	var pub recorder.Publisher = engine.ObserverPublisher{Bus: rt.bus}
	if cfg.WrapPublisher != nil {
		pub = cfg.WrapPublisher(pub)
	}
	var rec baton.Recorder = metrics.TimedRecorder{Next: recorder.New(st, pub), Collector: col}
	if cfg.WrapRecorder != nil {
		rec = cfg.WrapRecorder(rec)
	}
	rt.recorder = rec

	if err := step("tracing"); err != nil {
		return nil, err
	}
	switch {
	case cfg.TracerProvider != nil:
		rt.traces = cfg.TracerProvider
	case cfg.TracesFromEnv:
		tp, err := metrics.OTLPFromEnv(ctx, metrics.ReadBuildInfo().ServiceVersion()) // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		rt.traces, rt.ownTraces = tp, tp != nil
	}
	toolOpts := []tool.Option{tool.WithFuncs(cfg.Funcs...)}
	if rt.ownTraces {
		// The SDK reports export failures through otel's one error
		// handler; they go to the log like every other line.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export failed", "err", err) }))
	}
	if rt.traces != nil {
		// HTTP and MCP tools get the traceparent of their call's span.
		toolOpts = append(toolOpts, tool.WithTraceContext(metrics.ToolSpanContext))
	}
	toolOpts = append(toolOpts, cfg.ToolOptions...)

	if err := step("engine"); err != nil {
		return nil, err
	}
	providers := cfg.Providers
	if providers == nil {
		providers = providerFor(log)
	}
	ecfg := engine.Config{
		Store: st, Recorder: rec, Bus: rt.bus, Workflows: rt.workflows, WorkflowRoot: rt.root,
		Providers: providers, Logger: log, SecretKey: key, Budget: col.Budget(cfg.Budget),
		InstanceID: cfg.InstanceID, LeaseTTL: cfg.LeaseTTL, StateCache: stateCacheOf(cfg.StateCache), ToolOptions: toolOpts,
	}
	if cfg.Engine != nil {
		cfg.Engine(&ecfg)
	}
	if rt.engine, err = engine.New(ecfg); err != nil {
		return nil, err
	}

	if err := step("tracer"); err != nil {
		return nil, err
	}
	if rt.traces != nil {
		tr := metrics.NewTracer(rt.bus, rt.traces, log).WithMaxChats(cfg.MaxChats)
		if err := tr.Start(); err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		rt.tracer = tr
		log.Info("tracing on", "exporter", "otlp")
	}
	if err := step("collector"); err != nil {
		return nil, err
	}
	if err := col.Start(); err != nil {
		return nil, err
	}

	if err := step("rules"); err != nil {
		return nil, err
	}
	// The rules of environment events: the engine's own (priority 100),
	// the defaults, then the app's from RulesFile.
	for _, r := range append(rt.engine.DefaultRules(), rt.engine.Rules(ruleSpecs)...) {
		if err := rt.bus.RegisterRule(r); err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
	}
	if rt.shared {
		rt.registerLeaseMetrics()
	}

	if err := step("nats"); err != nil {
		return nil, err
	}
	if cfg.BusURL != "" {
		if err := rt.startBridge(cfg, st); err != nil {
			return nil, err
		}
	}

	if err := step("run"); err != nil {
		return nil, err
	}
	var runCtx context.Context
	runCtx, rt.stopEngine = context.WithCancel(context.Background())
	rt.engineDone = make(chan struct{})
	go func() {
		defer close(rt.engineDone)
		_ = rt.engine.Run(runCtx) // UI tool timeouts, lease sweeps; stopped by Close
	}()
	log.Info("baton runtime ready", "store", redactURL(cfg.StoreURL), "workflows", len(rt.workflows), "workflow_root", rt.root)
	return rt, nil
}

// check refuses a configuration that cannot work, naming the setting, and
// fills in the defaults.
func check(cfg *Config) error {
	if cfg.MaxChats == 0 {
		cfg.MaxChats = metrics.DefaultMaxChats
	}
	if cfg.MaxChats < 1 {
		return fmt.Errorf("runtime: MaxChats %d: must be at least 1", cfg.MaxChats)
	}
	if cfg.Store == nil && cfg.StoreURL == "" {
		if cfg.DataDir == "" {
			return errors.New("runtime: no store: set StoreURL (sqlite:PATH, postgres://… or mem:), Store, or DataDir for sqlite under it")
		}
		cfg.StoreURL = "sqlite:" + filepath.Join(cfg.DataDir, "baton.db")
	}
	if cfg.WorkflowsDir == "" && len(cfg.Workflows) == 0 && cfg.DataDir == "" {
		return errors.New("runtime: no workflows: set WorkflowsDir or Workflows, or DataDir for the example workflows")
	}
	if cfg.InstanceID != "" && cfg.Store == nil && strings.HasPrefix(cfg.StoreURL, "mem:") {
		// Instances share chats through their store; a memory store is
		// this process's alone.
		return fmt.Errorf("runtime: InstanceID needs a store the instances share (postgres://…); store %s is in this process's memory", cfg.StoreURL)
	}
	if cfg.BusURL != "" && cfg.InstanceID == "" {
		return errors.New("runtime: BusURL needs InstanceID: instances that share chats must lease them")
	}
	if cfg.BusNamespace == "" {
		cfg.BusNamespace = natsbridge.DefaultNamespace
	}
	return nil
}

// registerLeaseMetrics adds the figures of a shared store's leases to the
// collector's registry.
func (rt *Runtime) registerLeaseMetrics() {
	eng := rt.engine
	rt.metrics.Registry().MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "baton", Name: "takeovers_total",
			Help: "Running chats this instance took over from instances whose lease expired."}, func() float64 { return float64(eng.Takeovers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "baton", Name: "leases_held",
			Help: "Chats this instance runs under a lease now."}, func() float64 { return float64(eng.LeasesHeld()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "baton", Name: "lease_losses_total",
			Help: "Runs that lost their chat's lease midway (a renewal later than the TTL) and were handled again."},
			func() float64 { return float64(eng.LeaseLosses()) }),
	)
}

// startBridge connects the bus to NATS.
func (rt *Runtime) startBridge(cfg Config, st baton.Store) error {
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "baton", Name: "cross_instance_delivery_seconds",
		Help:    "From an event's creation on one instance to its arrival on this one over NATS.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	if err := rt.metrics.Registry().Register(lag); err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	leases, ok := st.(natsbridge.LeaseReader)
	if !ok {
		return fmt.Errorf("nats: store %T keeps no chat leases", st)
	}
	bcfg := natsbridge.Config{URL: cfg.BusURL, Bus: rt.bus, Instance: cfg.InstanceID, Logger: rt.log,
		Namespace: cfg.BusNamespace,
		PerChat:   true, // receive the chats this instance's clients follow (server.Config.Watch)
		// Inputs go to the chat's owner through a JetStream work queue,
		// de-duplicated by event id.
		Inputs: &natsbridge.InputsConfig{Leases: leases, IsInput: engine.IsInput},
		Lag:    func(d time.Duration) { lag.Observe(d.Seconds()) },
		OnReconnect: func() {
			if f := rt.reconnect.Load(); f != nil {
				(*f)() // streams replay what NATS may have lost
			}
		}}
	if cfg.Bridge != nil {
		cfg.Bridge(&bcfg)
	}
	br, err := natsbridge.Start(bcfg)
	if err != nil {
		return err
	}
	rt.bridge = br
	rt.log.Info("events travel between instances over NATS", "bus", redactURL(cfg.BusURL), "instance", cfg.InstanceID)
	return nil
}

// Store returns the store (as wrapped by Config.WrapStore).
func (rt *Runtime) Store() baton.Store { return rt.store }

// Bus returns the bus: publish inputs on it, subscribe to chat.* and
// stream.* events.
func (rt *Runtime) Bus() *bus.Bus { return rt.bus }

// Engine returns the engine: start chats, submit messages, answer UI tools.
func (rt *Runtime) Engine() *engine.Engine { return rt.engine }

// Recorder returns the recorder the engine records through.
func (rt *Runtime) Recorder() baton.Recorder { return rt.recorder }

// Metrics returns the metrics collector.
func (rt *Runtime) Metrics() *metrics.Collector { return rt.metrics }

// TracerProvider returns the OpenTelemetry tracer provider, or nil (an
// untyped nil interface) when tracing is off.
func (rt *Runtime) TracerProvider() trace.TracerProvider {
	if rt.traces == nil {
		return nil
	}
	return rt.traces
}

// Workflows returns the workflows the runtime runs.
func (rt *Runtime) Workflows() []*workflow.Workflow { return rt.workflows }

// Health is what a health check adds: with several instances, this one's id
// and the chat leases it holds and took over; nil otherwise.
func (rt *Runtime) Health() map[string]any {
	if !rt.shared {
		return nil
	}
	return map[string]any{"instance": rt.engine.InstanceID(), "leases_held": rt.engine.LeasesHeld(),
		"takeovers": rt.engine.Takeovers(), "lease_losses": rt.engine.LeaseLosses()}
}

// Watch is a server's Watch: with NATS, the chats this instance's clients
// follow are the ones it receives from other instances. Nil without NATS.
func (rt *Runtime) Watch() func(chatID string) func() {
	if rt.bridge == nil {
		return nil
	}
	return rt.bridge.Watch
}

// Bridge returns the NATS bridge, or nil without Config.BusURL.
func (rt *Runtime) Bridge() *natsbridge.Bridge { return rt.bridge }

// OnReconnect sets what runs when the NATS connection comes back (a
// server's Resync: streams replay what NATS may have lost).
func (rt *Runtime) OnReconnect(f func()) { rt.reconnect.Store(&f) }

// Recover resumes the chats that were running when the process stopped,
// publishes again the inputs accepted and not yet taken, and reports the
// background tasks the stop interrupted as failed.
func (rt *Runtime) Recover(ctx context.Context) error {
	if rt.shared {
		// Other live instances may be running chats of this store: the
		// engine's sweeper resumes only those whose lease is free or
		// expired (this instance's own after its restart, a dead one's),
		// and RecoverTasks below takes only this instance's own tasks and
		// those of dead instances.
		rt.log.Info("shared store: chats of dead instances are taken over as their leases expire", "instance", rt.engine.InstanceID())
	} else {
		chats, err := rt.store.ChatsByStatus(ctx, baton.ChatRunning, 100000)
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		n, err := rt.engine.Recover(ctx, chats)
		if n > 0 {
			rt.log.Info("resumed chats that were running", "count", n)
		}
		if err != nil {
			return err
		}
	}
	// Inputs the chats accepted (202) and their runs had not taken when the
	// process stopped: published again, and taken once.
	inputs, err := rt.engine.RecoverInputs(ctx)
	if inputs > 0 {
		rt.log.Info("published again the inputs accepted before the restart and not yet taken", "count", inputs)
	}
	if err != nil {
		return err
	}
	tasks, err := rt.engine.RecoverTasks(ctx)
	if tasks > 0 {
		rt.log.Info("reported background tasks interrupted by the restart as failed", "count", tasks)
	}
	return err
}

// Close closes the runtime in the reverse order of Open, with one
// exception that keeps runs whole: the bus drains first (running turns
// reach a recorded point, which needs the engine, the collector and the
// store still open). Then the tracer, the metrics collector (it flushes its
// rollups to the store), the engine and the store close. A store given in
// Config.Store stays open. ctx bounds the drain and the flushes. Close is
// safe to call again; later calls return nil.
func (rt *Runtime) Close(ctx context.Context) error {
	if !rt.closed.CompareAndSwap(false, true) {
		return nil
	}
	return rt.close(ctx)
}

// close closes the parts that are open; Open calls it when a step fails.
func (rt *Runtime) close(ctx context.Context) error {
	var errs []error
	if rt.stopEngine != nil {
		rt.stopEngine()
		<-rt.engineDone
	}
	if rt.bridge != nil {
		rt.bridge.StopInputs() // no new inputs; those taken are handled and acknowledged below
	}
	if rt.bus != nil {
		errs = append(errs, rt.bus.Close(ctx))
	}
	if rt.bridge != nil {
		errs = append(errs, rt.bridge.Close(ctx))
	}
	if rt.tracer != nil {
		rt.tracer.Close()
	}
	if rt.traces != nil && rt.ownTraces {
		errs = append(errs, rt.traces.Shutdown(ctx))
	}
	if rt.metrics != nil {
		errs = append(errs, rt.metrics.Close(ctx)) // flushes the rollups before the store closes
	}
	if rt.engine != nil {
		errs = append(errs, rt.engine.Close())
	}
	if rt.store != nil && rt.ownStore {
		errs = append(errs, rt.store.Close())
	}
	return errors.Join(errs...)
}

// loadWorkflows loads the workflows of cfg.WorkflowsDir and cfg.Workflows,
// or extracts the embedded examples under the data dir (command tools must
// be files on disk to run) and loads them from there. It returns the root
// their folders live in.
func loadWorkflows(cfg Config) ([]*workflow.Workflow, string, error) {
	root := cfg.WorkflowsDir
	if root == "" && len(cfg.Workflows) == 0 {
		root = filepath.Join(cfg.DataDir, "workflows")
		if err := extract(workflows.FS, root); err != nil {
			return nil, "", fmt.Errorf("extract example workflows: %w", err)
		}
	}
	var wfs []*workflow.Workflow
	if root != "" {
		loaded, err := workflow.LoadAll(os.DirFS(root))
		if err != nil {
			return nil, "", fmt.Errorf("load workflows from %s: %w", root, err)
		}
		if len(loaded) == 0 && len(cfg.Workflows) == 0 {
			return nil, "", fmt.Errorf("no workflows in %s (a workflow is a folder with a workflow.json)", root)
		}
		wfs = loaded
	}
	seen := make(map[string]bool, len(wfs)+len(cfg.Workflows))
	for _, wf := range wfs {
		seen[wf.Name] = true
	}
	for i, wf := range cfg.Workflows {
		switch {
		case wf == nil:
			return nil, "", fmt.Errorf("runtime: Workflows[%d] is nil", i)
		case seen[wf.Name]:
			return nil, "", fmt.Errorf("runtime: Workflows[%d]: a workflow named %q is already loaded", i, wf.Name)
		}
		seen[wf.Name] = true
		wfs = append(wfs, wf)
	}
	return wfs, root, nil
}

// secretKey returns the key that seals secrets: Config.SecretKey, else the
// environment's or DataDir's (engine.LoadSecretKey), else a random one.
func secretKey(cfg Config) ([]byte, error) {
	switch {
	case cfg.SecretKey != nil:
		if len(cfg.SecretKey) != 32 {
			return nil, fmt.Errorf("runtime: SecretKey has %d bytes, want 32", len(cfg.SecretKey))
		}
		return cfg.SecretKey, nil
	case cfg.DataDir != "" || os.Getenv(engine.SecretKeyEnv) != "":
		return engine.LoadSecretKey(filepath.Join(cfg.DataDir, "secret.key"))
	}
	// Nowhere to keep a key: secrets last as long as this process.
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return k, nil
}

// extract writes fsys to dir, replacing what an earlier start wrote. Files
// under a tools/ folder are made executable (embed keeps no file modes).
func extract(fsys fs.FS, dir string) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.Contains("/"+path.Dir(p)+"/", "/tools/") {
			mode = 0o755
		}
		if err := os.WriteFile(target, data, mode); err != nil {
			return err
		}
		return os.Chmod(target, mode) // WriteFile keeps an existing file's mode
	})
}

// DefaultProviders is the provider choice of a Config without Providers
// (see Config.Providers), for a program that wraps it: baton replay serves
// recorded replies and falls back to it.
func DefaultProviders(log *slog.Logger) engine.ProviderFunc {
	if log == nil {
		log = slog.Default()
	}
	return providerFor(log)
}

// providerFor picks each workflow's model provider: the OpenAI-compatible
// one when the workflow's API key variable (llm.api_key_env, default
// OPENAI_API_KEY) or base URL variable (llm.base_url_env, default
// OPENAI_BASE_URL: a local server such as Ollama needs no key) is set, else
// the scripted provider with the workflow's scripted.json, which runs
// offline.
func providerFor(log *slog.Logger) engine.ProviderFunc {
	return func(wf *workflow.Workflow) (baton.Provider, error) {
		keyEnv, urlEnv := wf.Config.LLM.APIKeyEnv, wf.Config.LLM.BaseURLEnv
		if keyEnv == "" {
			keyEnv = "OPENAI_API_KEY"
		}
		if urlEnv == "" {
			urlEnv = "OPENAI_BASE_URL"
		}
		if key, u := os.Getenv(keyEnv), os.Getenv(urlEnv); key != "" || u != "" {
			opts := []openai.Option{openai.WithLogger(log)}
			if key != "" {
				opts = append(opts, openai.WithAPIKey(key))
			}
			if u != "" {
				opts = append(opts, openai.WithBaseURL(u))
			}
			if t := wf.Config.LLM.Timeout(); t > 0 {
				opts = append(opts, openai.WithTimeout(t))
			}
			p := openai.New(opts...)
			log.Info("model provider", "workflow", wf.Name, "provider", "openai-compatible", "base_url", llm.Endpoint(p.BaseURL()), "model", wf.Config.LLM.Model)
			return p, nil
		}
		p, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		if err != nil {
			return nil, fmt.Errorf("workflow %s: no %s set and no usable scripted.json: %w", wf.Name, keyEnv, err)
		}
		log.Info("model provider", "workflow", wf.Name, "provider", "scripted (offline)", "reason", keyEnv+" and "+urlEnv+" are not set")
		return p, nil
	}
}

// stateCacheOf maps Config.StateCache to engine.Config.StateCache.
func stateCacheOf(n int) int {
	if n < 0 {
		return -1
	}
	return n // 0: the engine's default
}

// redactURL hides a password in a store or bus URL for logs.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if at := strings.LastIndex(u, "@"); at > i {
			creds := u[i+3 : at]
			if c := strings.Index(creds, ":"); c >= 0 {
				return u[:i+3] + creds[:c] + ":***" + u[at:]
			}
		}
	}
	return u
}
