package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/storetest"
)

// TestMixedBatches runs appends that succeed and appends that must fail at
// the same moment, so that they share the writer's batches: the writer runs
// a batch's appends in bulk and, when one of them fails, again one at a
// time. Every append must get its own outcome, the failed ones must leave
// nothing, and every chat must stay gapless.
func TestMixedBatches(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	scope, other := storetest.NewScope(), storetest.NewScope()
	const chats, good = 40, 4
	ids := make([]string, chats)
	first := make([]baton.Event, chats) // each chat's first event, whose id the duplicates reuse
	for i := range ids {
		c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "bulk"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
		evs, err := s.Append(ctx, scope, c.ID, []baton.Event{storetest.TextEvent("A", "first")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		first[i] = evs[0]
	}
	gone, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "bulk"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChat(ctx, scope, gone.ID); err != nil {
		t.Fatal(err)
	}

	type call struct {
		chat   int // index in ids, or -1 for the deleted chat
		scope  baton.Scope
		events []baton.Event
		u      *baton.ChatUpdate
		code   string // "" for success
	}
	var calls []call
	for round := range 3 {
		for i := range chats {
			for range good {
				calls = append(calls, call{chat: i, scope: scope, events: []baton.Event{storetest.TextEvent("A", "ok")}})
			}
			switch i % 5 {
			case 0: // an event id the chat already has
				dup := storetest.TextEvent("A", "dup")
				dup.ID = first[i].ID
				calls = append(calls, call{chat: i, scope: scope, events: []baton.Event{storetest.TextEvent("A", "x"), dup}, code: baton.ECONFLICT})
			case 1: // another tenant
				calls = append(calls, call{chat: i, scope: other, events: []baton.Event{storetest.TextEvent("A", "x")}, code: baton.ENOTFOUND})
			case 2: // a stale lease token
				calls = append(calls, call{chat: i, scope: scope, events: []baton.Event{storetest.TextEvent("A", "x")}, u: &baton.ChatUpdate{Fence: 99}, code: baton.ECONFLICT})
				// and an append behind the chat (its first event is sequence 1)
				calls = append(calls, call{chat: i, scope: scope, events: []baton.Event{storetest.TextEvent("A", "x")}, u: &baton.ChatUpdate{ExpectNext: 1}, code: baton.ECONFLICT})
			case 3: // a context patch, which succeeds
				calls = append(calls, call{chat: i, scope: scope, events: []baton.Event{storetest.TextEvent("A", "x")},
					u: &baton.ChatUpdate{Context: map[string]json.RawMessage{"round": json.RawMessage(fmt.Sprint(round))}}})
			case 4: // the same new event twice in one append
				e := storetest.TextEvent("A", "twice")
				calls = append(calls, call{chat: i, scope: scope, events: []baton.Event{e, e}, code: baton.ECONFLICT})
			}
		}
		calls = append(calls, call{chat: -1, scope: scope, events: []baton.Event{storetest.TextEvent("A", "x")}, code: baton.ENOTFOUND})
	}

	want := make([]int64, chats) // events each chat must end with
	for i := range want {
		want[i] = 1
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range calls {
		id := gone.ID
		if c.chat >= 0 {
			id = ids[c.chat]
			if c.code == "" {
				want[c.chat] += int64(len(c.events))
			}
		}
		wg.Go(func() {
			<-start
			got, err := s.Append(ctx, c.scope, id, c.events, c.u)
			if c.code == "" {
				if err != nil {
					t.Errorf("chat %d: %v", c.chat, err)
				} else if len(got) != len(c.events) || got[0].Sequence < 2 {
					t.Errorf("chat %d: appended %+v", c.chat, got)
				}
				return
			}
			if code := baton.ErrorCode(err); code != c.code {
				t.Errorf("chat %d: error %v (code %q), want %s", c.chat, err, code, c.code)
			}
		})
	}
	close(start)
	wg.Wait()

	for i, id := range ids {
		evs, err := s.Events(ctx, scope, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(evs)) != want[i] {
			t.Errorf("chat %d: %d events, want %d", i, len(evs), want[i])
		}
		for j, e := range evs {
			if e.Sequence != int64(j+1) {
				t.Fatalf("chat %d: event %d has sequence %d", i, j, e.Sequence)
			}
			if !json.Valid(e.Payload) || e.Metadata.TriggerSessionID != id {
				t.Fatalf("chat %d: event %d: %s %+v", i, j, e.Payload, e.Metadata)
			}
			if j > 0 && e.ID == first[i].ID {
				t.Fatalf("chat %d: the duplicate of its first event was written", i)
			}
		}
		c, err := s.GetChat(ctx, scope, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.LastSequence != want[i] {
			t.Errorf("chat %d: last sequence %d, want %d", i, c.LastSequence, want[i])
		}
		var snapshot map[string]json.RawMessage
		if err := json.Unmarshal(c.Context, &snapshot); err != nil {
			t.Fatal(err)
		}
		if _, ok := snapshot["round"]; ok != (i%5 == 3) {
			t.Errorf("chat %d: context %s", i, c.Context)
		}
	}
	st := s.Stats()
	t.Logf("%d writes in %d commits", st.Writes, st.Commits)
}

// TestMixedUsage records usage rows that succeed and rows that must fail
// (a chat out of their scope, a deleted chat) at the same moment, beside
// appends, so that they share the writer's batches: the writer inserts a
// batch's usage rows in bulk and, when one of them fails, runs the batch
// again one request at a time. Every call must get its own outcome and
// only the good rows may be counted.
func TestMixedUsage(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	scope, other := storetest.NewScope(), storetest.NewScope()
	const chats, good = 20, 5
	ids := createChats(t, s, scope, "usage", chats)
	gone, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "usage"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChat(ctx, scope, gone.ID); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, chats*(good+3))
	for i, id := range ids {
		for j := range good {
			wg.Go(func() {
				rec := baton.UsageRecord{ChatID: id, Agent: fmt.Sprint("A", j%2), Model: "m", Usage: baton.Usage{PromptTokens: int64(i + 1), CompletionTokens: 2}, Cost: 0.5}
				if err := s.RecordUsage(ctx, scope, rec); err != nil {
					errs <- fmt.Errorf("good usage of chat %d: %v", i, err)
				}
			})
		}
		wg.Go(func() {
			if _, err := s.Append(ctx, scope, id, []baton.Event{storetest.TextEvent("A", "ok")}, nil); err != nil {
				errs <- fmt.Errorf("append to chat %d: %v", i, err)
			}
		})
		wg.Go(func() {
			err := s.RecordUsage(ctx, other, baton.UsageRecord{ChatID: id, Usage: baton.Usage{PromptTokens: 1000}})
			if baton.ErrorCode(err) != baton.ENOTFOUND {
				errs <- fmt.Errorf("usage of chat %d in another scope: %v, want ENOTFOUND", i, err)
			}
		})
		wg.Go(func() {
			err := s.RecordUsage(ctx, scope, baton.UsageRecord{ChatID: gone.ID, Usage: baton.Usage{PromptTokens: 1000}})
			if baton.ErrorCode(err) != baton.ENOTFOUND {
				errs <- fmt.Errorf("usage of the deleted chat: %v, want ENOTFOUND", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, id := range ids {
		total, per, err := s.ChatUsage(ctx, scope, id)
		if err != nil {
			t.Fatal(err)
		}
		if total.Calls != good || total.PromptTokens != int64(good*(i+1)) || total.CompletionTokens != 2*good || total.Cost != 0.5*good || len(per) != 2 {
			t.Errorf("chat %d: usage %+v per agent %+v", i, total, per)
		}
	}
}
