package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/web"
)

func init() {
	register(command{
		name:    "serve",
		summary: "run the baton server",
		usage:   "serve [flags]",
		about:   "Runs the HTTP, WebSocket and SSE API and the web UI: loads the workflows, opens the store,\nresumes the chats that were running when the process stopped. Stops gracefully on SIGINT/SIGTERM.",
		example: "baton serve --dev                                    # on this machine, no API key needed\nBATON_STORE=postgres://baton@db/baton baton serve --addr :8080",
		flags:   serveFlags,
	})
}

// serveConfig is what `baton serve` is configured with: flags, with
// environment variables as defaults.
type serveConfig struct {
	runtime         runtimeConfig
	addr            string
	logFormat       string
	logLevel        string
	shutdownTimeout time.Duration
	dev             bool
	exportFull      bool
	allowedOrigins  string
	maxBody         int64
	maxMessage      int64
	rateLimit       float64
	rateBurst       int
}

// serveFlags defines the flags of `baton serve`.
func serveFlags(fs *flag.FlagSet) runner {
	var cfg serveConfig
	fs.StringVar(&cfg.addr, "addr", envOr("BATON_ADDR", "127.0.0.1:8080"), "address to listen on (env BATON_ADDR)")
	fs.StringVar(&cfg.logFormat, "log-format", envOr("BATON_LOG_FORMAT", "text"), "log format: text or json (env BATON_LOG_FORMAT)")
	fs.StringVar(&cfg.logLevel, "log-level", envOr("BATON_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env BATON_LOG_LEVEL)")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown may take")
	fs.BoolVar(&cfg.dev, "dev", envOr("BATON_DEV", "") == "1", "allow requests without an API key, as user \"dev\" (only on a loopback address; env BATON_DEV=1)")
	fs.BoolVar(&cfg.exportFull, "export-full", envOr("BATON_EXPORT_FULL", "") == "1", "let GET …/export write every recorded event, hidden messages and internal agents' texts included, as baton replay needs (always on with --dev; env BATON_EXPORT_FULL=1)")
	fs.StringVar(&cfg.allowedOrigins, "allowed-origins", envOr("BATON_ALLOWED_ORIGINS", ""), "comma-separated browser origins allowed besides the server's own host, with CORS (env BATON_ALLOWED_ORIGINS)")
	fs.Int64Var(&cfg.maxBody, "max-body", server.DefaultMaxBody, "largest HTTP request body, in bytes")
	fs.Int64Var(&cfg.maxMessage, "max-message", server.DefaultMaxMessage, "largest WebSocket message, in bytes")
	fs.Float64Var(&cfg.rateLimit, "rate-limit", 20, "requests and WebSocket messages per second per API key (0: no limit)")
	fs.IntVar(&cfg.rateBurst, "rate-burst", 60, "burst of the per-key rate limit")
	cfg.runtime.flags(fs)
	return func(ctx context.Context, _ *flag.FlagSet, stdout, stderr io.Writer) error {
		return runServe(ctx, cfg, stdout, stderr)
	}
}

func runServe(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	// Before anything reads a secret: command tools and stdio MCP servers
	// run as this user and could otherwise read /proc/<pid>/environ (the
	// secret key) and /proc/<pid>/mem.
	if err := nonDumpable(); err != nil {
		return err
	}
	// The metrics token comes from the environment only: a flag's value is
	// on every process listing.
	metricsToken := os.Getenv("BATON_METRICS_TOKEN")
	if metricsToken != "" && len(metricsToken) < 16 {
		return fmt.Errorf("BATON_METRICS_TOKEN: %d characters; use 16 or more (say, openssl rand -hex 24)", len(metricsToken))
	}
	if cfg.dev && !server.IsLoopback(cfg.addr) {
		return fmt.Errorf("--dev allows requests without an API key, so it needs a loopback --addr (127.0.0.1:PORT, [::1]:PORT or localhost:PORT), not %q", cfg.addr)
	}
	log, err := newLogger(stderr, cfg.logFormat, cfg.logLevel)
	if err != nil {
		return err
	}
	cfg.runtime.log = log
	rt, err := openRuntime(ctx, cfg.runtime)
	if err != nil {
		return err
	}
	closeRuntime := func(ctx context.Context) error { return rt.Close(ctx) }
	release, err := recoverAtStart(ctx, rt, cfg.runtime, log, true)
	if err != nil {
		_ = closeRuntime(context.Background())
		return err
	}
	// The store's lock file is let go once the runs have stopped.
	closeRuntime = func(ctx context.Context) error { defer release(); return rt.Close(ctx) }

	var origins []string
	for _, o := range strings.Split(cfg.allowedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	api, err := server.New(server.Config{
		Store: rt.Store(), Keys: rt.Store(), Bus: rt.Bus(), Engine: rt.Engine(), Logger: log,
		Dev: cfg.dev, FullExport: cfg.dev || cfg.exportFull, AllowedOrigins: origins, MaxBody: cfg.maxBody, MaxMessage: cfg.maxMessage,
		RateLimit: cfg.rateLimit, RateBurst: cfg.rateBurst, UI: web.Handler(), Metrics: rt.Metrics(), MetricsToken: metricsToken,
		Health: rt.Health, Watch: rt.Watch(), TracerProvider: rt.TracerProvider(), // nil when tracing is off
	})
	if err != nil {
		_ = closeRuntime(context.Background())
		return err
	}
	rt.OnReconnect(api.Resync)
	if cfg.dev {
		log.Warn("DEV MODE: requests WITHOUT an API key are accepted as user \"dev\" of the app in the URL; never expose this server", "addr", cfg.addr)
		fmt.Fprintln(stderr, "WARNING: baton is running in --dev mode: no API key is needed. Use it only on this machine.")
	}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		api.Close()
		_ = closeRuntime(context.Background())
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	// No WriteTimeout: streams are long-lived; each stream write has its own
	// deadline (server.Config.WriteTimeout) and ReadTimeout bounds bodies.
	srv := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("baton listening", "addr", ln.Addr().String(), "version", versionString())
	fmt.Fprintf(stdout, "baton listening on http://%s\n", ln.Addr())

	// Shutdown stops accepting and waits for requests; streams never end
	// on their own, so the server closes them first (WebSockets with 1012:
	// reconnect and replay).
	srv.RegisterOnShutdown(api.Close)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		api.Close()
		_ = closeRuntime(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	log.Info("baton shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	shutdownErr := srv.Shutdown(sctx)
	api.Close()
	// Running turns reach a recorded point as the bus drains.
	busErr := closeRuntime(sctx)
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return errors.Join(shutdownErr, busErr)
}

// newLogger builds the process logger from the --log-format and --log-level flags.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format: %q is not text or json", format)
	}
}
