package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

func text(s string) baton.Delta { return baton.Delta{Kind: baton.DeltaText, Text: s} }

func call(i int, id, name, args string) baton.Delta {
	return baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{Index: i, ID: id, Name: name, Arguments: args}}
}

const repr = "<agent_framework.ChatMessage object at 0x7f3a2c1b9d90>"

func TestAccumulator(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deltas    []baton.Delta
		final     string // the provider's final message object, which must never win
		wantText  string
		wantCalls []baton.ToolCall
		agree     bool
	}{
		{
			name:     "A: text deltas then a corrupted final message",
			deltas:   []baton.Delta{text("Hello"), text(", "), text("world.")},
			final:    repr,
			wantText: "Hello, world.",
		},
		{
			name:      "B: no text, a tool call",
			deltas:    []baton.Delta{call(0, "call_1", "get_time", `{"tz":`), call(0, "", "", `"UTC"}`), {Kind: baton.DeltaFinish, FinishReason: "tool_calls"}},
			final:     repr,
			wantText:  "Action completed (Tool Call: get_time)",
			wantCalls: []baton.ToolCall{{ID: "call_1", Name: "get_time", Arguments: `{"tz":"UTC"}`}},
		},
		{
			name:     "empty turn",
			deltas:   []baton.Delta{text(""), {Kind: baton.DeltaFinish, FinishReason: "stop"}},
			final:    "",
			wantText: "",
			agree:    true,
		},
		{
			name:      "mixed text and tool call: the text wins over the fallback",
			deltas:    []baton.Delta{text("Let me check. "), call(0, "c1", "lookup", `{}`)},
			final:     "Let me check. ",
			wantText:  "Let me check. ",
			wantCalls: []baton.ToolCall{{ID: "c1", Name: "lookup", Arguments: `{}`}},
			agree:     true,
		},
		{
			name: "multi-tool, interleaved by index",
			deltas: []baton.Delta{
				call(0, "a", "get_time", ""), call(1, "b", "get_weather", `{"ci`), call(0, "", "", `{}`), call(1, "", "", `ty":"Oslo"}`),
				call(2, "", "", ""), // empty: ignored
			},
			final:     repr,
			wantText:  "Action completed (Tool Calls: get_time, get_weather)",
			wantCalls: []baton.ToolCall{{ID: "a", Name: "get_time", Arguments: `{}`}, {ID: "b", Name: "get_weather", Arguments: `{"city":"Oslo"}`}},
		},
		{
			name:      "parallel calls all at index 0, told apart by id (older Ollama)",
			deltas:    []baton.Delta{call(0, "a", "f", `{"x":1}`), call(0, "b", "g", `{"y":2}`)},
			wantText:  "Action completed (Tool Calls: f, g)",
			wantCalls: []baton.ToolCall{{ID: "a", Name: "f", Arguments: `{"x":1}`}, {ID: "b", Name: "g", Arguments: `{"y":2}`}},
			agree:     true, // no text either side
		},
		{
			name:      "whitespace-only text with a tool call gets the fallback",
			deltas:    []baton.Delta{text("\n"), call(0, "a", "", `{}`)},
			wantText:  FallbackText,
			wantCalls: []baton.ToolCall{{ID: "a", Arguments: `{}`}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			var a Accumulator
			for _, d := range tc.deltas {
				a.Add(d)
			}
			if got := a.FinalText(); got != tc.wantText {
				t.Fatalf("FinalText = %q, want %q", got, tc.wantText)
			}
			if strings.Contains(a.FinalText(), "object at 0x") {
				t.Fatal("a repr reached the text")
			}
			if got := a.ToolCalls(); len(got) != len(tc.wantCalls) || (len(got) > 0 && !equalCalls(got, tc.wantCalls)) {
				t.Fatalf("ToolCalls = %+v, want %+v", got, tc.wantCalls)
			}
			agreed := a.CheckFinal(t.Context(), log, tc.final)
			if agreed != tc.agree || (logs.Len() > 0) == tc.agree {
				t.Fatalf("CheckFinal = %v, logged %q", agreed, logs.String())
			}
			if a.FinalText() != tc.wantText {
				t.Fatal("CheckFinal changed the text")
			}
		})
	}
}

func equalCalls(a, b []baton.ToolCall) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAccumulatorUsageAndReset(t *testing.T) {
	var a Accumulator
	a.Add(baton.Delta{Kind: baton.DeltaReasoning, Text: "hmm"})
	a.Add(text("x"))
	a.Add(baton.Delta{Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 9, CompletionTokens: 1}})
	a.Add(baton.Delta{Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 10, CompletionTokens: 2, CachedTokens: 4, ReasoningTokens: 1}})
	if a.Reasoning() != "hmm" || a.Usage().PromptTokens != 10 || a.Usage().CompletionTokens != 2 || a.Deltas() != 4 {
		t.Fatalf("reasoning %q usage %+v deltas %d", a.Reasoning(), a.Usage(), a.Deltas())
	}
	a.Reset()
	a.Add(call(0, "z", "f", "{}"))
	if a.Text() != "" || a.Usage() != (baton.Usage{}) || len(a.ToolCalls()) != 1 || a.ToolCalls()[0].ID != "z" {
		t.Fatalf("after reset: text %q usage %+v calls %+v", a.Text(), a.Usage(), a.ToolCalls())
	}
}

func TestAccumulatorAllocs(t *testing.T) {
	var a Accumulator
	d := text("word ")
	a.Add(d)
	allocs := testing.AllocsPerRun(1000, func() { a.Add(d) })
	if allocs > 1 {
		t.Fatalf("Add allocates %.1f times per text delta, want ≤ 1 (amortized)", allocs)
	}
}

func TestStreamEvent(t *testing.T) {
	for _, tc := range []struct {
		d       baton.Delta
		typ     string
		payload string
	}{
		{text("Hi <b> \"x\"\n"), baton.TypeStreamText, `{"message_id":"m1","agent":"Writer","delta":"Hi \u003cb\u003e \"x\"\n"}`},
		{baton.Delta{Kind: baton.DeltaReasoning, Text: "hm"}, baton.TypeStreamReasoning, `{"message_id":"m1","agent":"Writer","delta":"hm"}`},
		{call(1, "call_9", "get_time", `{"tz"`), baton.TypeStreamToolCall, `{"message_id":"m1","agent":"Writer","index":1,"id":"call_9","name":"get_time","delta":"{\"tz\""}`},
		{call(1, "", "", `:1}`), baton.TypeStreamToolCall, `{"message_id":"m1","agent":"Writer","index":1,"delta":":1}"}`},
		{baton.Delta{Kind: baton.DeltaFinish, FinishReason: "stop"}, baton.TypeStreamCompleted, `{"message_id":"m1","agent":"Writer","finish_reason":"stop"}`},
	} {
		ev, ok := StreamEvent("chat-1", "Writer", "m1", tc.d)
		if !ok {
			t.Fatalf("%v: not published", tc.d)
		}
		if ev.Type != tc.typ || string(ev.Payload) != tc.payload {
			t.Errorf("%v: got %s %s, want %s %s", tc.d, ev.Type, ev.Payload, tc.typ, tc.payload)
		}
		if ev.Metadata.TriggerSessionID != "chat-1" || ev.Metadata.TriggerAgentName != "Writer" || ev.Metadata.Source != baton.SourceLLM {
			t.Errorf("metadata %+v", ev.Metadata)
		}
		if err := ev.Validate(); err != nil || !baton.IsStreamType(ev.Type) {
			t.Errorf("%s: %v", ev.Type, err)
		}
	}
	for _, d := range []baton.Delta{text(""), call(0, "", "", ""), {Kind: baton.DeltaUsage, Usage: baton.Usage{PromptTokens: 1}}} {
		if _, ok := StreamEvent("c", "a", "m", d); ok {
			t.Errorf("%+v published", d)
		}
	}
	start := StreamStartEvent("c", "a", "m")
	fail := StreamErrorEvent("c", "a", "m", &baton.ProviderError{Kind: baton.ProviderAuth, Endpoint: "http://x", Model: "gpt"}, false)
	if start.Type != baton.TypeStreamStart || fail.Type != baton.TypeStreamError || !json.Valid(fail.Payload) ||
		!strings.Contains(string(fail.Payload), `"message":"model \"gpt\": auth","code":"auth","retryable":false,"will_retry":false,"void":true`) {
		t.Fatalf("start %s %s; error %s %s", start.Type, start.Payload, fail.Type, fail.Payload)
	}
}

// TestStreamErrorCodes: a stream.error names the failure with a machine
// code, says whether it is of a retried kind and whether it is retried now,
// and that the message's deltas are void.
func TestStreamErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err       error
		willRetry bool
		code      string
		retryable bool
	}{
		{&baton.ProviderError{Kind: baton.ProviderConnectionDropped}, true, "connection_dropped", true},
		{&baton.ProviderError{Kind: baton.ProviderMalformedChunk}, true, "malformed_chunk", true},
		{&baton.ProviderError{Kind: baton.ProviderTimeoutFirstToken}, true, "timeout_first_token", true},
		{&baton.ProviderError{Kind: baton.ProviderTimeoutIdle}, false, "timeout_idle", true},
		{&baton.ProviderError{Kind: baton.ProviderTimeout}, false, "timeout", false},
		{&baton.ProviderError{Kind: baton.ProviderRateLimit, Status: 429}, true, "rate_limited", true},
		{&baton.ProviderError{Kind: baton.ProviderRateLimit, Status: 429, Code: "insufficient_quota"}, false, "rate_limited", false},
		{&baton.ProviderError{Kind: baton.ProviderUnavailable, Status: 503}, true, "server_error", true},
		{&baton.ProviderError{Kind: baton.ProviderUnavailable}, true, "connection_failed", true},
		{&baton.ProviderError{Kind: baton.ProviderContextLength, Status: 400}, false, "context_length", false},
		{errors.New("store down"), false, "error", false},
	} {
		ev := StreamErrorEvent("c", "a", "m1", tc.err, tc.willRetry)
		var p struct {
			MessageID string `json:"message_id"`
			Code      string `json:"code"`
			Retryable bool   `json:"retryable"`
			WillRetry bool   `json:"will_retry"`
			Void      bool   `json:"void"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatalf("%s: %v", ev.Payload, err)
		}
		if p.MessageID != "m1" || p.Code != tc.code || p.Retryable != tc.retryable || p.WillRetry != tc.willRetry || !p.Void {
			t.Errorf("%v: payload %s, want code %q retryable %v will_retry %v", tc.err, ev.Payload, tc.code, tc.retryable, tc.willRetry)
		}
	}
}

// TestAccumulatorRetryVoids: a DeltaRetry drops what the failed attempt
// streamed; the final text is the retry's alone.
func TestAccumulatorRetryVoids(t *testing.T) {
	var a Accumulator
	a.Add(baton.Delta{Kind: baton.DeltaText, Text: "half a rep"})
	a.Add(baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{ID: "c1", Name: "f", Arguments: "{"}})
	a.Add(baton.Delta{Kind: baton.DeltaRetry, Retry: &baton.Retry{Attempt: 2, MaxAttempts: 4}})
	a.Add(baton.Delta{Kind: baton.DeltaText, Text: "whole reply"})
	if a.Text() != "whole reply" || len(a.ToolCalls()) != 0 {
		t.Fatalf("text %q calls %v", a.Text(), a.ToolCalls())
	}
}

// FuzzAppendJSONString checks the hand-written encoder against encoding/json.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\ nl\n tab\t", "\x00\x1f\x7f", "<&>", "é日本\u2028\u2029", "\xff\xfe bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendJSONString(nil, s)
		want, _ := json.Marshal(s)
		if string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}

func TestErrorForStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		msg    string
		kind   baton.ProviderErrorKind
		retry  bool
	}{
		{401, "invalid_api_key", "bad key", baton.ProviderAuth, false},
		{403, "", "", baton.ProviderAuth, false},
		{429, "rate_limit_exceeded", "slow down", baton.ProviderRateLimit, true},
		{429, "insufficient_quota", "quota", baton.ProviderRateLimit, false},
		{400, "context_length_exceeded", "too long", baton.ProviderContextLength, false},
		{400, "", "This model's maximum context length is 8192 tokens", baton.ProviderContextLength, false},
		{400, "content_filter", "filtered", baton.ProviderContentFilter, false},
		{400, "", "Invalid 'messages'", baton.ProviderBadRequest, false},
		{404, "model_not_found", "no such model", baton.ProviderBadRequest, false},
		{408, "", "", baton.ProviderUnavailable, true},
		{409, "", "", baton.ProviderUnavailable, true},
		{500, "", "", baton.ProviderUnavailable, true},
		{503, "", "", baton.ProviderUnavailable, true},
	} {
		e := ErrorForStatus(tc.status, tc.code, tc.msg, "https://api.openai.com/v1", "gpt-4o", 0)
		if e.Kind != tc.kind || Retryable(e) != tc.retry || e.Message == "" {
			t.Errorf("%d %q %q: kind %s retryable %v message %q", tc.status, tc.code, tc.msg, e.Kind, Retryable(e), e.Message)
		}
		var coded *baton.Error
		// Clients see the model and the kind, never the endpoint; the log's Error() has both.
		if !errors.As(e, &coded) || coded.Code != e.ErrorCode() || strings.Contains(baton.ErrorMessage(e), "https://api.openai.com/v1") ||
			!strings.Contains(baton.ErrorMessage(e), string(tc.kind)) || !strings.Contains(e.Error(), "https://api.openai.com/v1") {
			t.Errorf("%d: coded %+v message %q", tc.status, coded, baton.ErrorMessage(e))
		}
	}
	if !errors.Is(ErrorForStatus(401, "", "", "e", "m", 0), baton.ErrUnauthorized) {
		t.Error("auth error is not ErrUnauthorized")
	}
}

func TestEndpointRedacts(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:secret@example.com/v1/?key=sk-1": "https://example.com/v1",
		"http://localhost:11434/v1":                    "http://localhost:11434/v1",
		"not a url":                                    "(invalid base URL)",
	} {
		if got := Endpoint(in); got != want {
			t.Errorf("Endpoint(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCost(t *testing.T) {
	u := baton.Usage{PromptTokens: 1_000_000, CompletionTokens: 500_000, CachedTokens: 400_000}
	for _, tc := range []struct {
		model     string
		overrides map[string]Price
		want      float64
	}{
		// 600k uncached × 2.50 + 400k cached × 1.25 + 500k × 10.00
		{"gpt-4o", nil, 1.5 + 0.5 + 5},
		{"gpt-4o-2024-08-06", nil, 1.5 + 0.5 + 5},
		// the mini, not gpt-4o: 0.6×0.15 + 0.4×0.075 + 0.5×0.60
		{"gpt-4o-mini-2024-07-18", nil, 0.09 + 0.03 + 0.3},
		{"gpt-5-mini", nil, 0.6*0.25 + 0.4*0.025 + 0.5*2},
		{"o4-mini", nil, 0.6*1.1 + 0.4*0.275 + 0.5*4.4},
		{"llama3.1:8b", nil, 0},
		{"llama3.1:8b", map[string]Price{"llama3.1:8b": {Input: 1, Output: 2}}, 1 + 1}, // no cached price: input price
		{"gpt-4o", map[string]Price{"gpt-4o": {Input: 1, Output: 1, CachedInput: 0.5}}, 0.6 + 0.2 + 0.5},
		// A price no workflow validates with: a cost no store keeps or event encodes.
		{"x", map[string]Price{"x": {Input: math.NaN()}}, 0},
		{"x", map[string]Price{"x": {Output: math.MaxFloat64}}, 0},
	} {
		if got := Cost(tc.model, u, tc.overrides); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Cost(%s) = %v, want %v", tc.model, got, tc.want)
		}
	}
	if _, ok := LookupPrice("gpt-4.1-nano-2025-04-14", nil); !ok {
		t.Error("dated gpt-4.1-nano not priced")
	}
	if p, _ := LookupPrice("o3-mini", nil); p != Prices["o3-mini"] {
		t.Error("o3-mini priced as o3")
	}
}

func BenchmarkAccumulatorAdd(b *testing.B) {
	d := text("word ")
	var a Accumulator
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%1000 == 0 {
			a.Reset()
		}
		a.Add(d)
	}
}

func BenchmarkStreamEvent(b *testing.B) {
	d := text("word ")
	b.ReportAllocs()
	for b.Loop() {
		StreamEvent("chat-1", "Writer", "m-1", d)
	}
}
