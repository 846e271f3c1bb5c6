package metrics_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/metrics"
)

// TestTraceTree runs the generator with the tracer on and checks the spans
// the SDK's in-memory exporter captured: one trace per chat, a root span per run, invoke_agent
// spans under the run, chat spans (with the scripted token usage) and
// execute_tool spans under an agent, every child inside its parent's time.
func TestTraceTree(t *testing.T) {
	h := newHarness(t, config{tracing: true})
	id := h.driveGenerator()
	h.waitObserved(1)
	calls, want := scriptedUsage(t, h, "generator", id)
	h.close() // ends the tracer: every span is exported
	spans := h.spans.GetSpans()
	if len(spans) == 0 {
		t.Fatal("no spans")
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	attr := func(s tracetest.SpanStub, key string) attribute.Value {
		for _, kv := range s.Attributes {
			if string(kv.Key) == key {
				return kv.Value
			}
		}
		return attribute.Value{}
	}
	var roots, agents, chats, tools int
	var in, out int64
	agentNames := map[string]bool{}
	traces := map[trace.TraceID]bool{}
	for _, s := range spans {
		if s.EndTime.Before(s.StartTime) {
			t.Errorf("%s ends before it starts", s.Name)
		}
		parent, hasParent := byID[s.Parent.SpanID()]
		awaiting := attr(s, "baton.awaiting_response").AsBool() // ends at the person's response, in a later run
		if hasParent && (s.StartTime.Before(parent.StartTime) || (!awaiting && s.EndTime.After(parent.EndTime))) {
			t.Errorf("%s [%v, %v] is outside its parent %s [%v, %v]", s.Name, s.StartTime, s.EndTime, parent.Name, parent.StartTime, parent.EndTime)
		}
		switch {
		case strings.HasPrefix(s.Name, "run "):
			roots++
			traces[s.SpanContext.TraceID()] = true
			if s.Parent.IsValid() {
				t.Errorf("run span %s has a parent", s.Name)
			}
			if attr(s, "gen_ai.conversation.id").AsString() != id {
				t.Errorf("run span without the chat id")
			}
		case strings.HasPrefix(s.Name, "invoke_agent "):
			agents++
			agentNames[strings.TrimPrefix(s.Name, "invoke_agent ")] = true
			if !hasParent || !strings.HasPrefix(parent.Name, "run ") {
				t.Errorf("%s: parent %q, want the run", s.Name, parent.Name)
			}
		case strings.HasPrefix(s.Name, "chat "):
			chats++
			if s.Name != "chat gpt-4o-mini" || attr(s, "gen_ai.request.model").AsString() != "gpt-4o-mini" || attr(s, "gen_ai.response.model").AsString() != "scripted" {
				t.Errorf("model span %q", s.Name)
			}
			in += attr(s, "gen_ai.usage.input_tokens").AsInt64()
			out += attr(s, "gen_ai.usage.output_tokens").AsInt64()
			if !hasParent || parent.Name != "invoke_agent "+attr(s, "gen_ai.agent.name").AsString() {
				t.Errorf("%s of %s: parent %q", s.Name, attr(s, "gen_ai.agent.name").AsString(), parent.Name)
			}
		case strings.HasPrefix(s.Name, "execute_tool "):
			tools++
			if !hasParent || (!strings.HasPrefix(parent.Name, "invoke_agent ") && !strings.HasPrefix(parent.Name, "run ")) {
				t.Errorf("%s: parent %q", s.Name, parent.Name)
			}
			if attr(s, "gen_ai.tool.name").AsString() == "" {
				t.Errorf("%s without gen_ai.tool.name", s.Name)
			}
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
	}
	for _, s := range spans {
		if !traces[s.SpanContext.TraceID()] {
			t.Errorf("%s is in a trace without a run span", s.Name)
		}
	}
	// Four inputs reach the engine (start, message, secret, approval): four
	// runs, all in the chat's one trace.
	if roots != 4 || len(traces) != 1 || !traces[metrics.ChatTraceID(id)] {
		t.Errorf("%d run spans in traces %v, want 4 in the chat's trace %s", roots, traces, metrics.ChatTraceID(id))
	}
	if int64(chats) != calls || in != want.PromptTokens || out != want.CompletionTokens {
		t.Errorf("%d chat spans with %d input and %d output tokens, want %d with %d and %d", chats, in, out, calls, want.PromptTokens, want.CompletionTokens)
	}
	for _, a := range []string{"InterviewAgent", "ContextVariablesAgent", "ActionPlanAgent", "ReviewAgent", "DeliveryAgent"} {
		if !agentNames[a] {
			t.Errorf("no invoke_agent span for %s (have %v)", a, agentNames)
		}
	}
	if tools == 0 || agents < 5 {
		t.Errorf("%d execute_tool and %d invoke_agent spans", tools, agents)
	}
}
