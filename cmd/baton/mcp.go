package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/server"
)

func init() {
	register(command{
		name:    "mcp",
		summary: "serve the workflows as MCP tools over stdio (for Claude Desktop and IDEs)",
		usage:   "mcp [flags]",
		about: "Runs an MCP server on standard input and output: each workflow is a tool whose input is a message\n" +
			"(and an optional chat_id to continue a chat). Chats run in this process, against the store\n" +
			"`baton serve` uses, as --app and --user. Logs go to standard error, never to standard output.\n" +
			"See docs/mcp.md for a client configuration.",
		example: "baton mcp\nbaton mcp --app acme --user ada --web-url http://127.0.0.1:8080",
		flags:   mcpFlags,
	})
}

// mcpFlags defines the flags of `baton mcp`.
func mcpFlags(fs *flag.FlagSet) runner {
	var rc runtimeConfig
	rc.flags(fs)
	app := fs.String("app", envOr("BATON_APP", server.DefaultApp), "the chats' app (tenant) (env BATON_APP)")
	user := fs.String("user", envOr("BATON_USER", server.DevUser), "the chats' user; the default is --dev mode's, so the web UI in --dev mode shows the chats (env BATON_USER)")
	webURL := fs.String("web-url", envOr("BATON_WEB_URL", ""), "the web UI's address (say http://127.0.0.1:8080), linked to when a chat waits for secrets, which MCP does not carry (env BATON_WEB_URL)")
	logLevel := fs.String("log-level", envOr("BATON_LOG_LEVEL", "warn"), "log level: debug, info, warn or error (env BATON_LOG_LEVEL)")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		if fs.NArg() != 0 {
			fs.Usage()
			return errUsage
		}
		return runMCP(ctx, rc, baton.Scope{App: *app, User: *user}, *webURL, *logLevel, stderr)
	}
}

// runMCP serves the workflows over stdio until the client closes standard
// input or ctx ends. Standard output carries the protocol only: the
// runtime logs to stderr, and so does anything that logs to slog's default.
func runMCP(ctx context.Context, rc runtimeConfig, scope baton.Scope, webURL, logLevel string, stderr io.Writer) error {
	if err := scope.Validate(); err != nil {
		return fmt.Errorf("--app, --user: %w", err)
	}
	if err := nonDumpable(); err != nil {
		return err
	}
	log, err := newLogger(stderr, "text", logLevel)
	if err != nil {
		return err
	}
	rc.log = log
	defaultLog := slog.Default()
	slog.SetDefault(log)
	defer slog.SetDefault(defaultLog)
	rt, err := openRuntime(ctx, rc)
	if err != nil {
		return err
	}
	release := func() {}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
		release() // once the runs have stopped
	}()
	// Chats a killed `baton mcp` (or serve) left running go on here, unless
	// another process runs chats on the store now (recoverAtStart).
	if release, err = recoverAtStart(ctx, rt, rc, log, false); err != nil {
		return err
	}
	api, err := server.New(server.Config{Store: rt.Store(), Keys: rt.Store(), Bus: rt.Bus(), Engine: rt.Engine(), Logger: log})
	if err != nil {
		return err
	}
	defer api.Close()
	err = api.MCPServer(scope, webURL).Run(ctx, &mcp.StdioTransport{})
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil // the client closed the connection, or Ctrl-C
	}
	return fmt.Errorf("mcp: %w", err)
}
