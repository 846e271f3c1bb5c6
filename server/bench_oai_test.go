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

	"github.com/coder/websocket"

	"github.com/batonhq/baton/internal/testenv"
)

// BenchmarkTurnCPU compares the server's CPU per turn of the OpenAI Chat
// Completions stream with the WebSocket's, on the same workload: each of N
// chats (BATON_BENCH_CHATS, default 200) is one turn of the benchpaced
// workflow (a visual agent streaming 65 deltas 20 ms apart, 75 envelopes),
// one chat started per millisecond, from a client in a child process (as
// BenchmarkWS's clients, so that their CPU is not the server's):
//
//   - "ws": POST /api/chats/{app}/benchpaced/start, then the chat's
//     WebSocket from sequence 0 until chat.run_complete;
//   - "chatcompletions": POST /v1/chat/completions with stream: true until
//     data: [DONE].
//
// It reports the server process's CPU (server, engine, store) per turn and
// the clients'. Run it with
//
//	go test -run '^$' -bench BenchmarkTurnCPU -benchtime 1x ./server/
func BenchmarkTurnCPU(b *testing.B) {
	b.Run("ws", func(b *testing.B) { benchTurns(b, "ws") })
	b.Run("chatcompletions", func(b *testing.B) { benchTurns(b, "oai") })
}

func benchTurns(b *testing.B, proto string) {
	chats := 200
	if n, err := strconv.Atoi(os.Getenv("BATON_BENCH_CHATS")); err == nil && n > 0 {
		chats = n
	}
	for range b.N {
		b.StopTimer()
		e := newEnv(b, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
		cfg, _ := json.Marshal(turnClients{URL: e.ts.URL, Key: e.keys[scopeAda], Proto: proto, Chats: chats, Workflow: "benchpaced"})
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTurnClients$")
		cmd.Env = append(os.Environ(), "BATON_TURN_CLIENTS="+string(cfg))
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
		if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
			b.Fatalf("turn clients: %q %v", line, err)
		}
		before := cpuTime()
		start := time.Now()
		b.StartTimer()
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			b.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil || line != "done\n" {
			b.Fatalf("turn clients: %q %v", line, err)
		}
		testenv.Eventually(b, 60*time.Second, "every run to end", func() error {
			if n := e.eng.Active(); n != 0 {
				return fmt.Errorf("%d runs active", n)
			}
			return nil
		})
		b.StopTimer()
		elapsed := time.Since(start)
		cpu := cpuTime() - before
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("turn clients: %v", err)
		}
		var clientCPU time.Duration
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		b.ReportMetric(float64(cpu.Microseconds())/float64(chats), "server-cpu-µs/turn")
		b.ReportMetric(float64(clientCPU.Microseconds())/float64(chats), "client-cpu-µs/turn")
		b.Logf("%s: %d turns in %v; server CPU %v (%.0f µs a turn), clients %v", proto, chats, elapsed, cpu, float64(cpu.Microseconds())/float64(chats), clientCPU)
	}
}

type turnClients struct {
	URL, Key, Proto, Workflow string
	Chats                     int
}

// TestHelperTurnClients is the child of BenchmarkTurnCPU; it does nothing
// in a normal test run.
func TestHelperTurnClients(t *testing.T) {
	raw := os.Getenv("BATON_TURN_CLIENTS")
	if raw == "" {
		t.Skip("the child process of BenchmarkTurnCPU")
	}
	var cfg turnClients
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Chats}
	defer tr.CloseIdleConnections() // the test binary checks for leaked goroutines
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, _ := in.ReadString('\n'); line != "go\n" {
		t.Fatalf("want go, got %q", line)
	}
	post := func(path, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", cfg.URL+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+cfg.Key)
		req.Header.Set("Content-Type", "application/json")
		return client.Do(req)
	}
	turn := func() error {
		switch cfg.Proto {
		case "oai":
			resp, err := post("/v1/chat/completions", `{"model":"`+cfg.Workflow+`","stream":true,"messages":[{"role":"user","content":"Tell me a story."}]}`)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
				return fmt.Errorf("chat completion: %d %v %.200s", resp.StatusCode, err, body)
			}
			return nil
		default:
			resp, err := post("/api/chats/acme/"+cfg.Workflow+"/start", "")
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
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(cfg.URL, "http")+"/ws/acme/"+started.ChatID+"?last_sequence=0", &websocket.DialOptions{HTTPHeader: h})
			if err != nil {
				return err
			}
			defer c.Close(websocket.StatusNormalClosure, "")
			c.SetReadLimit(8 << 20)
			for {
				_, msg, err := c.Read(ctx)
				if err != nil {
					return err
				}
				if bytes.HasPrefix(msg, []byte(`{"type":"chat.run_complete"`)) {
					return nil
				}
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Chats)
	tick := time.NewTicker(time.Millisecond)
	for range cfg.Chats {
		<-tick.C // chats arrive one by one, as people open them
		wg.Go(func() {
			if err := turn(); err != nil {
				errs <- err
			}
		})
	}
	tick.Stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	fmt.Println("done")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
