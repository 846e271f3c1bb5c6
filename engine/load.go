package engine

import (
	"context"

	"github.com/batonhq/baton"
)

// load returns a chat's state: the cached one caught up with the store, or
// (cached false, or none cached) one rebuilt from the store alone.
//
// Without leases (one process owns its store, and every append of its chats
// is this engine's) a cached state of the same tenant is taken on trust,
// without reading the chat: the run's first append carries
// ChatUpdate.ExpectNext, so a state the store has moved past (another
// process wrote to the chat, against that rule) is refused, not recorded,
// and the event is handled again from the store (baton.ErrStale,
// againOnLeaseLoss). Before that first append nothing the run does has an
// effect outside the process but what flush guards (verify).
func (e *Engine) load(ctx context.Context, scope baton.Scope, chatID string, cached bool) (*run, error) {
	var st *state
	if cached {
		st = e.cache.take(chatID)
		if st == nil {
			st = e.claimHandover(chatID) // a run parked after it created the chat holds its state
		}
	}
	if st != nil && e.instance == "" && st.chat.App == scope.App && st.chat.User == scope.User && st.wf == e.workflows[st.chat.Workflow] {
		r, err := e.runOf(scope, st, st.chat.Status)
		if err != nil {
			return nil, err
		}
		r.expectNext = st.chat.LastSequence + 1
		return r, nil
	}
	chat, err := e.store.GetChat(ctx, scope, chatID) // the tenant check, in the store's query
	if err != nil {
		if st != nil {
			// Not this caller's chat (another tenant's input names it), or
			// the store did not answer: the state is what it was, for the
			// chat's own next run.
			e.cache.put(st)
		}
		return nil, err
	}
	wf := e.workflows[chat.Workflow]
	if wf == nil {
		return nil, baton.Errorf(baton.ENOTFOUND, "workflow %q of chat %s: not loaded", chat.Workflow, chatID)
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
	if st.chat.LastSequence < chat.LastSequence {
		for ev, err := range baton.EventsAfter(ctx, e.store, scope, chatID, st.chat.LastSequence, 1000) {
			if err != nil {
				return nil, err
			}
			st.apply(&ev)
			if ev.Sequence >= chat.LastSequence {
				break // up to what the chat row says it holds
			}
		}
	}
	st.sync(chat)
	return e.runOf(scope, st, chat.Status)
}

// runOf returns a run of st, whose recorded status is status.
func (e *Engine) runOf(scope baton.Scope, st *state, status baton.ChatStatus) (*run, error) {
	prov, err := e.provider(st.wf)
	if err != nil {
		return nil, err
	}
	reg, err := e.registry(st.wf)
	if err != nil {
		return nil, err
	}
	return &run{
		e: e, scope: scope, st: st, wf: st.wf, prov: prov, reg: reg, recordedStatus: status,
	}, nil
}
