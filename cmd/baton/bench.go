package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/batonhq/baton/internal/turnbench"
	"golang.org/x/term"
)

func init() {
	register(command{
		name:    "bench",
		summary: "measure what a turn costs on this machine",
		usage:   "bench [flags]",
		about: `Runs the production turn — a message in a new chat, a streamed call of a Go tool, the tool's
result, a streamed 20-word reply, the pause — many times, and reports CPU per turn, turns/s and
allocations, one turn at a time and --concurrency in flight. By default the model is a fake
OpenAI-compatible server in this process (real HTTP, real SSE), and the same turn written by hand
with openai-go and no persistence (the floor) runs first: baton's figures are also given as
multiples of it ("x floor"), which is what to compare between machines.

--served runs the turns through a baton server in a child process (HTTP start, a WebSocket, the
message): the CPU is then the server process's. --server URL runs them against a server you run
(its workflow must be UserDriven and pause after each reply); --base-url points the model at a real
OpenAI-compatible endpoint. Against either, the command reports latency (time to first token,
turn latency p50/p95/p99) rather than overhead, since the other side's CPU is not measured here.`,
		example: "baton bench                                  # SQLite, fake model, 50 in flight\nbaton bench --store mem --turns 2000\nbaton bench --served --idle-chats 100000\nBATON_API_KEY=bk_… baton bench --server https://baton.example.com --workflow support\nOPENAI_API_KEY=sk-… baton bench --base-url https://api.openai.com/v1 --model gpt-4o-mini --turns 20 --concurrency 5\nbaton bench --json > bench.json",
		flags:   benchFlags,
	})
}

// benchConfig is what `baton bench` is configured with.
type benchConfig struct {
	store       string
	served      bool
	serverURL   string
	apiKey      string
	app         string
	workflow    string
	turns       int
	seqTurns    int
	concurrency int
	idleChats   int
	baseURL     string
	model       string
	jsonOut     bool
	cpuProfile  string
}

func benchFlags(fs *flag.FlagSet) runner {
	var cfg benchConfig
	fs.StringVar(&cfg.store, "store", "sqlite", "store: sqlite (a new file in a temporary folder, synchronous=FULL), sqlite:PATH, mem, or postgres://…")
	fs.BoolVar(&cfg.served, "served", false, "run the turns through a baton server this command starts in a child process (HTTP start + WebSocket); CPU is the server's")
	fs.StringVar(&cfg.serverURL, "server", "", "run the turns against the baton server at this URL (reports latency; see --api-key, --app, --workflow)")
	fs.StringVar(&cfg.apiKey, "api-key", envOr("BATON_API_KEY", ""), "with --server: the API key (env BATON_API_KEY; prefer it: a flag shows in the process list)")
	fs.StringVar(&cfg.app, "app", "default", "with --server: the app of the chats")
	fs.StringVar(&cfg.workflow, "workflow", turnbench.WorkflowName, "with --server: the workflow each turn starts a chat of (UserDriven, pausing after its reply)")
	fs.IntVar(&cfg.turns, "turns", 500, "turns to run with --concurrency in flight")
	fs.IntVar(&cfg.seqTurns, "seq-turns", 100, "turns to run one at a time first (0: none)")
	fs.IntVar(&cfg.concurrency, "concurrency", 50, "turns in flight")
	fs.IntVar(&cfg.idleChats, "idle-chats", 0, "then leave this many chats paused and report the heap each holds (0: skip; not with --server)")
	fs.StringVar(&cfg.baseURL, "base-url", "", "a real OpenAI-compatible endpoint instead of the fake model (key in OPENAI_API_KEY); reports latency")
	fs.StringVar(&cfg.model, "model", "", "with --base-url: the model to ask for (default "+turnbench.ModelName+")")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of baton's runs (not the floor's) to this file, for go tool pprof (with --served: of this client process)")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "baton bench: unexpected argument %q\n", fs.Arg(0))
			return errUsage
		}
		return runBench(ctx, cfg, stdout, stderr)
	}
}

// check validates cfg, naming the flag at fault.
func (cfg *benchConfig) check() error {
	switch {
	case cfg.turns < 1:
		return fmt.Errorf("--turns: %d; want at least 1", cfg.turns)
	case cfg.seqTurns < 0:
		return fmt.Errorf("--seq-turns: %d; want 0 or more", cfg.seqTurns)
	case cfg.concurrency < 1:
		return fmt.Errorf("--concurrency: %d; want at least 1", cfg.concurrency)
	case cfg.idleChats < 0:
		return fmt.Errorf("--idle-chats: %d; want 0 or more", cfg.idleChats)
	case cfg.serverURL != "" && cfg.idleChats > 0:
		return errors.New("--idle-chats needs a server this command starts (--served): the heap of a server elsewhere is not readable here")
	case cfg.serverURL != "" && cfg.baseURL != "":
		return errors.New("--base-url and --server: a server calls the model its workflow names; give one of them")
	case cfg.serverURL != "" && cfg.store != "sqlite":
		return errors.New("--store and --server: a server elsewhere uses its own store")
	case cfg.serverURL == "" && cfg.apiKey != "" && os.Getenv("BATON_API_KEY") != cfg.apiKey:
		return errors.New("--api-key is for --server")
	case cfg.model != "" && cfg.baseURL == "":
		return errors.New("--model is for --base-url: the fake model answers as " + turnbench.ModelName)
	case cfg.serverURL == "" && (cfg.app != "default" || cfg.workflow != turnbench.WorkflowName):
		return errors.New("--app and --workflow are for --server: otherwise the benchmark's own workflow runs")
	}
	if cfg.baseURL != "" && !strings.HasPrefix(cfg.baseURL, "http://") && !strings.HasPrefix(cfg.baseURL, "https://") {
		return fmt.Errorf("--base-url: %q; want http://… or https://…", cfg.baseURL)
	}
	return nil
}

// storeURL maps --store to a store URL; dir is where a fresh SQLite file goes.
func storeURL(store, dir string) (url, label string, err error) {
	switch {
	case store == "sqlite":
		return "sqlite:" + filepath.Join(dir, "baton.db"), "sqlite", nil
	case strings.HasPrefix(store, "sqlite:") && len(store) > len("sqlite:"):
		return store, "sqlite", nil
	case store == "mem" || store == "mem:":
		return "mem:", "mem", nil
	case strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://"):
		return store, "postgres", nil
	}
	return "", "", fmt.Errorf("--store: %q; want sqlite, sqlite:PATH, mem or postgres://…", store)
}

// benchReport is the JSON `baton bench --json` prints.
type benchReport struct {
	// Model is "fake" (the in-process fake model) or the --base-url.
	Model string `json:"model"`
	// Mode is "overhead" (fake model: CPU and ratios to the floor) or
	// "latency" (a real model or a server elsewhere).
	Mode    string        `json:"mode"`
	Store   string        `json:"store,omitempty"`
	Served  bool          `json:"served"`
	Server  string        `json:"server,omitempty"`
	CPUs    int           `json:"cpus"`
	Go      string        `json:"go"`
	Results []benchResult `json:"results"`
	Idle    *benchIdle    `json:"idle,omitempty"`
}

type benchResult struct {
	Variant     string  `json:"variant"`
	Concurrency int     `json:"concurrency"`
	Turns       int     `json:"turns"`
	Seconds     float64 `json:"seconds"`
	TurnsPerSec float64 `json:"turns_per_sec"`
	// CPUMsPerTurn is the CPU of the process baton runs in: the server's
	// when served by a child process, this one's otherwise.
	CPUMsPerTurn       float64 `json:"cpu_ms_per_turn"`
	ClientCPUMsPerTurn float64 `json:"client_cpu_ms_per_turn"`
	// XFloor is CPUMsPerTurn over the floor's at the same concurrency (0
	// when the floor did not run).
	XFloor        float64 `json:"x_floor,omitempty"`
	AllocsPerTurn float64 `json:"allocs_per_turn"`
	// CommitsPerTurn is the store's transactions per turn, for a store
	// that counts them (SQLite; served, the server's).
	CommitsPerTurn float64 `json:"commits_per_turn,omitempty"`
	// ReadsPerTurn is the store's read queries per turn, for a store that
	// counts them (SQLite; served, the server's); absent for any other.
	ReadsPerTurn *float64 `json:"reads_per_turn,omitempty"`
	// ModelConnsPerTurn is the connections the fake model accepted per
	// turn (absent with a real model): a client that keeps its connections
	// opens one per model call in flight, not one per call.
	ModelConnsPerTurn *float64     `json:"model_conns_per_turn,omitempty"`
	LatencyMs         benchPercent `json:"latency_ms"`
	FirstTokenMs      benchPercent `json:"first_token_ms"`
}

type benchPercent struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

type benchIdle struct {
	Chats            int     `json:"chats"`
	HeapBytesPerChat float64 `json:"heap_bytes_per_chat"`
}

func percentiles(d []time.Duration) benchPercent {
	return benchPercent{P50: msOf(turnbench.Percentile(d, 50)), P95: msOf(turnbench.Percentile(d, 95)), P99: msOf(turnbench.Percentile(d, 99))}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func runBench(ctx context.Context, cfg benchConfig, stdout, stderr io.Writer) error {
	if err := cfg.check(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "baton-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, storeLabel, err := storeURL(cfg.store, dir)
	if err != nil {
		return err
	}
	rep := benchReport{Model: "fake", Mode: "overhead", Store: storeLabel, Served: cfg.served || cfg.serverURL != "", Server: cfg.serverURL,
		CPUs: goruntime.NumCPU(), Go: goruntime.Version()}
	baseURL, modelKey, model := cfg.baseURL, os.Getenv("OPENAI_API_KEY"), cfg.model
	if cfg.serverURL != "" {
		rep.Mode, rep.Model, rep.Store = "latency", "", ""
	} else if baseURL != "" {
		rep.Mode, rep.Model = "latency", baseURL
		if model == "" {
			model = turnbench.ModelName
		}
	}
	var fake *turnbench.Model
	if rep.Mode == "overhead" {
		if fake, err = turnbench.StartModel(); err != nil {
			return err
		}
		defer fake.Close()
		baseURL, modelKey, model = fake.URL, "bench", turnbench.ModelName
	}

	phases := []int{cfg.concurrency}
	if cfg.seqTurns > 0 && cfg.concurrency > 1 {
		phases = []int{1, cfg.concurrency}
	}
	turnsAt := func(c int) int {
		if c == 1 && cfg.concurrency > 1 {
			return cfg.seqTurns
		}
		return cfg.turns
	}
	prog := newProgress(stderr)
	// The progress lines and a spawned server's standard error share
	// stderr; exec copies the child's from a goroutine of its own.
	stderr = prog.w
	floors := map[int]time.Duration{}
	measure := func(t turnbench.Turner) error {
		for _, c := range phases {
			n := turnsAt(c)
			label := fmt.Sprintf("%s, %d in flight", t.Name(), c)
			// Warm-up: one turn alone first, so that a setup that cannot
			// work (a wrong key, a model that refuses) fails with its own
			// error, not with what fifty failing turns at once provoke (the
			// server's limit on failed keys: 429); then connections (one
			// per turn in flight), pools, the store's first pages.
			if _, err := turnbench.Run(ctx, t, 1, 1, nil); err != nil {
				return fmt.Errorf("%s: warm-up: %w", label, err)
			}
			if _, err := turnbench.Run(ctx, t, max(c, 10), c, nil); err != nil {
				return fmt.Errorf("%s: warm-up: %w", label, err)
			}
			var conns0 int64
			if fake != nil {
				conns0 = fake.Conns()
			}
			prog.begin(label, n)
			r, err := turnbench.Run(ctx, t, n, c, prog.step)
			prog.end(r)
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			res := benchResult{
				Variant: t.Name(), Concurrency: c, Turns: r.Turns, Seconds: r.Elapsed.Seconds(), TurnsPerSec: r.TurnsPerSec(),
				CPUMsPerTurn: msOf(r.CPUPerTurn()), ClientCPUMsPerTurn: msOf(r.ClientCPUPerTurn()), AllocsPerTurn: r.AllocsPerTurn(),
				CommitsPerTurn: float64(r.Commits) / float64(r.Turns),
				LatencyMs:      percentiles(r.Latency), FirstTokenMs: percentiles(r.FirstToken),
			}
			if r.Commits > 0 { // a store that counts its commits counts its reads
				per := float64(r.Reads) / float64(r.Turns)
				res.ReadsPerTurn = &per
			}
			if fake != nil {
				per := float64(fake.Conns()-conns0) / float64(r.Turns)
				res.ModelConnsPerTurn = &per
			}
			if t.Name() == "floor" {
				floors[c] = r.CPUPerTurn()
			} else if f := floors[c]; f > 0 {
				res.XFloor = float64(r.CPUPerTurn()) / float64(f)
			}
			rep.Results = append(rep.Results, res)
		}
		return nil
	}
	closeTurner := func(t turnbench.Turner) error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return t.Close(cctx)
	}

	if cfg.serverURL == "" && cfg.baseURL == "" {
		floor := turnbench.NewFloor(baseURL, modelKey, model, cfg.concurrency)
		if err := measure(floor); err != nil {
			return err
		}
	}
	var t turnbench.Turner
	switch {
	case cfg.serverURL != "":
		t, err = turnbench.NewServed(turnbench.ServedConfig{Name: "baton served", URL: cfg.serverURL, APIKey: cfg.apiKey,
			App: cfg.app, Workflow: cfg.workflow, Concurrency: cfg.concurrency})
	case cfg.served:
		t, err = spawnBenchServer(ctx, store, storeLabel, baseURL, modelKey, model, cfg.concurrency, stderr)
	default:
		t, err = turnbench.OpenEmbedded(ctx, turnbench.EmbeddedConfig{Name: "baton " + storeLabel, StoreURL: store,
			BaseURL: baseURL, APIKey: modelKey, Model: model})
	}
	if err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(cfg.cpuProfile)
	if err != nil {
		_ = closeTurner(t)
		return err
	}
	err = measure(t)
	if err == nil && cfg.idleChats > 0 {
		label := fmt.Sprintf("%s, %d idle chats", t.Name(), cfg.idleChats)
		prog.begin(label, cfg.idleChats)
		var per float64
		per, err = turnbench.IdleHeap(ctx, t, cfg.idleChats, cfg.concurrency, prog.step)
		prog.end(turnbench.Result{})
		if err == nil {
			rep.Idle = &benchIdle{Chats: cfg.idleChats, HeapBytesPerChat: per}
		} else {
			err = fmt.Errorf("%s: %w", label, err)
		}
	}
	if perr := stopProfile(); err == nil && perr != nil {
		err = perr
	}
	if cerr := closeTurner(t); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", t.Name(), cerr)
	}
	if err != nil {
		return err
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeBenchTable(stdout, &rep)
	return nil
}

// startCPUProfile starts a CPU profile into path (none when path is
// empty) and returns what stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// spawnBenchServer starts this program again as the benchmark's server
// (main runs turnbench.ServeChild when it finds turnbench.ServerEnv) and
// returns the served variant against it.
func spawnBenchServer(ctx context.Context, store, storeLabel, baseURL, modelKey, model string, concurrency int, stderr io.Writer) (turnbench.Turner, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--served: find this program to start it as the server: %w", err)
	}
	p, err := turnbench.SpawnServer(ctx, exe, []string{"bench"}, os.Environ(),
		turnbench.ServerConfig{StoreURL: store, BaseURL: baseURL, APIKey: modelKey, Model: model}, stderr)
	if err != nil {
		return nil, fmt.Errorf("--served: %w", err)
	}
	s, err := turnbench.NewServed(turnbench.ServedConfig{Name: "baton served " + storeLabel, URL: p.URL, APIKey: p.Key, Concurrency: concurrency, Server: p})
	if err != nil {
		_ = p.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// writeBenchTable prints the results as a table.
func writeBenchTable(w io.Writer, rep *benchReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if rep.Mode == "overhead" {
		fmt.Fprintln(tw, "variant\tin flight\tturns\tturns/s\tCPU ms/turn\tx floor\tallocs/turn\tcommits/turn\treads/turn\tmodel conns/turn\tp50 ms\tp99 ms\t")
		for _, r := range rep.Results {
			x, commits, reads, conns := "-", "-", "-", "-"
			if r.XFloor > 0 {
				x = fmt.Sprintf("%.2f", r.XFloor)
			}
			if r.CommitsPerTurn > 0 {
				commits = fmt.Sprintf("%.2f", r.CommitsPerTurn)
			}
			if r.ReadsPerTurn != nil {
				reads = fmt.Sprintf("%.2f", *r.ReadsPerTurn)
			}
			if r.ModelConnsPerTurn != nil {
				conns = fmt.Sprintf("%.3f", *r.ModelConnsPerTurn)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%s\t%.0f\t%s\t%s\t%s\t%.2f\t%.2f\t\n", r.Variant, r.Concurrency, r.Turns, r.TurnsPerSec,
				r.CPUMsPerTurn, x, r.AllocsPerTurn, commits, reads, conns, r.LatencyMs.P50, r.LatencyMs.P99)
		}
	} else {
		fmt.Fprintln(tw, "variant\tin flight\tturns\tturns/s\tfirst token p50\tp95\tp99\tturn p50\tp95\tp99 ms\t")
		for _, r := range rep.Results {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", r.Variant, r.Concurrency, r.Turns, r.TurnsPerSec,
				r.FirstTokenMs.P50, r.FirstTokenMs.P95, r.FirstTokenMs.P99, r.LatencyMs.P50, r.LatencyMs.P95, r.LatencyMs.P99)
		}
	}
	_ = tw.Flush()
	if rep.Idle != nil {
		fmt.Fprintf(w, "\nheap per idle chat: %.0f B (%d chats paused)\n", rep.Idle.HeapBytesPerChat, rep.Idle.Chats)
	}
	switch {
	case rep.Mode == "overhead" && rep.Served:
		fmt.Fprintf(w, "\nFake model in this process; CPU is the server process's, \"x floor\" its multiple of the floor's (%d CPUs, %s).\n", rep.CPUs, rep.Go)
	case rep.Mode == "overhead":
		fmt.Fprintf(w, "\nFake model in this process, counted in every variant's CPU; \"x floor\" is CPU per turn over the floor's (%d CPUs, %s).\n", rep.CPUs, rep.Go)
	}
}

// progress shows how far a phase is: a bar redrawn in place on a
// terminal, a line at each phase's start and end otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	label string
	total int
	start time.Time
	drawn time.Time
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: &lockedWriter{w: w}, tty: ok && term.IsTerminal(int(f.Fd()))}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (p *progress) begin(label string, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.total, p.start, p.drawn = label, total, time.Now(), time.Time{}
	if !p.tty {
		fmt.Fprintf(p.w, "bench: %s: %d turns…\n", label, total)
	}
}

// step is called after each turn, from the turns' goroutines. Off a
// terminal it prints a line at each tenth of a long phase.
func (p *progress) step(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		if p.total >= 1000 && done < p.total && done%(p.total/10) == 0 {
			fmt.Fprintf(p.w, "bench: %s: %d/%d, %.0f turns/s\n", p.label, done, p.total, float64(done)/max(time.Since(p.start).Seconds(), 1e-9))
		}
		return
	}
	if now := time.Now(); done == p.total || now.Sub(p.drawn) >= 100*time.Millisecond {
		p.drawn = now
		const width = 30
		fill := width * done / max(p.total, 1)
		rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-9)
		fmt.Fprintf(p.w, "\r\033[K%s [%s%s] %d/%d %.0f turns/s", p.label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, p.total, rate)
	}
}

func (p *progress) end(r turnbench.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.tty:
		fmt.Fprint(p.w, "\r\033[K")
	case r.Turns > 0:
		fmt.Fprintf(p.w, "bench: %s: %d turns in %.2f s\n", p.label, r.Turns, r.Elapsed.Seconds())
	}
}
