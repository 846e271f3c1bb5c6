package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const benchDeltas = 200

// benchServer serves one fixed stream of benchDeltas text chunks.
func benchServer(b *testing.B) *httptest.Server {
	var sb strings.Builder
	for i := range benchDeltas {
		fmt.Fprintf(&sb, "data: %s\n\n", textChunk(fmt.Sprintf("tok%d ", i)))
	}
	fmt.Fprintf(&sb, "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunk(`{}`, "stop"), usageChunk)
	body := []byte(sb.String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkEmit measures the provider path's own work per delta, beyond the
// SDK's decoding: copying the decoded chunk out of the stream and turning it
// into a baton.Delta handed to the consumer.
func BenchmarkEmit(b *testing.B) {
	chunks := make([]streamChunk, benchDeltas)
	for i := range chunks {
		if err := json.Unmarshal([]byte(textChunk(fmt.Sprintf("tok%d ", i))), &chunks[i]); err != nil {
			b.Fatal(err)
		}
	}
	c := &call{}
	n := 0
	yield := func(d baton.Delta, err error) bool { n += len(d.Text); return true }
	b.ReportAllocs()
	for b.Loop() {
		for i := range chunks {
			ch := chunks[i] // what consume does with stream.Current()
			c.emit(&ch, yield)
		}
	}
	perDelta := float64(b.Elapsed().Nanoseconds()) / float64(b.N*benchDeltas)
	b.ReportMetric(perDelta/1000, "µs/delta")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStream is the whole provider against the fake server;
// BenchmarkSDKBaseline is the bare SDK loop on the same server. Their
// difference per delta is the provider's overhead.
func BenchmarkStream(b *testing.B) {
	srv := benchServer(b)
	p := New(WithBaseURL(srv.URL+"/v1"), WithAPIKey("k"), WithLogger(slog.New(slog.DiscardHandler)))
	req := request()
	ctx := context.Background()
	benchCalls(b, func() int {
		n := 0
		for d, err := range p.Stream(ctx, req) {
			if err != nil {
				b.Fatal(err)
			}
			if d.Kind == baton.DeltaText {
				n++
			}
		}
		return n
	})
}

// BenchmarkStreamWatchdog is BenchmarkStream with the stall timeouts on
// (the defaults: a timer reset per chunk) and off; the difference per delta
// is what watching for a stall costs.
func BenchmarkStreamWatchdog(b *testing.B) {
	srv := benchServer(b)
	for _, bc := range []struct {
		name  string
		first time.Duration
		idle  time.Duration
	}{{"on", 0, 0}, {"off", -1, -1}} {
		b.Run(bc.name, func(b *testing.B) {
			p := New(WithBaseURL(srv.URL+"/v1"), WithAPIKey("k"), WithLogger(slog.New(slog.DiscardHandler)), WithStallTimeouts(bc.first, bc.idle))
			req := request()
			ctx := context.Background()
			benchCalls(b, func() int {
				n := 0
				for d, err := range p.Stream(ctx, req) {
					if err != nil {
						b.Fatal(err)
					}
					if d.Kind == baton.DeltaText {
						n++
					}
				}
				return n
			})
		})
	}
}

func BenchmarkSDKBaseline(b *testing.B) {
	srv := benchServer(b)
	client := sdk.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := sdk.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("hi")},
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}}
	ctx := context.Background()
	benchCalls(b, func() int {
		n := 0
		s := client.Chat.Completions.NewStreaming(ctx, params)
		for s.Next() {
			if c := s.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				n++
			}
		}
		if err := s.Err(); err != nil {
			b.Fatal(err)
		}
		s.Close()
		return n
	})
}

func benchCalls(b *testing.B, call func() int) {
	b.ReportAllocs()
	var deltas int
	for b.Loop() {
		if n := call(); n != benchDeltas {
			b.Fatalf("%d deltas, want %d", n, benchDeltas)
		} else {
			deltas += n
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(deltas)/1000, "µs/delta")
}
