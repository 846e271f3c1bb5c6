package baton

import (
	"context"
	"iter"
)

// EventsAfter yields the chat's recorded events with sequence > after, in
// ascending order, reading them from store page events at a time (page <= 0
// reads them all at once). It stops after a page shorter than page, so events
// appended while it runs are yielded only while it is still paging. A store
// error is yielded once, as it is, and ends the sequence: each caller wraps it
// with its own context. Breaking out of the loop stops the reads.
func EventsAfter(ctx context.Context, store EventStore, scope Scope, chatID string, after int64, page int) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			evs, err := store.Events(ctx, scope, chatID, after, page)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for i := range evs {
				if !yield(evs[i], nil) {
					return
				}
				after = evs[i].Sequence
			}
			if page <= 0 || len(evs) < page {
				return
			}
		}
	}
}
