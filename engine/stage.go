package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
)

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
//
// A run whose state was taken from the cache on trust (load) stamps its
// first append with the sequence it expects it to get (ExpectNext); with
// nothing staged, flush — which a run calls before every step with an
// effect outside the process — checks the state against the chat instead
// (verify). A run whose chat is not stored yet (create.go) creates it, with
// whatever is staged, nothing included: a before_chat tool's effect then
// comes after the chat it belongs to.
func (r *run) flush(ctx context.Context) error {
	b := &r.staged
	if b.empty() && r.creation == nil {
		return r.verify(ctx)
	}
	if r.createFailed {
		return errors.New("the chat was not created: nothing more is recorded")
	}
	events, u := b.events, b.u
	r.staged = staged{}
	if r.fence > 0 {
		u.Fence = r.fence // the store refuses the append if another instance took the chat over
	}
	u.ExpectNext, r.expectNext = r.expectNext, 0 // checked by the store
	var recorded []baton.Event
	var err error
	handOver := false
	switch {
	case r.creation != nil:
		recorded, err = r.create(ctx, events, &u) // the chat's first append creates it
		if errors.Is(err, errHandOver) {
			handOver, err = true, nil // recorded; the run goes on elsewhere once this flush is done
		}
	case len(events) > 0 || u.Status != nil || u.TurnAgent != nil || len(u.Context) > 0 || len(u.AddPending) > 0 || len(u.ResolvePending) > 0 || len(u.ConsumeInputs) > 0 || len(u.Usage) > 0:
		recorded, err = r.e.rec.Record(ctx, r.scope, r.st.chat.ID, events, &u)
	}
	if err != nil {
		if errors.Is(err, baton.ErrStale) {
			r.expectNext = u.ExpectNext // nothing was recorded
		}
		if !r.createFailed { // no chat of this run's to count them against
			r.usageAlone(ctx, u.Usage)
		}
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
	if handOver {
		return errHandOver
	}
	return nil
}

// verify checks a state taken from the cache on trust (load) against the
// chat, when the run is about to do something whose effect is outside the
// process with nothing to record before it: the chat's last sequence must
// be the state's, else the run stops with baton.ErrStale and the event is
// handled again from the store. A state that was checked, or built from
// the store, needs nothing.
func (r *run) verify(ctx context.Context) error {
	if r.expectNext == 0 {
		return nil
	}
	chat, err := r.e.store.GetChat(ctx, r.scope, r.st.chat.ID)
	if err != nil {
		return fmt.Errorf("check the chat's state: %w", err)
	}
	if chat.LastSequence+1 != r.expectNext {
		return baton.StaleNext(chat.ID, r.expectNext, chat.LastSequence)
	}
	r.expectNext = 0
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

// consumes reports whether the staged append takes input id.
func (s *staged) consumes(id string) bool {
	for _, c := range s.u.ConsumeInputs {
		if c == id {
			return true
		}
	}
	return false
}
