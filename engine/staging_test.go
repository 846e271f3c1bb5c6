package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

// countingRecorder counts the appends of a run and the events in them.
type countingRecorder struct {
	baton.Recorder
	mu      sync.Mutex
	appends []int // events per append
}

func (c *countingRecorder) Record(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	out, err := c.Recorder.Record(ctx, scope, chatID, events, u)
	if err == nil {
		c.mu.Lock()
		c.appends = append(c.appends, len(events))
		c.mu.Unlock()
	}
	return out, err
}

func (c *countingRecorder) take() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.appends
	c.appends = nil
	return out
}

// A turn — the person, a model call that calls a Go tool without side
// effects, the tool, a second model call, the handoff to the person — is
// three appends: before each model call and at the pause. Observers still
// see every chat.* event in sequence order, and a model call's stream.*
// deltas only after everything recorded before that call.
func TestTurn_StagedStepsAreRecordedBeforeEachModelCall(t *testing.T) {
	cr := &countingRecorder{}
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), turnProvider(),
		withRecorder(func(r baton.Recorder) baton.Recorder { cr.Recorder = r; return cr }))
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	cr.take()
	sub, err := h.bus.Subscribe([]string{"chat.*", "stream.*"}, bus.ForChat(id), bus.Buffer(256))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
		t.Fatal(err)
	}
	var seen []baton.Event
	for ev := range sub.C() {
		seen = append(seen, ev)
		if ev.Type == baton.TypeChatInputRequest {
			break
		}
	}
	h.waitStatus(id, baton.ChatWaitingInput)

	if got := cr.take(); len(got) != 3 || got[0] != 3 || got[1] != 4 || got[2] != 4 {
		t.Fatalf("appends of the turn (events in each) = %v, want [3 4 4]", got)
	}
	var last int64
	recorded := map[string]bool{} // chat.* types seen so far
	for _, ev := range seen {
		if strings.HasPrefix(ev.Type, "chat.") {
			if last > 0 && ev.Sequence != last+1 {
				t.Fatalf("chat.* events out of order: %d after %d", ev.Sequence, last)
			}
			last = ev.Sequence
			recorded[ev.Type] = true
			continue
		}
		if ev.Type != baton.TypeStreamStart {
			continue
		}
		p := payloadOf(t, ev)
		switch msg, _ := p["message_id"].(string); {
		case strings.HasSuffix(msg, "_m0") && !recorded[baton.TypeChatSelectSpeaker]:
			t.Fatalf("the first model call streamed before its turn's select_speaker was published")
		case strings.HasSuffix(msg, "_m1") && !recorded[baton.TypeChatToolResponse]:
			t.Fatalf("the second model call streamed before the tool's response was published")
		}
	}
	evs := h.events(id)
	checkSequences(t, evs)
	if last != evs[len(evs)-1].Sequence {
		t.Fatalf("observers saw up to sequence %d, the store holds %d", last, evs[len(evs)-1].Sequence)
	}
}
