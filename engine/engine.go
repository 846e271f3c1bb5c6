// Package engine runs the chats of baton workflows: it turns inputs into
// turns, and turns into recorded events.
//
// Inputs arrive as bus events — run.start, user_query, ui.tool.response,
// run.resume — and the bus delivers a chat's events one at a time, in order,
// so a chat has at most one run at a time while many chats run in parallel.
// A handler loads the chat from the store, drives it until it pauses (waiting
// for the person, a UI tool's response, or after an error) or ends, and then
// holds nothing for it: a paused chat is only rows in the store.
//
// The chat's state is a fold over its recorded events (see state.apply):
// each step applies its events to the state and records them through the
// recorder (store first, then subscribers) — at once, or held back with the
// turn's other steps until the next point that needs them durable: before
// a model call, a tool with effects, a pause or the end (run.steps, stage.go). A step
// held back is one that can simply run again, so a crash before the append
// loses nothing that was published. What to do next is read off the state
// alone — start a turn, call the model, run an open tool call, hand off — so
// a first run, a resume after a pause, and a recovery after the process died
// mid-turn are the same code. After a crash the interrupted turn goes on from
// its last recorded step: model replies already recorded are not asked for
// again, tool calls without a recorded result are run again through the
// effect ledger (so side effects are not repeated), and text that was only
// streamed, never recorded, is produced afresh and recorded once.
package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
	"github.com/google/uuid"
)

// Store is what the engine reads and writes besides recording events. It
// declares all of it, so that a store lacking a part fails to compile where
// the Config is built, not at the first background task or lease: tasks
// back StartTask and RecoverTasks, leases back Config.InstanceID (several
// instances on one store). Every baton.Store is one.
type Store interface {
	baton.ChatStore
	baton.EventStore
	baton.UsageStore
	baton.EffectLedger
	baton.InboxStore
	baton.TaskStore
	baton.LeaseStore
	baton.ForkStore
}

// Broadcaster sends transient events (stream.*) to observers; *bus.Bus is one.
type Broadcaster interface {
	Broadcast(ev baton.Event) error
}

// BudgetFunc reports whether a chat has reached a token or cost limit, and
// why. It must answer quickly: it runs before every model call. An error is
// logged and the call goes ahead (metrics never stop a run, invariant 9).
type BudgetFunc func(ctx context.Context, scope baton.Scope, chat baton.Chat, wf *workflow.Workflow) (exceeded bool, reason string, err error)

// ProviderFunc returns the model provider for a workflow.
type ProviderFunc func(wf *workflow.Workflow) (baton.Provider, error)

// Config is what an Engine is made of.
type Config struct {
	Store     Store
	Recorder  baton.Recorder
	Bus       *bus.Bus // inputs are routed from it; stream deltas are broadcast on it
	Workflows []*workflow.Workflow
	// WorkflowRoot is the directory on disk the workflows' folders live in
	// (command tools are run from there). Empty means the current directory.
	WorkflowRoot string
	Providers    ProviderFunc
	// ToolOptions are passed to every workflow's tool registry (Go
	// functions, HTTP client, limits). The engine adds the effect ledger,
	// the publisher and the logger.
	ToolOptions []tool.Option
	Logger      *slog.Logger
	// SecretKey seals the secrets people give secret-collecting lifecycle
	// tools (32 bytes; see LoadSecretKey). Without it such tools fail.
	SecretKey []byte
	// RulePriority is the priority of the engine's bus rules (default 100,
	// seed 004 §3.3).
	RulePriority int
	// Budget, when set, is asked before every model call whether the chat
	// may spend more (metrics keeps the totals). A reached budget ends the
	// run with chat.run_complete {status: "budget_exceeded"}.
	Budget BudgetFunc
	// ShowEvents shows people the messages the event-handler agent records
	// for an environment event (they are hidden by default; models see them).
	ShowEvents bool
	// Tasks are the Go functions background tasks may run, by name (see
	// StartTask); a workflow's command tools can run as tasks too.
	Tasks map[string]TaskFunc
	// MaxTasks bounds the background tasks running at once (default
	// DefaultMaxTasks); more wait, queued.
	MaxTasks int
	// InstanceID names this engine among several sharing one store: runs
	// then take the chat's lease, fence their appends, and Run takes over
	// the running chats of dead instances (see lease.go). Empty: one
	// process owns the store, and there are no leases.
	InstanceID string
	// LeaseTTL is how long a chat's lease lasts without renewal (default
	// DefaultLeaseTTL); a dead instance's chats move on after it.
	LeaseTTL time.Duration
	// StartGrace is how long a chat that was created but never started
	// (nothing recorded yet: its run.start, which carries the person's
	// first message, waits in the dead instance's input queue) is left to
	// that input before another instance starts it without it (default
	// DefaultStartGrace). Make it longer than the input router's
	// drain delay (natsbridge: InactiveAfter plus AckWait).
	StartGrace time.Duration
	// TimeoutSweep is how often Run looks for expired UI tool requests
	// (default DefaultTimeoutSweep).
	TimeoutSweep time.Duration
	// StateCache is how many chat states stay in memory between inputs
	// (default DefaultStateCache; negative: none, every input rebuilds from
	// the store).
	StateCache int
}

// Engine runs chats. It is safe for concurrent use.
type Engine struct {
	store Store
	rec   baton.Recorder
	bus   *bus.Bus
	cast  Broadcaster
	log   *slog.Logger

	workflows map[string]*workflow.Workflow
	root      string
	providers ProviderFunc
	toolOpts  []tool.Option

	mu         sync.Mutex
	provCache  map[string]baton.Provider
	registries map[string]*tool.Registry

	sealer *sealer
	cache  *stateCache
	budget BudgetFunc
	sweep  time.Duration

	showEvents bool
	wakeMu     sync.Mutex
	wakes      map[string]*time.Timer // pending coalesced wakes, by chat

	tasks taskRunner

	instance    string
	holder      baton.EffectHolder // names this process in the effect ledger's claims
	leaseTTL    time.Duration
	startGrace  time.Duration
	takeovers   atomic.Int64
	leaseLosses atomic.Int64
	staleStates atomic.Int64 // runs whose cached state the store had moved past (load)
	inbox       inboxCount   // inputs kept per chat since a run read its inbox (without leases)
	creatingMu  sync.Mutex
	creating    map[string]*creation // chats Start waits for their run to create, by id (create.go)
	handovers   map[string]handover  // runs parked after creating their chat, by chat id (create.go)
	closing     bool                 // Close began: Start creates no more chats through a run (create.go)
	born        time.Time            // when New made the engine: tasks created since are this process's
	runningMu   sync.Mutex
	running     map[string]int // chats this instance runs now: runs acquiring, holding or releasing their lease

	synthMu   sync.Mutex
	synthetic map[string]int64 // synthetic select_speaker events recorded, per workflow

	cancels cancels // runs this instance may cancel (run.cancel)

	active atomic.Int64 // runs in progress
	turns  atomic.Int64 // turns started since New

	anyPolicy bool // a workflow's double_texting is not enqueue: submits read the chat

	agentRulesMu sync.Mutex
	agentRules   map[string]bool // names of the event-handler agent rules made by AgentRule
	callsMu      sync.Mutex
	calls        map[string]modelCallStop // model calls in progress, by chat, for interrupt

	activeMu sync.Mutex
	activeBy map[baton.Scope]int64 // runs in progress by tenant (ActiveIn)
}

// New returns an engine and registers its rules on cfg.Bus: run.start,
// run.resume, user_query and ui.tool.response go to the engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.Recorder == nil || cfg.Bus == nil || cfg.Providers == nil {
		return nil, fmt.Errorf("engine: Store, Recorder, Bus and Providers are required")
	}
	e := &Engine{
		store:      cfg.Store,
		rec:        cfg.Recorder,
		bus:        cfg.Bus,
		cast:       cfg.Bus,
		log:        cfg.Logger,
		workflows:  make(map[string]*workflow.Workflow, len(cfg.Workflows)),
		root:       cfg.WorkflowRoot,
		providers:  cfg.Providers,
		toolOpts:   cfg.ToolOptions,
		budget:     cfg.Budget,
		showEvents: cfg.ShowEvents,
		instance:   cfg.InstanceID,
		holder:     baton.EffectHolder{Instance: cfg.InstanceID, Boot: uuid.NewString()},
		leaseTTL:   cfg.LeaseTTL,
		startGrace: cfg.StartGrace,
		running:    map[string]int{},
		born:       time.Now(),
		sweep:      cfg.TimeoutSweep,
		provCache:  map[string]baton.Provider{},
		synthetic:  map[string]int64{},
		registries: map[string]*tool.Registry{},
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.tasks.init(e, cfg.Tasks, cfg.MaxTasks)
	if e.instance != "" {
		if e.leaseTTL <= 0 {
			e.leaseTTL = DefaultLeaseTTL
		}
		if e.startGrace <= 0 {
			e.startGrace = DefaultStartGrace
		}
	}
	if e.sweep <= 0 {
		e.sweep = DefaultTimeoutSweep
	}
	switch {
	case cfg.StateCache == 0:
		e.cache = newStateCache(DefaultStateCache)
	case cfg.StateCache > 0:
		e.cache = newStateCache(cfg.StateCache)
	}
	if cfg.SecretKey != nil {
		sl, err := newSealer(cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.sealer = sl
	}
	for _, wf := range cfg.Workflows {
		e.workflows[wf.Name] = wf
		e.anyPolicy = e.anyPolicy || wf.DoubleTexting() != workflow.DoubleTextingEnqueue
		// Go function tools are bound by name now, not at the workflow's
		// first chat: a missing or misnamed function stops the engine
		// from starting, with the tool and the workflow named.
		if err := tool.CheckFuncs(specsOf(wf), e.toolOptions(nil)...); err != nil {
			return nil, fmt.Errorf("engine: workflow %s: %w", wf.Name, err)
		}
	}
	prio := cfg.RulePriority
	if prio == 0 {
		prio = 100
	}
	// run.cancel is applied as it is published (an observer), and only
	// consumed on the chat's lane (cancel.go).
	if err := e.bus.RegisterRule(bus.Rule{
		Name:     "engine-cancel",
		Types:    []string{baton.TypeRunCancel},
		Priority: prio,
		Handler:  e.handleCancel,
	}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if err := e.bus.RegisterRule(bus.Rule{
		Name:     "engine",
		Types:    []string{baton.TypeRunStart, baton.TypeRunResume, baton.TypeRunWake, baton.TypeUserQuery, baton.TypeUIToolResponse},
		Priority: prio,
		Handler:  e.handleLeased,
	}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	// tool.executed and tool.error are facts for observers (metrics, logs);
	// the environment-events rules may claim tool.error with a higher
	// priority to wake an agent.
	if err := e.bus.RegisterRule(bus.Rule{
		Name:     "tool-events",
		Types:    []string{"tool.*"},
		Priority: 20,
		Handler: func(_ context.Context, ev baton.Event) error {
			e.log.Debug("engine: tool event", "event_type", ev.Type, "chat_id", ev.ChatID())
			return nil
		},
	}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	// Last: nothing above can fail after the goroutine started.
	if err := e.watchCancels(); err != nil {
		return nil, err
	}
	return e, nil
}

// Workflow returns the named workflow, or nil.
func (e *Engine) Workflow(name string) *workflow.Workflow { return e.workflows[name] }

// Workflows returns the engine's workflows.
func (e *Engine) Workflows() []*workflow.Workflow {
	out := make([]*workflow.Workflow, 0, len(e.workflows))
	for _, wf := range e.workflows {
		out = append(out, wf)
	}
	return out
}

// SyntheticCount returns how many synthetic select_speaker events the
// engine has recorded for a workflow since it started.
func (e *Engine) SyntheticCount(workflow string) int64 {
	e.synthMu.Lock()
	defer e.synthMu.Unlock()
	return e.synthetic[workflow]
}

// Active returns the number of runs in progress.
func (e *Engine) Active() int64 { return e.active.Load() }

// ActiveIn returns the number of runs in progress of scope's chats (of
// scope.App's users together when scope.User is ""): Active is their sum
// over every tenant.
func (e *Engine) ActiveIn(scope baton.Scope) int64 {
	e.activeMu.Lock()
	defer e.activeMu.Unlock()
	if scope.User != "" {
		return e.activeBy[scope]
	}
	var n int64
	for s, k := range e.activeBy {
		if s.App == scope.App {
			n += k
		}
	}
	return n
}

// countActive counts a run of scope in progress (ActiveIn) until the
// function it returns is called. A tenant is forgotten when its last run
// ends, so the map holds only tenants with runs in progress.
func (e *Engine) countActive(scope baton.Scope) func() {
	e.activeMu.Lock()
	if e.activeBy == nil {
		e.activeBy = map[baton.Scope]int64{}
	}
	e.activeBy[scope]++
	e.activeMu.Unlock()
	return func() {
		e.activeMu.Lock()
		if e.activeBy[scope]--; e.activeBy[scope] <= 0 {
			delete(e.activeBy, scope)
		}
		e.activeMu.Unlock()
	}
}

// Start creates a chat of the named workflow in scope and publishes its
// run.start. It returns once the chat is stored with its first message
// (opts.Message); the run proceeds on the bus. Without leases the chat's
// run stores it, with its first events, in one commit, and Start waits for
// that commit (create.go); otherwise Start stores it, with the message in
// its inbox, before it publishes the run.start. An error means nothing was
// created, unless it says the chat was (or may still be) created: a
// run.start the bus refused after the chat was stored is EUNAVAILABLE,
// returned with the chat, which the service's recovery starts when it next
// starts (Recover) or, with leases, the instance that takes it over.
func (e *Engine) Start(ctx context.Context, scope baton.Scope, workflowName string, opts baton.StartOptions) (baton.Chat, error) {
	return e.start(ctx, scope, workflowName, opts, "")
}

// start is Start with the id of the run.start event (empty: a fresh one).
func (e *Engine) start(ctx context.Context, scope baton.Scope, workflowName string, opts baton.StartOptions, startID string) (baton.Chat, error) {
	wf := e.workflows[workflowName]
	if wf == nil {
		return baton.Chat{}, baton.Errorf(baton.ENOTFOUND, "workflow %q: not found", workflowName)
	}
	id := opts.ChatID
	if id == "" {
		id = baton.NewID()
	}
	// A client may preset only what the workflow lets it: derived
	// variables and the rest guard steps of the chat (an interview, a
	// form) that a preset value would skip.
	if err := wf.CheckStartContext(opts.Context); err != nil {
		return baton.Chat{}, err
	}
	vars := initialVars(wf)
	for k, v := range opts.Context {
		vars[k] = v
	}
	if len(opts.ClientTools) > 0 {
		if err := e.CheckClientTools(wf.Name, opts.ClientTools); err != nil {
			return baton.Chat{}, err
		}
		vars[clientToolsVar] = clientToolsJSON(opts.ClientTools)
	}
	snap, err := json.Marshal(vars)
	if err != nil {
		return baton.Chat{}, fmt.Errorf("start %s: %w", workflowName, err)
	}
	c := baton.Chat{
		ID:        id,
		Workflow:  wf.Name,
		Status:    baton.ChatRunning,
		Context:   snap,
		CacheSeed: cacheSeed(wf, id),
	}
	payload, _ := json.Marshal(baton.RunStartPayload{Message: opts.Message})
	ev := baton.NewInput(scope, baton.TypeRunStart, id, payload)
	if startID != "" {
		ev.ID = startID
	}
	if _, ok := e.creator(); ok {
		// The run creates the chat in its first append (create.go).
		if err := c.PrepareCreate(scope); err != nil {
			return baton.Chat{}, fmt.Errorf("start %s: %w", workflowName, err)
		}
		ev.Metadata.TriggerSessionID = c.ID
		if startID != "" {
			// A retry's run.start id is one the bus may have seen: it would
			// drop the event, and no run would create the chat. The store
			// refuses an id in use when the run creates it. The message is
			// still kept under startID, so that a retry finds it kept.
			ev.ID = baton.NewID()
		}
		chat, err := e.startInRun(ctx, scope, c, ev, opts.Message, startID)
		if err != nil {
			return baton.Chat{}, fmt.Errorf("start %s: %w", workflowName, err)
		}
		return chat, nil
	}
	var chat baton.Chat
	if opts.Message == "" {
		chat, err = e.store.CreateChat(ctx, scope, c)
	} else {
		// The person's first message is an accepted input like any other:
		// kept before Start returns (and the client gets its 201), taken in
		// the append that records it. A restart before the run.start is
		// handled resumes the chat, and the run finds the message here. It
		// is kept in the commit that creates the chat: one commit where
		// there were two, and no chat is ever left without its message.
		var in baton.Input
		chat, in, err = e.store.CreateChatWithInput(ctx, scope, c, inboxed(ev))
		ev = in.Event
	}
	if err != nil {
		return baton.Chat{}, fmt.Errorf("start %s: %w", workflowName, err)
	}
	if e.instance == "" {
		// This engine alone runs the chat (no leases): its run starts from
		// this state rather than read back what was just written (load).
		// Its inbox holds the person's first message alone, if any, which
		// the state knows (takeStart).
		st := newState(chat, wf)
		st.sync(chat)
		st.inboxClear = true
		if opts.Message != "" {
			st.startInput, st.startMessage = ev.ID, opts.Message
		}
		e.cache.put(st)
	}
	e.publishSession(ctx, scope, baton.TypeSessionCreated, chat, "")
	if err := e.publishEvent(ctx, ev); err != nil {
		// The chat and its first message are committed: the error says so
		// and names the chat, so that a client does not start another one.
		// A running chat is resumed when the service starts (Recover), and
		// with leases an instance takes it over; a StartOnce retry
		// publishes its run.start again.
		return chat, baton.Errorf(baton.EUNAVAILABLE, "start %s: chat %s was created, but its run could not be started (%v); the service's recovery starts it", workflowName, chat.ID, err)
	}
	return chat, nil
}

// sessionPayload is the payload of session.created and session.updated.
type sessionPayload struct {
	ChatID         string           `json:"chat_id"`
	Workflow       string           `json:"workflow"`
	Status         baton.ChatStatus `json:"status"`
	PreviousStatus baton.ChatStatus `json:"previous_status,omitempty"` // session.updated: the status before
	Sequence       int64            `json:"sequence"`                  // the chat's last sequence with this status
}

// sessionPublishTimeout bounds the publication of a session event: it is
// published from within the chat's own handling (its bus lane), and an
// observation never holds up a run (invariant 9).
const sessionPublishTimeout = time.Second

// publishSession publishes session.created (a chat was started) or
// session.updated (its recorded status changed from prev) for rules on
// session.* to see. Its id is derived from the chat, its sequence and the
// change (previous and new status), so a republication of the same change is
// dropped by the bus while a change recorded with no new event — a resume
// turns failed into running in an append of no events, at the sequence the
// failure had — is a new event. A failure is
// logged, never returned: the chat goes on whether or not it was observed.
func (e *Engine) publishSession(ctx context.Context, scope baton.Scope, typ string, chat baton.Chat, prev baton.ChatStatus) {
	payload, _ := json.Marshal(sessionPayload{ChatID: chat.ID, Workflow: chat.Workflow, Status: chat.Status, PreviousStatus: prev, Sequence: chat.LastSequence})
	ev := baton.NewInput(scope, typ, chat.ID, payload)
	ev.ID = fmt.Sprintf("%s/%s/%d/%s-%s", typ, chat.ID, chat.LastSequence, prev, chat.Status)
	ev.Metadata.Source = baton.SourceSystem
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionPublishTimeout)
	defer cancel()
	if err := e.bus.Publish(pctx, ev); err != nil {
		e.log.Warn("engine: publish session event", "event_type", typ, "chat_id", chat.ID, "err", err)
	}
}

// StartOnce is Start for a start sent with an idempotency key: opts.ChatID
// (required) is the chat id the caller derived from the key, so that a
// retry after a lost answer names the same chat. The first call creates it
// (created true); a retry with the same request returns the stored chat
// (created false), and publishes its run.start again while nothing is
// recorded yet (the first answer may have been lost with the process before
// the run took it; the run.start's id is the same, so the bus takes it
// once). A retry with another request (another message or context) is
// ECONFLICT naming the key, and changes nothing.
//
// The request's fingerprint is kept in the chat's effect ledger under
// startKeyEffect, claimed and written right after the chat: a process that
// dies before it leaves a chat without one, or with a pending claim, and the
// next retry's request is then taken as the first's (it is recorded as the
// fingerprint). A pending claim whose holder may still be writing it (this
// process, less than startClaimAge ago) is EUNAVAILABLE: retry.
func (e *Engine) StartOnce(ctx context.Context, scope baton.Scope, workflowName, key string, opts baton.StartOptions) (chat baton.Chat, created bool, err error) {
	if opts.ChatID == "" || key == "" {
		return baton.Chat{}, false, baton.Errorf(baton.EINVALID, "idempotent start: a chat id and a key are required")
	}
	fp, err := startFingerprint(workflowName, opts)
	if err != nil {
		return baton.Chat{}, false, err
	}
	chat, err = e.start(ctx, scope, workflowName, opts, opts.ChatID)
	switch {
	case err == nil:
		// The chat exists: its request is recorded even if the client has
		// gone meanwhile (a killed caller, a closed connection), else the
		// claim would stay pending and the client's retry be told "still
		// being recorded" until the claim is startClaimAge old.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startRecordTimeout)
		defer cancel()
		if _, err := e.store.ClaimEffect(rctx, scope, chat.ID, startKeyEffect, e.holder); err == nil {
			if err := e.store.RecordEffect(rctx, scope, chat.ID, startKeyEffect, fp); err != nil {
				e.log.Warn("engine: record the start's idempotency fingerprint", "chat_id", chat.ID, "err", err)
			}
		}
		return chat, true, nil
	case !errors.Is(err, baton.ErrConflict):
		return chat, false, err
	}
	// The chat id is taken: a retry of this start, or the key's earlier use.
	chat, err = e.store.GetChat(ctx, scope, opts.ChatID)
	if errors.Is(err, baton.ErrNotFound) {
		return baton.Chat{}, false, baton.Errorf(baton.ECONFLICT, "Idempotency-Key %q: already used for a chat that was deleted; use a new key", key)
	}
	if err != nil {
		return baton.Chat{}, false, fmt.Errorf("start %s again: %w", workflowName, err)
	}
	eff, err := e.store.ClaimEffect(ctx, scope, chat.ID, startKeyEffect, e.holder)
	if err != nil {
		return baton.Chat{}, false, fmt.Errorf("start %s again: %w", workflowName, err)
	}
	switch eff.State {
	case baton.EffectDone:
		if !bytes.Equal(bytes.TrimSpace(eff.Result), fp) {
			return baton.Chat{}, false, baton.Errorf(baton.ECONFLICT, "Idempotency-Key %q: already used to start chat %s with another request (message or context); use a new key", key, chat.ID)
		}
	case baton.EffectNew:
		// The first start died before its fingerprint: this request is taken
		// for it.
		if err := e.store.RecordEffect(ctx, scope, chat.ID, startKeyEffect, fp); err != nil {
			e.log.Warn("engine: record the start's idempotency fingerprint", "chat_id", chat.ID, "err", err)
		}
	case baton.EffectPending:
		// The first start claimed the key and recorded no fingerprint: its
		// process died between the two (or the record failed), or it is
		// recording it right now. A claim held by a process that is gone, or
		// older than startClaimAge, is taken over and this request is taken
		// as the first's, as when there is no claim at all; otherwise the
		// client is told to retry, so that its request is always checked.
		if !e.holderGone(eff.Holder) && time.Since(eff.ClaimedAt) < startClaimAge {
			return baton.Chat{}, false, baton.Errorf(baton.EUNAVAILABLE, "Idempotency-Key %q: the first start with this key is still being recorded; retry", key)
		}
		took, err := e.store.TakeOverEffect(ctx, scope, chat.ID, eff, e.holder)
		if err != nil {
			return baton.Chat{}, false, fmt.Errorf("start %s again: take over the key's claim: %w", workflowName, err)
		}
		if !took { // another retry took it over first: it decides
			return baton.Chat{}, false, baton.Errorf(baton.EUNAVAILABLE, "Idempotency-Key %q: another request with this key is being recorded; retry", key)
		}
		if err := e.store.RecordEffect(ctx, scope, chat.ID, startKeyEffect, fp); err != nil {
			return baton.Chat{}, false, fmt.Errorf("start %s again: record the key's request: %w", workflowName, err)
		}
	}
	if chat.LastSequence == 0 && chat.Status == baton.ChatRunning {
		payload, _ := json.Marshal(struct {
			Message string `json:"message,omitempty"`
		}{opts.Message})
		ev := baton.NewInput(scope, baton.TypeRunStart, chat.ID, payload)
		ev.ID = chat.ID // the same for every retry: the bus takes it once
		if opts.Message != "" {
			if ev, err = e.keep(ctx, scope, ev); err != nil { // the first's, if it was kept
				return chat, false, err
			}
		}
		if err := e.publishEvent(ctx, ev); err != nil {
			return chat, false, err
		}
	}
	return chat, false, nil
}

// startClaimAge is the age after which a pending claim of a start's key is
// taken over even when its holder may still live: a start records its
// fingerprint milliseconds after its claim, so an older pending claim is one
// whose record failed.
const startClaimAge = 10 * time.Second

// startRecordTimeout bounds the recording of a start's request once its
// chat is created, which no longer waits on the client's context.
const startRecordTimeout = 10 * time.Second

// startKeyEffect is the effect-ledger key under which an idempotent start
// keeps its request's fingerprint.
const startKeyEffect = "start.idempotency"

// startFingerprint is a start request's fingerprint: the SHA-256 of its
// workflow, message and context (values compacted, keys sorted), as a JSON
// string.
func startFingerprint(workflowName string, opts baton.StartOptions) (json.RawMessage, error) {
	ctxVals := make(map[string]json.RawMessage, len(opts.Context))
	for k, v := range opts.Context {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return nil, baton.Errorf(baton.EINVALID, "context.%s: not valid JSON", k)
		}
		ctxVals[k] = b.Bytes()
	}
	canon, err := json.Marshal(struct {
		Workflow string                     `json:"workflow"`
		Message  string                     `json:"message"`
		Context  map[string]json.RawMessage `json:"context"`
	}{workflowName, opts.Message, ctxVals})
	if err != nil {
		return nil, fmt.Errorf("start fingerprint: %w", err)
	}
	sum := sha256.Sum256(canon)
	return json.Marshal(hex.EncodeToString(sum[:]))
}

// Submit publishes a person's message to a chat (user_query). source says
// where it came from: ws, http or api.
func (e *Engine) Submit(ctx context.Context, scope baton.Scope, chatID, content, source string) error {
	return e.SubmitOnce(ctx, scope, chatID, "", content, source)
}

// SubmitOnce is Submit for a message sent with an idempotency key: eventID
// (empty: a fresh one) is its user_query's id, the same for every retry (the
// server derives it from the client's key), so that the bus, JetStream and
// the engine's record of the chat's recent inputs take it once.
//
// The message is durable when SubmitOnce returns nil: it is in the chat's
// inbox (baton.InboxStore), and the run takes it from there at its next
// input point — when the chat waits for the person, after an error, or
// when the run ends first (completed, budget reached): it then starts the
// next run — recording it once, in the append that marks it taken. The
// user_query published on the bus afterwards only rings the bell: if the
// process dies before or after it, RecoverInputs publishes it again at
// start, and JetStream redelivers it to another instance. What the chat
// does with a message while a run goes is the workflow's double_texting
// policy: enqueue (above), reject (ECONFLICT while the chat is running,
// nothing kept) or interrupt (as enqueue, and the model call in progress on
// this instance is stopped at once, unless its run had recorded this very
// message before the call began; a retry interrupts nothing).
func (e *Engine) SubmitOnce(ctx context.Context, scope baton.Scope, chatID, eventID, content, source string) error {
	return e.submit(ctx, scope, chatID, eventID, baton.NewUserQuery(scope, chatID, content, source))
}

// submit is SubmitOnce for the user_query ev.
func (e *Engine) submit(ctx context.Context, scope baton.Scope, chatID, eventID string, ev baton.Event) error {
	if eventID != "" {
		ev.ID = eventID
	}
	policy, err := e.policyOf(ctx, scope, chatID)
	if err != nil {
		return err
	}
	if policy == workflow.DoubleTextingReject {
		if err := e.refuseWhileRunning(ctx, scope, chatID, eventID); err != nil {
			return err
		}
	}
	in, added, err := e.keepInput(ctx, scope, ev)
	if err != nil {
		return err
	}
	if policy == workflow.DoubleTextingInterrupt && added {
		// Only a new message interrupts: a retry of one the chat has (its
		// idempotency key) must not cut the answer to itself.
		e.interrupt(chatID, in.ID)
	}
	return e.publishEvent(ctx, in)
}

// errInterrupted is the cause of a model call stopped by a message sent
// to a workflow whose double_texting is interrupt.
var errInterrupted = errors.New("interrupted by the person's message")

// modelCallStop is a model call in progress: how to stop it, and the
// inputs its run had recorded when it started, which the call knows.
type modelCallStop struct {
	stop  context.CancelCauseFunc
	knows []string // never written once the call starts (state.recordedInputs)
}

// interrupt stops the model call in progress for the chat on this
// instance, if any (double_texting: interrupt), unless the call knows
// inputID already: a run takes a message from the inbox as soon as it is
// kept, so the run may have recorded it, and started a call that answers
// it (or a later message), between the message's keep and this interrupt.
func (e *Engine) interrupt(chatID, inputID string) {
	e.callsMu.Lock()
	call, ok := e.calls[chatID]
	e.callsMu.Unlock()
	if ok && !slices.Contains(call.knows, inputID) {
		call.stop(errInterrupted)
	}
}

// modelCall registers a model call of the chat, which knows the inputs
// knows (those its run had recorded), so that interrupt can stop it, and
// returns its context and the function that ends it.
func (e *Engine) modelCall(ctx context.Context, chatID string, knows []string) (context.Context, func()) {
	callCtx, stop := context.WithCancelCause(ctx)
	e.callsMu.Lock()
	if e.calls == nil {
		e.calls = map[string]modelCallStop{}
	}
	e.calls[chatID] = modelCallStop{stop: stop, knows: knows}
	e.callsMu.Unlock()
	return callCtx, func() {
		e.callsMu.Lock()
		delete(e.calls, chatID)
		e.callsMu.Unlock()
		stop(context.Canceled)
	}
}

// keep stores an input in its chat's inbox before it is acknowledged and
// returns the event to publish: ev, or the input kept before under its id
// (a retry). When keep returns nil the input survives kill -9.
func (e *Engine) keep(ctx context.Context, scope baton.Scope, ev baton.Event) (baton.Event, error) {
	kept, _, err := e.keepInput(ctx, scope, ev)
	return kept, err
}

// keepInput is keep, and reports whether the input is new: false for a
// retry, whose id the chat's inbox holds already (waiting or taken).
func (e *Engine) keepInput(ctx context.Context, scope baton.Scope, ev baton.Event) (baton.Event, bool, error) {
	in, added, err := e.store.AddInput(ctx, scope, inboxed(ev))
	e.inputKept(ev.ChatID(), err)
	if err != nil {
		return baton.Event{}, false, fmt.Errorf("keep %s for chat %s: %w", ev.Type, ev.ChatID(), err)
	}
	return in.Event, added, nil
}

// inboxed marks ev as an input kept in its chat's inbox (baton.InboxKey):
// the run that takes it consumes it in the append that records it.
func inboxed(ev baton.Event) baton.Event {
	extra := make(map[string]json.RawMessage, len(ev.Metadata.Extra)+1) // the caller's event keeps its map
	maps.Copy(extra, ev.Metadata.Extra)
	ev.Metadata.Extra = extra
	ev.Metadata.Extra[baton.InboxKey] = json.RawMessage("true")
	return ev
}

// policyOf returns the double_texting policy of the chat's workflow,
// reading the chat only when the engine runs a workflow that does not
// enqueue.
func (e *Engine) policyOf(ctx context.Context, scope baton.Scope, chatID string) (string, error) {
	if !e.anyPolicy {
		return workflow.DoubleTextingEnqueue, nil
	}
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		return "", err
	}
	if wf := e.workflows[chat.Workflow]; wf != nil {
		return wf.DoubleTexting(), nil
	}
	return workflow.DoubleTextingEnqueue, nil
}

// refuseWhileRunning is the reject policy: ECONFLICT while a run goes (the
// chat is running), unless eventID names a message the chat took already
// (a retry, which gets the same acceptance).
func (e *Engine) refuseWhileRunning(ctx context.Context, scope baton.Scope, chatID, eventID string) error {
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		return err
	}
	if chat.Status != baton.ChatRunning {
		return nil
	}
	if eventID != "" {
		if known, err := e.inputKnown(ctx, scope, chat, eventID); err != nil || known {
			return err
		}
	}
	return baton.Errorf(baton.ECONFLICT, "chat %s is running: workflow %s takes no message while a run goes (double_texting: reject); send it when the chat waits for input", chatID, chat.Workflow)
}

// inputKnown reports whether the chat holds input eventID: waiting in its
// inbox, or recorded among its last answeredWindow events.
func (e *Engine) inputKnown(ctx context.Context, scope baton.Scope, chat baton.Chat, eventID string) (bool, error) {
	ins, err := e.store.Inputs(ctx, scope, chat.ID)
	if err != nil {
		return false, err
	}
	for _, in := range ins {
		if in.Event.ID == eventID {
			return true, nil
		}
	}
	evs, err := e.store.Events(ctx, scope, chat.ID, max(0, chat.LastSequence-answeredWindow), answeredWindow)
	if err != nil {
		return false, err
	}
	for i := range evs {
		if evs[i].Type == baton.TypeChatText && bytes.Contains(evs[i].Payload, []byte(eventID)) {
			var p baton.TextPayload
			if json.Unmarshal(evs[i].Payload, &p) == nil && p.InputID == eventID {
				return true, nil
			}
		}
	}
	return false, nil
}

// RecoverInputs publishes again the inputs chats accepted and their runs
// had not taken when the process stopped (their bus events were in memory,
// or never published), and returns how many. Call it once at start, after
// New; with several instances every one may call it: the bus drops an id it
// has seen and a run takes an input once.
func (e *Engine) RecoverInputs(ctx context.Context) (int, error) {
	chats, err := e.store.ChatsWithInputs(ctx, 100000)
	if err != nil {
		return 0, fmt.Errorf("recover inputs: %w", err)
	}
	n := 0
	for _, c := range chats {
		if e.workflows[c.Workflow] == nil {
			continue
		}
		ins, err := e.store.Inputs(ctx, baton.Scope{App: c.App, User: c.User}, c.ID)
		if err != nil {
			return n, fmt.Errorf("recover the inputs of chat %s: %w", c.ID, err)
		}
		for _, in := range ins {
			if err := e.publishEvent(ctx, in.Event); err != nil {
				return n, fmt.Errorf("recover the inputs of chat %s: %w", c.ID, err)
			}
			n++
		}
	}
	return n, nil
}

// RespondUI publishes the person's response to a UI tool (ui.tool.response).
// It refuses, changing nothing, a ui_event_id the chat does not wait for
// (unknown, already answered, or another chat's: ENOTFOUND). The values of a
// secret form are sealed here, before the event reaches the bus, so no
// observer, log or store ever holds them in the clear.
func (e *Engine) RespondUI(ctx context.Context, scope baton.Scope, chatID, uiEventID string, status string, data json.RawMessage) error {
	return e.respondUI(ctx, scope, chatID, "", uiEventID, status, data)
}

// RespondUIOnce is RespondUI for a response sent with an idempotency key:
// eventID is the id its ui.tool.response event gets, the same for every
// retry of the response (the server derives it from the client's key, the
// chat and the caller), so that the bus and the engine apply it once, as
// they do a user_query's. A retry that arrives after the response was
// applied finds the request answered by this very event (AnsweredBy) and
// succeeds, publishing nothing; any other response to a request the chat no
// longer waits for is ENOTFOUND, as with RespondUI.
func (e *Engine) RespondUIOnce(ctx context.Context, scope baton.Scope, chatID, eventID, uiEventID string, status string, data json.RawMessage) error {
	if eventID == "" {
		return baton.Errorf(baton.EINVALID, "event id: required")
	}
	return e.respondUI(ctx, scope, chatID, eventID, uiEventID, status, data)
}

func (e *Engine) respondUI(ctx context.Context, scope baton.Scope, chatID, eventID, uiEventID string, status string, data json.RawMessage) error {
	return e.respondUIWith(ctx, scope, chatID, eventID, uiEventID, status, data, nil)
}

// respondUIWith is respondUI for a response that brings the client's tools
// (clientTools, a JSON array; nil: none, the chat keeps its set).
func (e *Engine) respondUIWith(ctx context.Context, scope baton.Scope, chatID, eventID, uiEventID string, status string, data, clientTools json.RawMessage) error {
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		return err
	}
	var pending *baton.PendingRequest
	for i := range chat.Pending {
		if chat.Pending[i].UIEventID == uiEventID {
			pending = &chat.Pending[i]
		}
	}
	if pending == nil {
		if eventID != "" {
			if answered, err := e.answeredBy(ctx, scope, chat, uiEventID, eventID); err != nil || answered {
				return err // a retry of the response that answered it: done already
			}
		}
		return baton.Errorf(baton.ENOTFOUND, "ui_event_id %q: the chat does not wait for it (unknown or already answered)", uiEventID)
	}
	if status == "" {
		status = "success"
	}
	resp := baton.UIToolResponsePayload{UIEventID: uiEventID, Status: status, Data: data, ClientTools: clientTools}
	if pending.Kind == baton.PendingSecret {
		resp.Data = nil
		if status == "success" {
			if e.sealer == nil {
				return baton.Errorf(baton.EUNAVAILABLE, "secrets: no secret key is configured")
			}
			var names []string
			if wf := e.workflows[chat.Workflow]; wf != nil {
				if t := wf.Tool(pending.ToolName); t != nil {
					names = t.SecretNames
				}
			}
			if len(names) == 0 {
				return baton.Errorf(baton.ECONFLICT, "ui_event_id %q: the secret form %q is no longer in workflow %q; its answer cannot be checked", uiEventID, pending.ToolName, chat.Workflow)
			}
			if resp.Sealed, err = e.sealer.sealForm(chatID, data, names); err != nil {
				return err
			}
		}
	}
	ev := baton.NewUIToolResponse(scope, chatID, resp)
	if eventID != "" {
		ev.ID = eventID
	}
	// Durable before it is acknowledged, as a message is (see SubmitOnce).
	if ev, err = e.keep(ctx, scope, ev); err != nil {
		return err
	}
	return e.publishEvent(ctx, ev)
}

// answeredWindow is how far back AnsweredBy looks: the chat's last 1,000
// events. A retry comes seconds after the response it repeats, and a
// bounded read keeps a refusal cheap however long the chat is.
const answeredWindow = 1000

// AnsweredBy reports whether the chat's UI request uiEventID was answered
// by the ui.tool.response event eventID: whether a chat.tool_response among
// the chat's last answeredWindow events answered it carrying input_id
// eventID. It is how a retried response (RespondUIOnce) is told from
// another response to a request answered already; a retry that comes after
// the chat has recorded 1,000 more events is taken for the latter.
func (e *Engine) AnsweredBy(ctx context.Context, scope baton.Scope, chatID, uiEventID, eventID string) (bool, error) {
	if uiEventID == "" || eventID == "" {
		return false, nil
	}
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		return false, err
	}
	return e.answeredBy(ctx, scope, chat, uiEventID, eventID)
}

// answeredBy is AnsweredBy for a chat the caller has read.
func (e *Engine) answeredBy(ctx context.Context, scope baton.Scope, chat baton.Chat, uiEventID, eventID string) (bool, error) {
	evs, err := e.store.Events(ctx, scope, chat.ID, max(0, chat.LastSequence-answeredWindow), answeredWindow)
	if err != nil {
		return false, fmt.Errorf("find the response to %s in chat %s: %w", uiEventID, chat.ID, err)
	}
	id := []byte(eventID)
	for i := range evs {
		ev := &evs[i]
		if ev.Type != baton.TypeChatToolResponse || !bytes.Contains(ev.Payload, id) {
			continue
		}
		var p struct {
			UIEventID string `json:"ui_event_id"`
			InputID   string `json:"input_id"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.UIEventID == uiEventID && p.InputID == eventID {
			return true, nil
		}
	}
	return false, nil
}

// Resume publishes a run.resume for a chat: a retry after an error, or
// going on after a restart.
func (e *Engine) Resume(ctx context.Context, scope baton.Scope, chatID string) error {
	return e.publish(ctx, scope, baton.TypeRunResume, chatID, nil)
}

// Recover resumes every chat that was running when the process stopped and
// returns how many it resumed. Call it once at start, after New.
func (e *Engine) Recover(ctx context.Context, chats []baton.Chat) (int, error) {
	n := 0
	for _, c := range chats {
		if c.Status != baton.ChatRunning || e.workflows[c.Workflow] == nil {
			continue
		}
		if err := e.Resume(ctx, baton.Scope{App: c.App, User: c.User}, c.ID); err != nil {
			return n, fmt.Errorf("recover chat %s: %w", c.ID, err)
		}
		n++
	}
	return n, nil
}

// WithTraceParent returns ev carrying, as Metadata.TraceParent, the span
// that ctx holds (an HTTP server span, or the caller's own traceparent), so
// that the run's trace can link to the request; ev as it is when ctx holds
// none.
func WithTraceParent(ctx context.Context, ev baton.Event) baton.Event {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ev
	}
	ev.Metadata.TraceParent = "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
	return ev
}

// TraceParentOf returns the span context an input event's traceparent
// names (WithTraceParent), or an invalid one.
func TraceParentOf(ev baton.Event) trace.SpanContext {
	if ev.Metadata.TraceParent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": ev.Metadata.TraceParent})
	return trace.SpanContextFromContext(ctx)
}

func (e *Engine) publish(ctx context.Context, scope baton.Scope, typ, chatID string, payload json.RawMessage) error {
	return e.publishEvent(ctx, baton.NewInput(scope, typ, chatID, payload))
}

// publishEvent publishes an input event built by the caller, with the
// trace context of the request that brought it (WithTraceParent).
func (e *Engine) publishEvent(ctx context.Context, ev baton.Event) error {
	ev = WithTraceParent(ctx, ev)
	if err := e.bus.Publish(ctx, ev); err != nil {
		return fmt.Errorf("publish %s for chat %s: %w", ev.Type, ev.ChatID(), err)
	}
	return nil
}

// provider returns (and caches) the workflow's model provider.
func (e *Engine) provider(wf *workflow.Workflow) (baton.Provider, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.provCache[wf.Name]; ok {
		return p, nil
	}
	p, err := e.providers(wf)
	if err != nil {
		return nil, err
	}
	e.provCache[wf.Name] = p
	return p, nil
}

// registry returns (and builds once) the workflow's tool registry.
func (e *Engine) registry(wf *workflow.Workflow) (*tool.Registry, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.registries[wf.Name]; ok {
		return r, nil
	}
	servers := make(map[string]tool.MCPServer, len(wf.Config.MCPServers))
	for name, s := range wf.Config.MCPServers {
		servers[name] = tool.MCPServer{Command: s.Command, Args: s.Args, Env: s.Env, URL: s.URL, Headers: s.Headers, HeadersFromEnv: s.HeadersFromEnv, AllowPrivateNetwork: s.AllowPrivateNetwork}
	}
	r, err := tool.New(filepath.Join(e.root, wf.Dir), specsOf(wf), e.toolOptions(servers)...)
	if err != nil {
		return nil, fmt.Errorf("tools of workflow %s: %w", wf.Name, err)
	}
	e.registries[wf.Name] = r
	return r, nil
}

// toolOptions are the options of a workflow's tool registry: the engine's
// own Go tools, ledger, publisher and logger, then Config.ToolOptions (whose
// Go functions may replace the engine's by name).
func (e *Engine) toolOptions(servers map[string]tool.MCPServer) []tool.Option {
	return append([]tool.Option{
		tool.WithFuncs(e.getEventInfoTool(), e.startTaskTool()),
		tool.WithLedger(e.store),
		tool.WithClaimant(tool.Claimant{Holder: e.holder, Gone: e.holderGone}),
		tool.WithPublisher(e.bus),
		tool.WithLogger(e.log),
		tool.WithMCPServers(servers),
	}, e.toolOpts...)
}

// holderGone reports whether the process holding an effect's claim is
// gone, so that its unfinished call is recovered at once instead of after
// the claim's age: this instance before a restart (the same instance id, or
// none for a single process, with another boot id), or another instance —
// tools run only under the chat's lease, which this instance now holds, so
// that instance lost it (died, or stalled and was taken over; its run was
// cancelled with the lease). A claim recorded without a holder (before
// holders were) is left to its age.
func (e *Engine) holderGone(h baton.EffectHolder) bool {
	switch {
	case h.Boot == "" || h == e.holder:
		return false
	case h.Instance == e.holder.Instance:
		return true
	}
	return e.instance != "" && h.Instance != ""
}

// Close stops what the engine started (MCP servers of tool registries, the
// run.cancel watcher). The
// bus and the store belong to the caller.
func (e *Engine) Close() error {
	e.endCreations()
	e.stopWatchingCancels()
	e.wakeMu.Lock()
	for _, t := range e.wakes {
		t.Stop()
	}
	e.wakes = nil
	e.wakeMu.Unlock()
	e.tasks.stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	var first error
	for _, r := range e.registries {
		if err := r.Close(); err != nil && first == nil {
			first = err
		}
	}
	e.registries = map[string]*tool.Registry{}
	return first
}

// specsOf converts a workflow's tools.json entries to tool specs: the same
// fields, the tool package's own type.
func specsOf(wf *workflow.Workflow) []tool.Spec {
	specs := make([]tool.Spec, 0, len(wf.Tools))
	for _, t := range wf.Tools {
		s := tool.Spec{
			Agent: t.Agent, Name: t.Name, File: t.File, Function: t.Function, Description: t.Description,
			ToolType: t.ToolType, Kind: t.Kind, Parameters: t.Parameters,
			TimeoutSeconds: t.TimeoutSeconds, SideEffects: t.SideEffects, MaxConcurrency: t.MaxConcurrency,
			Trigger: t.Trigger, Arguments: t.Arguments, URL: t.URL, Headers: t.Headers, HeadersFromEnv: t.HeadersFromEnv,
			Env: t.Env, Server: t.Server, Tools: t.Tools, Prefix: t.Prefix, AllowPrivateNetwork: t.AllowPrivateNetwork,
		}
		if t.UI != nil {
			s.UI = tool.UISpec{Component: t.UI.Component, Mode: t.UI.Mode}
		}
		if t.A2A != nil {
			s.A2A = tool.A2ASpec{CardURL: t.A2A.CardURL, Skill: t.A2A.Skill, TokenFrom: t.A2A.TokenFrom,
				ModelAnswers: t.A2A.OnInputRequired == workflow.A2AAskModel}
		}
		specs = append(specs, s)
	}
	return specs
}

// cacheSeed derives the chat's seed: one per chat, stable across resumes
// (spec/runtime-lifecycle.md, "Cache seed consistency"). A workflow's
// cache_seed makes it reproducible across chats with the same id too.
func cacheSeed(wf *workflow.Workflow, chatID string) int64 {
	base := int64(0)
	if s := wf.Config.LLM.CacheSeed; s != nil {
		base = *s
	}
	return int64(fnv32(fmt.Sprint(base, "/", chatID)) & 0x7fffffff) // positive and small: some providers reject 64-bit seeds
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// ObserverPublisher hands recorded events to a bus's observers (stream hubs,
// metrics) after the store holds them: it is the recorder's Publisher. It
// never blocks; a slow observer is dropped by the bus.
type ObserverPublisher struct{ Bus Broadcaster }

// Publish broadcasts each recorded event, in order.
func (p ObserverPublisher) Publish(_ baton.Scope, _ string, events []baton.Event) {
	for _, ev := range events {
		_ = p.Bus.Broadcast(ev)
	}
}
