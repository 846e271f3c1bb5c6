package engine

import (
	"context"

	"github.com/batonhq/baton"
)

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
