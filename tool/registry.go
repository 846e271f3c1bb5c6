package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/suggest"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton"
)

// Defaults of the registry options.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxOutput      = 64 << 10 // bytes of content the model gets
	DefaultMaxConcurrency = 16       // calls of one tool at once
)

// Publisher receives the tool.executed and tool.error events. *bus.Bus
// satisfies it.
type Publisher interface {
	Publish(ctx context.Context, ev baton.Event) error
}

// Option configures a Registry.
type Option func(*options)

type options struct {
	funcs       map[string]baton.Tool
	servers     map[string]MCPServer
	ledger      baton.EffectLedger
	claimant    Claimant
	pub         Publisher
	log         *slog.Logger
	timeout     time.Duration
	maxOutput   int
	concurrency int
	httpClient  *http.Client
	traceCtx    func(chatID, toolCallID string) trace.SpanContext
}

// WithFuncs registers Go tools (see [Func]) by name, for tools.json entries
// of kind go whose function is that name.
func WithFuncs(tools ...baton.Tool) Option {
	return func(o *options) {
		for _, t := range tools {
			o.funcs[t.Name()] = t
		}
	}
}

// WithMCPServers gives the workflow's mcp_servers, by name.
func WithMCPServers(servers map[string]MCPServer) Option {
	return func(o *options) { maps.Copy(o.servers, servers) }
}

// WithLedger sets the effect ledger that side_effects tools run through. A
// registry with such a tool and no ledger is an error.
func WithLedger(l baton.EffectLedger) Option { return func(o *options) { o.ledger = l } }

// WithClaimant sets who claims effects in the ledger and how a claim's gone
// holder is recognised (see Once). Without it claims name no holder and
// only their age decides.
func WithClaimant(c Claimant) Option { return func(o *options) { o.claimant = c } }

// WithPublisher sets where tool.executed and tool.error events go.
func WithPublisher(p Publisher) Option { return func(o *options) { o.pub = p } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithTimeout sets the timeout of tools whose spec sets none.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMaxOutput sets how many bytes of content a call may return; more is
// cut and marked as truncated.
func WithMaxOutput(n int) Option { return func(o *options) { o.maxOutput = n } }

// WithConcurrency sets how many calls of one tool may run at once, for tools
// whose spec sets no MaxConcurrency.
func WithConcurrency(n int) Option { return func(o *options) { o.concurrency = n } }

// WithHTTPClient sets the client of http tools and of MCP servers reached
// over HTTP (default: a client with no timeout of its own; each call has one).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// Registry holds the tools of one workflow. It is safe for concurrent use.
// Close it to stop the MCP servers it started.
type Registry struct {
	dir  string
	opts options
	log  *slog.Logger

	entries []*entry // every non-mcp tool, in tools.json order
	mcpSpec []Spec   // mcp entries, expanded lazily
	conns   map[string]*mcpConn

	mu       sync.Mutex
	expanded map[int][]*entry // index into mcpSpec → its tools
	closed   bool

	flights flightGroup
}

// New builds the registry of the workflow in dir (the folder holding
// tools.json; command tools live in dir/tools/) from its tool specs. It
// checks every spec — a command's file exists and is executable, a go
// function is registered, an mcp server is declared, every schema compiles —
// and reports the first problem as an EINVALID error naming the tool. MCP
// servers are not started until a tool of theirs is needed.
func New(dir string, specs []Spec, opts ...Option) (*Registry, error) {
	o := options{
		funcs:       map[string]baton.Tool{},
		servers:     map[string]MCPServer{},
		timeout:     DefaultTimeout,
		maxOutput:   DefaultMaxOutput,
		concurrency: DefaultMaxConcurrency,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.httpClient == nil {
		o.httpClient = &http.Client{}
	}
	r := &Registry{
		dir:      dir,
		opts:     o,
		log:      o.log,
		conns:    map[string]*mcpConn{},
		expanded: map[int][]*entry{},
	}
	for name, srv := range o.servers {
		if srv.Command == "" && srv.URL == "" && srv.Transport == nil {
			return nil, baton.Errorf(baton.EINVALID, "mcp_servers.%s: needs a command or a url", name)
		}
		r.conns[name] = newMCPConn(name, srv, dir, o.httpClient, r.log)
	}
	seen := map[string]bool{}
	for i := range specs {
		s := specs[i]
		if s.ToolType == "" {
			s.ToolType = TypeAgent
		}
		if s.Kind == "" {
			s.Kind = inferKind(&s, o.funcs)
		}
		where := fmt.Sprintf("tools[%d] (%s)", i, s.toolName())
		switch s.ToolType {
		case TypeAgent, TypeUI, TypeLifecycle:
		default:
			return nil, baton.Errorf(baton.EINVALID, "%s: tool_type %q is not one of %s, %s, %s", where, s.ToolType, TypeAgent, TypeUI, TypeLifecycle)
		}
		if s.Kind == KindMCP {
			if _, ok := r.conns[s.Server]; !ok {
				return nil, baton.Errorf(baton.EINVALID, "%s: mcp server %q is not declared in mcp_servers", where, s.Server)
			}
			r.mcpSpec = append(r.mcpSpec, s)
			continue
		}
		if s.toolName() == "" {
			return nil, baton.Errorf(baton.EINVALID, "%s: needs a name or a function", where)
		}
		key := s.Agent + "\x00" + s.toolName()
		if seen[key] {
			return nil, baton.Errorf(baton.EINVALID, "%s: agent %q has two tools named %q", where, s.Agent, s.toolName())
		}
		seen[key] = true
		inner, err := r.build(&s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		e, err := r.newEntry(s, inner)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		r.entries = append(r.entries, e)
	}
	for _, s := range append(slices.Clone(r.mcpSpec), specsOf(r.entries)...) {
		if s.SideEffects && o.ledger == nil {
			return nil, baton.Errorf(baton.EINVALID, "tool %s has side_effects but the registry has no effect ledger", s.toolName())
		}
	}
	return r, nil
}

// CheckFuncs checks that every go tool of specs has its function among the
// Go functions opts register (WithFuncs): the check New makes, without
// building anything. A runtime calls it when it opens, so that a missing or
// misnamed function is an error at start rather than at a workflow's first
// chat. The error is EINVALID and names every such tool (its place in
// tools.json, its name and the function), with the registered name closest
// to the missing one.
func CheckFuncs(specs []Spec, opts ...Option) error {
	o := options{funcs: map[string]baton.Tool{}, servers: map[string]MCPServer{}}
	for _, opt := range opts {
		opt(&o)
	}
	var msgs []string
	for i, s := range specs {
		if s.ToolType == "" {
			s.ToolType = TypeAgent
		}
		if s.Kind == "" {
			s.Kind = inferKind(&s, o.funcs)
		}
		if s.Kind != KindGo {
			continue
		}
		fname := s.Function
		if fname == "" {
			fname = s.Name
		}
		if _, ok := o.funcs[fname]; !ok {
			msgs = append(msgs, fmt.Sprintf("tools[%d] (%s): %s", i, s.toolName(), baton.ErrorMessage(unregistered(fname, o.funcs))))
		}
	}
	if len(msgs) > 0 {
		return baton.Errorf(baton.EINVALID, "%s", strings.Join(msgs, "; "))
	}
	return nil
}

// unregistered is the error of a go tool whose function is not among funcs.
func unregistered(fname string, funcs map[string]baton.Tool) error {
	msg := fmt.Sprintf("go function %q is not registered (register it with tool.WithFuncs", fname)
	best, bestD := "", len(fname)/3+2
	for _, name := range slices.Sorted(maps.Keys(funcs)) {
		if d := suggest.Distance(strings.ToLower(fname), strings.ToLower(name)); d < bestD {
			best, bestD = name, d
		}
	}
	if best != "" {
		msg += "; did you mean " + strconv.Quote(best) + "?"
	}
	return baton.Errorf(baton.EINVALID, "%s)", msg)
}

func specsOf(es []*entry) []Spec {
	out := make([]Spec, len(es))
	for i, e := range es {
		out[i] = e.spec
	}
	return out
}

func inferKind(s *Spec, funcs map[string]baton.Tool) string {
	switch {
	case s.ToolType == TypeUI:
		return KindUI
	case s.Server != "":
		return KindMCP
	case s.URL != "":
		return KindHTTP
	case s.A2A.CardURL != "":
		return KindA2A
	case funcs[s.Function] != nil && s.Function != "":
		return KindGo
	case s.File != "":
		return KindCommand
	}
	return KindGo
}

// build makes the kind-specific tool of a spec.
func (r *Registry) build(s *Spec) (baton.Tool, error) {
	switch s.Kind {
	case KindGo:
		fname := s.Function
		if fname == "" {
			fname = s.Name
		}
		t, ok := r.opts.funcs[fname]
		if !ok {
			return nil, unregistered(fname, r.opts.funcs)
		}
		return renamed{Tool: t, name: s.toolName(), desc: s.Description}, nil
	case KindCommand:
		return newCommandTool(r, s)
	case KindHTTP:
		return newHTTPTool(r, s)
	case KindUI:
		return newUITool(s)
	case KindA2A:
		// A message to a remote agent acts on the world: it goes through
		// the effect ledger, its id derived from the effect key.
		s.SideEffects = true
		return newA2ATool(r, s)
	}
	return nil, baton.Errorf(baton.EINVALID, "kind %q is not one of go, command, http, mcp, ui", s.Kind)
}

// renamed gives a registered Go tool the name and description of its spec.
type renamed struct {
	baton.Tool
	name, desc string
}

func (t renamed) Name() string { return t.name }
func (t renamed) Description() string {
	if t.desc != "" {
		return t.desc
	}
	return t.Tool.Description()
}

// Tools returns the tools offered to the model of agent: its Agent_Tool and
// UI_Tool entries, with the tools of its MCP servers (starting those servers
// if needed). The returned tools run the registry's whole call path.
func (r *Registry) Tools(ctx context.Context, agent string) ([]baton.Tool, error) {
	return r.collect(ctx, func(s *Spec) bool {
		return s.Agent == agent && s.ToolType != TypeLifecycle
	})
}

// Lifecycle returns the Lifecycle_Tool entries for trigger that apply to
// agent (those of the agent and those with no agent).
func (r *Registry) Lifecycle(ctx context.Context, trigger, agent string) ([]baton.Tool, error) {
	return r.collect(ctx, func(s *Spec) bool {
		return s.ToolType == TypeLifecycle && s.Trigger == trigger && (s.Agent == "" || s.Agent == agent)
	})
}

// Tool returns the tool named name among agent's tools (see Tools); an
// unknown name is ENOTFOUND.
func (r *Registry) Tool(ctx context.Context, agent, name string) (baton.Tool, error) {
	tools, err := r.Tools(ctx, agent)
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		if t.Name() == name {
			return t, nil
		}
	}
	return nil, baton.Errorf(baton.ENOTFOUND, "agent %s has no tool %q", agent, name)
}

func (r *Registry) collect(ctx context.Context, want func(*Spec) bool) ([]baton.Tool, error) {
	var out []baton.Tool
	for _, e := range r.entries {
		if want(&e.spec) {
			out = append(out, e)
		}
	}
	for i := range r.mcpSpec {
		if !want(&r.mcpSpec[i]) {
			continue
		}
		es, err := r.expandMCP(ctx, i)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out = append(out, e)
		}
	}
	return out, nil
}

// expandMCP lists the tools of an mcp entry's server once and keeps them.
func (r *Registry) expandMCP(ctx context.Context, i int) ([]*entry, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, baton.ErrClosed
	}
	if es, ok := r.expanded[i]; ok {
		r.mu.Unlock()
		return es, nil
	}
	r.mu.Unlock()

	s := r.mcpSpec[i]
	conn := r.conns[s.Server]
	// Starting a server (npx may download it first) and listing its tools
	// is bounded like a call.
	lctx, cancel := context.WithTimeout(ctx, max(s.timeout(r.opts.timeout), r.opts.timeout))
	defer cancel()
	remote, err := conn.listTools(lctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*mcpToolInfo{}
	for _, t := range remote {
		byName[t.name] = t
	}
	names := s.Tools
	if len(names) == 0 {
		for _, t := range remote {
			names = append(names, t.name)
		}
	}
	var es []*entry
	for _, n := range names {
		info, ok := byName[n]
		if !ok {
			return nil, baton.Errorf(baton.EINVALID, "mcp server %s has no tool %q", s.Server, n)
		}
		ts := s
		ts.Name = s.Prefix + n
		if ts.Description == "" || len(names) > 1 {
			ts.Description = info.description
		}
		e, err := r.newEntry(ts, &mcpTool{conn: conn, remote: n, name: ts.Name, desc: ts.Description, schema: info.schema})
		if err != nil {
			// A schema our validator cannot compile: the server validates
			// its own arguments, so the tool is kept without ours.
			r.log.Warn("mcp tool schema does not compile; arguments are not validated before the call",
				slog.String("server", s.Server), slog.String("tool", n), slog.Any("err", err))
			e, _ = r.newEntry(ts, &mcpTool{conn: conn, remote: n, name: ts.Name, desc: ts.Description, schema: json.RawMessage(`{"type":"object"}`)})
		}
		es = append(es, e)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.expanded[i]; ok {
		return prev, nil
	}
	r.expanded[i] = es
	return es, nil
}

// Close stops the MCP servers the registry started. Calls after Close fail
// with baton.ErrClosed.
func (r *Registry) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	var errs []error
	for _, c := range r.conns {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// entry is a tool as the registry runs it: the kind's tool plus the checks
// and limits of its spec. It is the baton.Tool callers get.
type entry struct {
	reg     *Registry
	spec    Spec
	inner   baton.Tool
	params  json.RawMessage
	schema  *schema
	timeout time.Duration
	sem     chan struct{}
	secrets []string // the names of the secrets the tool declares
}

func (r *Registry) newEntry(s Spec, inner baton.Tool) (*entry, error) {
	params := inner.Parameters()
	sch, err := compileSchema(params)
	if err != nil {
		return nil, baton.Errorf(baton.EINVALID, "parameters: %w", err)
	}
	n := s.MaxConcurrency
	if n <= 0 {
		n = r.opts.concurrency
	}
	return &entry{
		reg:     r,
		spec:    s,
		inner:   inner,
		params:  params,
		schema:  sch,
		timeout: s.timeout(r.opts.timeout),
		sem:     make(chan struct{}, n),
		secrets: s.declaredSecrets(),
	}, nil
}

// Name returns the tool's name.
func (e *entry) Name() string { return e.inner.Name() }

// Description returns the tool's description.
func (e *entry) Description() string { return e.inner.Description() }

// Parameters returns the JSON Schema of the tool's arguments.
func (e *entry) Parameters() json.RawMessage { return e.params }

// Call runs the tool through the registry's call path (see the package doc).
func (e *entry) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	return e.reg.call(ctx, e, cc, args)
}

// Spec returns the tools.json entry the tool was built from (for an MCP
// tool, with Name set to the tool's name).
func (e *entry) Spec() Spec { return e.spec }

// Abandoner is a tool that can be told the engine gave up on a call that
// asks the person (baton.ToolStatusInputRequired) — it asked
// engine.MaxToolInputRounds times — so that it can end what waits on the
// remote side (an a2a tool cancels the remote task). resume is the
// tool's state from its last question. It is best effort: it returns
// nothing, and should return soon when ctx ends.
type Abandoner interface {
	Abandon(ctx context.Context, cc *baton.CallContext, resume json.RawMessage)
}

// Abandon passes the engine's giving up on a call to the tool, when it is
// an Abandoner.
func (e *entry) Abandon(ctx context.Context, cc *baton.CallContext, resume json.RawMessage) {
	inner := e.inner
	if r, ok := inner.(renamed); ok {
		inner = r.Tool // a Go tool under its tools.json name
	}
	if a, ok := inner.(Abandoner); ok {
		a.Abandon(ctx, cc, resume)
	}
}

// SpecOf returns the spec a registry tool was built from, and false for a
// tool that did not come from a Registry.
func SpecOf(t baton.Tool) (Spec, bool) {
	e, ok := t.(*entry)
	if !ok {
		return Spec{}, false
	}
	return e.spec, true
}

var errTimeout = errors.New("tool call timed out")

func (r *Registry) call(ctx context.Context, e *entry, cc *baton.CallContext, args json.RawMessage) (res baton.ToolResult, err error) {
	start := time.Now()
	var c baton.CallContext
	if cc != nil {
		c = *cc
	}
	if c.EffectKey == "" && c.ToolCallID != "" {
		c.EffectKey = baton.EffectKey(c.ChatID, c.TurnKey, c.ToolCallID)
	}
	if c.Vars == nil {
		c.Vars = baton.NewContextVars(nil)
	}
	replayed := false
	defer func() { r.publish(ctx, e, &c, res, err, replayed, time.Since(start)) }()

	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if msg := e.schema.validate(args); msg != "" {
		return errorResult("invalid arguments for tool %s: %s", e.Name(), msg), nil
	}
	// The tool gets only the secrets it declares, and every secret of the
	// chat is redacted from what it returns before that is recorded (in
	// the effect ledger too), published or logged: a tool that echoes a
	// key must not put it into the history.
	red := newRedactor(c.Secrets)
	c.Secrets = secretsFor(e.secrets, c.Secrets)
	runRedacted := func(ctx context.Context) (baton.ToolResult, error) {
		res, err := r.run(ctx, e, &c, args)
		return red.result(res), red.error(err)
	}
	if !e.spec.SideEffects {
		return runRedacted(ctx)
	}
	if c.ChatID == "" || c.TurnKey == "" || c.ToolCallID == "" {
		return baton.ToolResult{}, baton.Errorf(baton.EINVALID, "tool %s has side effects: the call needs a chat id, a turn key and a tool-call id", e.Name())
	}
	scope := baton.Scope{App: c.App, User: c.User}
	res, replayed, err = r.flights.do(ctx, c.EffectKey, func() (baton.ToolResult, bool, error) {
		return Once(ctx, r.opts.ledger, scope, c.ChatID, c.EffectKey, e.timeout+pendingGrace, r.opts.claimant, c.Recovery, runRedacted)
	})
	return res, err
}

// run calls the tool with its concurrency limit, timeout, panic containment
// and output cap.
func (r *Registry) run(parent context.Context, e *entry, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	ctx, cancel := context.WithTimeoutCause(parent, e.timeout, errTimeout)
	defer cancel()
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		if parent.Err() != nil {
			return baton.ToolResult{}, fmt.Errorf("tool %s: waiting for a free slot: %w", e.Name(), parent.Err())
		}
		return errorResult("tool %s timed out after %s waiting for a free slot (%d calls running)", e.Name(), e.timeout, cap(e.sem)), nil
	}
	defer func() { <-e.sem }()

	res, err := e.safeCall(r.traceContext(ctx, cc), cc, args)
	if parent.Err() != nil {
		// The caller gave up: the outcome is not a result for the model.
		return baton.ToolResult{}, fmt.Errorf("tool %s: %w", e.Name(), parent.Err())
	}
	if context.Cause(ctx) == errTimeout {
		return errorResult("tool %s timed out after %s", e.Name(), e.timeout), nil
	}
	if err != nil {
		return baton.ToolResult{}, fmt.Errorf("tool %s: %w", e.Name(), err)
	}
	if res.Status == "" {
		res.Status = baton.ToolStatusOK
	}
	if u := cc.Vars.Updates(); len(u) > 0 {
		if res.Updates == nil {
			res.Updates = u
		} else {
			for k, v := range u {
				if _, set := res.Updates[k]; !set {
					res.Updates[k] = v
				}
			}
		}
	}
	if _, ok := e.inner.(selfCapped); !ok {
		res.Content = capText(res.Content, r.opts.maxOutput)
	}
	return res, nil
}

func (e *entry) safeCall(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (res baton.ToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.reg.log.Error("tool panicked", slog.String("tool", e.Name()), slog.String("chat_id", cc.ChatID), slog.String("app", cc.App),
				slog.String("workflow", cc.Workflow), slog.String("agent", cc.Agent), slog.String("turn_key", cc.TurnKey),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			res, err = errorResult("tool %s failed: panic: %v", e.Name(), p), nil
		}
	}()
	return e.inner.Call(ctx, cc, args)
}

// toolEvent is the payload of tool.executed and tool.error.
type toolEvent struct {
	ChatID     string  `json:"chat_id,omitempty"`
	ToolName   string  `json:"tool_name"`
	Kind       string  `json:"kind"`
	Agent      string  `json:"agent,omitempty"`
	Workflow   string  `json:"workflow,omitempty"`
	ToolCallID string  `json:"tool_call_id,omitempty"`
	TurnKey    string  `json:"turn_key,omitempty"`
	Status     string  `json:"status"`
	DurationMS float64 `json:"duration_ms"`
	Replayed   bool    `json:"replayed,omitempty"`
	Error      string  `json:"error,omitempty"`
}

func (r *Registry) publish(ctx context.Context, e *entry, cc *baton.CallContext, res baton.ToolResult, err error, replayed bool, d time.Duration) {
	p := toolEvent{
		ChatID: cc.ChatID, ToolName: e.Name(), Kind: e.spec.Kind, Agent: cc.Agent, Workflow: cc.Workflow,
		ToolCallID: cc.ToolCallID, TurnKey: cc.TurnKey, Status: res.Status,
		DurationMS: float64(d.Microseconds()) / 1000, Replayed: replayed,
	}
	typ := baton.TypeToolExecuted
	switch {
	case errors.Is(err, ErrInterrupted) || errors.Is(err, baton.ErrConflict):
		// The call did not run: its effect is claimed by another process,
		// or was interrupted and is about to be recovered. Not a tool's
		// outcome, and retried every second while it waits: no event.
		return
	case err != nil:
		typ, p.Status, p.Error = baton.TypeToolError, baton.ToolStatusError, baton.ErrorMessage(err)
		r.log.Warn("tool call failed", slog.String("tool", e.Name()), slog.String("chat_id", cc.ChatID), slog.String("app", cc.App),
			slog.String("workflow", cc.Workflow), slog.String("agent", cc.Agent), slog.String("turn_key", cc.TurnKey), slog.Any("err", err))
	case res.Status == baton.ToolStatusError:
		typ, p.Error = baton.TypeToolError, capText(res.Content, 1024)
	}
	if r.opts.pub == nil {
		return
	}
	payload, _ := json.Marshal(p) // plain strings and numbers always marshal
	// The chat's tenant goes with the event, as with an input
	// (baton.NewInput), so that a rule routing tool.error to the
	// event-handler agent finds the chat (Metadata.Scope); without it the
	// event is of no chat.
	ev := baton.NewEvent(typ, baton.Metadata{
		TriggerSessionID: cc.ChatID,
		TriggerAgentName: cc.Agent,
		Source:           baton.SourceTool,
		App:              cc.App,
		User:             cc.User,
	}, payload)
	// Events never fail or hold up the call (invariant 9): a short, detached
	// deadline bounds a full bus.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if perr := r.opts.pub.Publish(pctx, ev); perr != nil {
		r.log.Warn("publish tool event", slog.String("type", typ), slog.String("tool", e.Name()), slog.Any("err", perr))
	}
}

// selfCapped is a tool that caps its output while reading it (command and
// http tools), so the registry does not cut it again.
type selfCapped interface{ capsOutput() }

func (*commandTool) capsOutput() {}
func (*httpTool) capsOutput()    {}

// errorResult is a tool error for the model.
func errorResult(format string, args ...any) baton.ToolResult {
	return baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf(format, args...)}
}

// capText cuts s to at most max bytes (on a rune boundary) and says so.
func capText(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[output truncated: %d of %d bytes shown]", cut, len(s))
}

// expandEnv replaces ${VAR} and $VAR in s by the secret VAR or, failing
// that, the environment variable VAR; an unset variable is an error.
func expandEnv(s string, secrets map[string]string) (string, error) {
	var missing []string
	out := os.Expand(s, func(k string) string {
		if baton.ServerOnlyEnv(k) {
			missing = append(missing, k+" (baton's own, never a workflow's)")
			return ""
		}
		if v, ok := secrets[k]; ok {
			return v
		}
		v, ok := os.LookupEnv(k)
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return "", baton.Errorf(baton.EINVALID, "environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}

// lookupSecret returns the secret name or, failing that, the environment
// variable name; an unset variable is an error.
func lookupSecret(name string, secrets map[string]string) (string, error) {
	if baton.ServerOnlyEnv(name) {
		return "", baton.Errorf(baton.EINVALID, "environment variable %s is baton's own, never a workflow's", name)
	}
	if v, ok := secrets[name]; ok {
		return v, nil
	}
	if v, ok := os.LookupEnv(name); ok {
		return v, nil
	}
	return "", baton.Errorf(baton.EINVALID, "environment variable %s is not set", name)
}

// insideDir returns the absolute path of file with its symbolic links
// resolved, and an error when that is not inside dir (itself resolved): a
// link to /bin/sh or out of the workflow folder runs no tool.
func insideDir(dir, file string) (string, error) {
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if realDir, err = filepath.Abs(realDir); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(file)
	if err != nil {
		return "", err
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(realDir, real); err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("resolves to %s, outside the workflow folder", real)
	}
	return real, nil
}

// localPath resolves a path inside dir that may not leave it.
func localPath(dir, rel string) (string, error) {
	if !filepath.IsLocal(rel) {
		return "", baton.Errorf(baton.EINVALID, "file %q must be a relative path inside the tools folder", rel)
	}
	return filepath.Join(dir, rel), nil
}
