package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
)

// TestBackgroundTask_WebSocketSeesTheWokenAgent is the background-task
// scenario of spec/environment-events.md §8.5 over a real WebSocket: a chat
// waits for the person and holds no run; a task's completion is published;
// the event-handler agent records the event in the chat and runs its agent;
// the client connected before sees the agent's answer, live and in order.
func TestBackgroundTask_WebSocketSeesTheWokenAgent(t *testing.T) {
	e := newEnv(t, withWorkflows("testdata/workflows"))
	for _, r := range e.eng.DefaultRules() {
		if err := e.bus.RegisterRule(r); err != nil {
			t.Fatal(err)
		}
	}
	id := e.start(t, "notify", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
	defer c.CloseNow()

	payload, _ := json.Marshal(map[string]any{"taskId": "t-1", "task": "report", "result": map[string]int{"pages": 12}})
	ev := engine.InputEvent(scopeAda, baton.TypeBackgroundTaskCompleted, id, payload)
	ev.Metadata.Source = baton.SourceTool
	if err := e.bus.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("the answer never reached the WebSocket client: %v", err)
		}
		v := decodeEnvelope(t, raw)
		if s := v.seq(); s != 0 {
			if s <= last {
				t.Fatalf("sequence %d after %d", s, last)
			}
			last = s
		}
		if v.Type == baton.TypeChatText && v.str("agent") == "Assistant" && v.str("content") == "Your report is ready: 12 pages." {
			break
		}
	}
	// The woken agent saw the event: it is recorded in the chat's history.
	found := false
	for _, raw := range e.history(t, id) {
		v := decodeEnvelope(t, raw)
		if v.Type == baton.TypeChatToolResponse && v.str("tool_name") == engine.ToolGetEventInfo {
			found = true
		}
	}
	if !found {
		t.Fatal("the event is not in the chat's history")
	}
}
