package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
	"go.uber.org/goleak"
)

// fakeServer is an OpenAI-compatible endpoint speaking the real Chat
// Completions SSE format. Each request gets the next handler of its script
// (the last one repeats); every request body is recorded.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   [][]byte
	headers  []http.Header
	handlers []http.HandlerFunc
	calls    atomic.Int32
}

func newFake(t *testing.T, handlers ...http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{handlers: handlers}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		n := int(f.calls.Add(1)) - 1
		f.mu.Lock()
		f.bodies = append(f.bodies, body)
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		f.handlers[min(n, len(f.handlers)-1)](w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) body(t *testing.T, i int) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var m map[string]any
	if err := json.Unmarshal(f.bodies[i], &m); err != nil {
		t.Fatalf("request %d body: %v", i, err)
	}
	return m
}

func (f *fakeServer) provider(opts ...Option) *Provider {
	return New(append([]Option{WithBaseURL(f.URL + "/v1"), WithAPIKey("sk-test-secret"), WithBackoff(time.Millisecond, 5*time.Millisecond),
		WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
}

// sse writes an SSE stream of the given data payloads then [DONE].
func sse(chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + f + `}]}`
}

func textChunk(s string) string {
	b, _ := json.Marshal(s)
	return chunk(`{"content":`+string(b)+`}`, "")
}

const usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":7,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":32},"completion_tokens_details":{"reasoning_tokens":2}}}`

func jsonError(status int, code, msg string, header map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":%q}}`, msg, code)
	}
}

func request() *baton.Request {
	return &baton.Request{ChatID: "chat-1", Agent: "Writer", MessageID: "m-1",
		Messages: []baton.Message{{Role: baton.RoleUser, Name: "user", Content: "hi"}},
		Params:   baton.ModelParams{Model: "gpt-4o-mini"}}
}

// collect runs a stream to its end.
func collect(t *testing.T, ctx context.Context, p baton.Provider, req *baton.Request) ([]baton.Delta, *llm.Accumulator, error) {
	t.Helper()
	var ds []baton.Delta
	acc := &llm.Accumulator{}
	for d, err := range p.Stream(ctx, req) {
		if err != nil {
			return ds, acc, err
		}
		ds = append(ds, d)
		acc.Add(d)
	}
	return ds, acc, nil
}

func TestStreamText(t *testing.T) {
	f := newFake(t, sse(chunk(`{"role":"assistant","content":""}`, ""), textChunk("Hel"), textChunk("lo, "), textChunk("world"), chunk(`{}`, "stop"), usageChunk))
	ds, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil {
		t.Fatal(err)
	}
	want := []baton.Delta{
		{Kind: baton.DeltaText, Text: "Hel"}, {Kind: baton.DeltaText, Text: "lo, "}, {Kind: baton.DeltaText, Text: "world"},
		{Kind: baton.DeltaFinish, FinishReason: "stop", ResponseID: "chatcmpl-1"}, // the chunk id: gen_ai.response.id
		{Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 50, CompletionTokens: 7, CachedTokens: 32, ReasoningTokens: 2}},
	}
	if fmt.Sprint(ds) != fmt.Sprint(want) {
		t.Fatalf("deltas\n got %+v\nwant %+v", ds, want)
	}
	if acc.FinalText() != "Hello, world" || acc.FinishReason() != "stop" {
		t.Fatalf("accumulated %q finish %q", acc.FinalText(), acc.FinishReason())
	}
}

func TestRequestBody(t *testing.T) {
	f := newFake(t, sse(textChunk("ok"), chunk(`{}`, "stop")))
	temp, seed := 0.2, int64(42)
	req := &baton.Request{
		ChatID: "c", Agent: "Planner", MessageID: "m",
		Messages: []baton.Message{
			{Role: baton.RoleSystem, Content: "You plan."},
			{Role: baton.RoleUser, Name: "user", Content: "plan a trip"},
			{Role: baton.RoleAssistant, Name: "Planner", ToolCalls: []baton.ToolCall{{ID: "call_1", Name: "get_time", Arguments: `{"tz":"UTC"}`}}},
			{Role: baton.RoleTool, ToolCallID: "call_1", Content: "12:00"},
			{Role: baton.RoleAssistant, Name: "Travel Agent", Content: "It is noon."},
		},
		Tools: []baton.ToolDef{{Name: "get_time", Description: "Current time", Strict: true,
			Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"],"additionalProperties":false}`)}},
		ResponseFormat: &baton.ResponseFormat{Name: "Plan", Schema: json.RawMessage(`{"type":"object","properties":{"steps":{"type":"array","items":{"type":"string"}}},"required":["steps"],"additionalProperties":false}`)},
		Params:         baton.ModelParams{Model: "gpt-4.1", Temperature: &temp, Seed: &seed, MaxTokens: 256},
	}
	if _, _, err := collect(t, t.Context(), f.provider(), req); err != nil {
		t.Fatal(err)
	}
	got := f.body(t, 0)
	want := map[string]any{
		"model":               "gpt-4.1",
		"stream":              true,
		"stream_options":      map[string]any{"include_usage": true},
		"temperature":         0.2,
		"seed":                42.0,
		"max_tokens":          256.0,
		"parallel_tool_calls": true,
		"messages": []any{
			map[string]any{"role": "system", "content": "You plan."},
			map[string]any{"role": "user", "name": "user", "content": "plan a trip"},
			map[string]any{"role": "assistant", "name": "Planner", "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function", "function": map[string]any{"name": "get_time", "arguments": `{"tz":"UTC"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
			map[string]any{"role": "assistant", "name": "Travel_Agent", "content": "It is noon."},
		},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "get_time", "description": "Current time", "strict": true,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"tz": map[string]any{"type": "string"}},
				"required": []any{"tz"}, "additionalProperties": false}}}},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{
			"name": "Plan", "strict": true, "schema": map[string]any{"type": "object",
				"properties": map[string]any{"steps": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}},
				"required":   []any{"steps"}, "additionalProperties": false}}},
	}
	gj, _ := json.MarshalIndent(got, "", " ")
	wj, _ := json.MarshalIndent(want, "", " ")
	if string(gj) != string(wj) {
		t.Fatalf("request body\n got %s\nwant %s", gj, wj)
	}
	if h := f.headers[0].Get("Authorization"); h != "Bearer sk-test-secret" {
		t.Fatalf("Authorization = %q", h)
	}
}

func TestParallelToolCalls(t *testing.T) {
	// Two calls, their fragments split across chunks and interleaved.
	f := newFake(t, sse(
		chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_time","arguments":""}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_weather","arguments":"{\"ci"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"tz\":"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"ty\":\"Oslo\"}"}},{"index":0,"function":{"arguments":"\"UTC\"}"}}]}`, ""),
		chunk(`{}`, "tool_calls"), usageChunk))
	_, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil {
		t.Fatal(err)
	}
	want := []baton.ToolCall{{ID: "call_a", Name: "get_time", Arguments: `{"tz":"UTC"}`}, {ID: "call_b", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}
	if fmt.Sprint(acc.ToolCalls()) != fmt.Sprint(want) {
		t.Fatalf("tool calls %+v, want %+v", acc.ToolCalls(), want)
	}
	if got := acc.FinalText(); got != "Action completed (Tool Calls: get_time, get_weather)" {
		t.Fatalf("final text %q", got)
	}
	if acc.FinishReason() != "tool_calls" || acc.Usage().PromptTokens != 50 {
		t.Fatalf("finish %q usage %+v", acc.FinishReason(), acc.Usage())
	}
}

func TestReasoningField(t *testing.T) {
	f := newFake(t, sse(chunk(`{"reasoning_content":"think "}`, ""), chunk(`{"reasoning":"more"}`, ""), textChunk("answer"), chunk(`{}`, "stop")))
	_, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil {
		t.Fatal(err)
	}
	if acc.Reasoning() != "think more" || acc.Text() != "answer" {
		t.Fatalf("reasoning %q text %q", acc.Reasoning(), acc.Text())
	}
}

func TestRetryAfter429ThenSuccess(t *testing.T) {
	f := newFake(t, jsonError(429, "rate_limit_exceeded", "Rate limit reached", map[string]string{"Retry-After": "1"}), sse(textChunk("ok"), chunk(`{}`, "stop")))
	start := time.Now()
	_, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Fatalf("retried after %v, want Retry-After's 1s honoured", el)
	}
	if f.calls.Load() != 2 || acc.Text() != "ok" {
		t.Fatalf("calls %d text %q", f.calls.Load(), acc.Text())
	}
}

func Test500ThenSuccess(t *testing.T) {
	f := newFake(t, jsonError(500, "server_error", "boom", nil), jsonError(503, "", "overloaded", nil), sse(textChunk("ok"), chunk(`{}`, "stop")))
	_, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 3 || acc.Text() != "ok" {
		t.Fatalf("calls %d text %q", f.calls.Load(), acc.Text())
	}
}

func TestRetriesExhausted(t *testing.T) {
	f := newFake(t, jsonError(502, "", "bad gateway", nil))
	_, _, err := collect(t, t.Context(), f.provider(WithRetries(2)), request())
	if !baton.IsProviderError(err, baton.ProviderUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if f.calls.Load() != 3 {
		t.Fatalf("calls %d, want 1 + 2 retries", f.calls.Load())
	}
}

// dropAfter streams the chunks, then cuts the connection without [DONE].
func dropAfter(chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// retries returns the DeltaRetry deltas of a stream.
func retries(ds []baton.Delta) []*baton.Retry {
	var out []*baton.Retry
	for _, d := range ds {
		if d.Kind == baton.DeltaRetry {
			out = append(out, d.Retry)
		}
	}
	return out
}

// TestDroppedMidStreamRestartsOnce: a connection cut after deltas were
// streamed is named connection_dropped, announced by a DeltaRetry that
// voids the partial reply, and sent again from scratch.
func TestDroppedMidStreamRestartsOnce(t *testing.T) {
	f := newFake(t, dropAfter(textChunk("partial "), textChunk("text")), sse(textChunk("second attempt"), chunk(`{}`, "stop")))
	ds, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 2 || acc.Text() != "second attempt" {
		t.Fatalf("calls %d text %q", f.calls.Load(), acc.Text())
	}
	rs := retries(ds)
	if len(rs) != 1 || rs[0].Attempt != 2 || rs[0].MaxAttempts != DefaultMaxRetries+1 || !baton.IsProviderError(rs[0].Err, baton.ProviderConnectionDropped) {
		t.Fatalf("retries %+v, want one after connection_dropped", rs)
	}
	if ds[0].Text != "partial " || ds[2].Kind != baton.DeltaRetry {
		t.Fatalf("deltas %+v: the partial reply, then the retry", ds)
	}
}

// TestDroppedTwiceMidStreamFails: a reply is restarted from scratch once; a
// second break after deltas ends the call.
func TestDroppedTwiceMidStreamFails(t *testing.T) {
	f := newFake(t, dropAfter(textChunk("partial")))
	ds, _, err := collect(t, t.Context(), f.provider(), request())
	if !baton.IsProviderError(err, baton.ProviderConnectionDropped) {
		t.Fatalf("err = %v, want connection_dropped", err)
	}
	if f.calls.Load() != 2 || len(retries(ds)) != 1 {
		t.Fatalf("calls %d retries %d, want one restart", f.calls.Load(), len(retries(ds)))
	}
}

func TestEndedWithoutFinish(t *testing.T) {
	f := newFake(t, sse(textChunk("cut")))
	_, acc, err := collect(t, t.Context(), f.provider(), request())
	if !baton.IsProviderError(err, baton.ProviderConnectionDropped) || acc.Text() != "cut" || f.calls.Load() != 2 {
		t.Fatalf("err = %v text %q calls %d", err, acc.Text(), f.calls.Load())
	}
}

// TestMalformedChunkRetried: one malformed chunk is named as such and the
// reply is sent again.
func TestMalformedChunkRetried(t *testing.T) {
	f := newFake(t, sse(textChunk("a"), `{"id":"x","choices":[{"index":0,"delta":{"content":`), sse(textChunk("whole"), chunk(`{}`, "stop")))
	ds, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil || acc.Text() != "whole" || f.calls.Load() != 2 {
		t.Fatalf("err %v text %q calls %d", err, acc.Text(), f.calls.Load())
	}
	if rs := retries(ds); len(rs) != 1 || !baton.IsProviderError(rs[0].Err, baton.ProviderMalformedChunk) {
		t.Fatalf("retries %+v, want one after malformed_chunk", rs)
	}
}

// TestStallBeforeFirstTokenRetried: a server that sends nothing (or only a
// role chunk) within the first-token timeout is abandoned and asked again,
// with backoff, like a 5xx — long before the call's own timeout.
func TestStallBeforeFirstTokenRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"no headers", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"role chunk only", hang(chunk(`{"role":"assistant","content":""}`, ""))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.h, tc.h, sse(textChunk("late but fine"), chunk(`{}`, "stop")))
			ds, acc, err := collect(t, t.Context(), f.provider(WithStallTimeouts(200*time.Millisecond, time.Minute)), request())
			if err != nil || acc.Text() != "late but fine" || f.calls.Load() != 3 {
				t.Fatalf("err %v text %q calls %d", err, acc.Text(), f.calls.Load())
			}
			rs := retries(ds)
			if len(rs) != 2 || rs[0].Attempt != 2 || rs[1].Attempt != 3 || !baton.IsProviderError(rs[1].Err, baton.ProviderTimeoutFirstToken) {
				t.Fatalf("retries %+v, want attempts 2 and 3 after timeout_first_token", rs)
			}
		})
	}
}

// TestStallBeforeFirstTokenExhausted: every attempt stalls: the call fails
// with timeout_first_token after its retries, not after the call timeout.
func TestStallBeforeFirstTokenExhausted(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	_, _, err := collect(t, t.Context(), f.provider(WithRetries(2), WithStallTimeouts(30*time.Millisecond, 0)), request())
	if !baton.IsProviderError(err, baton.ProviderTimeoutFirstToken) || f.calls.Load() != 3 {
		t.Fatalf("err %v calls %d, want timeout_first_token after 3 attempts", err, f.calls.Load())
	}
	if msg := baton.ErrorMessage(err); !strings.Contains(msg, "first-token") {
		t.Fatalf("client message %q does not say which timeout", msg)
	}
}

// TestStallMidStreamRestarted: a reply that stops after three chunks is
// abandoned after the idle timeout and restarted from scratch once.
func TestStallMidStreamRestarted(t *testing.T) {
	f := newFake(t, hang(textChunk("one "), textChunk("two "), textChunk("three ")), sse(textChunk("complete"), chunk(`{}`, "stop")))
	ds, acc, err := collect(t, t.Context(), f.provider(WithStallTimeouts(time.Minute, 50*time.Millisecond)), request())
	if err != nil || acc.Text() != "complete" || f.calls.Load() != 2 {
		t.Fatalf("err %v text %q calls %d", err, acc.Text(), f.calls.Load())
	}
	if rs := retries(ds); len(rs) != 1 || !baton.IsProviderError(rs[0].Err, baton.ProviderTimeoutIdle) {
		t.Fatalf("retries %+v, want one after timeout_idle", rs)
	}
}

// TestStallAfterFinishKeepsReply: a reply that stalls after its finish
// reason (the usage never comes) is whole: it is kept, not sent again.
func TestStallAfterFinishKeepsReply(t *testing.T) {
	f := newFake(t, hang(textChunk("done"), chunk(`{}`, "stop")), sse(textChunk("again"), chunk(`{}`, "stop")))
	_, acc, err := collect(t, t.Context(), f.provider(WithStallTimeouts(time.Minute, 30*time.Millisecond)), request())
	if err != nil || acc.Text() != "done" || f.calls.Load() != 1 {
		t.Fatalf("err %v text %q calls %d", err, acc.Text(), f.calls.Load())
	}
}

// TestStallTimeoutsPerRequest: the request's timeouts win over the
// provider's (a minute by default, so the error proves it). The timeout
// counts from the request's start, so on a loaded machine it may fire
// before the server saw the call: at most one call, never a retry.
func TestStallTimeoutsPerRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	req := request()
	req.Params.FirstTokenTimeout = 20 * time.Millisecond
	_, _, err := collect(t, t.Context(), f.provider(WithRetries(0)), req)
	if !baton.IsProviderError(err, baton.ProviderTimeoutFirstToken) || f.calls.Load() > 1 {
		t.Fatalf("err %v calls %d", err, f.calls.Load())
	}
}

func TestErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		h         http.HandlerFunc
		kind      baton.ProviderErrorKind
		code      string
		calls     int32
		inMessage string
	}{
		{"401", jsonError(401, "invalid_api_key", "Incorrect API key provided: sk-test-secret", nil), baton.ProviderAuth, baton.EUNAUTHORIZED, 1, "Incorrect API key"},
		{"400", jsonError(400, "", "Invalid value for 'temperature'", nil), baton.ProviderBadRequest, baton.EINVALID, 1, "Invalid value for 'temperature'"},
		{"context length", jsonError(400, "context_length_exceeded", "This model's maximum context length is 128000 tokens.", nil), baton.ProviderContextLength, baton.EINVALID, 1, "maximum context length"},
		{"content filter 400", jsonError(400, "content_filter", "The response was filtered", nil), baton.ProviderContentFilter, baton.EINVALID, 1, "filtered"},
		{"content filter finish", sse(textChunk("I"), chunk(`{}`, "content_filter")), baton.ProviderContentFilter, baton.EINVALID, 1, "content filter"},
		{"quota", jsonError(429, "insufficient_quota", "You exceeded your current quota", nil), baton.ProviderRateLimit, baton.EUNAVAILABLE, 1, "quota"},
		{"rate limit exhausted", jsonError(429, "rate_limit_exceeded", "Rate limit reached", nil), baton.ProviderRateLimit, baton.EUNAVAILABLE, 4, "Rate limit"},
		{"malformed chunk", sse(textChunk("a"), `{"id":"x","choices":[{"index":0,"delta":{"content":`), baton.ProviderMalformedChunk, baton.EUNAVAILABLE, 2, "malformed"},   // restarted once
		{"error event", sse(`{"error":{"message":"server overloaded","type":"server_error","code":null}}`), baton.ProviderUnavailable, baton.EUNAVAILABLE, 4, "overloaded"}, // before the first delta: retried
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.h)
			_, _, err := collect(t, t.Context(), f.provider(), request())
			var pe *baton.ProviderError
			if !errors.As(err, &pe) || pe.Kind != tc.kind {
				t.Fatalf("err = %#v, want kind %s", err, tc.kind)
			}
			if baton.ErrorCode(err) != tc.code {
				t.Fatalf("code %q, want %q", baton.ErrorCode(err), tc.code)
			}
			// The log's text has it all; a client's names the model and
			// never the base URL.
			if msg := err.Error(); !strings.Contains(msg, tc.inMessage) || !strings.Contains(msg, f.URL+"/v1") || !strings.Contains(msg, `"gpt-4o-mini"`) {
				t.Fatalf("error %q should contain %q, the base URL and the model", msg, tc.inMessage)
			}
			if msg := baton.ErrorMessage(err); strings.Contains(msg, f.URL) || !strings.Contains(msg, `"gpt-4o-mini"`) || !strings.Contains(msg, string(tc.kind)) {
				t.Fatalf("client message %q should name the model and the kind, not the base URL", msg)
			}
			if tc.name != "401" && strings.Contains(err.Error(), "sk-test-secret") {
				t.Fatalf("error leaks the key: %v", err)
			}
			if f.calls.Load() != tc.calls {
				t.Fatalf("calls %d, want %d", f.calls.Load(), tc.calls)
			}
		})
	}
}

// hang waits until the client goes away, after sending the given chunks.
func hang(chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

func TestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"before headers", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"mid stream", hang(textChunk("slow"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.h)
			start := time.Now()
			_, _, err := collect(t, t.Context(), f.provider(WithTimeout(150*time.Millisecond)), request())
			if !baton.IsProviderError(err, baton.ProviderTimeout) {
				t.Fatalf("err = %v, want timeout", err)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("timeout took %v", el)
			}
		})
	}
}

// TestCancelStopsStream: cancelling the context ends a stream promptly, with
// context.Canceled, rather than waiting for the server (which here never
// ends the response by itself), and closes the response body. The bound
// after cancel is generous: it only tells a stream that stops from one that
// hangs, whatever the machine's load.
func TestCancelStopsStream(t *testing.T) {
	disconnected := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		hang(textChunk("first"))(w, r)
		close(disconnected)
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var cancelled time.Time // written before cancelledCh is closed
	cancelledCh := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var err error
		for d, e := range f.provider().Stream(ctx, request()) {
			if e != nil {
				err = e
				break
			}
			if d.Text == "first" && cancelled.IsZero() {
				cancelled = time.Now()
				close(cancelledCh)
				cancel()
			}
		}
		done <- err
	}()
	// A stream that ignored cancel would wait for the server forever: on a
	// hang, drop the connection so that the stream and the handler end.
	hung := func(format string, args ...any) {
		t.Helper()
		f.CloseClientConnections()
		<-done
		t.Fatalf(format, args...)
	}
	var err error
	select {
	case <-cancelledCh:
	case err = <-done:
		t.Fatalf("the stream ended before its first delta: %v", err)
	case <-time.After(30 * time.Second):
		hung("no first delta in 30 s")
	}
	select {
	case err = <-done:
		t.Logf("stream ended %v after cancel", time.Since(cancelled))
	case <-time.After(5 * time.Second):
		hung("the stream had not ended 5 s after cancel: it waits for the server")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	select {
	case <-disconnected:
	case <-time.After(5 * time.Second):
		t.Fatal("the response body was not closed: the server never saw the client go")
	}
}

func TestBreakClosesBody(t *testing.T) {
	disconnected := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		hang(textChunk("a"), textChunk("b"))(w, r)
		close(disconnected)
	})
	for d := range f.provider().Stream(t.Context(), request()) {
		if d.Text == "a" {
			break
		}
	}
	select {
	case <-disconnected:
	case <-time.After(5 * time.Second):
		t.Fatal("stopping the loop did not close the response body")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, 250 * time.Millisecond},
		{http.Header{"Retry-After": {now.Add(10 * time.Second).Format(http.TimeFormat)}}, 10 * time.Second},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{}, 0},
	} {
		if got := parseRetryAfter(tc.h, now); got != tc.want {
			t.Errorf("parseRetryAfter(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestNoModel(t *testing.T) {
	f := newFake(t, sse(textChunk("x"), chunk(`{}`, "stop")))
	req := request()
	req.Params.Model = ""
	_, _, err := collect(t, t.Context(), f.provider(), req)
	if !baton.IsProviderError(err, baton.ProviderBadRequest) || f.calls.Load() != 0 {
		t.Fatalf("err = %v calls %d", err, f.calls.Load())
	}
}

func TestEnvironmentAndNoKey(t *testing.T) {
	// A local server (Ollama, vLLM) needs no key: none is sent.
	f := newFake(t, sse(textChunk("local"), chunk(`{}`, "stop")))
	t.Setenv("OPENAI_BASE_URL", f.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "")
	p := New(WithLogger(slog.New(slog.DiscardHandler)))
	if p.BaseURL() != f.URL+"/v1" {
		t.Fatalf("base URL %q", p.BaseURL())
	}
	_, acc, err := collect(t, t.Context(), p, request())
	if err != nil || acc.Text() != "local" {
		t.Fatalf("err %v text %q", err, acc.Text())
	}
	if h := f.headers[0].Get("Authorization"); h != "" && h != "Bearer " {
		t.Fatalf("Authorization = %q, want none", h)
	}
}

func TestPerRequestEndpoint(t *testing.T) {
	f := newFake(t, sse(textChunk("routed"), chunk(`{}`, "stop")))
	p := New(WithBaseURL("http://127.0.0.1:1/v1"), WithAPIKey("default-key"), WithLogger(slog.New(slog.DiscardHandler)))
	req := request()
	req.Params.BaseURL = f.URL + "/v1"
	req.Params.APIKey = "workflow-key"
	_, acc, err := collect(t, t.Context(), p, req)
	if err != nil || acc.Text() != "routed" {
		t.Fatalf("err %v text %q", err, acc.Text())
	}
	if h := f.headers[0].Get("Authorization"); h != "Bearer workflow-key" {
		t.Fatalf("Authorization = %q", h)
	}
}

func TestConnectionErrorThenSuccess(t *testing.T) {
	// The first connection is cut before any response: nothing was streamed,
	// so the call is sent again.
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }, sse(textChunk("ok"), chunk(`{}`, "stop")))
	_, acc, err := collect(t, t.Context(), f.provider(), request())
	if err != nil || acc.Text() != "ok" || f.calls.Load() != 2 {
		t.Fatalf("err %v text %q calls %d", err, acc.Text(), f.calls.Load())
	}
}

func TestConnectionRefused(t *testing.T) {
	f := newFake(t, sse(textChunk("x")))
	url := f.URL
	f.Close()
	p := New(WithBaseURL(url+"/v1"), WithAPIKey("sk-test-secret"), WithRetries(1), WithBackoff(time.Millisecond, time.Millisecond),
		WithLogger(slog.New(slog.DiscardHandler)))
	_, _, err := collect(t, t.Context(), p, request())
	if !baton.IsProviderError(err, baton.ProviderUnavailable) || !strings.Contains(err.Error(), url) || strings.Contains(err.Error(), "sk-test") {
		t.Fatalf("err %v", err)
	}
}

func TestMain(m *testing.M) {
	// Idle keep-alive connections of the shared transport are not leaks;
	// any other goroutine left running after the tests is.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
