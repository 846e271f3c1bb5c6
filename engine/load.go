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
