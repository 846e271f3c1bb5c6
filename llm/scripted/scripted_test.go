package scripted

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/workflows"
)

// The example from the format's description, verbatim but for usage.
const example = `{
  "delay_ms": 0,
  "agents": {
    "AgentName": [
      {"text": "Hello!", "usage": {"prompt_tokens": 50, "completion_tokens": 3, "cached_tokens": 0}},
      {"tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}], "usage": {"prompt_tokens": 60, "completion_tokens": 9}},
      {"match": "(?i)approve", "text": "Great, approved."},
      {"json": {"ActionPlan": {"workflow": {}}, "agent_message": "Review the plan"}},
      {"reasoning": "thinking…", "text": "…"},
      {"error": {"status": 429, "message": "rate limited"}}
    ]
  }
}`

func load(t *testing.T, script string) *Provider {
	t.Helper()
	p, err := Load(fstest.MapFS{"wf/scripted.json": {Data: []byte(script)}}, "wf/scripted.json")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(ctx context.Context, p baton.Provider, req *baton.Request) ([]baton.Delta, *llm.Accumulator, error) {
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

// history returns a request for AgentName after it has spoken n times, the
// last user message being userText.
func history(n int, userText string) *baton.Request {
	req := &baton.Request{ChatID: "chat-1", Agent: "AgentName", MessageID: "m", Params: baton.ModelParams{Model: "gpt-4o-mini"}}
	for i := range n {
		req.Messages = append(req.Messages,
			baton.Message{Role: baton.RoleUser, Name: "user", Content: fmt.Sprint("turn ", i)},
			baton.Message{Role: baton.RoleAssistant, Name: "AgentName", Content: "earlier"},
			baton.Message{Role: baton.RoleAssistant, Name: "Other", Content: "not counted"})
	}
	req.Messages = append(req.Messages, baton.Message{Role: baton.RoleUser, Name: "user", Content: userText})
	return req
}

func TestExampleSequence(t *testing.T) {
	p := load(t, example)

	ds, acc, err := run(t.Context(), p, history(0, "hi"))
	if err != nil || acc.FinalText() != "Hello!" || acc.Usage() != (baton.Usage{PromptTokens: 50, CompletionTokens: 3}) || acc.FinishReason() != "stop" {
		t.Fatalf("N=0: err %v text %q usage %+v finish %q", err, acc.FinalText(), acc.Usage(), acc.FinishReason())
	}
	if ds[len(ds)-1].Kind != baton.DeltaUsage || ds[len(ds)-2].Kind != baton.DeltaFinish {
		t.Fatalf("finish then usage must end the stream: %+v", ds)
	}

	_, acc, err = run(t.Context(), p, history(1, "what time is it"))
	calls := acc.ToolCalls()
	if err != nil || len(calls) != 1 || calls[0].Name != "get_time" || calls[0].Arguments != `{"tz":"UTC"}` ||
		!strings.HasPrefix(calls[0].ID, "call_") || acc.FinishReason() != "tool_calls" || acc.FinalText() != "Action completed (Tool Call: get_time)" {
		t.Fatalf("N=1: err %v calls %+v finish %q text %q", err, calls, acc.FinishReason(), acc.FinalText())
	}

	_, acc, err = run(t.Context(), p, history(2, "next"))
	if err != nil || acc.FinalText() != `{"ActionPlan":{"workflow":{}},"agent_message":"Review the plan"}` {
		t.Fatalf("N=2 (json): err %v text %q", err, acc.FinalText())
	}

	_, acc, err = run(t.Context(), p, history(3, "next"))
	if err != nil || acc.Reasoning() != "thinking…" || acc.FinalText() != "…" {
		t.Fatalf("N=3: err %v reasoning %q text %q", err, acc.Reasoning(), acc.FinalText())
	}

	_, _, err = run(t.Context(), p, history(4, "next"))
	var pe *baton.ProviderError
	if !errors.As(err, &pe) || pe.Kind != baton.ProviderRateLimit || pe.Status != 429 || !strings.Contains(err.Error(), "rate limited") {
		t.Fatalf("N=4: err %v, want a 429 rate-limit provider error", err)
	}
	if llm.ErrorForStatus(429, "", "rate limited", "x", "y", 0).Kind != pe.Kind {
		t.Fatal("the injected error is not the kind the OpenAI provider returns")
	}

	_, _, err = run(t.Context(), p, history(5, "next"))
	if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), `"AgentName"`) || !strings.Contains(err.Error(), "N=5") {
		t.Fatalf("past the end: %v", err)
	}
}

func TestMatch(t *testing.T) {
	p := load(t, example)
	// The match answers a fresh user message whatever N is.
	for _, n := range []int{0, 3} {
		_, acc, err := run(t.Context(), p, history(n, "I APPROVE this"))
		if err != nil || acc.FinalText() != "Great, approved." {
			t.Fatalf("N=%d: err %v text %q", n, err, acc.FinalText())
		}
	}
	// Once the agent has answered that message (a tool call and its result
	// count), the match no longer applies: the N-th unmatched entry answers.
	req := history(0, "please approve")
	req.Messages = append(req.Messages,
		baton.Message{Role: baton.RoleAssistant, Name: "AgentName", ToolCalls: []baton.ToolCall{{ID: "c", Name: "get_time"}}},
		baton.Message{Role: baton.RoleTool, ToolCallID: "c", Content: "12:00"})
	_, acc, err := run(t.Context(), p, req)
	if err != nil || len(acc.ToolCalls()) != 1 {
		t.Fatalf("after the agent spoke: err %v text %q, want the N=1 entry (a tool call)", err, acc.FinalText())
	}
}

func TestDeterministicStream(t *testing.T) {
	const script = `{"agents": {"AgentName": [
		{"reasoning": "Let me think.", "text": "  Hello there,\nworld!  How are\tyou? ", "tool_calls": [
			{"name": "a", "arguments": {"long": "a value long enough to need several fragments", "n": [1, 2, 3]}},
			{"name": "b"}
		], "usage": {"prompt_tokens": 5, "completion_tokens": 6, "cached_tokens": 1, "reasoning_tokens": 2}}
	]}}`
	p := load(t, script)
	first, acc, err := run(t.Context(), p, history(0, "x"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, _, err := run(t.Context(), load(t, script), history(0, "x"))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("a second run streamed different deltas:\n%+v\n%+v", first, again)
		}
	}
	var words []string
	for _, d := range first {
		if d.Kind == baton.DeltaText {
			words = append(words, d.Text)
		}
	}
	if want := []string{"  Hello ", "there,\n", "world!  ", "How ", "are\t", "you? "}; fmt.Sprint(words) != fmt.Sprint(want) {
		t.Fatalf("words %q, want %q", words, want)
	}
	calls := acc.ToolCalls()
	if len(calls) != 2 || calls[0].Arguments != `{"long":"a value long enough to need several fragments","n":[1,2,3]}` ||
		calls[1].Arguments != "{}" || calls[0].ID == calls[1].ID || acc.Reasoning() != "Let me think." ||
		acc.Usage() != (baton.Usage{PromptTokens: 5, CompletionTokens: 6, CachedTokens: 1, ReasoningTokens: 2}) {
		t.Fatalf("calls %+v reasoning %q usage %+v", calls, acc.Reasoning(), acc.Usage())
	}
	fragments := 0
	for _, d := range first {
		if d.Kind == baton.DeltaToolCall && d.ToolCall.Index == 0 && d.ToolCall.Arguments != "" {
			fragments++
		}
	}
	if fragments < 3 {
		t.Fatalf("arguments streamed in %d fragments, want several", fragments)
	}
	// Ids are derived from chat, agent, N and index: another chat gets others.
	other := history(0, "x")
	other.ChatID = "chat-2"
	_, acc2, _ := run(t.Context(), p, other)
	if acc2.ToolCalls()[0].ID == calls[0].ID {
		t.Fatal("tool call ids do not depend on the chat")
	}
}

func TestDelayHonoursContext(t *testing.T) {
	p := load(t, `{"delay_ms": 10000, "agents": {"AgentName": [{"text": "slow words here"}]}}`)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := run(ctx, p, history(0, "x"))
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	p = load(t, `{"delay_ms": 5, "agents": {"AgentName": [{"text": "a b c"}]}}`)
	start = time.Now()
	if _, acc, err := run(t.Context(), p, history(0, "x")); err != nil || acc.Text() != "a b c" || time.Since(start) < 25*time.Millisecond {
		t.Fatalf("err %v text %q in %v: want 5 deltas 5 ms apart", err, acc.Text(), time.Since(start))
	}
}

func TestUnknownAgent(t *testing.T) {
	p := load(t, example)
	req := history(0, "x")
	req.Agent = "Nobody"
	_, _, err := run(t.Context(), p, req)
	if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), `"Nobody"`) {
		t.Fatalf("err %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct{ script, want string }{
		{`{"agents": {"A": [{"txt": "hi"}]}}`, `wf/scripted.json: agents.A[0]: unknown field "txt"`},
		{`{"delay": 5, "agents": {}}`, `unknown field "delay"`},
		{`{"agents": {}}`, `agents: required`},
		{`{"agents": {"A": [{"text": 5}]}}`, `agents.A[0]: text: must be string, not number`},
		{`{"agents": {"A": [{}]}}`, `agents.A[0]: needs one of`},
		{`{"agents": {"A": [{"text": "a"}, {"match": "(", "text": "b"}]}}`, `agents.A[1]: match: error parsing regexp`},
		{`{"agents": {"A": [{"json": {}, "text": "b"}]}}`, `"json" and "text" cannot both be set`},
		{`{"agents": {"A": [{"error": {"status": 200}}]}}`, `error.status: 200`},
		{`{"agents": {"A": [{"error": {"status": 500}, "text": "x"}]}}`, `"error" cannot be combined`},
		{`{"agents": {"A": [{"tool_calls": [{"arguments": {}}]}]}}`, `tool_calls[0].name: required`},
		{`{"agents": {"A": [{"text": "a", "usage": {"prompt": 1}}]}}`, `unknown field "prompt"`},
		{`{"agents": `, `invalid JSON`},
		{`{"agents": {"A": [{"text": "a"}]}} {}`, `unexpected data after`},
	} {
		_, err := Load(fstest.MapFS{"wf/scripted.json": {Data: []byte(tc.script)}}, "wf/scripted.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) || baton.ErrorCode(err) != baton.EINVALID {
			t.Errorf("%s: err %v, want it to contain %q", tc.script, err, tc.want)
		}
	}
	if _, err := Load(fstest.MapFS{}, "missing.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// The example workflows' scripts load, and every agent's first answer streams.
func TestExampleWorkflows(t *testing.T) {
	paths, err := fs.Glob(workflows.FS, "*/scripted.json")
	if err != nil || len(paths) == 0 {
		t.Skipf("no example scripts (%v)", err)
	}
	for _, path := range paths {
		p, err := Load(workflows.FS, path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, agent := range p.Agents() {
			req := &baton.Request{ChatID: "c", Agent: agent, Messages: []baton.Message{{Role: baton.RoleUser, Content: "start"}}}
			var pe *baton.ProviderError
			if _, _, err := run(t.Context(), p, req); err != nil && !errors.As(err, &pe) { // an injected error is a valid answer
				t.Errorf("%s: %s: %v", path, agent, err)
			}
		}
	}
}

func BenchmarkScriptedStream(b *testing.B) {
	p, err := Parse("bench", []byte(`{"agents": {"A": [{"text": "`+strings.Repeat("word ", 100)+`"}]}}`))
	if err != nil {
		b.Fatal(err)
	}
	req := &baton.Request{ChatID: "c", Agent: "A"}
	ctx := context.Background()
	b.ReportAllocs()
	deltas := 0
	for b.Loop() {
		for _, err := range p.Stream(ctx, req) {
			if err != nil {
				b.Fatal(err)
			}
			deltas++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(deltas), "ns/delta")
}

// TestWhen: an entry with "when" answers when the person's last message or
// the last UI response (a tool result, or the engine's note of an
// auto-tool's response) matches, newer than the agent's last message; else
// the N-th plain entry answers, as in a script without conditions.
func TestWhen(t *testing.T) {
	const script = `{"agents": {"AgentName": [
		{"when": {"ui_response": {"data": {"action": "revise"}}}, "text": "Revising."},
		{"when": {"ui_response": {"tool": "pick", "status": "cancelled"}}, "text": "Cancelled."},
		{"when": {"ui_response": {"data": {"plan": {"day": "friday"}}}}, "text": "Friday."},
		{"when": {"input_contains": "WEEKLY"}, "text": "Weekly it is."},
		{"text": "plain 0"},
		{"text": "plain 1"}
	]}}`
	p := load(t, script)
	note := func(tool, js string) baton.Message {
		return baton.Message{Role: baton.RoleUser, Name: "system", Content: "The person responded to " + tool + ": " + js}
	}
	cases := []struct {
		name string
		msgs []baton.Message
		want string
	}{
		{"auto-tool revise", []baton.Message{note("action_plan", `{"status":"success","ui_event_id":"ui_1","data":{"action":"revise","feedback":"x"}}`)}, "Revising."},
		{"auto-tool approve", []baton.Message{note("action_plan", `{"status":"success","ui_event_id":"ui_1","data":{"action":"approve"}}`)}, "plain 0"},
		{"tool result cancelled", []baton.Message{
			{Role: baton.RoleAssistant, Name: "Other", ToolCalls: []baton.ToolCall{{ID: "c", Name: "pick"}}},
			{Role: baton.RoleTool, Name: "pick", ToolCallID: "c", Content: `{"status":"cancelled","ui_event_id":"ui_2"}`}}, "Cancelled."},
		{"other tool cancelled", []baton.Message{{Role: baton.RoleTool, Name: "choose", Content: `{"status":"cancelled","ui_event_id":"ui_2"}`}}, "plain 0"},
		{"nested data", []baton.Message{note("f", `{"status":"success","ui_event_id":"u","data":{"plan":{"day":"friday","time":"9"}}}`)}, "Friday."},
		{"nested data differs", []baton.Message{note("f", `{"status":"success","ui_event_id":"u","data":{"plan":"friday"}}`)}, "plain 0"},
		{"input", []baton.Message{{Role: baton.RoleUser, Name: "user", Content: "a weekly digest"}}, "Weekly it is."},
		{"input answered already", []baton.Message{
			{Role: baton.RoleUser, Name: "user", Content: "a weekly digest"},
			{Role: baton.RoleAssistant, Name: "AgentName", Content: "Weekly it is."}}, "plain 1"},
		{"not a ui result", []baton.Message{{Role: baton.RoleTool, Name: "pick", Content: `{"action":"revise"}`}}, "plain 0"},
	}
	for _, tc := range cases {
		req := &baton.Request{ChatID: "c", Agent: "AgentName", Messages: tc.msgs}
		_, acc, err := run(t.Context(), p, req)
		if err != nil || acc.FinalText() != tc.want {
			t.Errorf("%s: err %v, text %q, want %q", tc.name, err, acc.FinalText(), tc.want)
		}
	}
}

func TestWhenErrors(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{`{"when": {"input_contains": ""}, "text": "x"}`, "agents.A[0]: when.input_contains: must not be empty"},
		{`{"when": {}, "text": "x"}`, `agents.A[0]: when: needs "input_contains" or "ui_response"`},
		{`{"when": {"input_contains": "a", "ui_response": {}}, "text": "x"}`, `agents.A[0]: when: give one of`},
		{`{"when": {"ui_response": {"data": [1]}}, "text": "x"}`, "agents.A[0]: when.ui_response.data: must be an object"},
		{`{"when": {"ui_respons": {}}, "text": "x"}`, `agents.A[0]: when: unknown field "ui_respons"`},
		{`{"when": {"ui_response": {"status": 3}}, "text": "x"}`, "agents.A[0]: when: ui_response.status: must be string"},
		{`{"when": {"input_contains": "a"}, "match": "a", "text": "x"}`, `agents.A[0]: "match" and "when" cannot both be set`},
		{`{"when": {"input_contains": "a"}}`, `agents.A[0]: needs one of`},
	} {
		_, err := Parse("wf/scripted.json", []byte(`{"agents": {"A": [`+tc.entry+`]}}`))
		if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), "wf/scripted.json: "+tc.want) {
			t.Errorf("%s: %v, want %q", tc.entry, err, tc.want)
		}
	}
}
