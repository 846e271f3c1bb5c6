package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

)

func init() {
	register(command{name: "serve", summary: "run the baton server", run: runServe})
}

// serveConfig is what `baton serve` is configured with: flags, with
// environment variables as defaults.
type serveConfig struct {
	runtime         runtimeConfig
	addr            string
	logFormat       string
	logLevel        string
	shutdownTimeout time.Duration
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg serveConfig
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&cfg.addr, "addr", envOr("BATON_ADDR", "127.0.0.1:8080"), "address to listen on (env BATON_ADDR)")
	fs.StringVar(&cfg.logFormat, "log-format", envOr("BATON_LOG_FORMAT", "text"), "log format: text or json (env BATON_LOG_FORMAT)")
	fs.StringVar(&cfg.logLevel, "log-level", envOr("BATON_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env BATON_LOG_LEVEL)")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown may take")
	cfg.runtime.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
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
	if err := rt.recover(ctx); err != nil {
		_ = closeRuntime(context.Background())
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := rt.store.Ping(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"unavailable","reason":"store"}`)
			return
		}
		_, _ = io.WriteString(w, `{"status":"ready"}`)
	})

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("baton listening", "addr", ln.Addr().String(), "version", versionString())
	fmt.Fprintf(stdout, "baton listening on http://%s\n", ln.Addr())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		_ = closeRuntime(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	log.Info("baton shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	shutdownErr := srv.Shutdown(sctx)
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
