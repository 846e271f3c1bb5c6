package engine_test

import (
	"context"
	"encoding/json"
	"iter"
	"math/rand/v2"
	"path"
	"sync/atomic"
	"testing"
	"testing/quick"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/workflow"
)

// TestProperty_SpeakerBeforeText checks invariant 6 (every text from a new
// speaker is preceded by a select_speaker for it) and invariant 2 over
// random schedules of the generator: at each pause the engine may be
// rebuilt from the store, one model call may fail and be retried, and the
// person's words vary.
func TestProperty_SpeakerBeforeText(t *testing.T) {
	check := func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		failAt := rng.Int64N(8) + 1 // the n-th model call fails once
		var calls atomic.Int64
		prov := func(wf *workflow.Workflow) (baton.Provider, error) {
			sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
			if err != nil {
				return nil, err
			}
			return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
				if calls.Add(1) == failAt {
					return fakeProvider(func(*baton.Request) ([]baton.Delta, error) {
						return nil, &baton.ProviderError{Kind: baton.ProviderUnavailable, Status: 503, Message: "injected", Endpoint: "fake", Model: "m"}
					}).Stream(ctx, req)
				}
				return sp.Stream(ctx, req)
			}), nil
		}
		h := newHarness(t, withProvider(prov))
		defer h.close()
		ctx := context.Background()
		id := start(t, h, "generator")
		// maybe restarts the engine, and retries a failed chat, at a pause.
		pause := func(want ...baton.ChatStatus) baton.Chat {
			c := h.waitStatus(id, append(want, baton.ChatFailed)...)
			if rng.IntN(2) == 0 {
				h = h.restart()
			}
			if c.Status == baton.ChatFailed {
				if err := h.eng.Resume(ctx, testScope, id); err != nil {
					t.Fatal(err)
				}
				c = h.waitStatus(id, want...)
			}
			return c
		}
		answers := []string{"a newsletter", "reports every Monday", "ü… émoji 🎉"}
		pause(baton.ChatWaitingInput)
		if err := h.eng.Submit(ctx, testScope, id, answers[rng.IntN(len(answers))], "ws"); err != nil {
			t.Fatal(err)
		}
		pause(baton.ChatWaitingSecret)
		if err := h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingSecret).UIEventID, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"k"}`)); err != nil {
			t.Fatal(err)
		}
		pause(baton.ChatWaitingUITool)
		if err := h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingUITool).UIEventID, "success", json.RawMessage(`{"action":"approve"}`)); err != nil {
			t.Fatal(err)
		}
		pause(baton.ChatCompleted)
		evs := h.events(id)
		checkSequences(t, evs)
		checkSpeakers(t, evs)
		return !t.Failed()
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 12}); err != nil {
		t.Fatal(err)
	}
}
