package engine_test

import (
	"context"
	"iter"
	"path"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// stuckFirstCall is the hello workflow's scripted provider, except that its
// first model call streams a word and then waits for its context: a model
// that is slow to answer. entered is closed when that call is waiting.
func stuckFirstCall(entered chan struct{}, calls *atomic.Int64) harnessOption {
	return withProvider(func(wf *workflow.Workflow) (baton.Provider, error) {
		sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		if err != nil {
			return nil, err
		}
		return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
			if calls.Add(1) > 1 {
				return sp.Stream(ctx, req)
			}
			return func(yield func(baton.Delta, error) bool) {
				if !yield(baton.Delta{Kind: baton.DeltaText, Text: "Let me "}, nil) {
					return
				}
				close(entered)
				<-ctx.Done()
				yield(baton.Delta{}, ctx.Err())
			}
		}), nil
	})
}

// TestCancel_StopsTheModelCallAndResumes: run.cancel stops a model call in
// progress at once; the run's end is recorded as chat.run_complete with
// status cancelled and the chat is cancelled (not failed, not completed);
// cancelling twice records one end; a resume goes on from the open turn
// and is not stopped by the earlier cancels; the chat then completes.
func TestCancel_StopsTheModelCallAndResumes(t *testing.T) {
	entered := make(chan struct{})
	var calls atomic.Int64
	h := newHarness(t, stuckFirstCall(entered, &calls))
	ctx := context.Background()
	id := start(t, h, "hello")
	<-entered
	for range 2 {
		if err := h.eng.Cancel(ctx, testScope, id); err != nil {
			t.Fatal(err)
		}
	}
	h.waitStatus(id, baton.ChatCancelled)
	evs := h.events(id)
	checkSequences(t, evs)
	end := evs[len(evs)-1]
	if end.Type != baton.TypeChatRunComplete || payloadOf(t, end)["status"] != "cancelled" {
		t.Fatalf("last event %s %s, want chat.run_complete with status cancelled", end.Type, end.Payload)
	}
	if n := countType(evs, baton.TypeChatError); n != 0 {
		t.Errorf("%d chat.error recorded for a cancel", n)
	}
	if err := h.eng.Resume(ctx, testScope, id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	evs = h.events(id)
	checkSequences(t, evs)
	cancelled := 0
	for _, ev := range evs {
		if ev.Type == baton.TypeChatRunComplete && payloadOf(t, ev)["status"] == "cancelled" {
			cancelled++
		}
	}
	if cancelled != 1 {
		t.Errorf("%d cancelled ends recorded, want 1", cancelled)
	}
	last := lastOfType(t, evs, baton.TypeChatRunComplete)
	if last["status"] != "success" {
		t.Errorf("the resumed chat ended with %v", last)
	}
	// The resumed turn is the same turn: the model was asked again and
	// answered with the tool call, then the text.
	if got := calls.Load(); got != 3 {
		t.Errorf("%d model calls, want 3 (the cancelled one and the two of the resumed turn)", got)
	}
	if lastOfType(t, evs, baton.TypeChatToolResponse) == nil {
		t.Error("the resumed turn did not run get_time")
	}
}

// TestCancel_StopsATool: a cancel reaches a tool in progress through its
// context; the call is not recorded as answered and the chat is
// cancelled.
func TestCancel_StopsATool(t *testing.T) {
	entered := make(chan struct{})
	var once atomic.Bool
	h := newHarness(t, withWorkflows(loopDir), fake(func(req *baton.Request) ([]baton.Delta, error) {
		return callTool("c1", "bump", `{}`), nil
	}), withTools(tool.WithFuncs(tool.MustFunc("bump", "Count a bump.", func(ctx context.Context, _ *baton.CallContext, _ struct{}) (string, error) {
		if once.CompareAndSwap(false, true) {
			close(entered)
		}
		<-ctx.Done()
		return "", ctx.Err()
	}))))
	id := start(t, h, "loop")
	<-entered
	if err := h.eng.Cancel(context.Background(), testScope, id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCancelled)
	evs := h.events(id)
	if n := countType(evs, baton.TypeChatToolResponse); n != 0 {
		t.Errorf("%d tool responses recorded for a cancelled tool", n)
	}
	if n := countType(evs, baton.TypeChatError); n != 0 {
		t.Errorf("%d chat.error recorded for a cancel", n)
	}
}

// TestCancel_IdleChatIsANoOp: cancelling a chat with no run in progress
// changes nothing, and does not stop the chat's next run.
func TestCancel_IdleChatIsANoOp(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := start(t, h, "hello")
	before := h.waitStatus(id, baton.ChatCompleted)
	if err := h.eng.Cancel(ctx, testScope, id); err != nil {
		t.Fatal(err)
	}
	h.settle()
	after := h.waitStatus(id, baton.ChatCompleted)
	if after.LastSequence != before.LastSequence {
		t.Errorf("a cancel of a completed chat recorded events: last sequence %d → %d", before.LastSequence, after.LastSequence)
	}
}
