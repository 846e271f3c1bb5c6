package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/batonhq/baton/internal/testenv"
)

// protoTurnProtocols are BenchmarkProtocolTurn's sub-benchmarks, in the
// order they run: ws first, the yardstick of the others.
var protoTurnProtocols = []string{"ws", "chatcompletions", "agui", "mcp", "a2a"}

// BenchmarkProtocolTurn is the server's CPU per turn of each protocol a
// client can follow a chat with, on the same workload: each of N chats
// (BATON_BENCH_CHATS, default 200) is one turn of the benchpaced workflow
// (a visual agent streaming 65 deltas 20 ms apart, like a model; 75
// envelopes, 7 of them recorded), one chat started per millisecond. The
// clients run in a child process (this test binary,
// TestHelperProtocolTurnClients), so the CPU measured in this process is the
// server's alone: HTTP, engine, bus, real SQLite. Per turn, the client
//
//   - ws: POST /api/chats/{app}/benchpaced/start, then the chat's WebSocket
//     from sequence 0 until chat.run_complete;
//   - chatcompletions: POST /v1/chat/completions, stream: true, until
//     data: [DONE];
//   - agui: POST /agui/{app}/benchpaced with a new thread's RunAgentInput
//     until RUN_FINISHED;
//   - mcp: a tools/call of benchpaced over /mcp (the go-sdk client, one
//     session for all turns), which starts the chat, follows it and returns
//     its text;
//   - a2a: message/stream with the a2a-go client until the final status
//     update.
//
// It reports server-cpu-µs/turn, client-cpu-µs/turn and, once ws has run in
// the same process, x-ws: the protocol's server CPU over the WebSocket's.
// Run it with
//
//	BATON_BENCH_CHATS=200 go test -run '^$' -bench BenchmarkProtocolTurn -benchtime 1x ./server/
//
// On a shared machine the figures are noisy: compare the ratios of one run,
// and run it more than once (-count).
func BenchmarkProtocolTurn(b *testing.B) {
	var ws float64 // the ws row's server CPU per turn in this run
	for _, proto := range protoTurnProtocols {
		b.Run(proto, func(b *testing.B) {
			perTurn := benchProtocolTurns(b, proto)
			if proto == "ws" {
				ws = perTurn
			} else if ws > 0 {
				b.ReportMetric(perTurn/ws, "x-ws")
			}
		})
	}
}

// benchProtocolTurns runs b.N rounds of the protocol's turns and returns the
// server's CPU per turn in µs.
func benchProtocolTurns(b *testing.B, proto string) float64 {
	chats := 200
	if n, err := strconv.Atoi(os.Getenv("BATON_BENCH_CHATS")); err == nil && n > 0 {
		chats = n
	}
	var serverCPU, clientCPU time.Duration
	for range b.N {
		b.StopTimer()
		e := newEnv(b, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
		cfg, _ := json.Marshal(protoTurnClients{URL: e.ts.URL, Key: e.keys[scopeAda], Proto: proto, Chats: chats, Workflow: "benchpaced"})
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProtocolTurnClients$")
		cmd.Env = append(os.Environ(), "BATON_PROTO_TURN_CLIENTS="+string(cfg))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		out := bufio.NewReader(stdout)
		// The child connects (MCP's initialize, A2A's card) before it is
		// ready: per-client setup is not a turn's cost.
		if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("%s clients: %q %v", proto, line, err)
		}
		before := cpuTime()
		start := time.Now()
		b.StartTimer()
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			b.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil || line != "done\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("%s clients: %q %v", proto, line, err)
		}
		testenv.Eventually(b, 60*time.Second, "every run to end", func() error {
			if n := e.eng.Active(); n != 0 {
				return fmt.Errorf("%d runs active", n)
			}
			return nil
		})
		b.StopTimer()
		cpu := cpuTime() - before
		elapsed := time.Since(start)
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("%s clients: %v", proto, err)
		}
		var child time.Duration
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			child = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		serverCPU += cpu
		clientCPU += child
		b.Logf("%s: %d turns in %v; server CPU %v, clients %v", proto, chats, elapsed, cpu, child)
	}
	turns := float64(b.N * chats)
	perTurn := float64(serverCPU.Microseconds()) / turns
	b.ReportMetric(perTurn, "server-cpu-µs/turn")
	b.ReportMetric(float64(clientCPU.Microseconds())/turns, "client-cpu-µs/turn")
	b.ReportMetric(0, "ns/op")
	return perTurn
}

type protoTurnClients struct {
	URL, Key, Proto, Workflow string
	Chats                     int
}

// TestHelperProtocolTurnClients is the child of BenchmarkProtocolTurn: the
// clients. It does nothing in a normal test run.
func TestHelperProtocolTurnClients(t *testing.T) {
	raw := os.Getenv("BATON_PROTO_TURN_CLIENTS")
	if raw == "" {
		t.Skip("the child process of BenchmarkProtocolTurn")
	}
	var cfg protoTurnClients
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Chats}
	defer tr.CloseIdleConnections() // the test binary checks for leaked goroutines
	client := &http.Client{Transport: tr}
	authed := &http.Client{Transport: bearerTransport{key: cfg.Key, next: tr}}
	turn, closeClient, err := protoTurnClient(ctx, cfg, client, authed)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, _ := in.ReadString('\n'); line != "go\n" {
		t.Fatalf("want go, got %q", line)
	}
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Chats)
	tick := time.NewTicker(time.Millisecond)
	for i := range cfg.Chats {
		<-tick.C // chats arrive one by one, as people open them
		wg.Go(func() {
			if err := turn(ctx, i); err != nil {
				errs <- fmt.Errorf("%s turn %d: %w", cfg.Proto, i, err)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	fmt.Println("done")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// protoTurnClient connects the protocol's client and returns its turn: one
// new chat followed to its end.
func protoTurnClient(ctx context.Context, cfg protoTurnClients, client, authed *http.Client) (func(context.Context, int) error, func(), error) {
	post := func(ctx context.Context, path string, body any) (*http.Response, error) {
		raw, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", cfg.URL+path, bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := authed.Do(req)
		if err == nil && resp.StatusCode/100 != 2 {
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, msg)
		}
		return resp, err
	}
	nothing := func() {}
	switch cfg.Proto {
	case "ws":
		return func(ctx context.Context, _ int) error {
			resp, err := post(ctx, "/api/chats/acme/"+cfg.Workflow+"/start", map[string]any{})
			if err != nil {
				return err
			}
			var started struct {
				ChatID string `json:"chat_id"`
			}
			err = json.NewDecoder(resp.Body).Decode(&started)
			resp.Body.Close()
			if err != nil {
				return err
			}
			h := http.Header{}
			h.Set("Authorization", "Bearer "+cfg.Key)
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(cfg.URL, "http")+"/ws/acme/"+started.ChatID+"?last_sequence=0", &websocket.DialOptions{HTTPHeader: h, HTTPClient: client})
			if err != nil {
				return err
			}
			defer c.CloseNow()
			c.SetReadLimit(8 << 20)
			for {
				_, msg, err := c.Read(ctx)
				if err != nil {
					return err
				}
				if bytes.HasPrefix(msg, []byte(`{"type":"chat.run_complete"`)) {
					return c.Close(websocket.StatusNormalClosure, "")
				}
			}
		}, nothing, nil
	case "chatcompletions":
		body := map[string]any{"model": cfg.Workflow, "stream": true, "messages": []map[string]any{{"role": "user", "content": "Tell me a story."}}}
		return func(ctx context.Context, _ int) error {
			resp, err := post(ctx, "/v1/chat/completions", body)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			all, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.HasSuffix(all, []byte("data: [DONE]\n\n")) {
				return fmt.Errorf("chat completion: %v %.200s", err, all)
			}
			return nil
		}, nothing, nil
	case "agui":
		return func(ctx context.Context, i int) error {
			resp, err := post(ctx, "/agui/acme/"+cfg.Workflow, aguiInputOf(fmt.Sprintf("bench-%d-%d", os.Getpid(), i), "r"))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if bytes.HasPrefix(sc.Bytes(), []byte(`data: {"type":"RUN_FINISHED"`)) {
					return nil
				}
			}
			return fmt.Errorf("the stream ended before RUN_FINISHED: %v", sc.Err())
		}, nothing, nil
	case "mcp":
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		sess, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: cfg.URL + "/mcp", HTTPClient: authed, MaxRetries: -1}, nil)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, _ int) error {
			res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: cfg.Workflow, Arguments: map[string]any{}})
			if err != nil {
				return err
			}
			if res.IsError || len(res.Content) == 0 {
				return fmt.Errorf("tools/call: %+v", res.Content)
			}
			return nil
		}, func() { _ = sess.Close() }, nil
	case "a2a":
		card, err := agentcard.NewResolver(authed).Resolve(ctx, cfg.URL+"/a2a/acme/"+cfg.Workflow)
		if err != nil {
			return nil, nil, fmt.Errorf("resolve card: %w", err)
		}
		c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(authed))
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, i int) error {
			msg := &a2a.Message{ID: fmt.Sprintf("bench-%d", i), Role: a2a.MessageRoleUser, Parts: a2a.ContentParts{a2a.TextPart{Text: "Tell me a story."}}}
			for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: msg}) {
				if err != nil {
					return err
				}
				if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && su.Final {
					if su.Status.State != a2a.TaskStateCompleted {
						return fmt.Errorf("the turn ended %s", su.Status.State)
					}
					return nil
				}
			}
			return fmt.Errorf("the stream ended before the final status update")
		}, func() { _ = c.Destroy() }, nil
	}
	return nil, nil, fmt.Errorf("unknown protocol %q", cfg.Proto)
}
