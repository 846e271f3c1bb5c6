// Command customserver is `baton serve` with the program's own Go
// function tools: stock `baton serve` runs workflows whose tools are
// commands, HTTP endpoints or MCP servers, but it cannot run a Go function
// it was not built with. This program opens a runtime with its own
// workflow and function (runtime.Open), serves baton's HTTP API, WebSocket
// and web UI (server.New with web.Handler) on -addr, and exits cleanly on
// SIGINT or SIGTERM.
//
//	go run ./examples/customserver -addr 127.0.0.1:8080
//
// It runs in dev mode (no API key; loopback addresses only). With -smoke it
// listens on a free loopback port, runs one chat through its own HTTP API,
// prints the chat's texts and exits: CI runs it so.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/web"
	"github.com/batonhq/baton/workflow"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "loopback address to listen on (dev mode: no API key)")
	storeURL := flag.String("store", "mem:", "store URL: mem:, sqlite:PATH or postgres://…")
	smoke := flag.Bool("smoke", false, "listen on a free port, run one chat through the HTTP API, and exit")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *smoke {
		*addr = "127.0.0.1:0"
	}
	if err := serve(ctx, *addr, *storeURL, *smoke, log); err != nil {
		fmt.Fprintln(os.Stderr, "customserver:", err)
		os.Exit(1)
	}
}

// orders is the program's workflow; its go tool lookup_order is bound to
// findOrder by the function's name, find_order, when the runtime opens.
func orders() (*workflow.Workflow, error) {
	return workflow.Build(workflow.Definition{
		Config: workflow.Config{
			Name:          "orders",
			VisualAgents:  []string{"Clerk"},
			Orchestration: workflow.Orchestration{InitialAgent: "Clerk", InitialMessage: "Where is order 42?"},
		},
		Agents: []*workflow.Agent{{Name: "Clerk", SystemMessage: "You find orders with lookup_order and say where they are."}},
		Handoffs: []*workflow.HandoffRule{{
			SourceAgent: "Clerk", HandoffType: workflow.HandoffAfterWork, TransitionTarget: workflow.TerminateTarget,
		}},
		Tools: []*workflow.Tool{{
			Agent: "Clerk", Name: "lookup_order", Function: "find_order", Description: "Find an order by its number.",
			ToolType: workflow.AgentTool, Kind: workflow.KindGo,
			Parameters: json.RawMessage(`{"type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"]}`),
		}},
	})
}

var findOrder = tool.MustFunc("find_order", "Find an order by its number.",
	func(_ context.Context, _ *baton.CallContext, in struct {
		Number string `json:"number"`
	}) (string, error) {
		return "order " + in.Number + ": shipped on Monday, arrives Thursday", nil
	})

// script is what the scripted model says (it runs offline).
const script = `{"agents": {"Clerk": [
	{"tool_calls": [{"name": "lookup_order", "arguments": {"number": "42"}}]},
	{"text": "Order 42 shipped on Monday and arrives on Thursday."}
]}}`

func serve(ctx context.Context, addr, storeURL string, smoke bool, log *slog.Logger) error {
	if !server.IsLoopback(addr) {
		return fmt.Errorf("-addr %q: dev mode needs a loopback address", addr)
	}
	wf, err := orders()
	if err != nil {
		return err
	}
	model, err := scripted.Parse("orders", []byte(script))
	if err != nil {
		return err
	}
	rt, err := runtime.Open(ctx, runtime.Config{
		StoreURL: storeURL, Workflows: []*workflow.Workflow{wf}, Funcs: []baton.Tool{findOrder},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return model, nil },
		Logger:    log,
	})
	if err != nil {
		return err
	}
	// Close last: the bus drains so that running turns reach a recorded point.
	defer rt.Close(context.Background())
	if err := rt.Recover(ctx); err != nil {
		return err
	}
	api, err := server.New(server.Config{
		Store: rt.Store(), Keys: rt.Store(), Bus: rt.Bus(), Engine: rt.Engine(), Logger: log,
		Dev: true, UI: web.Handler(), Metrics: rt.Metrics(), Health: rt.Health, Watch: rt.Watch(),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		api.Close()
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	// Streams never end on their own: the server closes them on shutdown.
	srv.RegisterOnShutdown(api.Close)
	fmt.Printf("listening on http://%s (web UI at /, dev mode)\n", ln.Addr())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }() // ends with Shutdown below

	var smokeErr error
	if smoke {
		smokeErr = runOneChat(ctx, rt, "http://"+ln.Addr().String())
	} else {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			api.Close()
			return fmt.Errorf("serve: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdownErr := srv.Shutdown(sctx)
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(smokeErr, fmt.Errorf("serve: %w", err))
	}
	return errors.Join(smokeErr, shutdownErr)
}

// runOneChat starts a chat of orders through the HTTP API, waits for its
// end, and prints its texts from the history endpoint.
func runOneChat(ctx context.Context, rt *runtime.Runtime, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The end of the run is seen on the bus; subscribed before the start,
	// so it cannot be missed.
	ends, err := rt.Bus().Subscribe([]string{baton.TypeChatRunComplete, baton.TypeChatError})
	if err != nil {
		return err
	}
	defer ends.Close()

	var started struct {
		ChatID string `json:"chat_id"`
	}
	if err := call(ctx, http.MethodPost, base+"/api/chats/acme/orders/start", "{}", &started); err != nil {
		return err
	}
	end, err := ends.Wait(ctx, func(ev baton.Event) bool { return ev.ChatID() == started.ChatID })
	if err != nil {
		return fmt.Errorf("chat %s: waiting for its end: %w", started.ChatID, err)
	}
	if end.Type != baton.TypeChatRunComplete {
		return fmt.Errorf("chat %s ended with %s: %s", started.ChatID, end.Type, end.Payload)
	}
	var history struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
		LastSequence int64 `json:"last_sequence"`
	}
	if err := call(ctx, http.MethodGet, base+"/api/chats/acme/"+started.ChatID+"/events", "", &history); err != nil {
		return err
	}
	for _, ev := range history.Events {
		switch ev.Type {
		case baton.TypeChatText:
			var p baton.TextPayload
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				return err
			}
			fmt.Printf("%s: %s\n", p.Agent, p.Content)
		case baton.TypeChatToolResponse:
			var p baton.ToolResponsePayload
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				return err
			}
			fmt.Printf("[%s -> %s]\n", p.ToolName, p.Content)
		}
	}
	fmt.Printf("chat %s: run complete, %d events\n", started.ChatID, history.LastSequence)
	return nil
}

// call sends a request to the API and decodes its JSON answer into out.
func call(ctx context.Context, method, url, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: answer: %w", method, url, err)
	}
	return nil
}
