package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// tracePatterns are the events the tracer observes.
var tracePatterns = []string{
	baton.TypeChatSelectSpeaker, baton.TypeChatHandoff, baton.TypeChatToolCall, baton.TypeChatToolResponse,
	baton.TypeChatUsageSummary, baton.TypeChatRunComplete, baton.TypeChatError, baton.TypeChatInputRequest,
	baton.TypeStreamStart, baton.TypeStreamError,
	baton.TypeRunStart, baton.TypeRunResume, baton.TypeUserQuery, baton.TypeUIToolResponse,
}

// Tracer turns observed events into OpenTelemetry spans that follow the
// GenAI semantic conventions, with the events' own timestamps:
//
//	run {input}                    one trace per run: from the input event to the run's last event
//	├─ invoke_agent {agent}        a native chat.select_speaker to that turn's chat.handoff
//	│  ├─ chat {model}             stream.start to chat.usage_summary (gen_ai.usage.*)
//	│  └─ execute_tool {tool}      chat.tool_call to its chat.tool_response
//
// A run ends at chat.run_complete, chat.error, chat.input_request, or when
// the chat's next input arrives (a pause for a person). A tool call that
// waits for a person (awaiting_response, or an auto-tool's ui_event_id) ends at its response, so its span
// outlives its agent's span of the paused run. Like the
// Collector, it reads one subscription from one goroutine and never delays
// a run. Off (no Tracer), nothing subscribes and nothing is spent.
type Tracer struct {
	bus    *bus.Bus
	tracer trace.Tracer
	log    *slog.Logger
	buffer int
	chats  *lru[*chatTrace] // owned by the loop goroutine; at most DefaultMaxChats

	stop context.CancelFunc
	done chan struct{}
}

type chatTrace struct {
	root      trace.Span
	rootCtx   context.Context
	last      time.Time
	agent     trace.Span
	agentName string
	agentCtx  context.Context
	calls     map[string]trace.Span // model calls by message id
	tools     map[string]trace.Span // tool calls by tool_call_id
}

// NewTracer returns a tracer that makes spans with tp. It observes nothing
// until Start.
func NewTracer(b *bus.Bus, tp trace.TracerProvider, log *slog.Logger) *Tracer {
	if log == nil {
		log = slog.Default()
	}
	t := &Tracer{bus: b, tracer: tp.Tracer("github.com/batonhq/baton/metrics"), log: log, buffer: DefaultBuffer}
	// A chat put out by the cap has its open spans ended at its last event,
	// as at Close.
	t.chats = newLRU(DefaultMaxChats, func(_ string, ct *chatTrace) { t.endChat(ct) })
	return t
}

// OTLPFromEnv returns a tracer provider exporting over OTLP/HTTP when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set, configured by the standard OTEL_* variables, and nil otherwise.
// Shut the provider down (Shutdown) to flush it.
func OTLPFromEnv(ctx context.Context, serviceVersion string) (*sdktrace.TracerProvider, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics: otlp exporter: %w", err)
	}
	res, err := sdkresource.Merge(sdkresource.Default(), sdkresource.NewSchemaless(
		attribute.String("service.name", "baton"), attribute.String("service.version", serviceVersion)))
	if err != nil {
		res = sdkresource.Default()
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Start subscribes to the bus and starts the tracer's goroutine.
func (t *Tracer) Start() error {
	if t.done != nil {
		return errors.New("metrics: tracer already started")
	}
	sub, err := t.bus.Subscribe(tracePatterns, bus.Buffer(t.buffer))
	if err != nil {
		return fmt.Errorf("metrics: tracer subscribe: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.stop, t.done = cancel, make(chan struct{})
	go t.loop(ctx, sub)
	return nil
}

// Close stops the tracer and ends the spans still open at their last
// observed time. Flushing the exporter is the provider's Shutdown.
func (t *Tracer) Close() {
	if t.done == nil {
		return
	}
	t.stop()
	<-t.done
	for id, ct := range t.chats.all() {
		t.endChat(ct)
		t.chats.delete(id)
	}
}

// endChat ends every span of a chat still open, at its last event.
func (t *Tracer) endChat(ct *chatTrace) {
	t.endRun(ct, ct.last, nil)
	for cid, s := range ct.tools {
		s.End(trace.WithTimestamp(ct.last))
		delete(ct.tools, cid)
	}
}

func (t *Tracer) loop(ctx context.Context, sub *bus.Subscription) {
	defer close(t.done)
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			t.evict(now)
		case <-ctx.Done():
			// Take what is already buffered (all of it once the bus has
			// closed), then stop.
			for {
				select {
				case ev, ok := <-sub.C():
					if ok {
						t.Observe(ev)
						continue
					}
				default:
				}
				sub.Close()
				return
			}
		case ev, ok := <-sub.C():
			if ok {
				t.Observe(ev)
				continue
			}
			if !errors.Is(sub.Err(), bus.ErrSlowSubscriber) {
				return
			}
			t.log.Warn("metrics: the bus dropped the tracer's subscription (too slow); spans were missed, subscribing again")
			next, err := t.bus.Subscribe(tracePatterns, bus.Buffer(t.buffer))
			if err != nil {
				t.log.Warn("metrics: tracer subscribe again failed; tracing stops", "err", err)
				return
			}
			sub = next
		}
	}
}

type tracePayload struct {
	Agent            string `json:"agent"`
	Model            string `json:"model"`
	AgentMessageID   string `json:"agent_message_id"`
	MessageID        string `json:"message_id"`
	Source           string `json:"source"`
	Synthetic        bool   `json:"_synthetic"`
	TurnIndex        int    `json:"turn_index"`
	From             string `json:"from"`
	ToolName         string `json:"tool_name"`
	ToolCallID       string `json:"tool_call_id"`
	Status           string `json:"status"`
	Code             string `json:"code"`
	Message          string `json:"message"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	CachedTokens     int64  `json:"cached_tokens"`
	InteractionType  string `json:"interaction_type"`
	Awaiting         bool   `json:"awaiting_response"`
	UIEventID        string `json:"ui_event_id"`
}

// Observe folds one event into the spans. The tracer's goroutine calls it;
// it is exported for tests that feed events directly (not concurrently).
// Another instance's events (bus.Remote) are skipped: it traces its runs.
func (t *Tracer) Observe(ev baton.Event) {
	if bus.Remote(ev) {
		return // traced by the instance that ran it
	}
	ts := time.UnixMilli(ev.Timestamp)
	chatID := ev.ChatID()
	ct, _ := t.chats.get(chatID)
	switch ev.Type {
	case baton.TypeRunStart, baton.TypeRunResume, baton.TypeUserQuery, baton.TypeUIToolResponse:
		if ct != nil && ct.root != nil {
			t.endRun(ct, ct.last, nil) // the previous run paused
		}
		if ct == nil {
			ct = &chatTrace{calls: map[string]trace.Span{}, tools: map[string]trace.Span{}}
			t.chats.put(chatID, ct)
		}
		scope := ev.Metadata.Scope()
		ctx, root := t.tracer.Start(context.Background(), "run "+ev.Type, trace.WithTimestamp(ts),
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attribute.String("gen_ai.conversation.id", chatID), attribute.String("baton.app", scope.App),
				attribute.String("baton.input", ev.Type)))
		ct.root, ct.rootCtx, ct.last = root, ctx, ts
		if ct.agentName != "" {
			// A turn paused for a person goes on in this run.
			t.startAgent(ct, ct.agentName, ts)
		}
		return
	}
	if ct == nil || ct.root == nil {
		return // the run started before the tracer did
	}
	ct.last = ts
	var p tracePayload
	_ = json.Unmarshal(ev.Payload, &p)
	switch ev.Type {
	case baton.TypeChatSelectSpeaker:
		if p.Synthetic || p.Source == "synthetic" {
			return
		}
		t.endAgent(ct, ts)
		t.startAgent(ct, p.Agent, ts)
	case baton.TypeChatHandoff:
		t.endAgent(ct, ts)
		ct.agentName = ""
	case baton.TypeStreamStart:
		_, s := t.tracer.Start(ct.parent(), "chat", trace.WithTimestamp(ts), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.agent.name", p.Agent),
				attribute.String("gen_ai.conversation.id", chatID)))
		ct.calls[p.MessageID] = s
	case baton.TypeStreamError:
		if s := ct.calls[p.MessageID]; s != nil {
			s.SetStatus(codes.Error, p.Message)
			s.SetAttributes(attribute.String("error.type", "model_error"))
			s.End(trace.WithTimestamp(ts))
			delete(ct.calls, p.MessageID)
		}
	case baton.TypeChatUsageSummary:
		s := ct.calls[p.AgentMessageID]
		if s == nil {
			return
		}
		delete(ct.calls, p.AgentMessageID)
		s.SetName("chat " + p.Model)
		s.SetAttributes(attribute.String("gen_ai.request.model", p.Model), attribute.String("gen_ai.response.model", p.Model),
			attribute.Int64("gen_ai.usage.input_tokens", p.PromptTokens), attribute.Int64("gen_ai.usage.output_tokens", p.CompletionTokens),
			attribute.Int64("gen_ai.usage.cached_tokens", p.CachedTokens))
		s.End(trace.WithTimestamp(ts))
	case baton.TypeChatToolCall:
		_, s := t.tracer.Start(ct.parent(), "execute_tool "+p.ToolName, trace.WithTimestamp(ts), trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", p.ToolName),
				attribute.String("gen_ai.tool.call.id", p.ToolCallID), attribute.String("gen_ai.agent.name", p.Agent)))
		if p.InteractionType != "" {
			s.SetAttributes(attribute.String("baton.interaction_type", p.InteractionType))
		}
		if p.Awaiting || p.UIEventID != "" {
			// It waits for a person: it ends at the response, in a later
			// run, after its agent's span in this one.
			s.SetAttributes(attribute.Bool("baton.awaiting_response", true))
		}
		ct.tools[p.ToolCallID] = s
	case baton.TypeChatToolResponse:
		if s := ct.tools[p.ToolCallID]; s != nil {
			if p.Status == baton.ToolStatusError || p.Status == "error" {
				s.SetStatus(codes.Error, "tool error")
				s.SetAttributes(attribute.String("error.type", "tool_error"))
			}
			s.End(trace.WithTimestamp(ts))
			delete(ct.tools, p.ToolCallID)
		}
	case baton.TypeChatRunComplete:
		ct.root.SetAttributes(attribute.String("baton.run.status", p.Status))
		t.endRun(ct, ts, nil)
		ct.agentName = ""
		t.chats.delete(chatID)
	case baton.TypeChatError:
		t.endRun(ct, ts, fmt.Errorf("%s", p.Code))
	case baton.TypeChatInputRequest:
		t.endRun(ct, ts, nil)
	}
}

// evict forgets chats paused for longer than DefaultIdle, ending the tool
// spans still waiting for a person at the chat's last event.
func (t *Tracer) evict(now time.Time) {
	for id, ct := range t.chats.all() {
		if ct.root == nil && now.Sub(ct.last) > DefaultIdle {
			for cid, s := range ct.tools {
				s.End(trace.WithTimestamp(ct.last))
				delete(ct.tools, cid)
			}
			t.chats.delete(id)
		}
	}
}

// WithMaxChats sets how many chats the tracer keeps open spans of (default
// DefaultMaxChats; n <= 0 keeps the default): beyond it the least recently
// active chat's spans are ended at its last event. Call it before Start.
func (t *Tracer) WithMaxChats(n int) *Tracer {
	if n > 0 {
		t.chats.max = n
	}
	return t
}

// parent is the context new model and tool spans hang from: the agent's
// span, else the run's.
func (ct *chatTrace) parent() context.Context {
	if ct.agent != nil {
		return ct.agentCtx
	}
	return ct.rootCtx
}

func (t *Tracer) startAgent(ct *chatTrace, agent string, ts time.Time) {
	ctx, s := t.tracer.Start(ct.rootCtx, "invoke_agent "+agent, trace.WithTimestamp(ts), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "invoke_agent"), attribute.String("gen_ai.agent.name", agent)))
	ct.agent, ct.agentCtx, ct.agentName = s, ctx, agent
}

func (t *Tracer) endAgent(ct *chatTrace, ts time.Time) {
	if ct.agent != nil {
		ct.agent.End(trace.WithTimestamp(ts))
		ct.agent, ct.agentCtx = nil, nil
	}
}

// endRun ends the run's open spans and its root at ts. Tool calls waiting
// for a person stay open and end when answered.
func (t *Tracer) endRun(ct *chatTrace, ts time.Time, err error) {
	for id, s := range ct.calls {
		s.End(trace.WithTimestamp(ts))
		delete(ct.calls, id)
	}
	t.endAgent(ct, ts)
	if ct.root != nil {
		if err != nil {
			ct.root.SetStatus(codes.Error, err.Error())
		}
		ct.root.End(trace.WithTimestamp(ts))
		ct.root, ct.rootCtx = nil, nil
	}
}
