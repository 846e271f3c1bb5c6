package metrics

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
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
	baton.TypeStreamStart, baton.TypeStreamCompleted, baton.TypeStreamError,
	baton.TypeRunStart, baton.TypeRunResume, baton.TypeUserQuery, baton.TypeUIToolResponse,
}

// Tracer turns observed events into OpenTelemetry spans that follow the
// GenAI semantic conventions, with the events' own timestamps:
//
//	run {input}                    a root span per run, from the input event to the run's last event;
//	│                              every run of a chat is in the chat's trace (IDGenerator)
//	├─ invoke_agent {agent}        a native chat.select_speaker to that turn's chat.handoff
//	│  ├─ chat {model}             stream.start to chat.usage_summary (gen_ai.request.*, gen_ai.response.*, gen_ai.usage.*)
//	│  └─ execute_tool {tool}      chat.tool_call to its chat.tool_response
//
// Every span carries gen_ai.conversation.id, the chat's id. A run links
// to the span of the request that brought its input (Metadata.TraceParent).
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
	chatID    string
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

// OTLPFromEnv returns a tracer provider exporting over OTLP when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set, and nil otherwise (or when OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none). The standard variables configure it:
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL chooses grpc or http/protobuf (the
// default), the exporters read their endpoint, headers, timeout and TLS
// settings, the SDK its sampler (OTEL_TRACES_SAMPLER) and batching
// (OTEL_BSP_*), and the resource takes OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES over baton's defaults (service.name "baton",
// service.version serviceVersion). Its spans get their ids from
// IDGenerator, so one chat's runs share a trace. Shut the provider down
// (Shutdown) to flush it.
func OTLPFromEnv(ctx context.Context, serviceVersion string) (*sdktrace.TracerProvider, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return nil, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol = strings.TrimSpace(protocol); protocol == "" {
		protocol = "http/protobuf" // the OTLP default
	}
	// The resource first: a malformed variable fails before an exporter
	// (and its connection) exists.
	res, err := Resource(ctx, serviceVersion)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("metrics: OTEL_EXPORTER_OTLP_PROTOCOL %q: baton exports traces over grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: otlp exporter (%s): %w", protocol, err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(IDGenerator())), nil
}

// Resource describes this process to a trace backend: service.name "baton"
// and service.version serviceVersion (the build's module version or VCS
// revision), then the SDK's own attributes, with OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES taking precedence over both.
func Resource(ctx context.Context, serviceVersion string) (*sdkresource.Resource, error) {
	res, err := sdkresource.New(ctx,
		sdkresource.WithAttributes(attribute.String("service.name", "baton"), attribute.String("service.version", serviceVersion)),
		sdkresource.WithTelemetrySDK(),
		sdkresource.WithFromEnv(), // last: the operator's variables win
	)
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES: say so rather than export
		// under a name nobody chose.
		return nil, fmt.Errorf("metrics: trace resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return res, nil
}

// IDGenerator returns the span id generator the tracer's spans need from
// their provider (OTLPFromEnv uses it; pass it with
// sdktrace.WithIDGenerator to a provider of your own). A run's span gets the
// trace id ChatTraceID derives from its chat's id, so every run of a chat
// is one trace, on every instance and after a restart, with nothing stored;
// an execute_tool span gets the span id ToolSpanContext derives from its
// call, so the traceparent an HTTP or MCP tool received names it. Other
// ids are random.
func IDGenerator() sdktrace.IDGenerator { return chatIDs{} }

type chatIDs struct{}

// idsKey is the context key of the ids a span must have (ctxIDs).
type idsKey struct{}

type ctxIDs struct {
	trace trace.TraceID // valid: a run's span
	span  trace.SpanID  // valid: a tool call's span
}

func (chatIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	ids, _ := ctx.Value(idsKey{}).(ctxIDs)
	tid := ids.trace
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

func (chatIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if ids, _ := ctx.Value(idsKey{}).(ctxIDs); ids.span.IsValid() {
		return ids.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// ChatTraceID is the trace id of every run of chat chatID: the first 16
// bytes of SHA-256 over the id (chat ids are random, so trace ids are too).
func ChatTraceID(chatID string) trace.TraceID {
	sum := sha256.Sum256([]byte("baton chat\x00" + chatID))
	var tid trace.TraceID
	copy(tid[:], sum[:16])
	return tid
}

// ToolSpanContext is the span context of the execute_tool span of call
// toolCallID in chat chatID, as the tracer makes it with IDGenerator: the
// parent an HTTP or MCP tool's own spans should have. The tool registry
// (tool.WithTraceContext) sends it as the W3C traceparent header.
func ToolSpanContext(chatID, toolCallID string) trace.SpanContext {
	if chatID == "" || toolCallID == "" {
		return trace.SpanContext{}
	}
	sum := sha256.Sum256([]byte("baton tool\x00" + chatID + "\x00" + toolCallID))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: ChatTraceID(chatID), SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	})
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
	// stream.start and stream.completed
	Provider     string   `json:"provider"`
	Temperature  *float64 `json:"temperature"`
	MaxTokens    int64    `json:"max_tokens"`
	Seed         *int64   `json:"seed"`
	FinishReason string   `json:"finish_reason"`
	ResponseID   string   `json:"response_id"`
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
			ct = &chatTrace{chatID: chatID, calls: map[string]trace.Span{}, tools: map[string]trace.Span{}}
			t.chats.put(chatID, ct)
		}
		scope := ev.Metadata.Scope()
		opts := []trace.SpanStartOption{trace.WithTimestamp(ts), trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attribute.String("gen_ai.conversation.id", chatID), attribute.String("baton.app", scope.App),
				attribute.String("baton.input", ev.Type))}
		if caller := traceParentOf(ev); caller.IsValid() {
			// The request that brought the input is in its caller's trace;
			// the run is in the chat's, and links to it.
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller,
				Attributes: []attribute.KeyValue{attribute.String("baton.link", "input")}}))
		}
		// Every run of the chat is a root span of the chat's trace
		// (IDGenerator): its runs read as one story, on any instance.
		ctx := context.WithValue(context.Background(), idsKey{}, ctxIDs{trace: ChatTraceID(chatID)})
		ctx, root := t.tracer.Start(ctx, "run "+ev.Type, opts...)
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
		name := "chat"
		attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.agent.name", p.Agent),
			attribute.String("gen_ai.conversation.id", chatID)}
		if p.Model != "" {
			name += " " + p.Model
			attrs = append(attrs, attribute.String("gen_ai.request.model", p.Model))
		}
		if p.Provider != "" {
			attrs = append(attrs, attribute.String("gen_ai.provider.name", p.Provider))
		}
		if p.Temperature != nil {
			attrs = append(attrs, attribute.Float64("gen_ai.request.temperature", *p.Temperature))
		}
		if p.MaxTokens > 0 {
			attrs = append(attrs, attribute.Int64("gen_ai.request.max_tokens", p.MaxTokens))
		}
		if p.Seed != nil {
			attrs = append(attrs, attribute.Int64("gen_ai.request.seed", *p.Seed))
		}
		_, s := t.tracer.Start(ct.parent(), name, trace.WithTimestamp(ts), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attrs...))
		ct.calls[p.MessageID] = s
	case baton.TypeStreamCompleted:
		if s := ct.calls[p.MessageID]; s != nil {
			if p.FinishReason != "" {
				s.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{p.FinishReason}))
			}
			if p.ResponseID != "" {
				s.SetAttributes(attribute.String("gen_ai.response.id", p.ResponseID))
			}
		}
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
		// The model that answered: the requested one for a real provider,
		// the provider's own for the scripted one (the span keeps the
		// requested model in its name and gen_ai.request.model).
		s.SetAttributes(attribute.String("gen_ai.response.model", p.Model),
			attribute.Int64("gen_ai.usage.input_tokens", p.PromptTokens), attribute.Int64("gen_ai.usage.output_tokens", p.CompletionTokens),
			attribute.Int64("gen_ai.usage.cached_tokens", p.CachedTokens))
		s.End(trace.WithTimestamp(ts))
	case baton.TypeChatToolCall:
		// The span id is the one the tool was sent as its traceparent
		// (ToolSpanContext): the tool's own spans hang from this one.
		ctx := context.WithValue(ct.parent(), idsKey{}, ctxIDs{span: ToolSpanContext(chatID, p.ToolCallID).SpanID()})
		_, s := t.tracer.Start(ctx, "execute_tool "+p.ToolName, trace.WithTimestamp(ts), trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", p.ToolName),
				attribute.String("gen_ai.tool.call.id", p.ToolCallID), attribute.String("gen_ai.agent.name", p.Agent),
				attribute.String("gen_ai.conversation.id", chatID)))
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
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "invoke_agent"), attribute.String("gen_ai.agent.name", agent),
			attribute.String("gen_ai.conversation.id", ct.chatID)))
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

// traceParentOf returns the span context an input event's traceparent
// names (engine.WithTraceParent sets it), or an invalid one.
func traceParentOf(ev baton.Event) trace.SpanContext {
	if ev.Metadata.TraceParent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": ev.Metadata.TraceParent})
	return trace.SpanContextFromContext(ctx)
}
