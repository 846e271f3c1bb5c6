package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// promMetrics are the Prometheus series. Labels are bounded: workflow,
// model, tool, status, kind — never a chat, user or message id.
type promMetrics struct {
	observed     prometheus.Counter
	turns        *prometheus.CounterVec
	synthetic    *prometheus.CounterVec
	runs         *prometheus.CounterVec
	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec
	modelCalls   *prometheus.CounterVec
	modelErrors  prometheus.Counter
	tokens       *prometheus.CounterVec
	cost         *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	ttft         *prometheus.HistogramVec
	appendTime   prometheus.Histogram
	appendErrors prometheus.Counter
	wsConns      prometheus.Gauge
	wsDrops      prometheus.Counter
	subDrops     prometheus.Counter
	rollupWrites prometheus.Counter
	rollupDrops  prometheus.Counter
	rollupErrors prometheus.Counter
	httpDuration *prometheus.HistogramVec
}

// modelBuckets cover a fast first token (tens of ms) to a long completion
// (minutes).
var modelBuckets = []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120}

func newPromMetrics(c *Collector, reg *prometheus.Registry) (*promMetrics, error) {
	const ns = "baton"
	p := &promMetrics{
		observed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "metrics_events_observed_total",
			Help: "Events the metrics collector observed on the bus."}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "turns_total",
			Help: "Agent turns started (native chat.select_speaker)."}, []string{"workflow"}),
		synthetic: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "synthetic_speaker_events_total",
			Help: "Synthetic chat.select_speaker events recorded."}, []string{"workflow"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "runs_ended_total",
			Help: "Chats ended (chat.run_complete by status) or failed (chat.error, status error)."}, []string{"workflow", "status"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tool_calls_total",
			Help: "Tool calls run (tool.executed and tool.error), by tool and status."}, []string{"tool", "status"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "tool_duration_seconds",
			Help: "Tool call duration as the tool registry measured it.", Buckets: prometheus.DefBuckets}, []string{"tool"}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "model_calls_total",
			Help: "Model calls recorded (chat.usage_summary)."}, []string{"model"}),
		modelErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "model_errors_total",
			Help: "Model call attempts that failed (stream.error), those retried included."}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tokens_total",
			Help: "Tokens used, by model and kind (prompt, completion, cached, reasoning)."}, []string{"model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "cost_usd_total",
			Help: "Cost of model calls in US dollars, from the workflows' pricing."}, []string{"model"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "model_latency_seconds",
			Help: "Observed time from stream.start to stream.completed of a model call.", Buckets: modelBuckets}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "model_time_to_first_token_seconds",
			Help: "Observed time from stream.start to the first stream.text of a model call.", Buckets: modelBuckets}, []string{"model"}),
		appendTime: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "store_append_seconds",
			Help:    "Time to record a batch of chat events (store append and publish to observers).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}}),
		appendErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "store_append_errors_total",
			Help: "Appends of chat events that failed."}),
		wsConns: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "websocket_connections",
			Help: "Open WebSocket connections."}),
		wsDrops: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "websocket_slow_consumer_drops_total",
			Help: "WebSocket streams closed because the client fell behind."}),
		subDrops: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "metrics_subscription_drops_total",
			Help: "Times the bus dropped the metrics collector's subscription for being slow (events were missed)."}),
		rollupWrites: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "metrics_rollup_writes_total",
			Help: "Rollups written to workflow_stats."}),
		rollupDrops: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "metrics_rollup_queue_full_total",
			Help: "Rollups not queued because the writer's queue was full (they wait for the next flush)."}),
		rollupErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "metrics_rollup_errors_total",
			Help: "Rollup writes that failed (their delta is lost from workflow_stats)."}),
		httpDuration: newHTTPDuration(),
	}
	cs := []prometheus.Collector{
		p.observed, p.turns, p.synthetic, p.runs, p.toolCalls, p.toolDuration, p.modelCalls, p.modelErrors,
		p.tokens, p.cost, p.latency, p.ttft, p.appendTime, p.appendErrors, p.wsConns, p.wsDrops,
		p.subDrops, p.rollupWrites, p.rollupDrops, p.rollupErrors, p.httpDuration, newBuildInfo(ReadBuildInfo()),
		busCollector{c.opts.Bus},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "active_chats",
			Help: "Chats with a run in progress."}, func() float64 { return float64(c.activeChats()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "metrics_rollup_queue",
			Help: "Rollups waiting for the writer."}, func() float64 { return float64(len(c.queue)) }),
	}
	for _, x := range cs {
		if err := reg.Register(x); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return p, nil
}

// RegisterRuntime adds the Go runtime and process collectors to the
// collector's registry (a server wants them; tests do not need them).
func (c *Collector) RegisterRuntime() error {
	for _, x := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := c.opts.Registry.Register(x); err != nil {
			return fmt.Errorf("metrics: register runtime: %w", err)
		}
	}
	return nil
}

// busCollector reads bus.Stats at scrape time.
type busCollector struct{ b *bus.Bus }

var busDescs = struct {
	published, handled, duplicates, unmatched, errors, panics, abandoned, waits, broadcasts, drops, pending *prometheus.Desc
}{
	published:  prometheus.NewDesc("baton_bus_events_published_total", "Events the bus accepted.", nil, nil),
	handled:    prometheus.NewDesc("baton_bus_events_handled_total", "Events a rule's handler was called for.", nil, nil),
	duplicates: prometheus.NewDesc("baton_bus_duplicates_total", "Events dropped as already seen.", nil, nil),
	unmatched:  prometheus.NewDesc("baton_bus_unmatched_total", "Events no rule matched.", nil, nil),
	errors:     prometheus.NewDesc("baton_bus_handler_errors_total", "Handlers that returned an error.", nil, nil),
	panics:     prometheus.NewDesc("baton_bus_handler_panics_total", "Handlers that panicked.", nil, nil),
	abandoned:  prometheus.NewDesc("baton_bus_abandoned_total", "Accepted events dropped at shutdown.", nil, nil),
	waits:      prometheus.NewDesc("baton_bus_publish_waits_total", "Times Publish waited for room on a full lane.", nil, nil),
	broadcasts: prometheus.NewDesc("baton_bus_broadcasts_total", "Transient events sent to observers.", nil, nil),
	drops:      prometheus.NewDesc("baton_bus_observer_drops_total", "Observer subscriptions dropped for being slow.", nil, nil),
	pending:    prometheus.NewDesc("baton_bus_pending_events", "Events accepted and not yet handled.", nil, nil),
}

// Describe implements prometheus.Collector.
func (busCollector) Describe(ch chan<- *prometheus.Desc) {
	d := busDescs
	for _, x := range []*prometheus.Desc{d.published, d.handled, d.duplicates, d.unmatched, d.errors, d.panics, d.abandoned, d.waits, d.broadcasts, d.drops, d.pending} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (b busCollector) Collect(ch chan<- prometheus.Metric) {
	s := b.b.Stats()
	d := busDescs
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	counter(d.published, s.Published)
	counter(d.handled, s.Handled)
	counter(d.duplicates, s.Duplicates)
	counter(d.unmatched, s.Unmatched)
	counter(d.errors, s.HandlerErrors)
	counter(d.panics, s.Panics)
	counter(d.abandoned, s.Abandoned)
	counter(d.waits, s.PublishWaits)
	counter(d.broadcasts, s.Broadcasts)
	counter(d.drops, s.ObserverDrops)
	ch <- prometheus.MustNewConstMetric(d.pending, prometheus.GaugeValue, float64(b.b.Pending()))
}

// WSConnected adds delta (+1 on open, -1 on close) to the open WebSocket
// connections. The server calls it; it never blocks.
func (c *Collector) WSConnected(delta int) { c.prom.wsConns.Add(float64(delta)) }

// WSDropped counts a WebSocket stream closed because its client fell
// behind. The server calls it; it never blocks.
func (c *Collector) WSDropped() { c.prom.wsDrops.Inc() }

// TimedRecorder wraps the engine's recorder: it measures every append
// (baton_store_append_seconds) and notes each chat's tenant for the
// collector. It adds a clock read and a map lookup to the run path,
// nothing that can block.
type TimedRecorder struct {
	Next      baton.Recorder
	Collector *Collector
}

var _ baton.Recorder = TimedRecorder{}

var _ baton.ChatCreator = TimedRecorder{}

// CanCreate reports whether Next creates chats with their first events.
func (r TimedRecorder) CanCreate() bool {
	c, ok := r.Next.(baton.ChatCreator)
	return ok && c.CanCreate()
}

// Create creates a chat with its first events through Next and measures
// it as an append; see baton.ChatCreator.
func (r TimedRecorder) Create(ctx context.Context, scope baton.Scope, c baton.Chat, keep *baton.Event, events []baton.Event, u *baton.ChatUpdate, created func(baton.Chat)) (baton.Chat, []baton.Event, error) {
	cr, ok := r.Next.(baton.ChatCreator)
	if !ok {
		return baton.Chat{}, nil, fmt.Errorf("create chat %s: the recorder cannot create chats", c.ID)
	}
	start := time.Now()
	chat, out, err := cr.Create(ctx, scope, c, keep, events, u, func(stored baton.Chat) {
		r.Collector.NoteScope(scope, stored.ID) // once the chat is this tenant's: an id in use may be another's
		if created != nil {
			created(stored)
		}
	})
	r.Collector.prom.appendTime.Observe(time.Since(start).Seconds())
	if err != nil {
		r.Collector.prom.appendErrors.Inc()
	}
	return chat, out, err
}

// Record records through Next and measures it.
func (r TimedRecorder) Record(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	r.Collector.NoteScope(scope, chatID)
	start := time.Now()
	out, err := r.Next.Record(ctx, scope, chatID, events, u)
	r.Collector.prom.appendTime.Observe(time.Since(start).Seconds())
	if err != nil {
		r.Collector.prom.appendErrors.Inc()
	}
	return out, err
}
