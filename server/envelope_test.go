package server

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
	"github.com/batonhq/baton/workflow"
)

// TestEnvelopeFilter is the filter of docs/api.md, rule by rule, on the
// generator workflow (visual: InterviewAgent, ActionPlanAgent, ReviewAgent,
// DeliveryAgent; internal: ContextVariablesAgent).
func TestEnvelopeFilter(t *testing.T) {
	wfs, err := workflow.LoadAll(os.DirFS(examplesDir))
	if err != nil {
		t.Fatal(err)
	}
	var gen *workflow.Workflow
	for _, wf := range wfs {
		if wf.Name == "generator" {
			gen = wf
		}
	}
	const internal = "ContextVariablesAgent"
	cases := []struct {
		name, typ, agent, payload string
		shown                     bool
	}{
		{"visual agent text", baton.TypeChatText, "InterviewAgent", `{"kind":"text","agent":"InterviewAgent","content":"hi"}`, true},
		{"internal agent text", baton.TypeChatText, internal, `{"kind":"text","agent":"ContextVariablesAgent","content":"x"}`, false},
		{"internal agent usage", baton.TypeChatUsageSummary, internal, `{"kind":"usage_summary","agent":"ContextVariablesAgent"}`, false},
		{"internal agent context", baton.TypeChatContextUpdated, internal, `{"kind":"context_updated","agent":"ContextVariablesAgent","variables":{"a":1}}`, false},
		{"internal agent select_speaker", baton.TypeChatSelectSpeaker, internal, `{"kind":"select_speaker","agent":"ContextVariablesAgent"}`, true},
		{"notice of an internal agent's tool", baton.TypeChatNotice, internal, `{"kind":"notice","code":"tool_recovery","agent":"ContextVariablesAgent","tool":"t","tool_call_id":"c"}`, true},
		{"internal agent synthetic select_speaker", baton.TypeChatSelectSpeaker, internal, `{"kind":"select_speaker","agent":"ContextVariablesAgent","source":"synthetic","_synthetic":true}`, true},
		{"user text", baton.TypeChatText, "user", `{"kind":"text","agent":"user","content":"hello"}`, true},
		{"system text", baton.TypeChatText, "system", `{"kind":"text","agent":"system","content":"[SYSTEM_RESUME_SIGNAL]","ui_hidden":true}`, true},
		{"user select_speaker", baton.TypeChatSelectSpeaker, "user", `{"kind":"select_speaker","agent":"user","_synthetic":true}`, true},
		{"input_request of an internal agent", baton.TypeChatInputRequest, internal, `{"kind":"input_request","agent":"ContextVariablesAgent"}`, true},
		{"run_complete", baton.TypeChatRunComplete, "", `{"kind":"run_complete","status":"success"}`, true},
		{"error of an internal agent", baton.TypeChatError, internal, `{"kind":"error","agent":"ContextVariablesAgent","message":"m"}`, true},
		{"workflow_resumed", baton.TypeChatWorkflowResumed, internal, `{"kind":"workflow_resumed","agent":"ContextVariablesAgent"}`, true},
		{"UI form of an internal agent", baton.TypeChatToolCall, internal, `{"kind":"tool_call","agent":"ContextVariablesAgent","ui_event_id":"u1","awaiting_response":true}`, true},
		{"its response", baton.TypeChatToolResponse, internal, `{"kind":"tool_response","agent":"ContextVariablesAgent","ui_event_id":"u1"}`, true},
		{"plain tool call of an internal agent", baton.TypeChatToolCall, internal, `{"kind":"tool_call","agent":"ContextVariablesAgent","tool_name":"t"}`, false},
		{"handoff visual to internal", baton.TypeChatHandoff, "InterviewAgent", `{"kind":"handoff","from":"InterviewAgent","to":"ContextVariablesAgent"}`, false},
		{"handoff internal to visual", baton.TypeChatHandoff, internal, `{"kind":"handoff","from":"ContextVariablesAgent","to":"ActionPlanAgent"}`, false},
		{"handoff visual to the person", baton.TypeChatHandoff, "InterviewAgent", `{"kind":"handoff","from":"InterviewAgent","transition_target":"RevertToUserTarget"}`, true},
		{"handoff user to visual", baton.TypeChatHandoff, "user", `{"kind":"handoff","from":"user","to":"InterviewAgent"}`, true},
		{"stream of a visual agent", baton.TypeStreamText, "InterviewAgent", `{"message_id":"m","agent":"InterviewAgent","delta":"x"}`, true},
		{"stream of an internal agent", baton.TypeStreamText, internal, `{"message_id":"m","agent":"ContextVariablesAgent","delta":"x"}`, false},
		{"model retry notice of an internal agent", baton.TypeChatNotice, internal, `{"kind":"notice","code":"model_retry","agent":"ContextVariablesAgent","message":"the model is slow; retrying (2/4)","attempt":2,"max_attempts":4}`, true},
		{"stream.error of a visual agent", baton.TypeStreamError, "InterviewAgent", `{"message_id":"m","agent":"InterviewAgent","code":"timeout_idle","will_retry":true,"void":true}`, true},
		{"not an event for clients", baton.TypeUserQuery, "", `{"content":"x"}`, false},
	}
	for _, tc := range cases {
		ev := baton.NewEvent(tc.typ, baton.Metadata{TriggerSessionID: "c1", TriggerAgentName: tc.agent}, json.RawMessage(tc.payload))
		if baton.IsChatType(tc.typ) {
			ev.Sequence = 7
		}
		if got := Visible(gen, &ev); got != tc.shown {
			t.Errorf("%s: Visible = %v, want %v", tc.name, got, tc.shown)
		}
		f := encodeFrame(gen, &ev)
		if (f.data != nil) != tc.shown {
			t.Errorf("%s: shown = %v, want %v", tc.name, f.data != nil, tc.shown)
			continue
		}
		if f.data == nil {
			continue
		}
		var env struct {
			Type      string         `json:"type"`
			Data      map[string]any `json:"data"`
			Timestamp string         `json:"timestamp"`
		}
		if err := json.Unmarshal(f.data, &env); err != nil || env.Type != tc.typ || env.Timestamp == "" {
			t.Errorf("%s: envelope %s (%v)", tc.name, f.data, err)
			continue
		}
		if baton.IsChatType(tc.typ) {
			if env.Data["sequence"] != float64(7) || env.Data["is_visual"] != gen.IsVisual(tc.agent) {
				t.Errorf("%s: envelope %s", tc.name, f.data)
			}
		} else if env.Data["chat_id"] != "c1" || env.Data["sequence"] != nil {
			t.Errorf("%s: stream envelope %s", tc.name, f.data)
		}
	}
	// ui_hidden is kept; reserved variables are dropped; a workflow without
	// visual_agents shows every agent; a payload that is not an object is never sent.
	ev := baton.NewEvent(baton.TypeChatContextUpdated, baton.Metadata{TriggerSessionID: "c1"},
		json.RawMessage(`{"kind":"context_updated","agent":"InterviewAgent","variables":{"__secrets":"sealed","plan":"x"}}`))
	if f := encodeFrame(gen, &ev); f.data == nil || strings.Contains(string(f.data), "__secrets") || !strings.Contains(string(f.data), `"plan":"x"`) {
		t.Errorf("context_updated: %s", f.data)
	}
	// An event rule's prompt on a select_speaker (the author's instructions
	// to the agent) never reaches a client, whoever the agent; the rest of
	// the payload does.
	for _, agent := range []string{internal, "InterviewAgent"} {
		ev = baton.NewEvent(baton.TypeChatSelectSpeaker, baton.Metadata{TriggerSessionID: "c1", TriggerAgentName: agent},
			json.RawMessage(`{"kind":"select_speaker","agent":"`+agent+`","source":"native","turn_index":3,"prompt":"SECRET-RULE-PROMPT"}`))
		if f := encodeFrame(gen, &ev); f.data == nil || strings.Contains(string(f.data), "SECRET-RULE-PROMPT") || strings.Contains(string(f.data), `"prompt"`) ||
			!strings.Contains(string(f.data), `"agent":"`+agent+`"`) || !strings.Contains(string(f.data), `"turn_index":3`) {
			t.Errorf("select_speaker of %s: %s", agent, f.data)
		}
	}
	ev = baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c1"}, json.RawMessage(`{"kind":"text","agent":"InterviewAgent","content":"NEXT","ui_hidden":true}`))
	if f := encodeFrame(gen, &ev); !strings.Contains(string(f.data), `"ui_hidden":true`) {
		t.Errorf("ui_hidden dropped: %s", f.data)
	}
	open := *gen
	open.Config.VisualAgents = nil
	ev = baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c1"}, json.RawMessage(`{"kind":"text","agent":"ContextVariablesAgent","content":"x"}`))
	if f := encodeFrame(&open, &ev); f.data == nil {
		t.Errorf("workflow without visual_agents hides an agent")
	}
	for _, bad := range []string{`[1,2]`, `"text"`, `{"a":`, ``} {
		ev = baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: "c1"}, json.RawMessage(bad))
		if f := encodeFrame(gen, &ev); f.data != nil && !json.Valid(f.data) {
			t.Errorf("payload %q: invalid envelope %s", bad, f.data)
		}
	}
}

// BenchmarkEncodeFrame is the hub's cost per event before fan-out: a
// stream delta (the bulk of the traffic) and a recorded agent text.
func BenchmarkEncodeFrame(b *testing.B) {
	wfs, err := workflow.LoadAll(os.DirFS(benchDir))
	if err != nil {
		b.Fatal(err)
	}
	var wf *workflow.Workflow
	for _, w := range wfs {
		if w.Name == "benchpaced" {
			wf = w
		}
	}
	meta := baton.Metadata{TriggerSessionID: "0193c2a1-7f3e-7b4a-9c1d-2e8f5a6b7c8d", TriggerAgentName: "Talker"}
	delta, _ := llm.StreamEvent(meta.TriggerSessionID, "Talker", "msg_0193c2a17f3e7b4a", baton.Delta{Kind: baton.DeltaText, Text: " word42"})
	delta.Metadata = meta
	text := baton.NewEvent(baton.TypeChatText, meta, json.RawMessage(`{"kind":"text","agent":"Talker","content":"`+strings.Repeat("word ", 70)+`","index":2}`))
	text.Sequence = 72
	for _, bc := range []struct {
		name string
		ev   baton.Event
	}{{"delta", delta}, {"text", text}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if f := encodeFrame(wf, &bc.ev); f.data == nil {
					b.Fatal("hidden")
				}
			}
		})
	}
}

// TestEnvelopeFilter_UnknownWorkflowFailsClosed: without the chat's
// workflow (no engine, or the workflow was removed) the filter cannot tell
// visual agents from internal ones, so it shows no agent's text, tool calls,
// usage or context — only the person's, the system's and agent-less events,
// and the types the UI needs whoever the agent.
func TestEnvelopeFilter_UnknownWorkflowFailsClosed(t *testing.T) {
	const agent = "ContextVariablesAgent"
	for _, tc := range []struct {
		name, typ, agent, payload string
		shown                     bool
	}{
		{"agent text", baton.TypeChatText, agent, `{"kind":"text","agent":"ContextVariablesAgent","content":"INTERNAL"}`, false},
		{"agent tool call", baton.TypeChatToolCall, agent, `{"kind":"tool_call","agent":"ContextVariablesAgent","tool_name":"t"}`, false},
		{"agent context update", baton.TypeChatContextUpdated, agent, `{"kind":"context_updated","agent":"ContextVariablesAgent","variables":{"a":1}}`, false},
		{"agent usage", baton.TypeChatUsageSummary, agent, `{"kind":"usage_summary","agent":"ContextVariablesAgent"}`, false},
		{"agent stream", baton.TypeStreamText, agent, `{"message_id":"m","agent":"ContextVariablesAgent","delta":"x"}`, false},
		{"handoff agent to the person", baton.TypeChatHandoff, agent, `{"kind":"handoff","from":"ContextVariablesAgent","to":""}`, false},
		{"user text", baton.TypeChatText, "user", `{"kind":"text","agent":"user","content":"hello"}`, true},
		{"system text", baton.TypeChatText, "system", `{"kind":"text","agent":"system","content":"resume"}`, true},
		{"agent-less event", baton.TypeChatContextUpdated, "", `{"kind":"context_updated","variables":{"a":1}}`, true},
		{"input request", baton.TypeChatInputRequest, agent, `{"kind":"input_request","agent":"ContextVariablesAgent"}`, true},
		{"UI tool call awaiting the person", baton.TypeChatToolCall, agent, `{"kind":"tool_call","agent":"ContextVariablesAgent","ui_event_id":"u1","awaiting_response":true}`, true},
		{"run complete", baton.TypeChatRunComplete, "", `{"kind":"run_complete","status":"success"}`, true},
		{"error", baton.TypeChatError, agent, `{"kind":"error","agent":"ContextVariablesAgent","message":"m"}`, true},
		{"select_speaker", baton.TypeChatSelectSpeaker, agent, `{"kind":"select_speaker","agent":"ContextVariablesAgent"}`, true},
		{"notice", baton.TypeChatNotice, agent, `{"kind":"notice","code":"model_retry","agent":"ContextVariablesAgent","message":"m"}`, true},
	} {
		ev := baton.NewEvent(tc.typ, baton.Metadata{TriggerSessionID: "c1", TriggerAgentName: tc.agent}, json.RawMessage(tc.payload))
		if baton.IsChatType(tc.typ) {
			ev.Sequence = 3
		}
		if f := encodeFrame(nil, &ev); (f.data != nil) != tc.shown {
			t.Errorf("%s: shown = %v, want %v", tc.name, f.data != nil, tc.shown)
		}
	}
}

// TestEngineless_HistoryHidesAgents: a server that runs no engine (so
// knows no workflow) serves a chat's history without its agents' text.
func TestEngineless_HistoryHidesAgents(t *testing.T) {
	e := newEnv(t, withoutEngine())
	ctx := context.Background()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "generator", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	var evs []baton.Event
	for _, p := range []string{
		`{"kind":"text","agent":"user","content":"PERSON"}`,
		`{"kind":"text","agent":"ContextVariablesAgent","content":"INTERNAL"}`,
	} {
		evs = append(evs, baton.NewEvent(baton.TypeChatText, baton.Metadata{Source: baton.SourceLLM}, json.RawMessage(p)))
	}
	if _, err := e.store.Append(ctx, scopeAda, chat.ID, evs, nil); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "GET", "/api/chats/acme/"+chat.ID+"/events", e.keys[scopeAda], nil)
	if r.status != 200 || strings.Contains(string(r.body), "INTERNAL") || !strings.Contains(string(r.body), "PERSON") {
		t.Fatalf("history without the workflow: %d %s", r.status, r.body)
	}
}
