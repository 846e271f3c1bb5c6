package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// Input payloads.
// effectRetryWait is how long a run waits before trying again a tool call
// whose effect another (possibly dead) process claimed.
const effectRetryWait = time.Second

// DefaultMaxAutoReply is how many times an agent's model is called again
// after tool results within one turn when the agent sets no
// max_consecutive_auto_reply.
const DefaultMaxAutoReply = 10

// run is one handler invocation's hold on a chat: the state, and what it
// needs to advance it. It lives only while the handler runs.
type run struct {
	e     *Engine
	scope baton.Scope
	st    *state
	wf    *workflow.Workflow
	prov  baton.Provider
	reg   *tool.Registry

	startMessage string // run.start's message, if any
	startInput   string // the inbox input startMessage came from, if any
	retry        bool   // go on after a recorded error (run.resume, or the person wrote)
	fence        int64  // the chat's lease token, stamped on every append (0: no leases)

	staged staged // applied to st, not yet recorded (see stage)

	waitingFor string // the effect key whose claim elsewhere the run waits for (logged once)

	recordedStatus baton.ChatStatus // the chat's status as last recorded (session.updated on a change)
	quiet          bool             // publish no session.updated: the run handles a session.* event
}

// handle is the engine's bus handler: one input for one chat.
func (e *Engine) handle(ctx context.Context, ev baton.Event) (err error) {
	chatID := ev.ChatID()
	if chatID == "" {
		return baton.Errorf(baton.EINVALID, "%s: no chat (metadata.trigger_session_id)", ev.Type)
	}
	e.active.Add(1)
	defer e.active.Add(-1)
	defer e.countActive(ev.Metadata.Scope())()
	ctx, lease, end, err := e.leased(ctx, chatID)
	if err != nil {
		return fmt.Errorf("%s for chat %s: %w", ev.Type, chatID, err)
	}
	defer end(&err)
	r, err := e.load(ctx, ev.Metadata.Scope(), chatID, true)
	if err != nil {
		return fmt.Errorf("%s for chat %s: %w", ev.Type, chatID, err)
	}
	if lease != nil {
		r.fence = lease.token
	}
	clean := false
	defer func() {
		if clean {
			e.cache.put(r.st) // only a state that matches what was recorded
		}
	}()
	if (ev.Type == baton.TypeUserQuery || ev.Type == baton.TypeUIToolResponse) && r.st.inputs[ev.ID] {
		// Recorded before: a retried publish reached another instance, or
		// came back after the bus's window. Handled once.
		clean = true
		r.logger().Info("engine: input already recorded; skipped", "event_id", ev.ID, "event_type", ev.Type)
		return nil
	}
	switch ev.Type {
	case baton.TypeRunStart:
		var p baton.RunStartPayload
		_ = json.Unmarshal(ev.Payload, &p)
		r.startMessage = p.Message
		if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
			r.startInput = ev.ID // taken from the inbox in the start's append
		}
	case baton.TypeRunResume:
		r.retry = true
	case baton.TypeRunWake:
		if err := r.wake(ctx, ev); err != nil {
			return err
		}
	case baton.TypeUserQuery:
		// The message waits in the chat's inbox; the drive takes it at the
		// run's next input point (takeInput). A chat whose run was cut
		// short (a crash, a lost lease: JetStream redelivers the message
		// before the turn is taken over) goes on with its turn first.
		if err := r.queueInput(ctx, ev); err != nil {
			clean = errors.Is(err, errIgnored)
			return r.ignored(ev, err)
		}
	case baton.TypeUIToolResponse:
		if err := r.uiResponse(ctx, ev); err != nil {
			if errors.Is(err, errIgnored) {
				err = r.dropInput(ctx, ev, err)
			}
			clean = errors.Is(err, errIgnored)
			return r.ignored(ev, err)
		}
	}
	runCtx, done := e.cancellable(ctx, chatID)
	err = r.driveOrStop(runCtx)
	done()
	if err != nil && wasCancelled(ctx, runCtx) {
		// Stopped by the person: the model call or tool in progress was
		// abandoned, nothing of it recorded; the end is recorded instead.
		return e.recordCancelled(ctx, r)
	}
	clean = err == nil
	return err
}

// stopped records, when it can, that the run stopped on err midway (a
// store write that failed, a tool registry that could not be built): the
// chat pauses as failed and resumable, like after a model error, so the
// person's next message or a resume retries the step. Without it the chat
// would stay running with its turn open, ignoring the person's messages
// until a restart. The run's state is ahead of the store after a failed
// write, so the error is recorded from the store's state. A run stopped by
// its context (shutdown), a lost lease (another instance runs the chat) or
// a closed store records nothing: the chat is resumed as it is.
func (r *run) stopped(ctx context.Context, err error) {
	if ctx.Err() != nil || lostLease(err) || errors.Is(err, baton.ErrClosed) || errors.Is(err, context.Canceled) {
		return
	}
	fresh, lerr := r.e.load(ctx, r.scope, r.st.chat.ID, false)
	if lerr == nil {
		if fresh.st.chat.LastSequence == 0 || fresh.st.done {
			// Nothing recorded yet: the input that starts the chat
			// (run.start, with the person's first message) is handled again
			// as it is — redelivered, resumed at restart or by a takeover.
			// An error recorded now would make the chat wait for a retry
			// that has lost the message. Or the chat has ended.
			return
		}
		fresh.fence = r.fence
		agent := ""
		if t := fresh.st.turn; t != nil {
			agent = t.agent
		}
		lerr = fresh.fail(ctx, agent, err)
	}
	if lerr != nil {
		r.logger().Error("engine: the run stopped and its error could not be recorded; the chat is resumed at the next restart", "err", err, "record_err", lerr)
	}
}

// errIgnored marks an input that does not fit the chat's state: logged, not
// a handler failure.
var errIgnored = errors.New("input ignored")

func (r *run) ignored(ev baton.Event, err error) error {
	if errors.Is(err, errIgnored) {
		r.logger().Warn("engine: input ignored", "event_id", ev.ID, "event_type", ev.Type, "reason", err.Error())
		return nil
	}
	return err
}

// load returns a chat's state: the cached one caught up with the store, or
// (cached false, or none cached) one rebuilt from the store alone.
func (e *Engine) load(ctx context.Context, scope baton.Scope, chatID string, cached bool) (*run, error) {
	chat, err := e.store.GetChat(ctx, scope, chatID) // the tenant check, in the store's query
	if err != nil {
		return nil, err
	}
	wf := e.workflows[chat.Workflow]
	if wf == nil {
		return nil, baton.Errorf(baton.ENOTFOUND, "workflow %q of chat %s: not loaded", chat.Workflow, chatID)
	}
	var st *state
	if cached {
		st = e.cache.take(chatID)
	}
	if st != nil && (st.chat.App != chat.App || st.chat.User != chat.User || st.wf != wf || st.chat.LastSequence > chat.LastSequence) {
		st = nil // not this chat as the store knows it
	}
	if st == nil {
		st = newState(chat, wf)
		st.chat.LastSequence = 0 // nothing folded yet
		// About a third of a chat's events are messages (person, text, tool
		// result of a turn of ~11 events): room for them at once.
		st.messages = make([]baton.Message, 0, chat.LastSequence/3+8)
	}
	// Fold what the store holds beyond the state (everything, for a new one).
	for after := st.chat.LastSequence; after < chat.LastSequence; {
		page, err := e.store.Events(ctx, scope, chatID, after, 1000)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		for i := range page {
			st.apply(&page[i])
		}
		after = page[len(page)-1].Sequence
	}
	st.sync(chat)
	prov, err := e.provider(wf)
	if err != nil {
		return nil, err
	}
	reg, err := e.registry(wf)
	if err != nil {
		return nil, err
	}
	return &run{
		e: e, scope: scope, st: st, wf: wf, prov: prov, reg: reg, recordedStatus: chat.Status,
	}, nil
}

// record appends events — with whatever the run has staged before them —
// through the recorder. When it returns nil they are durable and published.
func (r *run) record(ctx context.Context, events []baton.Event, u *baton.ChatUpdate) error {
	r.stage(events, u)
	return r.flush(ctx)
}

// staged is what a run has applied to its state but not yet recorded: the
// events and the chat-row change they make (with the usage rows of the
// model calls among them), appended in one transaction by the next flush.
type staged struct {
	events []baton.Event
	u      baton.ChatUpdate
}

func (s *staged) empty() bool {
	u := &s.u
	return len(s.events) == 0 && len(u.Usage) == 0 && u.Status == nil && u.TurnAgent == nil &&
		len(u.Context) == 0 && len(u.AddPending) == 0 && len(u.ResolvePending) == 0 && len(u.ConsumeInputs) == 0
}

// stage folds events and u into the state at once and keeps them for the
// next flush. A step whose effects may be repeated stages (a run that dies
// before the flush does the step again, from the last recorded one); what
// must not be repeated, or must be seen before something else happens,
// flushes first: a model call (its stream.* deltas follow the events before
// it, and the budget reads the recorded usage), a tool that is not a plain
// Go function without side effects, a lifecycle tool, an auto-tool, and the
// end of every drive (a pause or the end of the chat). So a turn of the
// person, a Go tool and two model calls is three appends, not six.
func (r *run) stage(events []baton.Event, u *baton.ChatUpdate) {
	st, b := r.st, &r.staged
	if u == nil {
		u = &baton.ChatUpdate{}
	}
	if u.Status == nil && st.chat.Status != baton.ChatRunning {
		running := baton.ChatRunning
		u.Status = &running
	}
	for i := range events {
		st.apply(&events[i])
	}
	if b.events == nil {
		b.events = make([]baton.Event, 0, max(len(events), 8)) // a turn's appends hold 3 to 5 events
	}
	b.events = append(b.events, events...)
	if u.Status != nil {
		st.chat.Status = *u.Status
		s := *u.Status
		b.u.Status = &s
	}
	if u.TurnAgent != nil {
		st.chat.TurnAgent = *u.TurnAgent
		a := *u.TurnAgent
		b.u.TurnAgent = &a
	}
	if len(u.Context) > 0 {
		if b.u.Context == nil {
			b.u.Context = make(map[string]json.RawMessage, len(u.Context))
		}
		for k, v := range u.Context {
			st.setVar(k, v)
			b.u.Context[k] = v
		}
	}
	b.u.AddPending = append(b.u.AddPending, u.AddPending...)
	b.u.ResolvePending = append(b.u.ResolvePending, u.ResolvePending...)
	b.u.ConsumeInputs = append(b.u.ConsumeInputs, u.ConsumeInputs...)
	b.u.Usage = append(b.u.Usage, u.Usage...)
}

// flush records what the run staged in one append, with the usage rows of
// the model calls it reports. When it returns nil, everything the state
// holds is durable and published. When it fails nothing staged is recorded
// (but the usage rows, alone: see usageAlone), the state is ahead of the
// store, and the run must end with the error (its state is then dropped,
// not cached).
func (r *run) flush(ctx context.Context) error {
	b := &r.staged
	if b.empty() {
		return nil
	}
	events, u := b.events, b.u
	r.staged = staged{}
	if r.fence > 0 {
		u.Fence = r.fence // the store refuses the append if another instance took the chat over
	}
	var recorded []baton.Event
	var err error
	if len(events) > 0 || u.Status != nil || u.TurnAgent != nil || len(u.Context) > 0 || len(u.AddPending) > 0 || len(u.ResolvePending) > 0 || len(u.ConsumeInputs) > 0 || len(u.Usage) > 0 {
		recorded, err = r.e.rec.Record(ctx, r.scope, r.st.chat.ID, events, &u)
	}
	if err != nil {
		r.usageAlone(ctx, u.Usage)
		return fmt.Errorf("record %d events: %w", len(events), err)
	}
	synthetic := 0
	for i := range recorded {
		if s := recorded[i].Sequence; s > r.st.chat.LastSequence {
			r.st.chat.LastSequence = s
		}
		if recorded[i].Type == baton.TypeChatSelectSpeaker && bytes.Contains(recorded[i].Payload, []byte(`"_synthetic":true`)) {
			synthetic++
		}
	}
	if synthetic > 0 {
		r.e.synthMu.Lock()
		r.e.synthetic[r.wf.Name] += int64(synthetic)
		r.e.synthMu.Unlock()
	}
	if u.Status != nil && *u.Status != r.recordedStatus {
		// The chat resumed, paused, failed or ended: rules on session.*
		// see it (a run handling a session.* event publishes none, so
		// that a rule waking an agent on them cannot feed itself).
		prev := r.recordedStatus
		r.recordedStatus = *u.Status
		if !r.quiet {
			r.e.publishSession(ctx, r.scope, baton.TypeSessionUpdated, r.st.chat, prev)
		}
	}
	return nil
}

// usageAloneTimeout bounds usageAlone's writes.
const usageAloneTimeout = 2 * time.Second

// usageAlone records, on their own, the usage rows of an append that
// failed. A model call's row goes in the append that records the call's
// chat.usage_summary, so that the row is durable with it and before the
// next call's budget check; but the provider billed the call whether or not
// the append was made, and budgets must see what was spent. So the rows of
// a failed append are written alone (best effort, logged on failure), and
// a turn run again after it counts its new calls too, as they are billed
// too. The run's context may be what ended (a lost lease, a shutdown), so
// the writes get their own, bounded one.
func (r *run) usageAlone(ctx context.Context, usage []baton.UsageRecord) {
	if len(usage) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), usageAloneTimeout)
	defer cancel()
	for _, rec := range usage {
		if err := r.e.store.RecordUsage(ctx, r.scope, rec); err != nil {
			r.e.log.Warn("engine: record usage of a failed append", "chat_id", rec.ChatID, "agent", rec.Agent, "err", err)
		}
	}
}

// driveOrStop drives the chat and, when the run stops on an error midway,
// records it (stopped).
func (r *run) driveOrStop(ctx context.Context) error {
	err := r.drive(ctx)
	if err != nil {
		r.stopped(ctx, err)
	}
	return err
}

// drive advances the chat until it pauses or ends, and records what it
// staged. Each step records or stages events; what the next step is depends
// only on the state.
func (r *run) drive(ctx context.Context) error {
	if err := r.steps(ctx); err != nil {
		// What was staged before the failure happened: record it, as each
		// step once did at once, so a retry goes on from there (best effort;
		// if it fails too, the retry goes on from the last flush).
		if ferr := r.flush(ctx); ferr != nil {
			r.logger().Debug("engine: flush after a failed step", "err", ferr)
		}
		return err
	}
	return r.flush(ctx)
}

func (r *run) steps(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		st := r.st
		t := st.turn
		var err error
		switch {
		case st.done:
			// A message accepted while the run went on, which ended first
			// (completed, budget reached): it starts the next run.
			var took bool
			if took, err = r.takeInput(ctx); err == nil && !took {
				return nil
			}
		case st.isFailed() && !r.retry:
			// Paused after an error until a retry: a message is one.
			var took bool
			if took, err = r.takeInput(ctx); err == nil && !took {
				return nil
			}
			r.retry = took
		case len(st.waitingUI()) > 0:
			// Waiting for the person: a UI tool, a form, a secret. A
			// response kept in the inbox whose first handling failed is
			// taken now, by whatever event runs the chat (a resume, a
			// redelivery), not only by its own bus event, which the
			// client's retry with the same key does not bring back while
			// the bus remembers its id.
			var took bool
			if took, err = r.takeUIResponse(ctx); err == nil && !took {
				return nil
			}
		case st.terminating:
			if lt := r.nextLifecycle(workflow.AfterChat, "", "chat"); lt != nil {
				err = r.runLifecycle(ctx, lt, workflow.AfterChat, "", "chat")
			} else {
				err = r.complete(ctx, "success", "TerminateTarget reached")
			}
		case t != nil && t.calls == 0 && r.nextLifecycle(workflow.BeforeAgent, t.agent, t.key) != nil:
			err = r.runLifecycle(ctx, r.nextLifecycle(workflow.BeforeAgent, t.agent, t.key), workflow.BeforeAgent, t.agent, t.key)
		case t != nil && len(t.open) > 0:
			if !r.deferrable(t.open[0]) {
				if err = r.flush(ctx); err != nil {
					break
				}
			}
			err = r.runTool(ctx, t.open[0])
		case t != nil && !t.finished && t.transfer == "" && t.calls <= r.maxAutoReply(t.agent)+t.retries:
			if r.retry && st.chat.Status != baton.ChatRunning {
				// A retry after an error: the chat runs again, and says so
				// before the model call, so that a crash during it leaves a
				// running chat, which a restart resumes.
				running := baton.ChatRunning
				r.stage(nil, &baton.ChatUpdate{Status: &running})
			}
			r.retry = false
			if err = r.flush(ctx); err != nil {
				break
			}
			if over, reason := r.overBudget(ctx); over {
				err = r.complete(ctx, "budget_exceeded", reason)
				break
			}
			err = r.callModel(ctx)
		case t != nil && t.structured != nil && !t.autoFired && r.isAutoToolAgent(t.agent):
			if err = r.flush(ctx); err != nil {
				break
			}
			err = r.fireAutoTool(ctx)
		case t != nil && r.nextLifecycle(workflow.AfterAgent, t.agent, t.key) != nil:
			err = r.runLifecycle(ctx, r.nextLifecycle(workflow.AfterAgent, t.agent, t.key), workflow.AfterAgent, t.agent, t.key)
		case t != nil:
			err = r.handoff(ctx)
		case st.next == workflow.UserAgent:
			// Waiting for the person: a message in the inbox (sent while
			// the run went on, or before a restart) is taken now.
			var took bool
			if took, err = r.takeInput(ctx); err == nil && !took {
				return nil
			}
		case st.next == "":
			if st.started || st.turns > 0 {
				return nil // nothing left to do
			}
			if lt := r.nextLifecycle(workflow.BeforeChat, "", "chat"); lt != nil {
				err = r.runLifecycle(ctx, lt, workflow.BeforeChat, "", "chat")
				break
			}
			if r.startMessage == "" {
				// The start's message waits in the inbox when the run.start
				// that carried it was lost (a restart: the chat is resumed)
				// or handled before a before_chat pause.
				if err = r.takeStart(ctx); err != nil {
					break
				}
			}
			err = r.start(ctx)
			if st.next == "" && !st.done && !st.terminating {
				return err // UserDriven: waits for the first message
			}
		case st.turns >= r.wf.MaxTurns():
			err = r.complete(ctx, "max_turns", fmt.Sprintf("max_turns (%d) reached", r.wf.MaxTurns()))
		default:
			err = r.startTurn(ctx, st.next)
		}
		if err != nil {
			return err
		}
	}
}

// overBudget asks the budget hook, if any, before a model call.
func (r *run) overBudget(ctx context.Context) (bool, string) {
	if r.e.budget == nil {
		return false, ""
	}
	over, reason, err := r.e.budget(ctx, r.scope, r.st.chat, r.wf)
	if err != nil {
		r.logger().Warn("engine: budget check failed; the call goes ahead", "err", err)
		return false, ""
	}
	return over, reason
}

func (r *run) isAutoToolAgent(name string) bool {
	a := r.wf.Agent(name)
	return a != nil && a.AutoToolMode && a.AutoTool() != nil
}

func (r *run) maxAutoReply(agent string) int {
	if a := r.wf.Agent(agent); a != nil && a.MaxConsecutiveAutoReply > 0 {
		return a.MaxConsecutiveAutoReply
	}
	return DefaultMaxAutoReply
}

// start records how a fresh chat begins (orchestration.startup_mode).
func (r *run) start(ctx context.Context) error {
	o := r.wf.Config.Orchestration
	if o.StartupMode == workflow.UserDriven && r.startMessage == "" {
		ev := baton.NewChatEvent(baton.TypeChatInputRequest, r.st.chat.ID, "", baton.InputRequestPayload{
			Kind: "input_request", Prompt: o.InitialMessage, RequestID: "input_" + r.st.chat.ID + "_0",
		})
		waiting := baton.ChatWaitingInput
		r.stage([]baton.Event{ev}, &baton.ChatUpdate{Status: &waiting})
		return nil
	}
	msg, source, hidden := r.startMessage, "api", false
	if msg == "" {
		// The workflow's own initial_message starts the conversation for the
		// model; the person did not type it, so it is not shown as theirs.
		msg, source, hidden = o.InitialMessage, "initial_message", true
	}
	var events []baton.Event
	user := workflow.UserAgent
	if msg != "" {
		events = append(events, r.synthetic(user, msg)...) // after a before_chat form, the system spoke last
		events = append(events, baton.NewChatEvent(baton.TypeChatText, r.st.chat.ID, user, baton.TextPayload{
			Kind: "text", Agent: user, Content: msg, Index: r.st.texts, Source: source, UIHidden: hidden,
		}))
	}
	events = append(events, baton.NewChatEvent(baton.TypeChatHandoff, r.st.chat.ID, user, baton.HandoffPayload{
		Kind: "handoff", From: user, To: o.InitialAgent, HandoffType: "start", TransitionTarget: workflow.AgentTarget,
	}))
	u := &baton.ChatUpdate{TurnAgent: &user}
	if r.startInput != "" {
		u.ConsumeInputs = []string{r.startInput}
	}
	r.stage(events, u)
	return nil
}

// userInput records the person's message (the echo every client shows) and
// who answers it.
func (r *run) userInput(ctx context.Context, ev baton.Event) error {
	var q baton.UserQueryPayload
	if err := json.Unmarshal(ev.Payload, &q); err != nil {
		return fmt.Errorf("%w: payload: %v", errIgnored, err)
	}
	content := strings.TrimSpace(q.Content)
	st := r.st
	switch {
	case content == "":
		return fmt.Errorf("%w: empty message", errIgnored)
	case st.turn != nil && !st.isFailed():
		return fmt.Errorf("%w: the chat waits for a UI tool response, not a message", errIgnored)
	}
	if !st.started && st.turns == 0 && st.next == "" {
		// A message before the chat started (a UserDriven chat's first input
		// arriving with run.start): it is the start message.
		r.startMessage, r.startInput = content, ev.ID
		return r.start(ctx)
	}
	user := workflow.UserAgent
	events := r.synthetic(user, content)
	events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, user, baton.TextPayload{
		Kind: "text", Agent: user, Content: content, Index: st.texts, Source: q.Source, InputID: ev.ID,
	}))
	// Taken from the inbox in the append that records it: once, whatever
	// comes between (a crash, a redelivery, another instance).
	u := &baton.ChatUpdate{TurnAgent: &user, ConsumeInputs: []string{ev.ID}}
	if st.turn == nil {
		// After the end of the chat too: the message starts the next run
		// (the fold reopens a chat on a handoff from the person).
		events = append(events, baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, user, r.afterUser()))
	}
	r.stage(events, u) // recorded before the model answers it (drive flushes)
	return nil
}

// queueInput makes sure a user_query is in its chat's inbox, where the run
// takes it at its next input point (takeInput). One published through
// Submit is there already; one published straight on the bus (an app's own
// user_query) is kept now, unless the chat has ended: only a message the
// chat accepted while it ran starts a next run.
func (r *run) queueInput(ctx context.Context, ev baton.Event) error {
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
		return nil
	}
	var q baton.UserQueryPayload
	if err := json.Unmarshal(ev.Payload, &q); err != nil {
		return fmt.Errorf("%w: payload: %v", errIgnored, err)
	}
	switch {
	case strings.TrimSpace(q.Content) == "":
		return fmt.Errorf("%w: empty message", errIgnored)
	case r.st.done:
		return fmt.Errorf("%w: the chat has ended", errIgnored)
	}
	if _, _, err := r.e.store.AddInput(ctx, r.scope, ev); err != nil {
		return fmt.Errorf("keep the message in the inbox: %w", err)
	}
	return nil
}

// takeInput takes the oldest message waiting in the chat's inbox, if any,
// at an input point of the run (the chat waits for the person, failed, or
// ended): it stages the message's chat.text, which marks it taken in the
// same append. A message that cannot be taken (empty) is marked taken with
// nothing recorded.
func (r *run) takeInput(ctx context.Context) (bool, error) {
	ins, err := r.e.store.Inputs(ctx, r.scope, r.st.chat.ID)
	if err != nil {
		return false, fmt.Errorf("read the inbox: %w", err)
	}
	for _, in := range ins {
		ev := in.Event
		if ev.Type != baton.TypeUserQuery || r.staged.consumes(ev.ID) {
			continue // a UI response is taken by the request it answers
		}
		if r.st.inputs[ev.ID] {
			// Recorded and not marked taken: recorded before the inbox
			// existed. Marked now.
			r.stage(nil, &baton.ChatUpdate{Status: &r.st.chat.Status, ConsumeInputs: []string{ev.ID}})
			continue
		}
		if err := r.userInput(ctx, ev); err != nil {
			if !errors.Is(err, errIgnored) {
				return false, err
			}
			r.logger().Warn("engine: input dropped", "event_id", ev.ID, "reason", err.Error())
			r.stage(nil, &baton.ChatUpdate{Status: &r.st.chat.Status, ConsumeInputs: []string{ev.ID}})
			continue
		}
		return true, nil
	}
	return false, nil
}

// takeUIResponse records a ui.tool.response waiting in the inbox that
// answers one of the chat's pending requests, consuming it in the same
// append (uiResponse), and reports whether it took one. A kept response that
// fits no pending request is left to its own event, which drops it.
func (r *run) takeUIResponse(ctx context.Context) (bool, error) {
	ins, err := r.e.store.Inputs(ctx, r.scope, r.st.chat.ID)
	if err != nil {
		return false, fmt.Errorf("read the inbox: %w", err)
	}
	waiting := r.st.waitingUI()
	for _, in := range ins {
		ev := in.Event
		if ev.Type != baton.TypeUIToolResponse || r.staged.consumes(ev.ID) || r.st.inputs[ev.ID] {
			continue
		}
		var p baton.UIToolResponsePayload
		if json.Unmarshal(ev.Payload, &p) != nil {
			continue
		}
		if !slices.ContainsFunc(waiting, func(c openCall) bool { return c.uiEventID == p.UIEventID }) {
			continue
		}
		if err := r.uiResponse(ctx, ev); err != nil {
			if !errors.Is(err, errIgnored) {
				return false, err
			}
			if err := r.dropInput(ctx, ev, err); !errors.Is(err, errIgnored) {
				return false, err
			}
			r.logger().Warn("engine: input dropped", "event_id", ev.ID, "reason", err.Error())
			continue
		}
		r.logger().Info("engine: UI response taken from the inbox", "event_id", ev.ID, "ui_event_id", p.UIEventID)
		return true, nil
	}
	return false, nil
}

// takeStart finds the person's first message of a chat not started yet in
// its inbox (the run.start kept by Start), for start to record and take.
func (r *run) takeStart(ctx context.Context) error {
	ins, err := r.e.store.Inputs(ctx, r.scope, r.st.chat.ID)
	if err != nil {
		return fmt.Errorf("read the inbox: %w", err)
	}
	for _, in := range ins {
		if in.Event.Type != baton.TypeRunStart {
			continue
		}
		var p baton.RunStartPayload
		_ = json.Unmarshal(in.Event.Payload, &p)
		r.startMessage, r.startInput = p.Message, in.Event.ID
		return nil
	}
	return nil
}

// consumes reports whether the staged append takes input id.
func (s *staged) consumes(id string) bool {
	for _, c := range s.u.ConsumeInputs {
		if c == id {
			return true
		}
	}
	return false
}

// dropInput marks a UI response the chat cannot take (cause: not pending
// any more) taken, recording nothing, so that recovery does not publish it
// again; it returns cause, or the error of the write.
func (r *run) dropInput(ctx context.Context, ev baton.Event, cause error) error {
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; !kept {
		return cause
	}
	status := r.st.chat.Status
	if err := r.record(ctx, nil, &baton.ChatUpdate{Status: &status, ConsumeInputs: []string{ev.ID}}); err != nil && !errors.Is(err, baton.ErrConflict) {
		return fmt.Errorf("drop input %s: %w", ev.ID, err)
	}
	return cause
}

// afterUser decides who answers the person: the first matching rule whose
// source is "user", else the agent that handed over to them, else the
// initial agent.
func (r *run) afterUser() baton.HandoffPayload {
	if rule := r.pickRule(workflow.UserAgent); rule != nil &&
		(rule.TransitionTarget == workflow.AgentTarget || rule.TransitionTarget == workflow.TerminateTarget) {
		return baton.HandoffPayload{Kind: "handoff", From: workflow.UserAgent, To: rule.TargetAgent, HandoffType: rule.HandoffType,
			TransitionTarget: rule.TransitionTarget, Condition: rule.Condition}
	}
	to := r.st.revertedFrom
	if to == "" {
		to = r.wf.Config.Orchestration.InitialAgent
	}
	return baton.HandoffPayload{Kind: "handoff", From: workflow.UserAgent, To: to, HandoffType: "user_input", TransitionTarget: workflow.AgentTarget}
}

// pickRule returns the rule that fires for source after its turn
// (docs/workflow-format.md, "When rules fire"): the first condition rule, in
// file order, whose condition is true; else the first after_work rule whose
// condition, if any, is true; else nil. llm rules fire only through their
// transfer tool.
func (r *run) pickRule(source string) *workflow.HandoffRule {
	rules := r.wf.HandoffRules(source)
	for _, kind := range []string{workflow.HandoffCondition, workflow.HandoffAfterWork} {
		for _, rule := range rules {
			if rule.HandoffType == kind && r.ruleApplies(rule) {
				return rule
			}
		}
	}
	return nil
}

// uiResponse records the person's answer to a pending UI tool call: a
// tool the model called, an auto-tool, or a lifecycle tool (whose secrets
// are sealed, never recorded). After a lifecycle pause the chat resumes with
// the internal resume signal (spec/synthetic-events.md).
func (r *run) uiResponse(ctx context.Context, ev baton.Event) error {
	var p baton.UIToolResponsePayload
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return fmt.Errorf("%w: payload: %v", errIgnored, err)
	}
	st := r.st
	waiting := st.waitingUI()
	var call *openCall
	for i := range waiting {
		if waiting[i].uiEventID == p.UIEventID {
			call = &waiting[i]
		}
	}
	if call == nil {
		return fmt.Errorf("%w: ui_event_id %q is not pending in this chat", errIgnored, p.UIEventID)
	}
	if p.Status == "" {
		p.Status = "success"
	}
	corr := call.id
	if st.turn != nil {
		corr = st.turn.key
	}
	u := &baton.ChatUpdate{ResolvePending: []string{p.UIEventID}}
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
		u.ConsumeInputs = []string{ev.ID} // taken from the inbox in the append that records it
	}
	data := p.Data
	var secretNames []string
	if call.pendingKind == baton.PendingSecret {
		if len(p.Data) > 0 {
			return fmt.Errorf("%w: a secret form's values must arrive sealed (use Engine.RespondUI)", errIgnored)
		}
		box, redacted, names := mergeSealed(st.vars[secretsVar], p.Sealed)
		u.Context = map[string]json.RawMessage{secretsVar: box} // the snapshot only: no event carries it
		data, secretNames = redacted, names
	}
	res := tool.UIResult{Status: p.Status, UIEventID: p.UIEventID, Data: data}
	result := res.ToolResult()
	if p.Status == uiStatusTimeout {
		result.Content = fmt.Sprintf("Timed out: the person did not respond to %s in time. Go on without it.", call.name)
	}
	payload, _ := json.Marshal(res)
	var events []baton.Event
	switch call.interaction {
	case interactionAutoTool:
		ar := r.autoResponse(call.agent, call.name, call.id, result, payload, p.UIEventID)
		ar.Payload = withInputID(ar.Payload, ev.ID)
		events = append(events, ar)
	default:
		content := result.Content
		if secretNames != nil {
			content = "Secrets received: " + strings.Join(secretNames, ", ") + "."
		}
		events = append(events, baton.NewChatEvent(baton.TypeChatToolResponse, st.chat.ID, call.agent, baton.ToolResponsePayload{
			Kind: "tool_response", Agent: call.agent, ToolName: call.name, ToolCallID: call.id, CallID: call.id, Corr: corr,
			Status: result.Status, Success: result.OK(), Content: content, Payload: payload, UIEventID: p.UIEventID,
			InteractionType: call.interaction, InputID: ev.ID,
		}))
	}
	if patch, ctxEv := r.toolDerived(call.agent, call.name, result.OK(), nil); ctxEv != nil {
		events = append(events, *ctxEv)
		if u.Context == nil {
			u.Context = map[string]json.RawMessage{}
		}
		for k, v := range patch {
			u.Context[k] = v
		}
	}
	if len(waiting) > 1 {
		still := baton.ChatWaitingUITool
		u.Status = &still
	} else if call.interaction == interactionLifecycle {
		// The pause had no text of the person's: resume with the signal,
		// shown as the system's (its text is hidden; its bubble is not).
		events = append(events, baton.NewChatEvent(baton.TypeChatWorkflowResumed, st.chat.ID, systemAgent, baton.WorkflowResumedPayload{
			Kind: "workflow_resumed", Reason: "lifecycle_tool", Agent: call.agent,
		}))
		events = append(events, r.synthetic(systemAgent, ResumeSignal)...)
		events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, systemAgent, baton.TextPayload{
			Kind: "text", Agent: systemAgent, Content: ResumeSignal, Index: st.texts, UIHidden: true,
		}))
		sys := systemAgent
		u.TurnAgent = &sys
	}
	return r.record(ctx, events, u)
}

// withInputID adds input_id to a tool_response payload.
func withInputID(payload json.RawMessage, id string) json.RawMessage {
	var p baton.ToolResponsePayload
	if json.Unmarshal(payload, &p) != nil {
		return payload
	}
	p.InputID = id
	out, _ := json.Marshal(p)
	return out
}

// startTurn records the native select_speaker that begins agent's turn.
func (r *run) startTurn(ctx context.Context, agent string) error {
	idx := r.st.turns
	ev := baton.NewChatEvent(baton.TypeChatSelectSpeaker, r.st.chat.ID, agent, baton.SelectSpeakerPayload{
		Kind: "select_speaker", Agent: agent, Source: "native", TurnKey: turnKey(r.st.chat.ID, agent, idx), TurnIndex: idx,
		Prompt: r.st.nextPrompt,
	})
	r.e.turns.Add(1)
	r.stage([]baton.Event{ev}, nil)
	return nil
}

// synthetic returns the synthetic select_speaker that must precede a text
// from sender when the speaker changed and no select_speaker for it was
// recorded since the last text (spec/synthetic-events.md). The resume
// signal shows as agent "system".
func (r *run) synthetic(sender, content string) []baton.Event {
	if sender == r.st.turnAgent || sender == r.st.selected || r.st.turnAgent == "" {
		return nil // no change of speaker, or the chat's first text: nobody spoke before it
	}
	display := sender
	if strings.Contains(content, ResumeSignal) {
		display = "system"
	}
	if r.e.log.Enabled(context.Background(), slog.LevelDebug) {
		r.logger().Debug("[SYNTHETIC_SPEAKER] Emitted synthetic select_speaker", "agent", display)
	}
	return []baton.Event{syntheticEvent(r.st.chat.ID, display, r.st.turns)}
}

func syntheticEvent(chatID, agent string, turns int) baton.Event {
	return baton.NewChatEvent(baton.TypeChatSelectSpeaker, chatID, agent, baton.SelectSpeakerPayload{
		Kind: "select_speaker", Agent: agent, Source: "synthetic", Synthetic: true, TurnIndex: turns,
	})
}

// ResumeSignal is the internal message that resumes a chat after a pause
// without the person's text (spec/synthetic-events.md).
const ResumeSignal = "[SYSTEM_RESUME_SIGNAL]"

// callModel streams one model call of the current turn and records its
// result: the text (or the fallback for a tool-only reply), the tool calls,
// the usage, and any derived variables the text sets.
func (r *run) callModel(ctx context.Context) error {
	st, t := r.st, r.st.turn
	agent := r.wf.Agent(t.agent)
	if agent == nil {
		return r.fail(ctx, t.agent, baton.Errorf(baton.ENOTFOUND, "agent %q: not in workflow %s", t.agent, r.wf.Name))
	}
	cfg := r.wf.LLMFor(agent.Name)
	msgID := fmt.Sprintf("%s_m%d", t.key, t.calls)
	msgs := make([]baton.Message, 0, len(st.messages)+1)
	system := st.systemMessage(agent)
	if t.prompt != "" {
		system += "\n\n" + t.prompt // an event rule's prompt, for this turn only
	}
	msgs = append(msgs, baton.Message{Role: baton.RoleSystem, Name: agent.Name, Content: system})
	msgs = append(msgs, st.messages...)
	tools, err := r.toolDefs(ctx, agent.Name)
	if err != nil {
		return r.fail(ctx, agent.Name, err)
	}
	seed := st.chat.CacheSeed
	req := &baton.Request{
		ChatID: st.chat.ID, Agent: agent.Name, MessageID: msgID, Messages: msgs, Tools: tools,
		Params: baton.ModelParams{Model: cfg.Model, Temperature: cfg.Temperature, MaxTokens: cfg.MaxTokens, Seed: &seed,
			Timeout: cfg.Timeout(), FirstTokenTimeout: cfg.FirstTokenTimeout(), IdleTimeout: cfg.IdleTimeout()},
	}
	if m := agent.Model(); m != nil && agent.StructuredOutputsRequired {
		req.ResponseFormat = &baton.ResponseFormat{Name: m.Name, Schema: m.Schema()}
	}

	var acc llm.Accumulator
	_ = r.e.cast.Broadcast(llm.ModelCallEvent(req, llm.ProviderName(r.prov)))
	gate := newTextGate(r.wf, agent) // hidden text never streams (hidden.go)
	emit := func(d baton.Delta) {    // msgID is the current attempt's
		if ev, ok := llm.StreamEvent(st.chat.ID, agent.Name, msgID, d); ok {
			_ = r.e.cast.Broadcast(ev) // observers are never waited for
		}
	}
	firstID, attempt := msgID, 1
	var streamErr, recordErr error
	callCtx, endCall := r.e.modelCall(ctx, st.chat.ID) // a message may interrupt it (double_texting)
	defer endCall()
	for d, err := range r.prov.Stream(callCtx, req) {
		if err != nil {
			streamErr = err
			break
		}
		if d.Kind == baton.DeltaRetry {
			if d.Retry == nil { // a provider that says no more than "again"
				d.Retry = &baton.Retry{}
			}
			// The provider sends the call again from scratch. Nothing of
			// the failed attempt is recorded (the call's result is staged
			// only when it ends), so its deltas are void: its stream.error
			// says so, and the retry streams under a new message id, so a
			// client never mixes the two replies in one bubble.
			acc.Add(d)
			_ = r.e.cast.Broadcast(llm.StreamErrorEvent(st.chat.ID, agent.Name, msgID, d.Retry.Err, true))
			if recordErr = r.record(ctx, []baton.Event{r.retryNotice(agent.Name, d.Retry)}, nil); recordErr != nil {
				break // stopping the loop ends the call
			}
			attempt++
			msgID = fmt.Sprintf("%s_a%d", firstID, attempt)
			_ = r.e.cast.Broadcast(llm.StreamStartEvent(st.chat.ID, agent.Name, msgID))
			gate = newTextGate(r.wf, agent) // what the void attempt held goes with it
			continue
		}
		acc.Add(d)
		gate.pass(d, emit)
	}
	if recordErr != nil {
		_ = r.e.cast.Broadcast(llm.StreamErrorEvent(st.chat.ID, agent.Name, msgID, recordErr, false))
		return recordErr
	}
	if streamErr == nil && errors.Is(context.Cause(callCtx), errInterrupted) {
		streamErr = errInterrupted // the stream ended as it was stopped
	}
	if streamErr != nil {
		if ctx.Err() != nil {
			return ctx.Err() // shutting down: nothing recorded, the turn resumes later
		}
		if errors.Is(context.Cause(callCtx), errInterrupted) {
			return r.interrupted(agent.Name, msgID, t.key, &acc, gate)
		}
		_ = r.e.cast.Broadcast(llm.StreamErrorEvent(st.chat.ID, agent.Name, msgID, streamErr, false))
		return r.fail(ctx, agent.Name, streamErr)
	}

	usage := acc.Usage()
	cost := llm.Cost(cfg.Model, usage, pricing(r.wf))
	text := acc.Text()
	calls := acc.ToolCalls()
	var events []baton.Event
	u := &baton.ChatUpdate{TurnAgent: &agent.Name}
	hidden := agent.AutoToolMode // its raw JSON is shown by the component, not as text
	var ctxEv *baton.Event
	if len(calls) == 0 {
		// Only a final text sets derived variables; a text that goes with
		// tool calls is the agent thinking aloud.
		var h bool
		h, u.Context, ctxEv = r.textDerived(agent.Name, text)
		hidden = hidden || h
	}
	gate.end(hidden, emit)
	events = append(events, r.synthetic(agent.Name, text)...)
	toolOnly := strings.TrimSpace(text) == "" && len(calls) > 0 // as FinalText decides on the fallback
	events = append(events, r.textEvent(agent.Name, msgID, t.key, acc.FinalText(), toolOnly, len(calls) > 0, hidden, usage, cost, gate.retraction(hidden, msgID)))
	if ctxEv != nil {
		events = append(events, *ctxEv)
	}
	usageRecorded := false
	usageEv := baton.NewChatEvent(baton.TypeChatUsageSummary, st.chat.ID, agent.Name, baton.UsageSummaryPayload{
		Kind: "usage_summary", Agent: agent.Name, Model: cfg.Model, AgentMessageID: msgID,
		PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens, CachedTokens: usage.CachedTokens,
		ReasoningTokens: usage.ReasoningTokens, TotalTokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost,
	})
	if len(calls) == 0 && agent.StructuredOutputsRequired && agent.Model() != nil {
		// The usage goes before the outcome: a chat.error must be the last
		// event of the append, as the fold reads it.
		events = append(events, usageEv)
		usageRecorded = true
		more, failed, patch := r.structuredResult(agent, text)
		events = append(events, more...)
		for k, v := range patch {
			if u.Context == nil {
				u.Context = map[string]json.RawMessage{}
			}
			u.Context[k] = v
		}
		if failed {
			st := baton.ChatFailed
			u.Status = &st
		}
	}
	for i, c := range calls {
		ev, pending, err := r.toolCallEvent(ctx, agent.Name, msgID, t.key, i, c)
		if err != nil {
			return err
		}
		events = append(events, ev)
		if pending != nil {
			u.AddPending = append(u.AddPending, *pending)
		}
	}
	if len(u.AddPending) > 0 {
		waiting := baton.ChatWaitingUITool
		u.Status = &waiting
	}
	if !usageRecorded {
		events = append(events, usageEv)
	}
	// Staged: recorded before anything that must not be repeated (the next
	// model call, a tool with effects, a pause); a crash before that asks
	// the model again, as it would have before the text was recorded.
	// The call's usage row goes in the same append (see flush). A row the
	// store would refuse is logged and left out, never a run error
	// (invariant 9).
	rec := baton.UsageRecord{ChatID: st.chat.ID, Workflow: r.wf.Name, Agent: agent.Name, Model: cfg.Model, Usage: usage, Cost: cost}
	if err := rec.Validate(); err != nil {
		r.e.log.Warn("engine: record usage", "chat_id", rec.ChatID, "agent", rec.Agent, "err", err)
	} else {
		u.Usage = []baton.UsageRecord{rec}
	}
	r.stage(events, u)
	return nil
}

// retryNotice is the chat.notice recorded while a model call is retried, so
// that the person sees why the reply is late (or started over) instead of
// silence.
func (r *run) retryNotice(agent string, rt *baton.Retry) baton.Event {
	var what string
	switch llm.StreamCode(rt.Err) {
	case string(baton.ProviderTimeoutFirstToken), string(baton.ProviderTimeoutIdle):
		what = "the model is slow"
	case string(baton.ProviderConnectionDropped), llm.CodeConnectionFailed:
		what = "the connection to the model dropped"
	case string(baton.ProviderMalformedChunk):
		what = "the model sent a malformed reply"
	case llm.CodeRateLimited:
		what = "the model is busy"
	default:
		what = "the model failed"
	}
	return baton.NewChatEvent(baton.TypeChatNotice, r.st.chat.ID, agent, baton.NoticePayload{
		Kind: "notice", Code: baton.NoticeModelRetry, Agent: agent, Attempt: rt.Attempt, MaxAttempts: rt.MaxAttempts,
		Message: fmt.Sprintf("%s; retrying (%d/%d)", what, rt.Attempt, rt.MaxAttempts),
	})
}

// interrupted ends a turn whose model call a person's message stopped
// (double_texting: interrupt): its stream ends with stream.completed
// {finish_reason: "interrupted"}, the text streamed so far is recorded once,
// as the agent's (tool calls it had begun are dropped), marked interrupted,
// and the turn hands over to the person, whose message the run takes next.
// Nothing is recorded for a call stopped before its first token.
//
// The partial text is hidden by the rules a whole one is (an auto-tool
// agent's, a ui_hidden trigger it matches), and also while the gate still
// holds it as a possible trigger (the generator cut at "NEX"): it never
// streamed, and would have been hidden had it ended as the trigger. Its
// chat.text retracts what streamed of a hidden one. A cut text sets no
// derived variable: the agent did not finish saying it.
//
// The call's usage is recorded when the provider reported any before the
// cut; most report it only at the end of a call, so an interrupted call's
// tokens are usually not counted.
func (r *run) interrupted(agent, msgID, key string, acc *llm.Accumulator, gate *textGate) error {
	st := r.st
	// The stream ends here, as a finished one does (its deltas stand: the
	// text is recorded under the same message id), not as a failed one.
	if ev, ok := llm.StreamEvent(st.chat.ID, agent, msgID, baton.Delta{Kind: baton.DeltaFinish, FinishReason: "interrupted"}); ok {
		_ = r.e.cast.Broadcast(ev)
	}
	var events []baton.Event
	var u baton.ChatUpdate
	if text := acc.Text(); strings.TrimSpace(text) != "" {
		hidden := r.isAutoToolAgent(agent) || gate.holding() || r.textHidden(agent, text)
		events = append(events, r.synthetic(agent, text)...)
		events = append(events, baton.NewChatEvent(baton.TypeChatText, st.chat.ID, agent, baton.TextPayload{
			Kind: "text", Agent: agent, Content: text, Index: st.texts, AgentMessageID: msgID,
			UIHidden: hidden, TurnKey: key, Interrupted: true, RetractMessageID: gate.retraction(hidden, msgID),
		}))
	}
	if usage := acc.Usage(); usage != (baton.Usage{}) {
		cfg := r.wf.LLMFor(agent)
		cost := llm.Cost(cfg.Model, usage, pricing(r.wf))
		events = append(events, baton.NewChatEvent(baton.TypeChatUsageSummary, st.chat.ID, agent, baton.UsageSummaryPayload{
			Kind: "usage_summary", Agent: agent, Model: cfg.Model, AgentMessageID: msgID,
			PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens, CachedTokens: usage.CachedTokens,
			ReasoningTokens: usage.ReasoningTokens, TotalTokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost,
		}))
		rec := baton.UsageRecord{ChatID: st.chat.ID, Workflow: r.wf.Name, Agent: agent, Model: cfg.Model, Usage: usage, Cost: cost}
		if err := rec.Validate(); err != nil {
			r.e.log.Warn("engine: record usage", "chat_id", rec.ChatID, "agent", rec.Agent, "err", err)
		} else {
			u.Usage = []baton.UsageRecord{rec}
		}
	}
	events = append(events,
		baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, agent, baton.HandoffPayload{Kind: "handoff", From: agent, HandoffType: "interrupt", TransitionTarget: workflow.RevertToUserTarget}),
		baton.NewChatEvent(baton.TypeChatInputRequest, st.chat.ID, agent, baton.InputRequestPayload{Kind: "input_request", Agent: agent, RequestID: "input_" + key + "_interrupt"}))
	waiting := baton.ChatWaitingInput
	u.TurnAgent, u.Status = &agent, &waiting
	r.stage(events, &u)
	r.logger().Info("engine: model call interrupted by the person's message", "agent", agent, "message_id", msgID)
	return nil
}

// textEvent builds the chat.text of a model call; retract names the
// streamed message a hidden text retracts (see hidden.go), if any.
func (r *run) textEvent(agent, msgID, key, content string, toolOnly, hasCalls, hidden bool, usage baton.Usage, cost float64, retract string) baton.Event {
	return baton.NewChatEvent(baton.TypeChatText, r.st.chat.ID, agent, baton.TextPayload{
		Kind: "text", Agent: agent, Content: content, Index: r.st.texts, AgentMessageID: msgID,
		Tokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost, UIHidden: hidden,
		HasToolCalls: hasCalls, ToolOnly: toolOnly, TurnKey: key, RetractMessageID: retract,
	})
}

// toolCallEvent builds the chat.tool_call for one of the model's tool
// calls. A UI tool's call is made at once (it only describes the component)
// so that the event carries what the person is shown, and the chat pauses
// for the response.
func (r *run) toolCallEvent(ctx context.Context, agent, msgID, key string, i int, c baton.ToolCall) (baton.Event, *baton.PendingRequest, error) {
	id := c.ID
	if id == "" {
		id = fmt.Sprintf("%s_call%d", msgID, i)
	}
	args := json.RawMessage(c.Arguments)
	if !json.Valid(args) {
		args, _ = json.Marshal(c.Arguments) // keep the model's text; the tool call gets a validation error
	}
	p := baton.ToolCallPayload{Kind: "tool_call", Agent: agent, ToolName: c.Name, ToolCallID: id, Corr: key, Arguments: args, AgentMessageID: msgID, TurnKey: key}
	var pending *baton.PendingRequest
	if r.offeredTransfer(agent, c.Name) != nil {
		p.Transfer = true
	} else if wt := r.wf.Tool(c.Name); wt != nil && wt.ToolType == workflow.UITool && wt.Agent == agent {
		tl, err := r.reg.Tool(ctx, agent, c.Name)
		if err != nil {
			return baton.Event{}, nil, err
		}
		res, err := tl.Call(ctx, r.callContext(agent, key, id), args)
		if err != nil {
			return baton.Event{}, nil, err
		}
		var ui tool.UIRequest
		if res.Status == baton.ToolStatusPending && json.Unmarshal(res.UI, &ui) == nil {
			p.AwaitingResponse = true
			p.UIEventID, p.ComponentType, p.Mode, p.Payload = ui.UIEventID, ui.Component, ui.Mode, ui.Payload
			pending = &baton.PendingRequest{UIEventID: ui.UIEventID, Kind: baton.PendingUITool, ToolCallID: id, ToolName: c.Name, Agent: agent}
		}
		// Otherwise the arguments were invalid: the call stays open and the
		// tool step records the error for the model.
	}
	return baton.NewChatEvent(baton.TypeChatToolCall, r.st.chat.ID, agent, p), pending, nil
}

// runTool runs one open tool call and records its response.
func (r *run) runTool(ctx context.Context, oc openCall) error {
	t := r.st.turn
	var res baton.ToolResult
	var updates map[string]json.RawMessage
	switch rule := r.transferRule(oc.agent, oc.name); {
	case oc.transfer && rule != nil:
		res = baton.ToolResult{Status: baton.ToolStatusOK, Content: "Transferring to " + transferTarget(rule) + "."}
	default:
		tl, err := r.reg.Tool(ctx, oc.agent, oc.name)
		if err != nil {
			if baton.ErrorCode(err) != baton.ENOTFOUND {
				return err
			}
			res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("There is no tool %q. Use one of the tools offered.", oc.name)}
			break
		}
		cc := r.callContext(oc.agent, t.key, oc.id)
		res, err = tl.Call(ctx, cc, oc.args)
		if err != nil && errors.Is(err, tool.ErrInterrupted) {
			// The process that ran the call is gone (killed, restarted, or
			// its instance lost the chat): the person is told, then the call
			// runs again at once under the same effect key.
			if err := r.recovering(ctx, oc); err != nil {
				return err
			}
			cc.Recovery = true
			res, err = tl.Call(ctx, cc, oc.args)
		}
		if err != nil && errors.Is(err, baton.ErrConflict) {
			// The effect was claimed by a process that may still be running
			// it (or died very recently): wait and try again, recording
			// nothing, until the claim is old enough to be re-run. Logged
			// once per call, not once per try.
			if r.waitingFor != cc.EffectKey {
				r.waitingFor = cc.EffectKey
				r.logger().Info("engine: tool effect in flight elsewhere; waiting", "tool", oc.name, "err", err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(effectRetryWait):
			}
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s failed: %s", oc.name, baton.ErrorMessage(err))}
			r.logger().Warn("engine: tool call failed", "tool", oc.name, "err", err)
		}
		if res.Status == baton.ToolStatusPending {
			res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s could not be shown.", oc.name)}
		}
		updates = cc.Vars.Updates()
		for k, v := range res.Updates {
			if updates == nil {
				updates = map[string]json.RawMessage{}
			}
			updates[k] = v
		}
		var note string
		if updates, note = r.toolUpdates(oc.name, updates); note != "" {
			res.Content += note
		}
		for k, v := range updates {
			// A value the store cannot keep (a NUL character, say) would
			// fail the append, and the call with it, on every retry: the
			// tool's result says so instead, and nothing is updated.
			if err := baton.ValidateJSONB("context_updates."+k, v); err != nil {
				res = baton.ToolResult{Status: baton.ToolStatusError, Content: fmt.Sprintf("Tool %s returned a context update that cannot be kept: %s", oc.name, baton.ErrorMessage(err))}
				r.logger().Warn("engine: tool context update refused", "tool", oc.name, "variable", k, "err", err)
				updates = nil
				break
			}
		}
	}
	events := []baton.Event{baton.NewChatEvent(baton.TypeChatToolResponse, r.st.chat.ID, oc.agent, baton.ToolResponsePayload{
		Kind: "tool_response", Agent: oc.agent, ToolName: oc.name, ToolCallID: oc.id, CallID: oc.id, Corr: t.key,
		Status: res.Status, Success: res.OK(), Content: res.Content, Payload: res.UI,
	})}
	patch, ctxEv := r.toolDerived(oc.agent, oc.name, res.OK(), updates)
	if ctxEv != nil {
		events = append(events, *ctxEv)
	}
	r.stage(events, &baton.ChatUpdate{Context: patch})
	return nil
}

// recovering records the chat.notice that an interrupted tool call is run
// again, before it runs: what the run staged goes with it, so the notice is
// durable (and sent) before the tool starts.
func (r *run) recovering(ctx context.Context, oc openCall) error {
	r.logger().Warn("engine: tool call interrupted by a process that is gone; running it again with the same effect key", "tool", oc.name, "tool_call_id", oc.id)
	r.stage([]baton.Event{baton.NewChatEvent(baton.TypeChatNotice, r.st.chat.ID, oc.agent, baton.NoticePayload{
		Kind: "notice", Code: baton.NoticeToolRecovery, Agent: oc.agent, Tool: oc.name, ToolCallID: oc.id,
		Message: fmt.Sprintf("Recovering the interrupted call of %s.", oc.name),
	})}, nil)
	return r.flush(ctx)
}

// deferrable reports whether an open tool call may run before what the run
// staged is recorded: a transfer tool, or a Go function of the workflow that
// declares no side effects and is not one of the engine's built-ins (they
// start tasks or read the chat's recorded events). If the process dies
// before the flush, the model is asked again and such a tool may run again,
// which is harmless. Anything else — a command, HTTP or MCP tool, a tool
// with side effects (through the effect ledger, whose key must name a
// recorded call) — runs only after its call is recorded.
func (r *run) deferrable(oc openCall) bool {
	if oc.uiEventID != "" || oc.interaction != "" {
		return false
	}
	if oc.transfer {
		return true
	}
	switch oc.name {
	case ToolGetEventInfo, ToolStartBackgroundTask:
		return false
	}
	wt := r.wf.Tool(oc.name)
	return wt != nil && wt.Kind == workflow.KindGo && !wt.SideEffects
}

func (r *run) callContext(agent, key, callID string) *baton.CallContext {
	st := r.st
	return &baton.CallContext{
		ChatID: st.chat.ID, App: r.scope.App, User: r.scope.User, Workflow: r.wf.Name, Agent: agent,
		TurnKey: key, ToolCallID: callID, EffectKey: baton.EffectKey(st.chat.ID, key, callID),
		Vars:    baton.NewContextVars(st.vars),
		Secrets: r.e.sealer.openAll(st.chat.ID, st.vars[secretsVar], r.wf.DeclaresSecret),
	}
}

// toolDefs returns the tools offered to agent's model: its tools and the
// transfer tools of its llm handoffs.
func (r *run) toolDefs(ctx context.Context, agent string) ([]baton.ToolDef, error) {
	tools, err := r.reg.Tools(ctx, agent)
	if err != nil {
		return nil, err
	}
	defs := make([]baton.ToolDef, 0, len(tools))
	for _, tl := range tools {
		defs = append(defs, baton.ToolDef{Name: tl.Name(), Description: tl.Description(), Parameters: tl.Parameters()})
	}
	for _, rule := range r.wf.HandoffRules(agent) {
		if rule.HandoffType != workflow.HandoffLLM || !r.ruleApplies(rule) {
			continue
		}
		desc := rule.Description
		if desc == "" {
			desc = "Hand the conversation to " + transferTarget(rule) + "."
		}
		defs = append(defs, baton.ToolDef{Name: rule.TransferToolName(), Description: desc, Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)})
	}
	return defs, nil
}

// transferRule returns the llm rule of agent whose transfer tool is name.
// Whether it may fire is decided once, when the model's call is recorded
// (offeredTransfer): the call is then a transfer (baton.ToolCallPayload.Transfer)
// whatever the tools of its turn change afterwards.
func (r *run) transferRule(agent, name string) *workflow.HandoffRule {
	for _, rule := range r.wf.HandoffRules(agent) {
		if rule.HandoffType == workflow.HandoffLLM && rule.TransferToolName() == name {
			return rule
		}
	}
	return nil
}

// offeredTransfer returns the llm rule of agent whose transfer tool is name
// if it applies now: a rule with a condition is offered, and honoured, only
// while the condition is true (docs/workflow-format.md). A call of a
// transfer tool whose rule does not apply is answered like an unknown tool.
func (r *run) offeredTransfer(agent, name string) *workflow.HandoffRule {
	if rule := r.transferRule(agent, name); rule != nil && r.ruleApplies(rule) {
		return rule
	}
	return nil
}

// ruleApplies reports whether rule's condition, if any, holds for the
// chat's variables now; a condition that fails to evaluate does not hold.
func (r *run) ruleApplies(rule *workflow.HandoffRule) bool {
	if rule.Condition == "" {
		return true
	}
	ok, err := rule.Applies(r.st.varsForEval())
	if err != nil {
		r.logger().Warn("engine: handoff condition failed", "condition", rule.Condition, "err", err)
		return false
	}
	return ok
}

func transferTarget(rule *workflow.HandoffRule) string {
	switch rule.TransitionTarget {
	case workflow.TerminateTarget:
		return "the end of the chat"
	case workflow.RevertToUserTarget:
		return "the person"
	}
	return rule.TargetAgent
}

// textHidden reports whether a ui_hidden derived variable's trigger matches
// an agent's text, setting nothing: for a text that sets no variables (an
// interrupted one), hidden by the same rules as a final one.
func (r *run) textHidden(agent, text string) bool {
	for _, d := range r.wf.DerivedFor(agent) {
		if d.UIHidden && d.Matches(text) {
			return true
		}
	}
	return false
}

// textDerived evaluates the derived variables an agent's final text sets.
// A match of a ui_hidden variable hides the text from people (the model
// still sees it).
func (r *run) textDerived(agent, text string) (hidden bool, patch map[string]json.RawMessage, ev *baton.Event) {
	var trigger string
	for _, d := range r.wf.DerivedFor(agent) {
		if !d.Matches(text) {
			continue
		}
		hidden = hidden || d.UIHidden
		value := json.RawMessage("true")
		if d.TriggerType == workflow.AgentTextPrefix {
			// The variable holds the captured text, and follows the agent's
			// latest line: a later summary replaces an earlier one.
			captured, _ := d.Captured(text)
			value, _ = json.Marshal(captured)
		}
		if string(r.st.vars[d.Name]) != string(value) {
			if patch == nil {
				patch = map[string]json.RawMessage{}
			}
			patch[d.Name] = value
			trigger = d.TriggerType
		}
	}
	if patch != nil {
		e := baton.NewChatEvent(baton.TypeChatContextUpdated, r.st.chat.ID, agent, baton.ContextUpdatedPayload{Kind: "context_updated", Agent: agent, Variables: patch, Trigger: trigger})
		ev = &e
	}
	return hidden, patch, ev
}

// toolUpdates keeps the context updates a tool may make: declared,
// non-derived variables not named "__…", each of its declared type
// (workflow.CheckToolUpdate). A tool's output can be steered by whoever
// talks to the model, so it must not pass a derived gate or touch
// __secrets. The others are dropped, logged once per call, and note says so
// for the tool's result (what the model reads); note is "" when none was.
func (r *run) toolUpdates(name string, updates map[string]json.RawMessage) (map[string]json.RawMessage, string) {
	var refused []string
	kept := make(map[string]json.RawMessage, len(updates))
	for k, v := range updates {
		if err := r.wf.CheckToolUpdate(k, v); err != nil {
			refused = append(refused, baton.ErrorMessage(err))
			continue
		}
		kept[k] = v
	}
	if len(refused) == 0 {
		return updates, ""
	}
	slices.Sort(refused)
	r.logger().Warn("engine: tool context updates ignored", "tool", name, "refused", refused)
	return kept, "\n[context updates ignored: " + strings.Join(refused, "; ") + "]"
}

// toolDerived merges a tool's own variable updates with the tool_called
// derived variables it sets.
func (r *run) toolDerived(agent, name string, ok bool, updates map[string]json.RawMessage) (map[string]json.RawMessage, *baton.Event) {
	patch := map[string]json.RawMessage{}
	for k, v := range updates {
		if string(r.st.vars[k]) != string(v) {
			patch[k] = v
		}
	}
	trigger := "tool"
	if ok {
		for _, d := range r.wf.DerivedFor(agent) {
			if d.TriggerType == workflow.ToolCalled && d.TriggerValue == name && string(r.st.vars[d.Name]) != "true" {
				patch[d.Name] = json.RawMessage("true")
				trigger = workflow.ToolCalled
			}
		}
	}
	if len(patch) == 0 {
		return nil, nil
	}
	ev := baton.NewChatEvent(baton.TypeChatContextUpdated, r.st.chat.ID, agent, baton.ContextUpdatedPayload{Kind: "context_updated", Agent: agent, Variables: patch, Trigger: trigger})
	return patch, &ev
}

// handoff ends the current turn: an llm rule whose transfer tool the model
// called, else the rule pickRule finds, picks the next speaker, the person,
// or the end. With no rule the chat reverts to the person.
func (r *run) handoff(ctx context.Context) error {
	st, t := r.st, r.st.turn
	var chosen *workflow.HandoffRule
	if t.transfer != "" {
		chosen = r.transferRule(t.agent, t.transfer)
	}
	if chosen == nil {
		chosen = r.pickRule(t.agent)
	}
	h := baton.HandoffPayload{Kind: "handoff", From: t.agent, HandoffType: "default", TransitionTarget: workflow.RevertToUserTarget}
	if chosen != nil {
		h.To, h.HandoffType, h.TransitionTarget, h.Condition = chosen.TargetAgent, chosen.HandoffType, chosen.TransitionTarget, chosen.Condition
	}
	events := []baton.Event{baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, t.agent, h)}
	u := &baton.ChatUpdate{}
	switch h.TransitionTarget {
	case workflow.RevertToUserTarget:
		events = append(events, baton.NewChatEvent(baton.TypeChatInputRequest, st.chat.ID, t.agent, baton.InputRequestPayload{
			Kind: "input_request", Agent: t.agent, RequestID: "input_" + t.key,
		}))
		waiting := baton.ChatWaitingInput
		u.Status = &waiting
	}
	// A TerminateTarget handoff is followed by the after_chat lifecycle
	// tools and then chat.run_complete (see drive); a pause ends the drive,
	// which records what is staged.
	r.stage(events, u)
	return nil
}

func (r *run) completeEvent(status, reason string) baton.Event {
	return baton.NewChatEvent(baton.TypeChatRunComplete, r.st.chat.ID, "", baton.RunCompletePayload{
		Kind: "run_complete", Status: status, Reason: reason, TotalTurns: r.st.turns,
	})
}

// complete ends the chat: after a TerminateTarget handoff, or without one
// (max_turns, budgets).
func (r *run) complete(ctx context.Context, status, reason string) error {
	// chat.run_complete goes in an append of its own, as it always has: an
	// observer that fell behind on the burst before it (and subscribed
	// again) still sees the chat end. It costs one commit per chat.
	if err := r.flush(ctx); err != nil {
		return err
	}
	done := baton.ChatCompleted
	return r.record(ctx, []baton.Event{r.completeEvent(status, reason)}, &baton.ChatUpdate{Status: &done})
}

// fail records a chat.error and pauses the chat as failed but resumable:
// the turn stays open, and a retry (run.resume, or the person's message)
// goes on from it.
func (r *run) fail(ctx context.Context, agent string, cause error) error {
	p := baton.ErrorPayload{Kind: "error", Agent: agent, Message: baton.ErrorMessage(cause), Code: baton.ErrorCode(cause), Retryable: true}
	var pe *baton.ProviderError
	if errors.As(cause, &pe) {
		p.Message, p.Code = pe.ClientMessage(), string(pe.Kind) // the whole error goes to the log below
		p.Retryable = llm.Retryable(pe) || pe.Kind == baton.ProviderTimeout
	}
	if r.st.turn != nil {
		p.TurnKey = r.st.turn.key
	}
	r.logger().Warn("engine: run failed", "agent", agent, "err", cause)
	failed := baton.ChatFailed
	return r.record(ctx, []baton.Event{baton.NewChatEvent(baton.TypeChatError, r.st.chat.ID, agent, p)}, &baton.ChatUpdate{Status: &failed})
}

// pricing converts the workflow's pricing overrides.
func pricing(wf *workflow.Workflow) map[string]llm.Price {
	if len(wf.Config.Pricing) == 0 {
		return nil
	}
	out := make(map[string]llm.Price, len(wf.Config.Pricing))
	for m, p := range wf.Config.Pricing {
		out[m] = llm.Price{Input: p.Input, Output: p.Output, CachedInput: p.CachedInput}
	}
	return out
}

// turnKey is the turn's idempotency key, turn_{chat}_{agent}_{index}_{hash}
// (spec/auto-tool-execution.md): the same turn always gets the same key.
func turnKey(chatID, agent string, index int) string {
	return fmt.Sprintf("turn_%s_%s_%d_%s", chatID, agent, index, shortHash(chatID, agent, fmt.Sprint(index)))
}

// logger is the run's logger with the turn's agent and index when a turn is
// in progress, so that every line of a run says chat, app, workflow, agent
// and turn. It is built when a line is logged, not for every run.
func (r *run) logger() *slog.Logger {
	log := r.e.log.With("chat_id", r.st.chat.ID, "app", r.scope.App, "workflow", r.wf.Name)
	if t := r.st.turn; t != nil {
		return log.With("agent", t.agent, "turn", t.index, "turn_key", t.key)
	}
	return log
}
