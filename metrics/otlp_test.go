package metrics_test

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/metrics"
)

// receiver is an in-process OTLP trace receiver: it keeps every span it is
// sent, over OTLP/HTTP (protobuf) or OTLP/gRPC.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	resource map[string]*commonpb.AnyValue
	span     *tracepb.Span
	attrs    map[string]*commonpb.AnyValue
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// Export implements the gRPC trace service.
func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{resource: res, span: s, attrs: attrMap(s.GetAttributes())})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is the OTLP/HTTP endpoint, POST /v1/traces.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, _ := r.Export(req.Context(), &msg)
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *receiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// startReceiver starts r on protocol and returns the endpoint to export to.
func startReceiver(t *testing.T, r *receiver, protocol string) string {
	t.Helper()
	if protocol == "grpc" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, r)
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(lis) }()
		t.Cleanup(func() { srv.Stop(); <-done })
		return "http://" + lis.Addr().String() // http: no TLS
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestOTLPExport runs the generator with tracing configured only by the
// standard OTEL_* variables and checks what an in-process OTLP receiver
// got, over HTTP and over gRPC: the resource names the service as
// OTEL_SERVICE_NAME says, with the build's version and
// OTEL_RESOURCE_ATTRIBUTES; the spans carry the GenAI attributes (provider,
// request parameters, finish reasons, response id, conversation id); the
// chat's four runs are one trace, each run linked to the caller's span
// that brought its input; and execute_tool spans have the span id the tool
// registry sends tools as their traceparent.
func TestOTLPExport(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			r := &receiver{}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", startReceiver(t, r, protocol))
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_SERVICE_NAME", "newsletter-agents")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,service.namespace=acme")
			ctx := context.Background()
			tp, err := metrics.OTLPFromEnv(ctx, "v1.2.3")
			if err != nil || tp == nil {
				t.Fatalf("OTLPFromEnv: %v, %v", tp, err)
			}
			h := newHarness(t, config{tp: tp})
			caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
				TraceFlags: trace.FlagsSampled, Remote: true})
			h.inputCtx = trace.ContextWithRemoteSpanContext(ctx, caller) // as the HTTP server span would be
			id := h.driveGenerator()
			h.waitObserved(1)
			chat, err := h.store.GetChat(ctx, testScope, id)
			if err != nil {
				t.Fatal(err)
			}
			h.close()
			if err := tp.Shutdown(ctx); err != nil { // flushes to the receiver
				t.Fatalf("shutdown: %v", err)
			}
			spans := r.received()
			if len(spans) == 0 {
				t.Fatal("the receiver got no spans")
			}
			res := spans[0].resource
			for k, want := range map[string]string{"service.name": "newsletter-agents", "service.version": "v1.2.3",
				"deployment.environment.name": "test", "service.namespace": "acme", "telemetry.sdk.language": "go"} {
				if got := res[k].GetStringValue(); got != want {
					t.Errorf("resource %s = %q, want %q", k, got, want)
				}
			}
			wantTrace := metrics.ChatTraceID(id)
			wf := h.eng.Workflow("generator")
			var runs, chats, tools int
			for _, s := range spans {
				if got := hex.EncodeToString(s.span.GetTraceId()); got != wantTrace.String() {
					t.Errorf("%s in trace %s, want the chat's %s", s.span.GetName(), got, wantTrace)
				}
				if s.attrs["gen_ai.conversation.id"].GetStringValue() != id {
					t.Errorf("%s: gen_ai.conversation.id %v, want %s", s.span.GetName(), s.attrs["gen_ai.conversation.id"], id)
				}
				switch name := s.span.GetName(); {
				case strings.HasPrefix(name, "run "):
					runs++
					if len(s.span.GetParentSpanId()) != 0 {
						t.Errorf("%s has a parent", name)
					}
					links := s.span.GetLinks()
					if len(links) != 1 || hex.EncodeToString(links[0].GetTraceId()) != caller.TraceID().String() ||
						hex.EncodeToString(links[0].GetSpanId()) != caller.SpanID().String() {
						t.Errorf("%s: links %v, want the caller's span %s", name, links, caller.SpanID())
					}
				case strings.HasPrefix(name, "chat "):
					chats++
					a := s.attrs
					cfg := wf.LLMFor(a["gen_ai.agent.name"].GetStringValue()) // the agent's parameters, over the workflow's
					if cfg.Temperature == nil || cfg.MaxTokens == 0 {
						t.Fatalf("the generator's %s has no temperature or max_tokens to check", a["gen_ai.agent.name"].GetStringValue())
					}
					if a["gen_ai.provider.name"].GetStringValue() != "baton.scripted" || a["gen_ai.request.model"].GetStringValue() != cfg.Model ||
						a["gen_ai.request.temperature"].GetDoubleValue() != *cfg.Temperature || a["gen_ai.request.max_tokens"].GetIntValue() != int64(cfg.MaxTokens) ||
						a["gen_ai.request.seed"].GetIntValue() != chat.CacheSeed || a["gen_ai.response.id"].GetStringValue() == "" ||
						a["gen_ai.usage.input_tokens"] == nil {
						t.Errorf("%s: attributes %v", name, a)
					}
					reasons := a["gen_ai.response.finish_reasons"].GetArrayValue().GetValues()
					if len(reasons) != 1 || (reasons[0].GetStringValue() != "stop" && reasons[0].GetStringValue() != "tool_calls") {
						t.Errorf("%s: gen_ai.response.finish_reasons %v", name, reasons)
					}
				case strings.HasPrefix(name, "execute_tool "):
					tools++
					want := metrics.ToolSpanContext(id, s.attrs["gen_ai.tool.call.id"].GetStringValue()).SpanID()
					if got := hex.EncodeToString(s.span.GetSpanId()); got != want.String() {
						t.Errorf("%s: span id %s, want %s (the traceparent its tool was sent)", name, got, want)
					}
				}
			}
			if runs != 4 || chats == 0 || tools == 0 {
				t.Errorf("%d run, %d chat and %d execute_tool spans; want 4 runs (start, message, secret, approval) and some of each", runs, chats, tools)
			}
		})
	}
}

// TestOTLPFromEnvChoices checks the variables that turn tracing off or
// choose what cannot be: no endpoint, OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none give no provider; an unknown protocol or a
// malformed OTEL_RESOURCE_ATTRIBUTES is an error that names the variable.
func TestOTLPFromEnvChoices(t *testing.T) {
	ctx := context.Background()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if tp, err := metrics.OTLPFromEnv(ctx, "v1"); tp != nil || err != nil {
		t.Fatalf("no endpoint: %v, %v", tp, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	for _, kv := range [][2]string{{"OTEL_SDK_DISABLED", "true"}, {"OTEL_TRACES_EXPORTER", "none"}} {
		t.Run(kv[0], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			if tp, err := metrics.OTLPFromEnv(ctx, "v1"); tp != nil || err != nil {
				t.Fatalf("%s=%s: %v, %v", kv[0], kv[1], tp, err)
			}
		})
	}
	t.Run("protocol", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
		if _, err := metrics.OTLPFromEnv(ctx, "v1"); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
			t.Fatalf("http/json: %v, want an error naming the variable", err)
		}
	})
	t.Run("resource", func(t *testing.T) {
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "no-equals-sign")
		tp, err := metrics.OTLPFromEnv(ctx, "v1")
		if err == nil || !strings.Contains(err.Error(), "OTEL_RESOURCE_ATTRIBUTES") {
			if tp != nil {
				_ = tp.Shutdown(ctx)
			}
			t.Fatalf("malformed attributes: %v, want an error naming the variable", err)
		}
	})
}
