package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
)

// TestBackgroundTask_WebSocketSeesTheWokenAgent is the background-task
// scenario of spec/environment-events.md §8.5 over a real WebSocket: a chat
// waits for the person and holds no run; a task's completion is published;
// the event-handler agent records the event in the chat and runs its agent;
// the client connected before sees the agent's answer, live and in order.
func TestBackgroundTask_WebSocketSeesTheWokenAgent(t *testing.T) {
	e := newEnv(t, withWorkflows("testdata/workflows")) // the runtime registers the default rules
	id := e.start(t, "notify", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
	defer c.CloseNow()

	payload, _ := json.Marshal(map[string]any{"taskId": "t-1", "task": "report", "result": map[string]int{"pages": 12}})
	ev := baton.NewInput(scopeAda, baton.TypeBackgroundTaskCompleted, id, payload)
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

// TestExternalEvent_ReservedMetadata: POST /api/events refuses what only the
// runtime may claim — metadata.origin (the NATS bridge's mark of another
// instance's event), metadata.inbox, metadata.traceparent (the trace a run
// joins and tools are sent is the request's own span's) and the user, llm
// and system sources — and publishes
// the rest with source env unless it says tool.
func TestExternalEvent_ReservedMetadata(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx := context.Background()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.bus.Subscribe([]string{"webhook.*"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	post := func(meta map[string]any) response {
		t.Helper()
		return e.do(t, "POST", "/api/events", e.keys[scopeAda], map[string]any{
			"type": "webhook.received", "chat_id": chat.ID, "metadata": meta, "payload": map[string]any{"n": 1},
		})
	}
	for _, tc := range []struct {
		meta  map[string]any
		field string
	}{
		{map[string]any{bus.OriginKey: "instance-b"}, "metadata.origin"},
		{map[string]any{baton.InboxKey: true}, "metadata.inbox"},
		{map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "metadata.traceparent"},
		{map[string]any{"source": "system"}, "metadata.source"},
		{map[string]any{"source": "llm"}, "metadata.source"},
		{map[string]any{"source": "user"}, "metadata.source"},
	} {
		if r := post(tc.meta); r.status != http.StatusBadRequest || !strings.HasPrefix(r.errorMessage(), tc.field) {
			t.Errorf("metadata %v: %d %s, want 400 naming %s", tc.meta, r.status, r.body, tc.field)
		}
	}
	for meta, want := range map[string]string{"": baton.SourceEnv, baton.SourceEnv: baton.SourceEnv, baton.SourceTool: baton.SourceTool} {
		m := map[string]any{}
		if meta != "" {
			m["source"] = meta
		}
		if r := post(m); r.status != http.StatusAccepted {
			t.Fatalf("source %q: %d %s", meta, r.status, r.body)
		}
		select {
		case ev := <-sub.C():
			if ev.Metadata.Source != want || bus.Remote(ev) {
				t.Errorf("source %q: published with source %q, remote %v", meta, ev.Metadata.Source, bus.Remote(ev))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("source %q: nothing published", meta)
		}
	}
	select {
	case ev := <-sub.C():
		t.Fatalf("a refused event was published: %+v", ev)
	default:
	}
}

// TestSelectSpeakerPrompt_NeverReachesAClient: the event-handler agent's
// turn starts with a select_speaker that records the rule's prompt (its
// instructions to the agent); a raw WebSocket client and the history
// endpoint get the select_speaker without it.
func TestSelectSpeakerPrompt_NeverReachesAClient(t *testing.T) {
	e := newEnv(t, withWorkflows("testdata/workflows")) // the runtime registers the default rules
	id := e.start(t, "notify", nil)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
	defer c.CloseNow()
	payload, _ := json.Marshal(map[string]any{"taskId": "t-1", "task": "report", "result": map[string]int{"pages": 12}})
	ev := baton.NewInput(scopeAda, baton.TypeBackgroundTaskCompleted, id, payload)
	ev.Metadata.Source = baton.SourceTool
	if err := e.bus.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	var speakers int
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("the answer never reached the WebSocket client: %v", err)
		}
		v := decodeEnvelope(t, raw)
		if v.Type == baton.TypeChatSelectSpeaker {
			speakers++
			if strings.Contains(string(raw), `"prompt"`) {
				t.Fatalf("live select_speaker carries the rule's prompt: %s", raw)
			}
		}
		if v.Type == baton.TypeChatText && v.str("agent") == "Assistant" && v.str("content") == "Your report is ready: 12 pages." {
			break
		}
	}
	if speakers == 0 {
		t.Fatal("no select_speaker reached the client")
	}
	// The recorded event has the prompt (else this test proves nothing)…
	evs, err := e.store.Events(ctx, scopeAda, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	prompted := false
	for _, ev := range evs {
		prompted = prompted || (ev.Type == baton.TypeChatSelectSpeaker && strings.Contains(string(ev.Payload), `"prompt"`))
	}
	if !prompted {
		t.Fatal("no recorded select_speaker has a prompt: the test shows nothing")
	}
	// …the history endpoint does not.
	for _, raw := range e.history(t, id) {
		if decodeEnvelope(t, raw).Type == baton.TypeChatSelectSpeaker && strings.Contains(string(raw), `"prompt"`) {
			t.Fatalf("history select_speaker carries the rule's prompt: %s", raw)
		}
	}
}
