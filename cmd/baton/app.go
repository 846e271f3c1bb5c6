package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/store/sqlite"
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
	commitDelay  time.Duration // SQLite: the longest the writer waits for more writes under load
	log          *slog.Logger
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
	fs.DurationVar(&c.commitDelay, "sqlite-commit-delay", envDurationOr("BATON_SQLITE_COMMIT_DELAY", sqlite.DefaultCommitDelay), "SQLite: the longest the writer waits for more writes before a commit under load, at most one commit's time; 0: never (lower latency per write, more CPU) (env BATON_SQLITE_COMMIT_DELAY)")
	fs.Int64Var(&c.budget.Chat.MaxTokens, "chat-max-tokens", envInt("BATON_CHAT_MAX_TOKENS"), "token budget of a chat whose workflow sets none (env BATON_CHAT_MAX_TOKENS; 0: none)")
	fs.Float64Var(&c.budget.Chat.MaxCostUSD, "chat-max-cost-usd", envFloat("BATON_CHAT_MAX_COST_USD"), "cost budget in USD of a chat whose workflow sets none (env BATON_CHAT_MAX_COST_USD; 0: none)")
	fs.Int64Var(&c.budget.App.MaxTokens, "app-max-tokens", envInt("BATON_APP_MAX_TOKENS"), "token budget of each app over all its chats (env BATON_APP_MAX_TOKENS; 0: none)")
	fs.Float64Var(&c.budget.App.MaxCostUSD, "app-max-cost-usd", envFloat("BATON_APP_MAX_COST_USD"), "cost budget in USD of each app over all its chats (env BATON_APP_MAX_COST_USD; 0: none)")
}

// openRuntime checks the flags runtime.Open does not know by their names,
// then opens the runtime they describe. The caller closes it.
func openRuntime(ctx context.Context, cfg runtimeConfig) (*runtime.Runtime, error) {
	if cfg.maxChats < 1 {
		return nil, fmt.Errorf("--max-chats-in-memory (BATON_MAX_CHATS_IN_MEMORY): must be a whole number of at least 1")
	}
	if cfg.stateCache < 0 {
		return nil, fmt.Errorf("--state-cache (BATON_STATE_CACHE): must be a whole number of at least 0")
	}
	if cfg.commitDelay < 0 {
		return nil, fmt.Errorf("--sqlite-commit-delay (BATON_SQLITE_COMMIT_DELAY): must be a duration of 0 or more, such as 1ms")
	}
	if cfg.instanceID != "" && strings.HasPrefix(cfg.storeURL, "mem:") {
		return nil, fmt.Errorf("--instance-id needs a store the instances share (postgres://…); --store %s is in this process's memory", cfg.storeURL)
	}
	if cfg.busURL != "" && cfg.instanceID == "" {
		return nil, fmt.Errorf("--bus needs --instance-id: instances that share chats must lease them")
	}
	return runtime.Open(ctx, runtime.Config{
		StoreURL: cfg.storeURL, WorkflowsDir: cfg.workflowsDir, DataDir: cfg.dataDir, RulesFile: cfg.rulesFile,
		BusURL: cfg.busURL, BusNamespace: cfg.busNamespace, InstanceID: cfg.instanceID, LeaseTTL: cfg.leaseTTL,
		StateCache: stateCacheOf(cfg.stateCache), SQLiteCommitDelay: commitDelayOf(cfg.commitDelay), Budget: cfg.budget, MaxChats: cfg.maxChats,
		TracesFromEnv: true, Logger: cfg.log,
	})
}

// envInt returns the integer in the environment variable key, or 0.
func envInt(key string) int64 {
	n, _ := strconv.ParseInt(os.Getenv(key), 10, 64)
	return n
}

// envIntOr returns the number in the environment variable key, def when it
// is unset, or -1 when it is not a number (which the flag's check then
// refuses, naming the variable).
func envIntOr(key string, def int) int { return envParsedOr(key, def, strconv.Atoi) }

// envDurationOr is envIntOr for a duration ("1ms").
func envDurationOr(key string, def time.Duration) time.Duration {
	return envParsedOr(key, def, time.ParseDuration)
}

// envParsedOr returns the environment variable key parsed by parse, def when it
// is unset or blank, or -1 when parse refuses it.
func envParsedOr[T ~int | ~int64](key string, def T, parse func(string) (T, error)) T {
	v, ok := os.LookupEnv(key)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	n, err := parse(strings.TrimSpace(v))
	if err != nil {
		return -1
	}
	return n
}

// commitDelayOf maps --sqlite-commit-delay to runtime.Config.SQLiteCommitDelay,
// where 0 means the default and a negative duration none.
func commitDelayOf(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
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
