package tool

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton"
)

// WithTraceContext makes the registry pass each call's trace context to the
// tools that speak HTTP: an HTTP tool's request and an MCP server's over
// HTTP carry the W3C traceparent of f(chat id, tool call id), the span that
// stands for the call in baton's trace (metrics.ToolSpanContext), so the
// tool's own spans join the chat's trace. Without it (tracing off) no
// traceparent is sent.
func WithTraceContext(f func(chatID, toolCallID string) trace.SpanContext) Option {
	return func(o *options) { o.traceCtx = f }
}

// traceContext returns ctx carrying the span context of cc's call, or ctx
// when tracing is off or the call has no id.
func (r *Registry) traceContext(ctx context.Context, cc *baton.CallContext) context.Context {
	if r.opts.traceCtx == nil || cc == nil {
		return ctx
	}
	sc := r.opts.traceCtx(cc.ChatID, cc.ToolCallID)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// injectTrace sets h's traceparent (and tracestate) from the span context
// ctx carries; it sets nothing when ctx carries none.
func injectTrace(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// tracedContext reports whether ctx carries a span context to propagate.
func tracedContext(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }
