package turnbench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/metrics"
	batonrt "github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/workflow"
)

// ServerEnv is the environment variable that makes a process the
// benchmark's server (ServeChild): it holds the ServerConfig as JSON. A
// program that spawns itself as the server (a test binary, `baton
// bench`) checks it first thing and runs ServeChild.
const ServerEnv = "BATON_TURNBENCH_SERVER"

// ServerConfig is what the spawned server runs.
type ServerConfig struct {
	// StoreURL is the server's store (sqlite:PATH, mem:, postgres://…).
	StoreURL string `json:"store"`
	// BaseURL, APIKey and Model are the model endpoint the workflow's
	// provider calls.
	BaseURL string `json:"base_url"`
	APIKey  string `json:"api_key"`
	Model   string `json:"model"`
	// CPUProfile, when set, is a file the server writes a CPU profile of
	// its whole life to (for go tool pprof), from before it listens until
	// its input closes.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// MetricsFlush, when set, is how often the metrics collector writes
	// its rollups (default metrics.DefaultFlushInterval, a second): a test
	// that counts the turns' commits sets it past the test's end.
	MetricsFlush time.Duration `json:"metrics_flush,omitempty"`
}

// ServerProcess is a benchmark server running in a child process, with a
// line protocol on its standard input and output: it prints
// "listening URL KEY" once it serves, answers "cpu" with "cpu NANOSECONDS"
// (its getrusage, user+system) and "heap" with "heap BYTES" (its live heap
// after a collection), and shuts down gracefully when its input closes.
type ServerProcess struct {
	// URL is the server's base URL; Key an API key of Scope's app and user
	// (empty when the store keeps no keys: the server then runs in --dev
	// mode, on loopback).
	URL, Key string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	mu     sync.Mutex // one request on the line protocol at a time
	waited chan error
}

// SpawnServer starts exe with args and env (to which it adds ServerEnv) as
// the benchmark's server for cfg and waits until it listens. The child's
// standard error goes to stderr. The caller closes the process.
func SpawnServer(ctx context.Context, exe string, args, env []string, cfg ServerConfig, stderr io.Writer) (*ServerProcess, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(env, ServerEnv+"="+string(raw))
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("spawn the server: %w", err)
	}
	p := &ServerProcess{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), waited: make(chan error, 1)}
	line, err := p.readLine(ctx, 30*time.Second)
	if err == nil {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "listening":
			p.URL = f[1]
			if len(f) > 2 {
				p.Key = f[2]
			}
			return p, nil
		default:
			err = fmt.Errorf("the server said %q, not listening", line)
		}
	}
	_ = p.Close(context.Background())
	return nil, fmt.Errorf("spawn the server: %w", err)
}

// readLine reads the child's next line, waiting at most d and no longer
// than ctx.
func (p *ServerProcess) readLine(ctx context.Context, d time.Duration) (string, error) {
	got := make(chan struct{})
	var line string
	var err error
	go func() { // ends when the line comes or the child's stdout closes (Close kills it)
		defer close(got)
		line, err = p.out.ReadString('\n')
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-got:
		return strings.TrimSpace(line), err
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-got
		return "", context.Cause(ctx)
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-got
		return "", fmt.Errorf("the server did not answer within %s", d)
	}
}

// ask sends one command and returns the number of its answer.
func (p *ServerProcess) ask(ctx context.Context, cmd string) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return 0, fmt.Errorf("server process: %s: %w", cmd, err)
	}
	line, err := p.readLine(ctx, time.Minute)
	if err != nil {
		return 0, fmt.Errorf("server process: %s: %w", cmd, err)
	}
	word, num, _ := strings.Cut(line, " ")
	n, err := strconv.ParseUint(num, 10, 64)
	if word != cmd || err != nil {
		return 0, fmt.Errorf("server process: %s: answered %q", cmd, line)
	}
	return n, nil
}

// CPU returns the server process's CPU time so far.
func (p *ServerProcess) CPU(ctx context.Context) (time.Duration, error) {
	n, err := p.ask(ctx, "cpu")
	return time.Duration(n), err
}

// Heap returns the server process's live heap after a full collection.
func (p *ServerProcess) Heap(ctx context.Context) (uint64, error) { return p.ask(ctx, "heap") }

// Commits returns how many transactions the server's store has committed
// (0 for a store that does not count them).
func (p *ServerProcess) Commits(ctx context.Context) (uint64, error) { return p.ask(ctx, "commits") }

// Reads returns how many read queries the server's store has run (0 for a
// store that does not count them).
func (p *ServerProcess) Reads(ctx context.Context) (uint64, error) { return p.ask(ctx, "reads") }

// Close asks the server to shut down (its input closes) and waits for it,
// killing it when ctx ends first. It is safe to call more than once.
func (p *ServerProcess) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
		go func() { p.waited <- p.cmd.Wait() }()
	} else {
		return nil
	}
	select {
	case err := <-p.waited:
		if err != nil {
			return fmt.Errorf("server process: %w", err)
		}
		return nil
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.waited
		return fmt.Errorf("server process: killed: %w", context.Cause(ctx))
	}
}

// ServeChild runs this process as the benchmark's server, configured by
// ServerEnv, and returns the exit status: the runtime as `baton serve`
// opens it (the workflow built in Go, the echo tool, the llm/openai
// provider) and the server on a loopback port, with an API key when the
// store keeps keys; no rate limit and no bound on streams per key, which a
// benchmark from one key would hit. It serves the line protocol of
// ServerProcess until its input closes.
func ServeChild() int {
	if err := serveChild(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "turnbench server:", err)
		return 1
	}
	return 0
}

func serveChild(in io.Reader, out io.Writer) error {
	var cfg ServerConfig
	if err := json.Unmarshal([]byte(os.Getenv(ServerEnv)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", ServerEnv, err)
	}
	if cfg.Model == "" {
		cfg.Model = ModelName
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	wf, err := Workflow(cfg.Model)
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	provider := newProvider(cfg.BaseURL, cfg.APIKey, log)
	rt, err := batonrt.Open(ctx, batonrt.Config{
		StoreURL: cfg.StoreURL, Workflows: []*workflow.Workflow{wf}, Funcs: []baton.Tool{Echo},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return provider, nil },
		SecretKey: secret, Logger: log,
		Metrics: func(o *metrics.Options) {
			if cfg.MetricsFlush > 0 {
				o.FlushInterval = cfg.MetricsFlush
			}
		},
	})
	if err != nil {
		return err
	}
	defer func() { _ = rt.Close(context.Background()) }()
	var key string
	keys, _ := rt.Store().(baton.KeyStore)
	if keys != nil {
		k, hash, err := server.NewKey()
		if err != nil {
			return err
		}
		if _, err := keys.CreateKey(ctx, baton.APIKey{Hash: hash, App: Scope.App, User: Scope.User, Name: "turnbench"}); err != nil {
			return fmt.Errorf("create the API key: %w", err)
		}
		key = k
	}
	api, err := server.New(server.Config{
		Store: rt.Store(), Keys: keys, Bus: rt.Bus(), Engine: rt.Engine(), Logger: log,
		Dev: keys == nil, RateLimit: 0, MaxStreamsPerKey: -1,
		Metrics: rt.Metrics(), Health: rt.Health, Watch: rt.Watch(),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		api.Close()
		return err
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(api.Close)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(out, "listening http://%s %s\n", ln.Addr(), key)

	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := sc.Text(); cmd {
		case "cpu":
			fmt.Fprintf(out, "cpu %d\n", CPUTime())
		case "heap":
			h, _ := localHeap(ctx)
			fmt.Fprintf(out, "heap %d\n", h)
		case "commits":
			fmt.Fprintf(out, "commits %d\n", storeStats(rt.Store()).Commits)
		case "reads":
			fmt.Fprintf(out, "reads %d\n", storeStats(rt.Store()).Reads)
		default:
			fmt.Fprintf(out, "unknown %q\n", cmd)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
