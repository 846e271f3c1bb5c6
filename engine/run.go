package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

	startMessage string      // run.start's message, if any
	startInput   string      // the inbox input startMessage came from, if any
	retry        bool        // go on after a recorded error (run.resume, or the person wrote)
	fence        int64       // the chat's lease token, stamped on every append (0: no leases)
	expectNext   int64       // > 0: st was taken from the cache on trust and not yet checked against the store (load)
	creation     *creation   // the chat is not stored yet: the first flush creates it (create.go)
	created      *baton.Chat // the chat the first flush created, for Start
	createFailed bool        // the creation failed: nothing more is recorded
	finalFlush   bool        // drive's last flush: no step follows it

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
	var r *run
	var cr *creation // the Start waiting for this run, until it is told
	if ev.Type == baton.TypeRunStart {
		if cr = e.takeCreation(chatID, ev.ID); cr != nil {
			if r, err = e.creatingRun(cr); err != nil {
				e.finishCreation(cr, baton.Chat{}, err)
				return fmt.Errorf("%s for chat %s: %w", ev.Type, chatID, err)
			}
			defer func() {
				switch {
				case cr == nil: // told already
				case r.created != nil: // Start returns the chat (after the hand-over, if any)
					e.finishCreation(cr, *r.created, nil)
				case r.creation != nil: // the run ended before its first append
					e.finishCreation(cr, baton.Chat{}, fmt.Errorf("chat %s: the run stopped before it recorded its start: %w", chatID, cmp.Or(err, errNoStart)))
				}
			}()
		}
	} else {
		r = e.takeHandover(chatID, ev.ID) // its run.wake has no payload: it only drives r on
	}
	if r == nil {
		if r, err = e.load(ctx, ev.Metadata.Scope(), chatID, true); err != nil {
			return fmt.Errorf("%s for chat %s: %w", ev.Type, chatID, err)
		}
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
		if cr := r.creation; cr != nil && cr.keep != nil {
			r.startInput = cr.keep.ID // kept by the creating append, under StartOnce's id if any
		} else if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
			r.startInput = ev.ID // taken from the inbox in the start's append
		}
	case baton.TypeRunResume:
		r.retry = true
	case baton.TypeRunWake:
		if len(ev.Payload) == 0 {
			break // a hand-over's (handOver): the chat goes on from its state, the parked one or the store's
		}
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
	if errors.Is(err, errHandOver) && wasCancelled(ctx, runCtx) {
		done()
		return e.recordCancelled(ctx, r) // stopped by the person before its first model call
	}
	if errors.Is(err, errHandOver) {
		herr := e.handOver(ctx, r)
		if herr == nil {
			done()
			return nil
		}
		// The chat is created: its run goes on here rather than stay put,
		// and Start is told now, not once the turn is over.
		r.logger().Warn("engine: could not hand the run over; it goes on in this handling", "err", herr)
		if cr != nil && r.created != nil {
			e.finishCreation(cr, *r.created, nil)
			cr = nil
		}
		err = r.driveOrStop(runCtx)
	}
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
	if ctx.Err() != nil || lostLease(err) || errors.Is(err, baton.ErrStale) || errors.Is(err, errHandOver) || errors.Is(err, baton.ErrClosed) || errors.Is(err, context.Canceled) {
		return // ErrStale: the event is handled again from the store; errHandOver: not an error
	}
	if r.creation != nil || r.createFailed {
		return // the chat was not created (or is another's): Start says so
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

// errNoStart is the cause Start gets when the run that was to create its
// chat ended without an error and without recording anything.
var errNoStart = errors.New("nothing to record")

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
		if errors.Is(err, baton.ErrStale) || errors.Is(err, errHandOver) {
			return err // the state is behind the store, or all of it is recorded
		}
		// What was staged before the failure happened: record it, as each
		// step once did at once, so a retry goes on from there (best effort;
		// if it fails too, the retry goes on from the last flush).
		if ferr := r.flush(ctx); ferr != nil {
			r.logger().Debug("engine: flush after a failed step", "err", ferr)
		}
		return err
	}
	if r.staged.empty() {
		return nil // the end of a drive has no effect to check the state for (flush's verify)
	}
	r.finalFlush = true
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
		case st.toolAsking() != nil && r.inheritedAsk(*st.toolAsking()):
			// A fork's copy of a question to the original's remote task.
			err = r.endInheritedAsk(ctx, *st.toolAsking())
		case st.toolAsking() != nil:
			// A tool call waits for the person's answer (toolinput.go): a
			// message in the inbox is it. The question is recorded first,
			// so its request is pending before the answer resolves it.
			if err = r.flush(ctx); err != nil {
				break
			}
			var took bool
			if took, err = r.takeInput(ctx); err == nil && !took {
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
