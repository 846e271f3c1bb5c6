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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkAGUITurn is the server's CPU per turn of an AG-UI client next to
// a WebSocket client, on the same workload: a chat of the benchpaced
// workflow (one visual agent streams 65 deltas, one every 20 ms like a
// model; 75 envelopes, 7 of them recorded), started by the client and
// followed to its end. Per turn, the WebSocket client starts the chat
// (POST …/start; "ws-idempotent" with an Idempotency-Key, as AG-UI starts
// a thread) and reads its stream until chat.run_complete; the AG-UI
// client posts a RunAgentInput of a new thread and reads its events until
// RUN_FINISHED. The clients run in a child process (this test binary,
// TestHelperAGUITurnClients), 16 turns at a time, so that the CPU measured is
// the server's: server, engine and store, real SQLite. It reports
// server-cpu-µs/turn.
//
// Run it with
//
//	go test -run '^$' -bench BenchmarkAGUITurn -benchtime 200x ./server/
//
// On a shared machine the figures are noisy: compare the two in one run.
func BenchmarkAGUITurn(b *testing.B) {
	for _, mode := range []string{"ws", "ws-idempotent", "agui"} {
		b.Run(mode, func(b *testing.B) {
			e := newEnv(b, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
			cfg, _ := json.Marshal(aguiTurnClients{URL: e.ts.URL, Key: e.keys[scopeAda], Mode: mode, Turns: b.N, Parallel: 16})
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAGUITurnClients$")
			cmd.Env = append(os.Environ(), "BATON_AGUI_TURN_CLIENTS="+string(cfg))
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			before := cpuTime()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			res, _ := io.ReadAll(out)
			if err := cmd.Wait(); err != nil {
				b.Fatalf("turn clients: %v: %s", err, res)
			}
			cpu := cpuTime() - before
			b.StopTimer()
			if !bytes.HasPrefix(res, []byte("done ")) {
				b.Fatalf("turn clients: %q", res)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-µs/turn")
			b.ReportMetric(0, "ns/op")
		})
	}
}

type aguiTurnClients struct {
	URL, Key, Mode  string
	Turns, Parallel int
}

// TestHelperAGUITurnClients is the child of BenchmarkAGUITurn; it does
// nothing in a normal test run.
func TestHelperAGUITurnClients(t *testing.T) {
	raw := os.Getenv("BATON_AGUI_TURN_CLIENTS")
	if raw == "" {
		t.Skip("the child process of BenchmarkAGUITurn")
	}
	var cfg aguiTurnClients
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Parallel}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	turns := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	envelopes := 0
	for range cfg.Parallel {
		wg.Go(func() {
			for i := range turns {
				n, err := oneTurn(ctx, client, cfg, i)
				if err != nil {
					t.Errorf("turn %d: %v", i, err)
					return
				}
				mu.Lock()
				envelopes += n
				mu.Unlock()
			}
		})
	}
	for i := range cfg.Turns {
		turns <- i
	}
	close(turns)
	wg.Wait()
	fmt.Printf("done %d\n", envelopes)
}

// oneTurn runs one turn of the benchmark's client and returns how many
// messages (envelopes, or AG-UI events) it read.
func oneTurn(ctx context.Context, client *http.Client, cfg aguiTurnClients, i int) (int, error) {
	post := func(path string, body any) (*http.Response, error) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, "POST", cfg.URL+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+cfg.Key)
		if cfg.Mode == "ws-idempotent" {
			// Started as AG-UI starts a thread: retry-safe (StartOnce).
			req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d-%d", os.Getpid(), i))
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil && resp.StatusCode/100 != 2 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return resp, err
	}
	if cfg.Mode == "agui" {
		resp, err := post("/agui/acme/benchpaced", aguiInputOf(fmt.Sprintf("bench-%d-%d", os.Getpid(), i), "r"))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		n := 0
		for sc.Scan() {
			if line := sc.Bytes(); bytes.HasPrefix(line, []byte("data: ")) {
				n++
				if bytes.HasPrefix(line, []byte(`data: {"type":"RUN_FINISHED"`)) {
					return n, nil
				}
			}
		}
		return n, fmt.Errorf("the stream ended before RUN_FINISHED: %v", sc.Err())
	}
	resp, err := post("/api/chats/acme/benchpaced/start", map[string]any{})
	if err != nil {
		return 0, err
	}
	var started struct {
		ChatID string `json:"chat_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+cfg.Key)
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(cfg.URL, "http")+"/ws/acme/"+started.ChatID+"?last_sequence=0", &websocket.DialOptions{HTTPHeader: h, HTTPClient: client})
	if err != nil {
		return 0, err
	}
	defer c.CloseNow()
	c.SetReadLimit(8 << 20)
	for n := 1; ; n++ {
		_, raw, err := c.Read(ctx)
		if err != nil {
			return n, err
		}
		if bytes.HasPrefix(raw, []byte(`{"type":"chat.run_complete"`)) {
			c.Close(websocket.StatusNormalClosure, "")
			return n, nil
		}
	}
}
