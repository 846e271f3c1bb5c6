package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
)

// A chat's first turn used to commit four times: Start created the chat
// (with the person's first message kept in its inbox), then the run
// recorded the message, the hand-over and the first speaker before the
// model call, the tool call and its result, and the answer. Where this
// engine runs its chats alone (no leases) and its recorder and store can
// (baton.ChatCreator), Start does not write: it hands the prepared chat to
// the run of its run.start, whose first append creates the chat, keeps the
// message (taken at once when the start records it) and records the run's
// first events in one commit; Start returns once that commit is made (or
// fails, when nothing was written). The message is durable before Start
// returns, as before; the first turn commits three times.
//
// Start then waits for the chat's run to be handed the run.start by the
// bus: with a long queue that takes longer than a commit, and after
// createWait Start gives up (EUNAVAILABLE; the chat may still be created
// by a run that took it, so a client that retries should send an
// Idempotency-Key).

// createWait bounds how long Start waits for the run to create the chat
// (a variable for the tests).
var createWait = 30 * time.Second

// creation is a chat Start prepared and its run.start's run creates.
type creation struct {
	scope   baton.Scope
	chat    baton.Chat   // prepared: id, workflow, status, context, cache seed
	keep    *baton.Event // the run.start, kept as the chat's first input (a message), or nil
	message string       // the person's first message, if any
	startID string       // the run.start's id: only its run takes the creation
	done    chan creationResult
	taken   bool // by the run (under Engine.creatingMu): Start can no longer drop it
}

type creationResult struct {
	chat baton.Chat
	err  error
}

// finish tells Start how the creation ended and lets another Start of the
// chat id in (once; later calls do nothing).
func (e *Engine) finishCreation(c *creation, chat baton.Chat, err error) {
	select {
	case c.done <- creationResult{chat, err}:
	default:
		return
	}
	e.creatingMu.Lock()
	if e.creating[c.chat.ID] == c {
		delete(e.creating, c.chat.ID)
	}
	e.creatingMu.Unlock()
}

// creator returns the recorder that creates chats with their first
// events, when Start may hand creation to the run.
func (e *Engine) creator() (baton.ChatCreator, bool) {
	if e.instance != "" {
		return nil, false
	}
	c, ok := e.rec.(baton.ChatCreator)
	return c, ok && c.CanCreate()
}

// startInRun is Start's path through the run (see above): chat is prepared
// (baton.Chat.PrepareCreate), ev is its run.start. keepID, when set (a
// StartOnce), is the id the first message is kept under, which a retry of
// the start keeps again (StartOnce) and so finds kept, while ev has an id
// of its own.
func (e *Engine) startInRun(ctx context.Context, scope baton.Scope, chat baton.Chat, ev baton.Event, message, keepID string) (baton.Chat, error) {
	if keepID != "" {
		// The run.start's id is a retry's (StartOnce): the bus drops it if
		// it saw it, so a chat made already is found here, not by a run.
		if _, err := e.store.GetChat(ctx, scope, chat.ID); err == nil {
			return baton.Chat{}, baton.Errorf(baton.ECONFLICT, "chat %q already exists", chat.ID)
		} else if !errors.Is(err, baton.ErrNotFound) {
			return baton.Chat{}, err
		}
	}
	cr := &creation{scope: scope, chat: chat, message: message, startID: ev.ID, done: make(chan creationResult, 1)}
	if message != "" {
		keep := inboxed(ev)
		if keepID != "" {
			keep.ID = keepID
		} else {
			ev = keep // the run.start says it is kept: it is the same event
		}
		cr.keep = &keep
	}
	e.creatingMu.Lock()
	if e.creating == nil {
		e.creating = map[string]*creation{}
	}
	if e.closing {
		e.creatingMu.Unlock()
		return baton.Chat{}, fmt.Errorf("chat %s: the engine is closing: %w", chat.ID, baton.ErrClosed)
	}
	if _, busy := e.creating[chat.ID]; busy {
		e.creatingMu.Unlock()
		return baton.Chat{}, baton.Errorf(baton.EUNAVAILABLE, "chat %s is being created; retry", chat.ID)
	}
	e.creating[chat.ID] = cr
	e.creatingMu.Unlock()
	if err := e.publishEvent(ctx, ev); err != nil && e.dropCreation(chat.ID, cr) {
		return baton.Chat{}, err // no run took it: nothing is written
	}
	t := time.NewTimer(createWait)
	defer t.Stop()
	select {
	case res := <-cr.done:
		return res.chat, res.err
	case <-ctx.Done():
		if e.dropCreation(chat.ID, cr) {
			return baton.Chat{}, ctx.Err() // its run never took it: nothing is written
		}
		return baton.Chat{}, fmt.Errorf("start chat %s: %w (its run may still create it)", chat.ID, ctx.Err())
	case <-t.C:
		if e.dropCreation(chat.ID, cr) {
			return baton.Chat{}, baton.Errorf(baton.EUNAVAILABLE, "chat %s: its run did not start within %v; nothing was created, retry", chat.ID, createWait)
		}
		return baton.Chat{}, baton.Errorf(baton.EUNAVAILABLE, "chat %s: its run did not record its start within %v; it may still be created", chat.ID, createWait)
	}
}

// dropCreation removes cr unless a run took it, and reports whether it did.
func (e *Engine) dropCreation(id string, cr *creation) bool {
	e.creatingMu.Lock()
	defer e.creatingMu.Unlock()
	if e.creating[id] == cr && !cr.taken {
		delete(e.creating, id)
		return true
	}
	return false
}

// takeCreation returns the creation the run.start startID of chat id
// carries, if Start is waiting for it, and marks it taken: it stays until
// finished, so that another Start of the id is told the chat is on its way.
func (e *Engine) takeCreation(id, startID string) *creation {
	e.creatingMu.Lock()
	defer e.creatingMu.Unlock()
	cr := e.creating[id]
	if cr == nil || cr.startID != startID || cr.taken {
		return nil
	}
	cr.taken = true
	return cr
}

// creatingRun returns the run that creates cr's chat: its state is the
// prepared chat's, nothing recorded, its inbox holding at most the first
// message (which the state knows: takeStart).
func (e *Engine) creatingRun(cr *creation) (*run, error) {
	wf := e.workflows[cr.chat.Workflow]
	if wf == nil {
		return nil, baton.Errorf(baton.ENOTFOUND, "workflow %q of chat %s: not loaded", cr.chat.Workflow, cr.chat.ID)
	}
	st := newState(cr.chat, wf)
	st.sync(cr.chat)
	st.inboxClear = true
	if cr.keep != nil {
		st.startInput, st.startMessage = cr.keep.ID, cr.message
	}
	r, err := e.runOf(cr.scope, st, cr.chat.Status)
	if err != nil {
		return nil, err
	}
	r.creation = cr
	return r, nil
}

// create is flush's first append of a creating run: the chat, its first
// input and the staged events in one commit (baton.ChatCreator). It
// publishes session.created before the events; Start is told of a failure
// at once, of the chat when the handling of the run.start ends (handle),
// after the hand-over (errHandOver) when the append came mid-drive.
func (r *run) create(ctx context.Context, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	cr := r.creation
	r.creation = nil
	c, _ := r.e.creator()
	if c == nil {
		err := fmt.Errorf("create chat %s: the recorder cannot create chats", cr.chat.ID)
		r.createFailed = true
		r.e.finishCreation(cr, baton.Chat{}, err)
		return nil, err
	}
	// Start returns, and session.created says, the chat as created, before
	// its first events (status running, sequence 0), as they did when Start
	// created it alone.
	var created baton.Chat
	chat, recorded, err := c.Create(ctx, r.scope, cr.chat, cr.keep, events, u, func(stored baton.Chat) {
		created = cr.chat
		created.App, created.User, created.CreatedAt, created.UpdatedAt = stored.App, stored.User, stored.CreatedAt, stored.CreatedAt
		r.e.publishSession(ctx, r.scope, baton.TypeSessionCreated, created, "")
	})
	if err != nil {
		// Nothing was written — or the id was taken, and the chat is
		// another's: the run records nothing more (flush, stopped).
		r.createFailed = true
		r.e.finishCreation(cr, baton.Chat{}, err)
		return nil, err
	}
	r.created = &created // Start is told when the handling of the run.start ends (handle)
	r.st.chat.CreatedAt, r.st.chat.UpdatedAt = chat.CreatedAt, chat.UpdatedAt
	if !r.finalFlush {
		return recorded, errHandOver
	}
	return recorded, nil
}

// errHandOver stops a run whose first append created its chat in the
// middle of a drive, before the step the append came before (a model call,
// say): the run goes on in the handling of another event (handOver), after
// Start has returned. A client that starts a chat and then follows it
// subscribes while that event waits for the bus, as it did while the
// run.start did when Start created the chat alone, and sees the model's
// first reply stream from its first token.
var errHandOver = errors.New("the run goes on in the handling of its next event")

// handover is a run parked by handOver until its event is handled.
type handover struct {
	r       *run
	eventID string
}

// handOver parks r, whose first append created its chat, and publishes
// the event whose handling goes on with it (a run.wake, which only the
// engine observes), before Start is told (handle): any input a client
// sends once Start returned is handled after it.
func (e *Engine) handOver(ctx context.Context, r *run) error {
	id := r.st.chat.ID
	ev := baton.NewInput(r.scope, baton.TypeRunWake, id, nil)
	e.creatingMu.Lock()
	if e.handovers == nil {
		e.handovers = map[string]handover{}
	}
	e.handovers[id] = handover{r: r, eventID: ev.ID}
	e.creatingMu.Unlock()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionPublishTimeout)
	defer cancel()
	if err := e.publishEvent(pctx, ev); err != nil {
		// The chat is created and running: it is resumed at the next
		// restart, or by the person's next message (which loads it).
		e.creatingMu.Lock()
		delete(e.handovers, id)
		e.creatingMu.Unlock()
		return fmt.Errorf("chat %s: hand the run over: %w", id, err)
	}
	return nil
}

// takeHandover returns the run parked for chat id's event eventID, if any.
func (e *Engine) takeHandover(id, eventID string) *run {
	e.creatingMu.Lock()
	defer e.creatingMu.Unlock()
	h, ok := e.handovers[id]
	if !ok || h.eventID != eventID {
		return nil
	}
	delete(e.handovers, id)
	return h.r
}

// claimHandover removes the run parked for chat id, if any, and returns its
// state: another event of the chat is handled before the run.wake (a rule
// on session.created, a message sent as soon as Start returned), and goes
// on from where the run stopped; the run.wake then finds nothing parked.
func (e *Engine) claimHandover(id string) *state {
	e.creatingMu.Lock()
	defer e.creatingMu.Unlock()
	h, ok := e.handovers[id]
	if !ok {
		return nil
	}
	delete(e.handovers, id)
	return h.r.st
}

// endCreations tells every Start still waiting for a run that has not
// taken its chat that the engine is closing: nothing was written.
func (e *Engine) endCreations() {
	e.creatingMu.Lock()
	e.closing = true // a Start from now on is refused at once
	var waiting []*creation
	for id, cr := range e.creating {
		if !cr.taken {
			waiting = append(waiting, cr)
			delete(e.creating, id)
		}
	}
	e.creatingMu.Unlock()
	for _, cr := range waiting {
		select {
		case cr.done <- creationResult{err: fmt.Errorf("chat %s: the engine closed before its run started; nothing was created: %w", cr.chat.ID, baton.ErrClosed)}:
		default:
		}
	}
}
