package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
)

// abandoningTool is an askingTool that always asks again, each question's
// resume state naming how many times it ran, and that records what
// Abandon is given (tool.Abandoner).
type abandoningTool struct {
	*askingTool
	mu        sync.Mutex
	ran       int
	abandoned []string
}

func (a *abandoningTool) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	res, err := a.askingTool.Call(ctx, cc, args)
	a.mu.Lock()
	a.ran++
	res.Resume = json.RawMessage(fmt.Sprintf(`{"run":%d}`, a.ran))
	a.mu.Unlock()
	return res, err
}

func (a *abandoningTool) Abandon(_ context.Context, cc *baton.CallContext, resume json.RawMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.abandoned = append(a.abandoned, cc.ToolCallID+" "+string(resume))
}

func (a *abandoningTool) abandons() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.abandoned...)
}

// TestToolInput_RoundsBoundAbandonsTheTool: a call ended after
// engine.MaxToolInputRounds questions tells its tool (tool.Abandoner),
// once, with the resume state of its last question, so that an a2a tool
// cancels the remote task left waiting for an answer.
func TestToolInput_RoundsBoundAbandonsTheTool(t *testing.T) {
	at := &abandoningTool{askingTool: &askingTool{always: true}}
	h, id := startAsking(t, at)
	answerEveryRound(t, h, id, func(i int) {
		if got := at.abandons(); len(got) != 0 {
			t.Fatalf("abandoned after %d questions: %q", i, got)
		}
	})
	if c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed); c.Status != baton.ChatCompleted {
		t.Fatalf("chat %s:\n%s", c.Status, dump(h.events(id)))
	}
	call := toolCallOf(t, h, id).ToolCallID
	want := fmt.Sprintf(`%s {"run":%d}`, call, engine.MaxToolInputRounds+1)
	if got := at.abandons(); len(got) != 1 || got[0] != want {
		t.Fatalf("Abandon calls %q, want [%q]", got, want)
	}
}
