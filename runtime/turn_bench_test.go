package runtime_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/openai"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// echoWorkflow is the turn of issue 25: the person's message, a streamed
// call of the Go tool echo, its result, a streamed 20-word answer, then
// the wait for the next message.
var echoWorkflow = map[string]string{
	"workflow.json": `{"name": "echo", "version": "1.0.0", "visual_agents": ["Assistant"],
  "orchestration": {"initial_agent": "Assistant", "startup_mode": "UserDriven", "max_turns": 1000000},
  "llm": {"model": "gpt-4o-mini"}}`,
	"agents.json":             `{"agents": {"Assistant": {"system_message": "You answer after echoing.", "max_consecutive_auto_reply": 2}}}`,
	"handoffs.json":           `{"handoff_rules": [{"source_agent": "Assistant", "handoff_type": "after_work", "transition_target": "RevertToUserTarget"}]}`,
	"context_variables.json":  `{"variables": {}}`,
	"structured_outputs.json": `{"structured_outputs": {"models": {}, "registry": {}}}`,
	"tools.json": `{"tools": [{"agent": "Assistant", "name": "echo", "function": "echo", "description": "Echo the text.",
  "tool_type": "Agent_Tool", "kind": "go"}]}`,
}

// fakeOpenAI answers every chat completion as issue 25's fake server does:
// a tool call of echo when the last message is the person's, else 20 words,
// one SSE chunk each, then a usage chunk and [DONE].
func fakeOpenAI(b *testing.B) *httptest.Server {
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":`
	usage := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":20,"total_tokens":70}}` + "\n\ndata: [DONE]\n\n"
	var text strings.Builder
	text.WriteString("data: " + head + `{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for i := range 20 {
		fmt.Fprintf(&text, "data: %s{\"content\":\"word%d \"},\"finish_reason\":null}]}\n\n", head, i)
	}
	text.WriteString("data: " + head + `{},"finish_reason":"stop"}]}` + "\n\n" + usage)
	call := "data: " + head + `{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"echo","arguments":""}}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"text\":"}}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"tool_calls":[{"index":0,"function":{"arguments":"\"hello\"}"}}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{},"finish_reason":"tool_calls"}]}` + "\n\n" + usage
	textBody, callBody := []byte(text.String()), []byte(call)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if bytes.Contains(body.Bytes(), []byte(`"role":"tool"`)) {
			_, _ = w.Write(textBody)
		} else {
			_, _ = w.Write(callBody)
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRealTurn runs issue 25's production turn embedded: a new chat
// per turn started with the person's message, the real llm/openai provider
// against a loopback SSE server, every event consumed as an envelope, on
// SQLite (synchronous=FULL, the default) and on the memory store, one and
// 50 turns in flight.
//
//	go test -run '^$' -bench BenchmarkRealTurn -benchmem ./runtime
func BenchmarkRealTurn(b *testing.B) {
	for _, store := range []string{"sqlite", "mem"} {
		for _, inFlight := range []int{1, 50} {
			b.Run(fmt.Sprintf("store=%s/inflight=%d", store, inFlight), func(b *testing.B) {
				realTurns(b, store, inFlight)
			})
		}
	}
}

func realTurns(b *testing.B, store string, inFlight int) {
	srv := fakeOpenAI(b)
	dir := b.TempDir()
	wfDir := filepath.Join(dir, "workflows", "echo")
	if err := os.MkdirAll(wfDir, 0o755); err != nil {
		b.Fatal(err)
	}
	for name, body := range echoWorkflow {
		if err := os.WriteFile(filepath.Join(wfDir, name), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	storeURL := "sqlite:" + filepath.Join(dir, "baton.db")
	if store == "mem" {
		storeURL = "mem:"
	}
	echo := tool.MustFunc("echo", "Echo the text.", func(_ context.Context, _ *baton.CallContext, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	prov := openai.New(openai.WithBaseURL(srv.URL+"/v1"), openai.WithAPIKey("k"), openai.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	rt, err := runtime.Open(ctx, runtime.Config{
		StoreURL: storeURL, DataDir: dir, WorkflowsDir: filepath.Join(dir, "workflows"),
		Funcs:     []baton.Tool{echo},
		Providers: func(*workflow.Workflow) (baton.Provider, error) { return prov, nil },
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rt.Close(ctx) }()
	scope := baton.Scope{App: "bench", User: "ada"}
	turn := func(buf []byte) []byte {
		c := rt.Chat(scope, "echo")
		var last string
		for ev, err := range c.Start(ctx, baton.StartOptions{Message: "What is a baton?"}) {
			if err != nil {
				b.Error(err)
				return buf
			}
			buf, _ = ev.AppendEnvelope(buf[:0], baton.AgentFlags{Visual: true})
			last = ev.Type
		}
		if last != baton.TypeChatInputRequest {
			b.Errorf("turn ended with %s", last)
		}
		return buf
	}
	turn(nil) // warm up
	per := (b.N + inFlight - 1) / inFlight
	sq, _ := rt.Store().(interface{ Stats() sqlite.Stats })
	var stats0 sqlite.Stats
	if sq != nil {
		stats0 = sq.Stats()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, t0 := rusage(), time.Now()
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			var buf []byte
			for range per {
				buf = turn(buf)
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), rusage()-cpu0
	b.StopTimer()
	turns := float64(per * inFlight)
	b.ReportMetric(turns/elapsed.Seconds(), "turns/s")
	b.ReportMetric(float64(cpu.Microseconds())/turns, "cpu-µs/turn")
	if sq != nil {
		stats := sq.Stats()
		b.ReportMetric(float64(stats.Writes-stats0.Writes)/turns, "writes/turn")
		b.ReportMetric(float64(stats.Commits-stats0.Commits)/turns, "commits/turn")
	}
}
