package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/batonhq/baton"
)

// BenchmarkMCP compares the CPU a turn costs over MCP with the WebSocket
// path on the same workload: the bench workflow (one visual agent streams
// 65 deltas, 7 recorded events, and the chat ends), 8 chats at a time.
//
//   - "mcp": a tools/call of bench over /mcp (streamable HTTP, the go-sdk
//     client, one session), which starts the chat, follows it and returns
//     its text;
//   - "mcp-progress": the same with a progress token, so that the recorded
//     events also go out as progress notifications;
//   - "ws": POST …/start, then a WebSocket that reads the chat's envelopes
//     (every delta) until chat.run_complete.
//
// cpu-µs/turn is the whole process's CPU (the engine, the store, the
// server and the client, which share it here) over the turns: the
// difference between the rows is the protocols' cost. Run it with
//
//	go test -run '^$' -bench BenchmarkMCP -benchtime 200x ./server/
func BenchmarkMCP(b *testing.B) {
	b.Run("mcp", func(b *testing.B) { benchMCP(b, false) })
	b.Run("mcp-progress", func(b *testing.B) { benchMCP(b, true) })
	b.Run("ws", benchMCPWS)
}

const benchMCPConcurrency = 8

// benchMCPTurns runs turn b.N times, benchMCPConcurrency at once, and reports
// the process's CPU per turn.
func benchMCPTurns(b *testing.B, turn func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchMCPConcurrency)
	b.ResetTimer()
	cpuBefore := cpuTime()
	for range benchMCPConcurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := turn(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	cpu := cpuTime() - cpuBefore
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/turn")
}

func benchMCP(b *testing.B, progress bool) {
	e := newEnv(b, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {},
	})
	hc := e.ts.Client()
	hc.Transport = bearerTransport{key: e.keys[scopeAda], next: hc.Transport}
	sess, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.ts.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	benchMCPTurns(b, func(ctx context.Context) error {
		p := &mcp.CallToolParams{Name: "bench", Arguments: map[string]any{}}
		if progress {
			p.SetProgressToken("p")
		}
		res, err := sess.CallTool(ctx, p)
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) == 0 {
			return baton.Errorf(baton.EINTERNAL, "bench: %+v", res.Content)
		}
		return nil
	})
}

func benchMCPWS(b *testing.B) {
	e := newEnv(b, withWorkflows(benchDir), withConfig(func(c *Config) { c.MaxStreamsPerKey = -1 }))
	key := e.keys[scopeAda]
	benchMCPTurns(b, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/api/chats/acme/bench/start", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			return err
		}
		var started struct {
			ChatID string `json:"chat_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&started)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("start: %d %v", resp.StatusCode, err)
		}
		c, err := e.tryDial(ctx, started.ChatID, 0, key)
		if err != nil {
			return err
		}
		defer c.CloseNow()
		for {
			_, raw, err := c.Read(ctx)
			if err != nil {
				return err
			}
			var v struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(raw, &v) == nil && v.Type == baton.TypeChatRunComplete {
				return nil
			}
		}
	})
}
