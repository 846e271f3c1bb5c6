package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/tool"
)

// memLedger is an in-memory baton.EffectLedger, to test the wrapper apart
// from a store.
type memLedger struct {
	mu      sync.Mutex
	effects map[string]*baton.Effect
}

func (l *memLedger) ClaimEffect(_ context.Context, _ baton.Scope, chatID, key string, holder baton.EffectHolder) (baton.Effect, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.effects == nil {
		l.effects = map[string]*baton.Effect{}
	}
	if e, ok := l.effects[chatID+"|"+key]; ok {
		return *e, nil
	}
	now := time.Now()
	l.effects[chatID+"|"+key] = &baton.Effect{Key: key, State: baton.EffectPending, ClaimedAt: now, Holder: holder}
	return baton.Effect{Key: key, State: baton.EffectNew, ClaimedAt: now, Holder: holder}, nil
}

func (l *memLedger) TakeOverEffect(_ context.Context, _ baton.Scope, chatID string, prev baton.Effect, holder baton.EffectHolder) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.effects[chatID+"|"+prev.Key]
	switch {
	case !ok:
		return false, baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", prev.Key)
	case e.State != baton.EffectPending || e.Holder != prev.Holder || !e.ClaimedAt.Equal(prev.ClaimedAt):
		return false, nil
	}
	e.Holder, e.ClaimedAt = holder, time.Now()
	return true, nil
}

func (l *memLedger) RecordEffect(_ context.Context, _ baton.Scope, chatID, key string, result json.RawMessage) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.effects[chatID+"|"+key]
	switch {
	case !ok:
		return baton.Errorf(baton.ENOTFOUND, "effect %q: not claimed", key)
	case e.State == baton.EffectDone:
		return baton.Errorf(baton.ECONFLICT, "effect %q: result already recorded", key)
	}
	e.State, e.Result = baton.EffectDone, result
	return nil
}

type chargeArgs struct {
	Amount int `json:"amount"`
}

// counted returns a side-effecting Go tool and the number of times it ran.
func counted() (baton.Tool, *atomic.Int32, *sync.Map) {
	var n atomic.Int32
	var keys sync.Map
	t := tool.MustFunc("charge", "charges a card", func(_ context.Context, cc *baton.CallContext, in chargeArgs) (string, error) {
		n.Add(1)
		keys.Store(cc.EffectKey, true)
		if err := cc.Vars.Set("charged", in.Amount); err != nil {
			return "", err
		}
		return "charged " + cc.EffectKey, nil
	})
	return t, &n, &keys
}

func effectSpecs() []tool.Spec {
	return []tool.Spec{
		{Agent: "A", Function: "charge", SideEffects: true},
		{Agent: "A", Name: "effect_cmd", File: "effect.sh", SideEffects: true, Env: []string{"EFFECT_LOG"}},
	}
}

// testEffectOnce runs the exactly-once scenarios against a ledger; reopen
// returns a ledger over the same storage (a restart), or the same ledger.
func testEffectOnce(t *testing.T, ledger baton.EffectLedger, reopen func() baton.EffectLedger) {
	charge, n, _ := counted()
	effectLog := filepath.Join(t.TempDir(), "effects")
	t.Setenv("EFFECT_LOG", effectLog)
	rec := &recorder{}
	r := newRegistry(t, effectSpecs(), tool.WithFuncs(charge), tool.WithLedger(ledger), tool.WithPublisher(rec))

	first := mustCall(t, lookup(t, r, "A", "charge"), callCtx("pay-1"), `{"amount": 5}`)
	second := mustCall(t, lookup(t, r, "A", "charge"), callCtx("pay-1"), `{"amount": 5}`)
	if n.Load() != 1 {
		t.Fatalf("the function ran %d times for one key", n.Load())
	}
	if first.Content != "charged chat-1/turn-1/pay-1" || first.Content != second.Content || first.Status != second.Status ||
		string(second.Updates["charged"]) != "5" {
		t.Fatalf("first %+v, replay %+v", first, second)
	}
	evs := rec.all()
	if len(evs) != 2 || !strings.Contains(string(evs[1].Payload), `"replayed":true`) {
		t.Fatalf("events = %v", evs)
	}

	// Another tool-call id is another effect.
	mustCall(t, lookup(t, r, "A", "charge"), callCtx("pay-2"), `{"amount": 5}`)
	if n.Load() != 2 {
		t.Fatalf("a second key: the function ran %d times in all, want 2", n.Load())
	}

	// Concurrent calls with one key: one execution, one result.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res, err := lookup(t, r, "A", "charge").Call(context.Background(), callCtx("pay-3"), json.RawMessage(`{"amount": 1}`))
			if err != nil || res.Content != "charged chat-1/turn-1/pay-3" {
				t.Errorf("concurrent call: %+v, %v", res, err)
			}
		})
	}
	wg.Wait()
	if n.Load() != 3 {
		t.Fatalf("8 concurrent calls with one key: the function ran %d times in all, want 3", n.Load())
	}

	// A command tool with side effects, twice.
	for range 2 {
		if res := mustCall(t, lookup(t, r, "A", "effect_cmd"), callCtx("cmd-1"), `{}`); res.Content != "done" {
			t.Fatalf("effect_cmd = %+v", res)
		}
	}
	if raw, _ := os.ReadFile(effectLog); string(raw) != "chat-1/turn-1/cmd-1\n" {
		t.Fatalf("effect log = %q, want the key once", raw)
	}

	// A new registry over a reopened ledger (a restart) replays too.
	_ = r.Close()
	charge2, n2, _ := counted()
	r2 := newRegistry(t, effectSpecs(), tool.WithFuncs(charge2), tool.WithLedger(reopen()))
	again := mustCall(t, lookup(t, r2, "A", "charge"), callCtx("pay-1"), `{"amount": 5}`)
	if n2.Load() != 0 || again.Content != first.Content || string(again.Updates["charged"]) != "5" {
		t.Fatalf("after reopening: ran %d times, result %+v", n2.Load(), again)
	}
	mustCall(t, lookup(t, r2, "A", "effect_cmd"), callCtx("cmd-1"), `{}`)
	if raw, _ := os.ReadFile(effectLog); string(raw) != "chat-1/turn-1/cmd-1\n" {
		t.Fatalf("effect log after reopening = %q, want the key once", raw)
	}
	if _, err := lookup(t, r2, "A", "charge").Call(context.Background(), &baton.CallContext{ChatID: "c"}, json.RawMessage(`{"amount":1}`)); baton.ErrorCode(err) != baton.EINVALID {
		t.Fatalf("a side-effect call without turn key and call id: err = %v", err)
	}
}

func TestEffectOnceMemory(t *testing.T) {
	l := &memLedger{}
	testEffectOnce(t, l, func() baton.EffectLedger { return l })
}

func TestEffectPending(t *testing.T) {
	l := &memLedger{}
	ctx := context.Background()
	scope := baton.Scope{App: "app", User: "u"}
	// A claim with no record: the process died mid-call.
	if _, err := l.ClaimEffect(ctx, scope, "chat-1", "k", baton.EffectHolder{}); err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context) (baton.ToolResult, error) {
		runs++
		return baton.ToolResult{Status: "ok", Content: "again"}, nil
	}
	// Recent: it may still be running elsewhere.
	if _, _, err := tool.Once(ctx, l, scope, "chat-1", "k", time.Hour, tool.Claimant{}, false, fn); baton.ErrorCode(err) != baton.ECONFLICT || runs != 0 {
		t.Fatalf("recent pending: err = %v, runs = %d", err, runs)
	}
	// Older than the call could run: abandoned, run once more and record.
	res, replayed, err := tool.Once(ctx, l, scope, "chat-1", "k", 0, tool.Claimant{}, false, fn)
	if err != nil || replayed || res.Content != "again" || runs != 1 {
		t.Fatalf("abandoned pending: %+v, %v, %v, runs %d", res, replayed, err, runs)
	}
	res, replayed, err = tool.Once(ctx, l, scope, "chat-1", "k", 0, tool.Claimant{}, false, fn)
	if err != nil || !replayed || res.Content != "again" || runs != 1 {
		t.Fatalf("after the re-run: %+v, %v, %v, runs %d", res, replayed, err, runs)
	}

	// Two processes re-run one abandoned effect; the one that records second
	// returns the first one's result, so every caller sees the same.
	if _, err := l.ClaimEffect(ctx, scope, "chat-1", "k2", baton.EffectHolder{}); err != nil {
		t.Fatal(err)
	}
	res, replayed, err = tool.Once(ctx, l, scope, "chat-1", "k2", 0, tool.Claimant{}, false, func(ctx context.Context) (baton.ToolResult, error) {
		other, _ := json.Marshal(baton.ToolResult{Status: "ok", Content: "theirs"})
		if err := l.RecordEffect(ctx, scope, "chat-1", "k2", other); err != nil {
			t.Fatal(err)
		}
		return baton.ToolResult{Status: "ok", Content: "mine"}, nil
	})
	if err != nil || !replayed || res.Content != "theirs" {
		t.Fatalf("losing the record race: %+v, %v, %v", res, replayed, err)
	}
}

// TestEffectGoneHolder: a pending claim whose holder is gone is not waited
// for: Once says the call was interrupted, and with recovery takes the
// claim over and runs it at once (the claim's age is an hour away); a
// claim of a live holder still waits; of two take-overs one wins.
func TestEffectGoneHolder(t *testing.T) {
	l := &memLedger{}
	ctx := context.Background()
	scope := baton.Scope{App: "app", User: "u"}
	old := baton.EffectHolder{Instance: "a", Boot: "boot-1"}
	if _, err := l.ClaimEffect(ctx, scope, "chat-1", "k", old); err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context) (baton.ToolResult, error) {
		runs++
		return baton.ToolResult{Status: "ok", Content: "recovered"}, nil
	}
	restarted := tool.Claimant{Holder: baton.EffectHolder{Instance: "a", Boot: "boot-2"}, Gone: func(h baton.EffectHolder) bool { return h == old }}
	live := tool.Claimant{Holder: restarted.Holder, Gone: func(baton.EffectHolder) bool { return false }}
	if _, _, err := tool.Once(ctx, l, scope, "chat-1", "k", time.Hour, live, true, fn); baton.ErrorCode(err) != baton.ECONFLICT || runs != 0 {
		t.Fatalf("live holder: err = %v, runs = %d", err, runs)
	}
	if _, _, err := tool.Once(ctx, l, scope, "chat-1", "k", time.Hour, restarted, false, fn); !errors.Is(err, tool.ErrInterrupted) || runs != 0 {
		t.Fatalf("gone holder without recovery: err = %v, runs = %d", err, runs)
	}
	res, replayed, err := tool.Once(ctx, l, scope, "chat-1", "k", time.Hour, restarted, true, fn)
	if err != nil || replayed || res.Content != "recovered" || runs != 1 {
		t.Fatalf("recovery: %+v, %v, %v, runs %d", res, replayed, err, runs)
	}

	// The claim moves to the new holder: the old one is no longer a claim
	// anyone can take over.
	e, err := l.ClaimEffect(ctx, scope, "chat-1", "k3", old)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := l.TakeOverEffect(ctx, scope, "chat-1", e, restarted.Holder); !ok || err != nil {
		t.Fatalf("first take-over: %v, %v", ok, err)
	}
	if ok, err := l.TakeOverEffect(ctx, scope, "chat-1", e, baton.EffectHolder{Instance: "b", Boot: "x"}); ok || err != nil {
		t.Fatalf("second take-over of the same claim: %v, %v", ok, err)
	}
}

// TestEffectWaitPublishesNothing: a call that does not run because its
// effect is claimed by a live holder (it waits, and is tried again every
// second) or by a gone one (it is about to be recovered) publishes no
// tool.error, so that a rule on tool.error sees only tools' outcomes.
func TestEffectWaitPublishesNothing(t *testing.T) {
	charge, n, _ := counted()
	ledger := &memLedger{}
	ctx := context.Background()
	live := baton.EffectHolder{Instance: "b", Boot: "1"}
	gone := baton.EffectHolder{Instance: "a", Boot: "0"}
	for _, h := range []baton.EffectHolder{live, gone} {
		cc := callCtx("pay-" + h.Instance)
		if _, err := ledger.ClaimEffect(ctx, baton.Scope{App: cc.App, User: cc.User}, cc.ChatID, baton.EffectKey(cc.ChatID, cc.TurnKey, cc.ToolCallID), h); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	r := newRegistry(t, effectSpecs(), tool.WithFuncs(charge), tool.WithLedger(ledger), tool.WithPublisher(rec),
		tool.WithClaimant(tool.Claimant{Holder: baton.EffectHolder{Instance: "a", Boot: "1"}, Gone: func(h baton.EffectHolder) bool { return h == gone }}))
	if _, err := lookup(t, r, "A", "charge").Call(ctx, callCtx("pay-b"), json.RawMessage(`{"amount": 1}`)); !errors.Is(err, baton.ErrConflict) {
		t.Fatalf("claimed by a live holder: err = %v, want a conflict", err)
	}
	if _, err := lookup(t, r, "A", "charge").Call(ctx, callCtx("pay-a"), json.RawMessage(`{"amount": 1}`)); !errors.Is(err, tool.ErrInterrupted) {
		t.Fatalf("claimed by a gone holder: err = %v, want ErrInterrupted", err)
	}
	if evs := rec.all(); len(evs) != 0 || n.Load() != 0 {
		t.Fatalf("calls that did not run: %d events published, %d runs", len(evs), n.Load())
	}
	cc := callCtx("pay-a")
	cc.Recovery = true
	if res := mustCall(t, lookup(t, r, "A", "charge"), cc, `{"amount": 1}`); n.Load() != 1 || res.Status != baton.ToolStatusOK {
		t.Fatalf("recovery: %+v, %d runs", res, n.Load())
	}
	if evs := rec.all(); len(evs) != 1 || evs[0].Type != baton.TypeToolExecuted {
		t.Fatalf("recovery published %v, want one tool.executed", evs)
	}
}
