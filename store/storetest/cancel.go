package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// shortCtx returns a context that ends 0 to 3 ms from now: long enough for
// some writes to finish, short enough for others to be cut off at every
// stage, including while their commit is in flight.
func shortCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
}

// testCancelledWrites: a write whose context ends at a random moment either
// returns nil and is durable, or returns an error and left nothing behind —
// never an error for a write that was committed (baton.EventStore.Append:
// "on an error nothing was written"). Appends go through every path a store
// has for them: plain, with a snapshot change, fenced (a transaction that
// locks the chat in PostgreSQL) and with no events.
func testCancelledWrites(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	lease, err := s.AcquireLease(ctx, c.ID, "cancel-"+baton.NewID(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var failed, lies int
	lie := func(format string, args ...any) {
		lies++
		if lies <= 3 {
			t.Errorf(format, args...)
		}
	}
	const rounds = 300
	for i := range rounds {
		before, err := s.GetChat(ctx, scope, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		ta := fmt.Sprint("agent-", i)
		var evs []baton.Event
		u := &baton.ChatUpdate{}
		switch i % 4 {
		case 0:
			evs, u = []baton.Event{TextEvent("A", fmt.Sprint(i))}, nil
		case 1:
			evs, u.TurnAgent = []baton.Event{TextEvent("A", fmt.Sprint(i))}, &ta
		case 2:
			evs, u.TurnAgent, u.Fence = []baton.Event{TextEvent("A", fmt.Sprint(i))}, &ta, lease.Token
		case 3:
			u.TurnAgent, u.Fence = &ta, lease.Token
		}
		actx, cancel := shortCtx()
		_, err = s.Append(actx, scope, c.ID, evs, u)
		cancel()
		after, gerr := s.GetChat(ctx, scope, c.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if err != nil {
			failed++
			if after.LastSequence != before.LastSequence || u != nil && after.TurnAgent == ta {
				lie("round %d: Append returned %v, but it was written (last sequence %d -> %d, speaker %q)", i, err, before.LastSequence, after.LastSequence, after.TurnAgent)
			}
		} else if after.LastSequence != before.LastSequence+int64(len(evs)) {
			t.Fatalf("round %d: Append succeeded but last sequence %d -> %d", i, before.LastSequence, after.LastSequence)
		}

		// UpdateChat also returns the chat; on success it is the updated one.
		ta2 := ta + "-update"
		uctx, cancel := shortCtx()
		got, err := s.UpdateChat(uctx, scope, c.ID, baton.ChatUpdate{TurnAgent: &ta2})
		cancel()
		after, gerr = s.GetChat(ctx, scope, c.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case err != nil:
			failed++
			if after.TurnAgent == ta2 {
				lie("round %d: UpdateChat returned %v, but the update was written", i, err)
			}
		case got.TurnAgent != ta2 || got.ID != c.ID:
			t.Fatalf("round %d: UpdateChat returned %+v, want speaker %q", i, got, ta2)
		}
	}
	// Tasks, effects and usage: one round each per iteration.
	for i := range rounds / 3 {
		task, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		tctx, cancel := shortCtx()
		got, err := s.UpdateTask(tctx, scope, task.ID, baton.TaskRunning, nil, "")
		cancel()
		now, gerr := s.GetTask(ctx, scope, task.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case err != nil:
			failed++
			if now.Status != baton.TaskQueued {
				lie("round %d: UpdateTask returned %v, but the task is %s", i, err, now.Status)
			}
		case got.Status != baton.TaskRunning || got.ID != task.ID:
			t.Fatalf("round %d: UpdateTask returned %+v, want it running", i, got)
		}

		key := fmt.Sprint("cancel-", i)
		ectx, cancel := shortCtx()
		_, err = s.ClaimEffect(ectx, scope, c.ID, key, baton.EffectHolder{})
		cancel()
		if err != nil {
			failed++
			if e, cerr := s.ClaimEffect(ctx, scope, c.ID, key, baton.EffectHolder{}); cerr != nil || e.State != baton.EffectNew {
				lie("round %d: ClaimEffect returned %v, but the claim was written (%+v, %v)", i, err, e, cerr)
			}
		}

		total, _, err := s.ChatUsage(ctx, scope, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		uctx, cancel := shortCtx()
		err = s.RecordUsage(uctx, scope, baton.UsageRecord{ChatID: c.ID, Agent: "A", Usage: baton.Usage{PromptTokens: 1}})
		cancel()
		if err != nil {
			failed++
			if now, _, _ := s.ChatUsage(ctx, scope, c.ID); now.Calls != total.Calls {
				lie("round %d: RecordUsage returned %v, but the row was written", i, err)
			}
		}
	}
	if lies > 0 {
		t.Fatalf("%d writes returned an error although they were written (%d errors in all)", lies, failed)
	}
	t.Logf("%d writes cut off by their context, none of them written", failed)
}

// testGetChatNotTorn: GetChat returns a chat of one moment. Each append
// resolves pending request k, adds request k+1 and makes agent k+1 the
// speaker, with event k+1; a reader must never see the speaker, the last
// sequence and the pending requests of different appends.
func testGetChatNotTorn(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "hello", TurnAgent: "0",
		Pending: []baton.PendingRequest{{UIEventID: "p0-" + baton.NewID(), Kind: baton.PendingInput, Agent: "0"}}})
	if err != nil {
		t.Fatal(err)
	}
	var stop sync.WaitGroup
	done := make(chan struct{})
	var torn []string
	var mu sync.Mutex
	for range 2 {
		stop.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				g, err := s.GetChat(ctx, scope, c.ID)
				if err != nil {
					t.Error(err)
					return
				}
				if len(g.Pending) != 1 || g.Pending[0].Agent != g.TurnAgent || g.TurnAgent != fmt.Sprint(g.LastSequence) {
					mu.Lock()
					torn = append(torn, fmt.Sprintf("speaker %q, last sequence %d, pending %+v", g.TurnAgent, g.LastSequence, g.Pending))
					mu.Unlock()
				}
			}
		})
	}
	cur := c.Pending[0].UIEventID
	for k := 1; k <= 300; k++ {
		next := fmt.Sprintf("p%d-%s", k, baton.NewID())
		ta := fmt.Sprint(k)
		_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", ta)}, &baton.ChatUpdate{TurnAgent: &ta, ResolvePending: []string{cur},
			AddPending: []baton.PendingRequest{{UIEventID: next, Kind: baton.PendingInput, Agent: ta}}})
		if err != nil {
			close(done)
			stop.Wait()
			t.Fatal(err)
		}
		cur = next
	}
	close(done)
	stop.Wait()
	if len(torn) > 0 {
		t.Fatalf("%d torn reads of a chat, e.g. %s", len(torn), torn[0])
	}
}
