package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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

// runtimeConfig says where a runtime's parts come from; `baton serve` and
// `baton chat` share it.
type runtimeConfig struct {
	storeURL     string // sqlite:PATH or postgres://…; empty means sqlite under dataDir
	workflowsDir string // a folder of workflow folders; empty means the embedded examples
	dataDir      string // where baton keeps its files (default ./.baton)
	rulesFile    string // extra bus rules (engine.LoadRules); empty means the defaults only
	budget       metrics.BudgetConfig
	busURL       string        // nats://… to carry events between instances; empty: in-process only
	busNamespace string        // first subject token on NATS, shared by a deployment's instances
	instanceID   string        // set when several instances share the store
	leaseTTL     time.Duration // how long a chat's lease lasts without renewal
	maxChats     int           // chats the metrics (and the tracer) keep in memory at most
	stateCache   int           // chat states the engine keeps in memory between inputs
	log          *slog.Logger
}

// runtime is the store, the bus, the recorder, the engine and the metrics
// collector, wired.
type runtime struct {
	store     baton.Store
	bus       *bus.Bus
	recorder  baton.Recorder
	engine    *engine.Engine
	metrics   *metrics.Collector
	tracer    *metrics.Tracer          // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
	traces    *sdktrace.TracerProvider // likewise
	workflows []*workflow.Workflow
	log       *slog.Logger

	shared     bool               // several instances share the store (--instance-id)
	bridge     *natsbridge.Bridge // nil without --bus
	resync     atomic.Pointer[func()]
	stopEngine context.CancelFunc // stops the engine's background work
	engineDone chan struct{}
}

// flags are the flags every command that runs chats takes.
func (c *runtimeConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.storeURL, "store", envOr("BATON_STORE", ""), "store: sqlite:PATH, postgres://… or mem: (in memory, lost at exit) (env BATON_STORE; default sqlite under --data-dir)")
	fs.StringVar(&c.workflowsDir, "workflows", envOr("BATON_WORKFLOWS", ""), "folder of workflow folders (env BATON_WORKFLOWS; default: the built-in examples)")
	fs.StringVar(&c.dataDir, "data-dir", envOr("BATON_DATA_DIR", ".baton"), "where baton keeps its files (env BATON_DATA_DIR)")
	fs.StringVar(&c.rulesFile, "rules", envOr("BATON_RULES", ""), "a rules file for environment events (env BATON_RULES; see docs/events.md)")
	fs.StringVar(&c.busURL, "bus", envOr("BATON_BUS", ""), "nats://HOST:PORT to carry chat events between instances (env BATON_BUS; needs --instance-id)")
	fs.StringVar(&c.instanceID, "instance-id", envOr("BATON_INSTANCE_ID", ""), "this instance's name when several share one PostgreSQL store: chats are leased, appends fenced, dead instances' chats taken over (env BATON_INSTANCE_ID)")
	fs.StringVar(&c.busNamespace, "bus-namespace", envOr("BATON_BUS_NAMESPACE", natsbridge.DefaultNamespace), "with --bus: the first token of every NATS subject and the inputs stream's name, the same on every instance of a deployment (env BATON_BUS_NAMESPACE)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", engine.DefaultLeaseTTL, "with --instance-id: how long a chat's lease lasts without renewal")
	fs.IntVar(&c.maxChats, "max-chats-in-memory", envIntOr("BATON_MAX_CHATS_IN_MEMORY", metrics.DefaultMaxChats), "chats whose metrics (and trace spans) stay in memory; beyond it the least recently active is forgotten, its figures kept in the store (env BATON_MAX_CHATS_IN_MEMORY)")
	fs.IntVar(&c.stateCache, "state-cache", envIntOr("BATON_STATE_CACHE", engine.DefaultStateCache), "chat states kept in memory between inputs, least recently used out first; 0: none, every input rebuilds from the store (env BATON_STATE_CACHE)")
	fs.Int64Var(&c.budget.Chat.MaxTokens, "chat-max-tokens", envInt("BATON_CHAT_MAX_TOKENS"), "token budget of a chat whose workflow sets none (env BATON_CHAT_MAX_TOKENS; 0: none)")
	fs.Float64Var(&c.budget.Chat.MaxCostUSD, "chat-max-cost-usd", envFloat("BATON_CHAT_MAX_COST_USD"), "cost budget in USD of a chat whose workflow sets none (env BATON_CHAT_MAX_COST_USD; 0: none)")
	fs.Int64Var(&c.budget.App.MaxTokens, "app-max-tokens", envInt("BATON_APP_MAX_TOKENS"), "token budget of each app over all its chats (env BATON_APP_MAX_TOKENS; 0: none)")
	fs.Float64Var(&c.budget.App.MaxCostUSD, "app-max-cost-usd", envFloat("BATON_APP_MAX_COST_USD"), "cost budget in USD of each app over all its chats (env BATON_APP_MAX_COST_USD; 0: none)")
}

// openRuntime opens the store, loads the workflows, and starts the bus and
// the engine. The caller closes it.
func openRuntime(ctx context.Context, cfg runtimeConfig) (*runtime, error) {
	log := cfg.log
	if cfg.maxChats < 1 {
		return nil, fmt.Errorf("--max-chats-in-memory (BATON_MAX_CHATS_IN_MEMORY): must be a whole number of at least 1")
	}
	if cfg.stateCache < 0 {
		return nil, fmt.Errorf("--state-cache (BATON_STATE_CACHE): must be a whole number of at least 0")
	}
	if cfg.storeURL == "" {
		cfg.storeURL = "sqlite:" + filepath.Join(cfg.dataDir, "baton.db")
	}
	if cfg.instanceID != "" && strings.HasPrefix(cfg.storeURL, "mem:") {
		// Instances share chats through their store; a memory store is
		// this process's alone.
		return nil, fmt.Errorf("--instance-id needs a store the instances share (postgres://…); --store %s is in this process's memory", cfg.storeURL)
	}
	wfs, root, err := loadWorkflows(cfg)
	if err != nil {
		return nil, err
	}
	key, err := engine.LoadSecretKey(filepath.Join(cfg.dataDir, "secret.key"))
	if err != nil {
		return nil, err
	}
	var ruleSpecs []engine.RuleSpec
	if cfg.rulesFile != "" {
		if ruleSpecs, err = engine.LoadRules(cfg.rulesFile); err != nil {
			return nil, err
		}
	}
	st, err := store.Open(ctx, cfg.storeURL, store.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	b := bus.New(bus.WithLogger(log))
	// Metrics observe the bus (never the run path); the recorder is timed.
	stats, _ := st.(baton.StatsStore)
	var eng *engine.Engine
	col, err := metrics.New(metrics.Options{Bus: b, Stats: stats, Chats: st.GetChat, Usage: st, Logger: log,
		Active: func() int64 { return eng.Active() }, ActiveIn: func(s baton.Scope) int64 { return eng.ActiveIn(s) }, MaxChats: cfg.maxChats})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	if err := col.RegisterRuntime(); err != nil {
		_ = st.Close()
		return nil, err
	}
	rec := metrics.TimedRecorder{Next: recorder.New(st, engine.ObserverPublisher{Bus: b}), Collector: col}
	tp, err := metrics.OTLPFromEnv(ctx, metrics.ReadBuildInfo().ServiceVersion()) // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("tracing: %w", err)
	}
	var toolOpts []tool.Option
	if tp != nil {
		// The SDK reports export failures through otel's one error
		// handler; they go to the log like every other line.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export failed", "err", err) }))
		// HTTP and MCP tools get the traceparent of their call's span.
		toolOpts = append(toolOpts, tool.WithTraceContext(metrics.ToolSpanContext))
	}
	eng, err = engine.New(engine.Config{
		Store: st, Recorder: rec, Bus: b, Workflows: wfs, WorkflowRoot: root,
		Providers: providerFor(log), Logger: log, SecretKey: key, Budget: col.Budget(cfg.budget),
		InstanceID: cfg.instanceID, LeaseTTL: cfg.leaseTTL, StateCache: stateCacheOf(cfg.stateCache), ToolOptions: toolOpts,
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	var tr *metrics.Tracer
	if tp != nil {
		tr = metrics.NewTracer(b, tp, log).WithMaxChats(cfg.maxChats)
		if err := tr.Start(); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("tracing: %w", err)
		}
		log.Info("tracing on", "exporter", "otlp")
	}
	if err := col.Start(); err != nil {
		_ = st.Close()
		return nil, err
	}
	if cfg.busURL != "" && cfg.instanceID == "" {
		_ = st.Close()
		return nil, fmt.Errorf("--bus needs --instance-id: instances that share chats must lease them")
	}
	// The rules of spec/environment-events.md: the engine's own (priority
	// 100), the defaults, then the app's from --rules.
	for _, r := range append(eng.DefaultRules(), eng.Rules(ruleSpecs)...) {
		if err := b.RegisterRule(r); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("rules: %w", err)
		}
	}
	log.Info("baton runtime ready", "store", redactURL(cfg.storeURL), "workflows", len(wfs), "workflow_root", root)
	rt := &runtime{store: st, bus: b, recorder: rec, engine: eng, metrics: col, tracer: tr, traces: tp, workflows: wfs, log: log,
		engineDone: make(chan struct{}), shared: cfg.instanceID != ""}
	if cfg.instanceID != "" {
		reg := col.Registry()
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "baton", Name: "takeovers_total",
				Help: "Running chats this instance took over from instances whose lease expired."}, func() float64 { return float64(eng.Takeovers()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "baton", Name: "leases_held",
				Help: "Chats this instance runs under a lease now."}, func() float64 { return float64(eng.LeasesHeld()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "baton", Name: "lease_losses_total",
				Help: "Runs that lost their chat's lease midway (a renewal later than the TTL) and were handled again."},
				func() float64 { return float64(eng.LeaseLosses()) }),
		)
	}
	if cfg.busURL != "" {
		lag := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "baton", Name: "cross_instance_delivery_seconds",
			Help:    "From an event's creation on one instance to its arrival on this one over NATS.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
		col.Registry().MustRegister(lag)
		rt.bridge, err = natsbridge.Start(natsbridge.Config{URL: cfg.busURL, Bus: b, Instance: cfg.instanceID, Logger: log,
			Namespace: cfg.busNamespace,
			PerChat:   true, // receive the chats this instance's clients follow (server.Config.Watch)
			// Inputs go to the chat's owner through a JetStream work queue,
			// de-duplicated by event id.
			Inputs: &natsbridge.InputsConfig{Leases: st, IsInput: engine.IsInput},
			Lag:    func(d time.Duration) { lag.Observe(d.Seconds()) },
			OnReconnect: func() {
				if f := rt.resync.Load(); f != nil {
					(*f)() // streams replay what NATS may have lost
				}
			}})
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		log.Info("events travel between instances over NATS", "bus", redactURL(cfg.busURL), "instance", cfg.instanceID)
	}
	var runCtx context.Context
	runCtx, rt.stopEngine = context.WithCancel(context.Background())
	go func() {
		defer close(rt.engineDone)
		_ = eng.Run(runCtx) // UI tool timeouts; stopped by Close
	}()
	return rt, nil
}

// health is what /healthz adds: with several instances, this one's id and
// the chat leases it holds and took over.
func (rt *runtime) health() map[string]any {
	if !rt.shared {
		return nil
	}
	return map[string]any{"instance": rt.engine.InstanceID(), "leases_held": rt.engine.LeasesHeld(),
		"takeovers": rt.engine.Takeovers(), "lease_losses": rt.engine.LeaseLosses()}
}

// watch is the server's Watch: with the NATS bridge, the chats this
// instance's clients follow are the ones it receives from other instances.
func (rt *runtime) watch() func(chatID string) func() {
	if rt.bridge == nil {
		return nil
	}
	return rt.bridge.Watch
}

// Recover resumes the chats that were running when the process stopped.
func (rt *runtime) recover(ctx context.Context) error {
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

// Close drains the bus (running turns reach a recorded point), then stops
// the engine and the store.
func (rt *runtime) Close(ctx context.Context) error {
	rt.stopEngine()
	<-rt.engineDone
	if rt.bridge != nil {
		rt.bridge.StopInputs() // no new inputs; those taken are handled and acknowledged below
	}
	busErr := rt.bus.Close(ctx)
	if rt.bridge != nil {
		busErr = errors.Join(busErr, rt.bridge.Close(ctx))
	}
	var traceErr error
	if rt.tracer != nil {
		rt.tracer.Close()
		traceErr = rt.traces.Shutdown(ctx)
	}
	metricsErr := rt.metrics.Close(ctx) // flushes the rollups before the store closes
	engErr := rt.engine.Close()
	stErr := rt.store.Close()
	return errors.Join(busErr, traceErr, metricsErr, engErr, stErr)
}

// loadWorkflows loads the workflows from --workflows, or extracts the
// embedded examples under the data dir (command tools must be files on disk
// to run) and loads them from there. It returns the root they live in.
func loadWorkflows(cfg runtimeConfig) ([]*workflow.Workflow, string, error) {
	root := cfg.workflowsDir
	if root == "" {
		root = filepath.Join(cfg.dataDir, "workflows")
		if err := extract(workflows.FS, root); err != nil {
			return nil, "", fmt.Errorf("extract example workflows: %w", err)
		}
	}
	wfs, err := workflow.LoadAll(os.DirFS(root))
	if err != nil {
		return nil, "", fmt.Errorf("load workflows from %s: %w", root, err)
	}
	if len(wfs) == 0 {
		return nil, "", fmt.Errorf("no workflows in %s (a workflow is a folder with a workflow.json)", root)
	}
	return wfs, root, nil
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

// redactURL hides a password in a store URL for logs.
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

// envInt returns the integer in the environment variable key, or 0.
func envInt(key string) int64 {
	n, _ := strconv.ParseInt(os.Getenv(key), 10, 64)
	return n
}

// envIntOr returns the number in the environment variable key, def when it
// is unset, or -1 when it is not a number (which the flag's check then
// refuses, naming the variable).
func envIntOr(key string, def int) int {
	v, ok := os.LookupEnv(key)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return -1
	}
	return n
}

// envFloat returns the number in the environment variable key, or 0.
func envFloat(key string) float64 {
	f, _ := strconv.ParseFloat(os.Getenv(key), 64)
	return f
}

// stateCacheOf maps --state-cache to engine.Config.StateCache, where 0
// means the default and a negative number none.
func stateCacheOf(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
