// Package metrics watches baton's runs and reports what they cost and how
// fast they go: tokens and cost per chat, agent, model, workflow and app;
// turns and tool calls; model latency and time to first token; bus, store
// and WebSocket health. It serves them as the seeds' performance endpoints
// (/metrics/perf/…) and in the Prometheus format, persists rollups as the
// seeds' workflow_stats, enforces token and cost budgets through the
// engine's budget hook, and, when asked, turns what it sees into
// OpenTelemetry traces.
//
// Everything is learned from the bus: recorded chat.* events (broadcast to
// observers after the store holds them), stream.* deltas (broadcast as the
// model produces them), tool.executed and tool.error, and the engine's
// inputs. A Collector reads one bus subscription from one goroutine it owns;
// nothing it does is on the run path, so a slow or stalled collector never
// delays a run (invariant 9). If the bus drops its subscription for falling
// behind, the collector counts it, logs a warning and subscribes again: the
// events it missed are missing from the in-memory figures (the usage rows
// the engine stores stay the truth for a chat's tokens and cost).
//
// Latencies are observed times: the time between the collector seeing
// stream.start and seeing the first stream.text (time to first token) or
// stream.completed (model latency). They include the bus's delivery delay,
// which is microseconds unless the collector is behind.
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/internal/fastjson"
)

// Defaults of Options.
const (
	DefaultBuffer        = 1 << 16
	DefaultQueue         = 1024
	DefaultFlushInterval = time.Second
	DefaultIdle          = 30 * time.Minute
	DefaultMaxChats      = 10000
)

// patterns are the events the collector observes.
var patterns = []string{
	"chat.*",
	baton.TypeStreamStart, baton.TypeStreamText, baton.TypeStreamCompleted, baton.TypeStreamError,
	baton.TypeToolExecuted, baton.TypeToolError,
	baton.TypeRunStart, baton.TypeRunResume, baton.TypeUserQuery, baton.TypeUIToolResponse,
	baton.TypeSessionCreated,
}

// ChatLookup returns a chat of scope; baton.ChatStore's GetChat is one. The
// collector uses it once per chat, from its own goroutine, to learn the
// chat's workflow.
type ChatLookup func(ctx context.Context, scope baton.Scope, chatID string) (baton.Chat, error)

// Options configure a Collector. Bus is required.
type Options struct {
	Bus *bus.Bus
	// Stats receives the rollups (workflow_stats); nil keeps them in
	// memory only.
	Stats baton.StatsStore
	// Chats finds a chat's workflow; nil leaves rollups without one (they
	// are then not persisted).
	Chats ChatLookup
	// Usage answers the per-chat endpoint and the per-chat budget from the
	// usage rows the engine records (the truth); nil uses the in-memory
	// figures.
	Usage baton.UsageStore
	// Active reports the runs in progress (engine.Engine.Active); nil counts
	// chats with an event in the last minute.
	Active func() int64
	// ActiveIn reports the runs in progress of one tenant, or of an app's
	// users together when the scope's User is "" (engine.Engine.ActiveIn),
	// for /metrics/perf/aggregate; nil counts a tenant's chats with an
	// event in the last minute instead.
	ActiveIn func(baton.Scope) int64
	// Registry is where the Prometheus metrics are registered; nil makes a
	// new one (see Collector.Registry).
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Buffer is the bus subscription's buffer (default DefaultBuffer).
	Buffer int
	// Queue bounds the rollups waiting for the writer (default
	// DefaultQueue); when it is full a rollup stays pending in memory and
	// the drop is counted and logged.
	Queue int
	// FlushInterval is how often changed chats are queued for the writer
	// (default DefaultFlushInterval).
	FlushInterval time.Duration
	// Idle is how long a chat without events stays in memory (default
	// DefaultIdle).
	Idle time.Duration
	// MaxChats bounds the chats kept in memory (default DefaultMaxChats),
	// and the model calls in progress: beyond it the least recently active
	// chat is forgotten at once, its rollup handed to the writer first.
	// Figures of a forgotten chat are then read from the store.
	MaxChats int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Collector keeps the figures. It is safe for concurrent use; Start starts
// its goroutines and Close stops them.
type Collector struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time
	prom *promMetrics

	mu      sync.Mutex
	chats   *lru[*chatAgg]          // by chat id, at most Options.MaxChats
	apps    map[string]*totals      // in-memory totals per app, since Start
	tenants map[baton.Scope]*totals // in-memory totals per tenant (app and user), since Start
	appBase map[string]*appBase     // per-app totals from the store, for budgets
	written map[string]*totals      // what the writer has written, per app
	global  totals
	msgs    *lru[*msgTiming] // open model calls, by message id, at most Options.MaxChats

	scopes sync.Map // chat id -> baton.Scope, noted by TimedRecorder

	queue     chan baton.ChatStats
	writeCtx  context.Context // canceled when Close gives up waiting
	stopWrite context.CancelFunc
	stopLoop  context.CancelFunc
	loopDone  chan struct{}
	writeDone chan struct{}
	started   bool
	closed    bool
}

// totals are sums of observed activity.
type totals struct {
	Turns, ToolCalls, Calls int64
	baton.Usage
	Cost float64
}

func (t *totals) addUsage(u baton.Usage, cost float64) {
	t.Calls++
	t.Usage = t.Usage.Add(u)
	t.Cost += cost
}

// chatAgg is what the collector knows of one chat.
type chatAgg struct {
	id       string
	scope    baton.Scope
	scoped   bool
	workflow string
	looked   bool // the workflow lookup was tried
	all      totals
	agents   map[string]*agentAgg
	pending  baton.ChatStats // deltas not yet handed to the writer
	dirty    bool
	lastSeen time.Time
	gone     bool // put out of memory (cap or idle): c.chats holds a new one if the chat goes on
}

type agentAgg struct {
	totals
	latency, ttft time.Duration // sums
	latN, ttftN   int64
}

// msgTiming is one model call in progress, by message id.
type msgTiming struct {
	chatID, agent        string
	start, first, finish time.Time
}

// appBase is an app's persisted totals as loaded for its budget: the app's
// total is stored - written + the in-memory totals since Start. It is
// loaded again after appBaseRefresh, so that what other instances sharing
// the store recorded counts too (each instance counts only its own events).
type appBase struct {
	stored  totals    // AppStats when loaded
	written totals    // what this process had written for the app by then
	at      time.Time // when loaded
}

// appBaseRefresh is how long an app's loaded totals are trusted.
const appBaseRefresh = 5 * time.Second

// New returns a collector; it observes nothing until Start.
func New(opts Options) (*Collector, error) {
	if opts.Bus == nil {
		return nil, errors.New("metrics: Options.Bus is required")
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.MaxChats <= 0 {
		opts.MaxChats = DefaultMaxChats
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	c := &Collector{
		opts:    opts,
		log:     opts.Logger,
		now:     opts.Now,
		apps:    map[string]*totals{},
		tenants: map[baton.Scope]*totals{},
		appBase: map[string]*appBase{},
		written: map[string]*totals{},
		msgs:    newLRU[*msgTiming](opts.MaxChats, nil),
		queue:   make(chan baton.ChatStats, opts.Queue),
	}
	c.chats = newLRU(opts.MaxChats, c.forget)
	p, err := newPromMetrics(c, opts.Registry)
	if err != nil {
		return nil, err
	}
	c.prom = p
	return c, nil
}

// Registry returns the registry the collector's metrics are in; register
// other collectors there to serve them on the same endpoint.
func (c *Collector) Registry() *prometheus.Registry { return c.opts.Registry }

// Start subscribes to the bus and starts the collector's two goroutines:
// the observer and the rollup writer. Close stops them.
func (c *Collector) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("metrics: collector already started")
	}
	sub, err := c.opts.Bus.Subscribe(patterns, bus.Buffer(c.opts.Buffer))
	if err != nil {
		return fmt.Errorf("metrics: subscribe: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.started, c.stopLoop = true, cancel
	c.writeCtx, c.stopWrite = context.WithCancel(context.Background())
	c.loopDone, c.writeDone = make(chan struct{}), make(chan struct{})
	go c.loop(ctx, sub)
	go c.writer()
	return nil
}

// Close stops observing, queues what changed since the last flush, and
// waits until the writer has written what is queued or ctx is done (then
// the rest is dropped, counted as rollup errors).
func (c *Collector) Close(ctx context.Context) error {
	c.mu.Lock()
	if !c.started || c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.stopLoop()
	<-c.loopDone
	c.flushFinal(ctx)
	close(c.queue)
	select {
	case <-c.writeDone:
		c.stopWrite()
		return nil
	case <-ctx.Done():
		c.stopWrite() // the writer's current and queued writes fail at once
		<-c.writeDone
		return fmt.Errorf("metrics: close: rollups dropped: %w", ctx.Err())
	}
}

// loop is the observer: it owns the subscription and re-subscribes when
// the bus drops it.
func (c *Collector) loop(ctx context.Context, sub *bus.Subscription) {
	defer close(c.loopDone)
	tick := time.NewTicker(c.opts.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// Take what is already buffered (all of it once the bus has
			// closed), then stop.
			for {
				select {
				case ev, ok := <-sub.C():
					if ok {
						c.Observe(ev)
						continue
					}
				default:
				}
				sub.Close()
				return
			}
		case <-tick.C:
			c.flush()
			c.evict()
		case ev, ok := <-sub.C():
			if ok {
				c.Observe(ev)
				continue
			}
			if !errors.Is(sub.Err(), bus.ErrSlowSubscriber) {
				return // the bus closed
			}
			// Logged before counted: whoever sees the count finds the line.
			c.log.Warn("metrics: the bus dropped the collector's subscription (too slow); events were missed, subscribing again", "buffer", c.opts.Buffer)
			c.prom.subDrops.Inc()
			next, err := c.opts.Bus.Subscribe(patterns, bus.Buffer(c.opts.Buffer))
			if err != nil {
				c.log.Warn("metrics: subscribe again failed; metrics stop", "err", err)
				return
			}
			sub = next
		}
	}
}

// payload holds the fields the collector reads from any observed event.
type payload struct {
	Agent          string  `json:"agent"`
	Model          string  `json:"model"`
	AgentMessageID string  `json:"agent_message_id"`
	MessageID      string  `json:"message_id"`
	Prompt         int64   `json:"prompt_tokens"`
	Completion     int64   `json:"completion_tokens"`
	Cached         int64   `json:"cached_tokens"`
	Reasoning      int64   `json:"reasoning_tokens"`
	Cost           float64 `json:"cost"`
	Source         string  `json:"source"`
	Synthetic      bool    `json:"_synthetic"`
	Status         string  `json:"status"`
	ToolName       string  `json:"tool_name"`
	DurationMS     float64 `json:"duration_ms"`
	Workflow       string  `json:"workflow"`
	Code           string  `json:"code"`
}

// Observe folds one event into the figures. The collector's goroutine
// calls it for every event it receives; it is exported for tests and
// benchmarks that feed events directly. Another instance's events
// (bus.Remote) are skipped: with several instances, each counts and rolls
// up what it recorded, and the figures add up across them.
func (c *Collector) Observe(ev baton.Event) {
	if bus.Remote(ev) {
		return // counted by the instance that recorded it
	}
	c.prom.observed.Inc()
	now := c.now()
	chatID := ev.ChatID()
	switch ev.Type {
	case baton.TypeStreamText:
		// The hottest event: only its message id matters.
		id := messageID(ev.Payload)
		c.mu.Lock()
		if m, _ := c.msgs.peek(id); m != nil && m.first.IsZero() {
			m.first = now
		}
		c.mu.Unlock()
		return
	case baton.TypeSessionCreated:
		// A new chat: its workflow is in the event, so the chat need not
		// be looked up in the store (a read per new chat, on SQLite about
		// 3% of a turn's CPU). Published before the chat's first recorded
		// event.
		var p struct {
			Workflow string `json:"workflow"`
		}
		_ = fastjson.Unmarshal(ev.Payload, &p)
		scope := ev.Metadata.Scope()
		c.mu.Lock()
		ch := c.chat(chatID, now)
		c.setScope(ch, scope)
		if p.Workflow != "" && ch.scoped && !ch.looked && ch.scope == scope {
			ch.looked = true
			ch.workflow, ch.pending.Workflow = p.Workflow, p.Workflow
		}
		c.mu.Unlock()
		return
	case baton.TypeRunStart:
		// Nothing to count: the chat may not exist yet (the run of a
		// run.start creates it in its first append; its id may even be
		// another tenant's, which the store then refuses), and its
		// session.created tells its scope and workflow.
		return
	case baton.TypeRunResume, baton.TypeUserQuery, baton.TypeUIToolResponse:
		scope := ev.Metadata.Scope()
		c.mu.Lock()
		ch := c.chat(chatID, now)
		c.setScope(ch, scope)
		c.mu.Unlock()
		c.resolve(ch)
		return
	}
	var p payload
	if len(ev.Payload) > 0 && readsPayload(ev.Type) {
		// fastjson: encoding/json's answer at about half its cost (the
		// collector reads every event of every chat).
		_ = fastjson.Unmarshal(ev.Payload, &p) // a payload of another shape yields zero fields
	}
	switch ev.Type {
	case baton.TypeStreamStart:
		c.mu.Lock()
		c.msgs.put(p.MessageID, &msgTiming{chatID: chatID, agent: p.Agent, start: now})
		c.mu.Unlock()
		return
	case baton.TypeStreamCompleted:
		c.mu.Lock()
		if m, _ := c.msgs.peek(p.MessageID); m != nil {
			m.finish = now
		}
		c.mu.Unlock()
		return
	case baton.TypeStreamError:
		c.mu.Lock()
		c.msgs.delete(p.MessageID)
		c.mu.Unlock()
		c.prom.modelErrors.Inc()
		return
	case baton.TypeToolExecuted, baton.TypeToolError:
		status := p.Status
		if status == "" {
			status = baton.ToolStatusOK
			if ev.Type == baton.TypeToolError {
				status = baton.ToolStatusError
			}
		}
		c.prom.toolCalls.WithLabelValues(label(p.ToolName), label(status)).Inc()
		c.prom.toolDuration.WithLabelValues(label(p.ToolName)).Observe(p.DurationMS / 1000)
		return
	}
	if !baton.IsChatType(ev.Type) {
		return
	}

	c.mu.Lock()
	ch := c.chat(chatID, now)
	if !ch.scoped {
		if s, ok := c.scopes.Load(chatID); ok {
			c.setScope(ch, s.(baton.Scope))
		}
	}
	lookup := ch.scoped && !ch.looked
	c.mu.Unlock()
	if lookup {
		c.resolve(ch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.gone { // put out while the lock was released: count in the chat's new aggregate
		ch = c.chat(chatID, now)
	}
	wf := label(ch.workflow)
	switch ev.Type {
	case baton.TypeChatSelectSpeaker:
		if p.Synthetic || p.Source == "synthetic" {
			c.prom.synthetic.WithLabelValues(wf).Inc()
			return
		}
		c.prom.turns.WithLabelValues(wf).Inc()
		c.global.Turns++
		ch.all.Turns++
		ch.pending.Turns++
		a := ch.agent(p.Agent)
		a.Turns++
		ch.pendingAgent(p.Agent).Turns++
		for _, t := range []*totals{c.app(ch), c.tenant(ch)} {
			if t != nil {
				t.Turns++
			}
		}
		ch.dirty = true
	case baton.TypeChatToolResponse:
		c.global.ToolCalls++
		ch.all.ToolCalls++
		ch.pending.ToolCalls++
		ch.agent(p.Agent).ToolCalls++
		ch.pendingAgent(p.Agent).ToolCalls++
		for _, t := range []*totals{c.app(ch), c.tenant(ch)} {
			if t != nil {
				t.ToolCalls++
			}
		}
		ch.dirty = true
	case baton.TypeChatUsageSummary:
		u := baton.Usage{PromptTokens: p.Prompt, CompletionTokens: p.Completion, CachedTokens: p.Cached, ReasoningTokens: p.Reasoning}
		model := label(p.Model)
		c.prom.modelCalls.WithLabelValues(model).Inc()
		c.prom.tokens.WithLabelValues(model, "prompt").Add(float64(u.PromptTokens))
		c.prom.tokens.WithLabelValues(model, "completion").Add(float64(u.CompletionTokens))
		c.prom.tokens.WithLabelValues(model, "cached").Add(float64(u.CachedTokens))
		c.prom.tokens.WithLabelValues(model, "reasoning").Add(float64(u.ReasoningTokens))
		c.prom.cost.WithLabelValues(model).Add(p.Cost)
		c.global.addUsage(u, p.Cost)
		ch.all.addUsage(u, p.Cost)
		ch.pending.Calls++
		ch.pending.Usage = ch.pending.Usage.Add(u)
		ch.pending.Cost += p.Cost
		a := ch.agent(p.Agent)
		a.addUsage(u, p.Cost)
		pa := ch.pendingAgent(p.Agent)
		pa.Calls++
		pa.Usage = pa.Usage.Add(u)
		pa.Cost += p.Cost
		for _, t := range []*totals{c.app(ch), c.tenant(ch)} {
			if t != nil {
				t.addUsage(u, p.Cost)
			}
		}
		ch.dirty = true
		if m, _ := c.msgs.peek(p.AgentMessageID); m != nil {
			c.msgs.delete(p.AgentMessageID)
			end := m.finish
			if end.IsZero() {
				end = now
			}
			lat := end.Sub(m.start)
			c.prom.latency.WithLabelValues(model).Observe(lat.Seconds())
			a.latency += lat
			a.latN++
			if !m.first.IsZero() {
				ttft := m.first.Sub(m.start)
				c.prom.ttft.WithLabelValues(model).Observe(ttft.Seconds())
				a.ttft += ttft
				a.ttftN++
			}
		}
	case baton.TypeChatRunComplete:
		c.prom.runs.WithLabelValues(wf, label(p.Status)).Inc()
	case baton.TypeChatError:
		c.prom.runs.WithLabelValues(wf, "error").Inc()
	}
}

// readsPayload reports whether Observe reads the payload of an event of
// type typ: other events (a chat's texts and tool calls, the bulk of its
// bytes) only mark the chat active, and decoding them was a tenth of the
// collector's time.
func readsPayload(typ string) bool {
	switch typ {
	case baton.TypeStreamStart, baton.TypeStreamCompleted, baton.TypeStreamError,
		baton.TypeToolExecuted, baton.TypeToolError,
		baton.TypeChatSelectSpeaker, baton.TypeChatToolResponse, baton.TypeChatUsageSummary, baton.TypeChatRunComplete:
		return true
	}
	return false
}

// messageID reads the message id of a stream.* payload, which
// llm.StreamEvent always writes first; other shapes are decoded.
func messageID(b []byte) string {
	const prefix = `{"message_id":"`
	if len(b) > len(prefix) && string(b[:len(prefix)]) == prefix {
		rest := b[len(prefix):]
		for i, ch := range rest {
			if ch == '\\' {
				break // escaped: decode properly
			}
			if ch == '"' {
				return string(rest[:i])
			}
		}
	}
	var p struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(b, &p)
	return p.MessageID
}

// label bounds a label value: empty becomes "unknown", long values are cut.
func label(s string) string {
	switch {
	case s == "":
		return "unknown"
	case len(s) > 64:
		return s[:64]
	}
	return s
}

// chat returns the chat's aggregate, creating it. c.mu is held.
func (c *Collector) chat(id string, now time.Time) *chatAgg {
	ch, _ := c.chats.get(id)
	if ch == nil {
		ch = &chatAgg{id: id, agents: map[string]*agentAgg{}, pending: baton.ChatStats{ChatID: id}}
		c.chats.put(id, ch)
	}
	ch.lastSeen = now
	return ch
}

// forget is called when the chat cap puts a chat out of memory: its rollup
// not yet handed to the writer is handed now, if the queue has room (else
// it is dropped, counted and logged like any rollup the queue refuses).
// c.mu is held.
func (c *Collector) forget(id string, ch *chatAgg) {
	ch.gone = true
	c.scopes.Delete(id)
	if !ch.dirty || ch.pending.App == "" || ch.pending.Workflow == "" || c.opts.Stats == nil {
		return
	}
	select {
	case c.queue <- ch.pending:
	default:
		c.prom.rollupDrops.Inc()
		c.log.Warn("metrics: rollup queue full; the rollup of a chat put out of memory (Options.MaxChats) is dropped", "chat_id", id, "queue", cap(c.queue))
	}
}

// setScope attributes the chat to its tenant; in-memory totals observed
// before are added to the app's. c.mu is held.
func (c *Collector) setScope(ch *chatAgg, scope baton.Scope) {
	if ch.scoped || scope.App == "" {
		return
	}
	ch.scope, ch.scoped = scope, true
	ch.pending.App = scope.App
	t := c.apps[scope.App]
	if t == nil {
		t = &totals{}
		c.apps[scope.App] = t
	}
	u := c.tenants[scope]
	if u == nil {
		u = &totals{}
		c.tenants[scope] = u
	}
	for _, t := range []*totals{t, u} {
		t.Turns += ch.all.Turns
		t.ToolCalls += ch.all.ToolCalls
		t.Calls += ch.all.Calls
		t.Usage = t.Usage.Add(ch.all.Usage)
		t.Cost += ch.all.Cost
	}
}

// tenant returns the totals of the chat's tenant (app and user), nil when
// it is not known yet. c.mu is held.
func (c *Collector) tenant(ch *chatAgg) *totals {
	if !ch.scoped {
		return nil
	}
	return c.tenants[ch.scope]
}

// app returns the totals of the chat's app, nil when it is not known yet.
// c.mu is held.
func (c *Collector) app(ch *chatAgg) *totals {
	if !ch.scoped {
		return nil
	}
	return c.apps[ch.scope.App]
}

func (ch *chatAgg) agent(name string) *agentAgg {
	name = label(name)
	a := ch.agents[name]
	if a == nil {
		a = &agentAgg{}
		ch.agents[name] = a
	}
	return a
}

// pendingAgent returns the agent's not-yet-written delta.
func (ch *chatAgg) pendingAgent(name string) *baton.AgentStats {
	name = label(name)
	for i := range ch.pending.Agents {
		if ch.pending.Agents[i].Agent == name {
			return &ch.pending.Agents[i]
		}
	}
	ch.pending.Agents = append(ch.pending.Agents, baton.AgentStats{Agent: name})
	return &ch.pending.Agents[len(ch.pending.Agents)-1]
}

// resolve looks up the chat's workflow once, outside c.mu.
func (c *Collector) resolve(ch *chatAgg) {
	c.mu.Lock()
	if ch.looked || !ch.scoped || c.opts.Chats == nil {
		c.mu.Unlock()
		return
	}
	ch.looked = true
	scope, id := ch.scope, ch.id
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	chat, err := c.opts.Chats(ctx, scope, id)
	if err != nil {
		c.log.Debug("metrics: chat lookup", "chat_id", id, "err", err)
		if errors.Is(err, baton.ErrNotFound) {
			// Not created yet: the run of a run.start creates its chat in
			// its first append, and session.created (or the next event)
			// tells the workflow then.
			c.mu.Lock()
			ch.looked = false
			c.mu.Unlock()
		}
		return
	}
	c.mu.Lock()
	ch.workflow = chat.Workflow
	ch.pending.Workflow = chat.Workflow
	c.mu.Unlock()
}

// flush hands every changed chat's delta to the writer. A full queue
// leaves the delta pending (it goes with the next flush) and counts a drop.
func (c *Collector) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.chats.all() {
		if !ch.dirty {
			continue
		}
		if ch.pending.App == "" || ch.pending.Workflow == "" || c.opts.Stats == nil {
			if c.opts.Stats == nil {
				ch.dirty = false
			}
			continue // not attributable (yet): kept in memory only
		}
		select {
		case c.queue <- ch.pending:
			ch.pending = baton.ChatStats{App: ch.pending.App, Workflow: ch.pending.Workflow, ChatID: ch.id}
			ch.dirty = false
		default:
			c.prom.rollupDrops.Inc()
			c.log.Warn("metrics: rollup queue full; the chat's rollup waits for the next flush", "chat_id", ch.id, "queue", cap(c.queue))
		}
	}
}

// flushFinal hands every changed chat's delta to the writer, waiting for
// room in the queue until ctx is done (then the rest is dropped, counted).
func (c *Collector) flushFinal(ctx context.Context) {
	c.mu.Lock()
	var out []baton.ChatStats
	for _, ch := range c.chats.all() {
		if ch.dirty && ch.pending.App != "" && ch.pending.Workflow != "" && c.opts.Stats != nil {
			out = append(out, ch.pending)
			ch.pending = baton.ChatStats{App: ch.pending.App, Workflow: ch.pending.Workflow, ChatID: ch.id}
		}
		ch.dirty = false
	}
	c.mu.Unlock()
	for i, d := range out {
		select {
		case c.queue <- d:
		case <-ctx.Done():
			c.prom.rollupDrops.Add(float64(len(out) - i))
			c.log.Warn("metrics: closing: rollups dropped", "count", len(out)-i, "err", ctx.Err())
			return
		}
	}
}

// evict forgets chats idle for longer than Options.Idle whose rollups
// were handed to the writer, and model calls never finished.
func (c *Collector) evict() {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, ch := range c.chats.all() {
		if !ch.dirty && now.Sub(ch.lastSeen) > c.opts.Idle {
			c.chats.delete(id)
			ch.gone = true
			c.scopes.Delete(id)
		}
	}
	for id, m := range c.msgs.all() {
		if now.Sub(m.start) > c.opts.Idle {
			c.msgs.delete(id)
		}
	}
}

// writerBatch bounds the rollups the writer has in flight at once.
const writerBatch = 64

// writer drains the rollup queue into the store. The rollups waiting
// together (a flush queues every changed chat's at once) are written
// concurrently, up to writerBatch, so that a store with group commit (SQLite,
// PostgreSQL) commits them together: one at a time, a flush of N chats was N
// commits, each an fsync, one more commit per chat than its turns need.
// Rollups only add, so their order does not matter, even two of one chat.
func (c *Collector) writer() {
	defer close(c.writeDone)
	batch := make([]baton.ChatStats, 0, writerBatch)
	var wg sync.WaitGroup
	for d := range c.queue {
		batch = append(batch[:0], d)
	more:
		for len(batch) < writerBatch {
			select {
			case d, ok := <-c.queue:
				if !ok {
					break more
				}
				batch = append(batch, d)
			default:
				break more
			}
		}
		if len(batch) == 1 {
			c.write(batch[0])
			continue
		}
		for _, d := range batch {
			wg.Go(func() { c.write(d) })
		}
		wg.Wait()
	}
}

// write adds one rollup to the store and to the totals written.
func (c *Collector) write(d baton.ChatStats) {
	ctx, cancel := context.WithTimeout(c.writeCtx, 30*time.Second)
	err := c.opts.Stats.AddChatStats(ctx, d)
	cancel()
	if err != nil {
		c.prom.rollupErrors.Inc()
		c.log.Warn("metrics: rollup write failed; the delta is lost from workflow_stats", "chat_id", d.ChatID, "err", err)
		return
	}
	c.prom.rollupWrites.Inc()
	c.mu.Lock()
	w := c.written[d.App]
	if w == nil {
		w = &totals{}
		c.written[d.App] = w
	}
	w.Turns += d.Turns
	w.ToolCalls += d.ToolCalls
	w.Calls += d.Calls
	w.Usage = w.Usage.Add(d.Usage)
	w.Cost += d.Cost
	c.mu.Unlock()
}

// NoteScope records the tenant of a chat; TimedRecorder calls it before
// each append so that events whose input the collector missed are still
// attributed. It is cheap and never blocks.
func (c *Collector) NoteScope(scope baton.Scope, chatID string) {
	if _, ok := c.scopes.Load(chatID); !ok {
		c.scopes.Store(chatID, scope)
	}
}
