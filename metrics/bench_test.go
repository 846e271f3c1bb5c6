package metrics_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/metrics"
)

// turnEvents is one model call of a turn as the collector observes it:
// stream.start, 20 text deltas, stream.completed, the recorded
// select_speaker, text, tool call and response, and usage summary.
func turnEvents(chatID string, n int) []baton.Event {
	agent := "WriterAgent"
	msg := fmt.Sprintf("turn_%s_%d_m0", chatID, n)
	evs := []baton.Event{
		chatEv(baton.TypeChatSelectSpeaker, chatID, `{"kind":"select_speaker","agent":"WriterAgent","source":"native","turn_index":1}`),
		llm.StreamStartEvent(chatID, agent, msg),
	}
	for range 20 {
		ev, _ := llm.StreamEvent(chatID, agent, msg, baton.Delta{Kind: baton.DeltaText, Text: "some words "})
		evs = append(evs, ev)
	}
	done, _ := llm.StreamEvent(chatID, agent, msg, baton.Delta{Kind: baton.DeltaFinish, FinishReason: "stop"})
	evs = append(evs, done,
		chatEv(baton.TypeChatText, chatID, `{"kind":"text","agent":"WriterAgent","content":"some words some words","index":3,"agent_message_id":"`+msg+`","tokens":130}`),
		chatEv(baton.TypeChatToolCall, chatID, `{"kind":"tool_call","agent":"WriterAgent","tool_name":"lookup","tool_call_id":"call_1","arguments":{}}`),
		chatEv(baton.TypeChatToolResponse, chatID, `{"kind":"tool_response","agent":"WriterAgent","tool_name":"lookup","tool_call_id":"call_1","status":"ok","success":true,"content":"x"}`),
		chatEv(baton.TypeChatUsageSummary, chatID, `{"kind":"usage_summary","agent":"WriterAgent","model":"gpt-4o-mini","agent_message_id":"`+msg+`","prompt_tokens":120,"completion_tokens":10,"cached_tokens":0,"reasoning_tokens":0,"total_tokens":130,"cost":0.000024}`),
	)
	return evs
}

func chatEv(typ, chatID, payload string) baton.Event {
	return baton.NewEvent(typ, baton.Metadata{TriggerSessionID: chatID, Source: baton.SourceSystem}, json.RawMessage(payload))
}

// BenchmarkObserve measures the collector's cost per observed event over
// a realistic mix (most events are stream.text deltas), 100 chats.
func BenchmarkObserve(b *testing.B) {
	bs := bus.New()
	defer bs.Close(b.Context())
	c, err := metrics.New(metrics.Options{Bus: bs})
	if err != nil {
		b.Fatal(err)
	}
	var evs []baton.Event
	for i := range 100 {
		evs = append(evs, turnEvents(fmt.Sprintf("chat-%d", i), i)...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c.Observe(evs[i%len(evs)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
}
