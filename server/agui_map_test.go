package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// mapperOf returns a mapper of thread t1 whose events are collected as
// JSON, for the mapping's unit tests.
func mapperOf(t *testing.T, msgs ...aguiMessage) (*aguiMapper, *[]string) {
	t.Helper()
	in := &aguiInput{ThreadID: "t1", RunID: "r1", Messages: msgs}
	for i := range in.Messages {
		if err := in.Messages[i].check("m"); err != nil {
			t.Fatal(err)
		}
	}
	m := newAGUIMapper(in, nil, scopeAda, "chat-1", "http://localhost/#chat=chat-1")
	var out []string
	m.emit = func(ev any) error {
		if raw, ok := ev.(aguiRaw); ok {
			if !json.Valid(raw) {
				t.Fatalf("invalid event %s", raw)
			}
			out = append(out, string(raw))
			return nil
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(raw))
		return nil
	}
	return m, &out
}

// feed maps envelopes given as type and data, returning whether the run
// ended at the last.
func feed(t *testing.T, m *aguiMapper, evs ...[2]string) bool {
	t.Helper()
	done := false
	for i, ev := range evs {
		f := &Followed{Envelope: baton.Envelope{Type: ev[0], Data: json.RawMessage(ev[1])}}
		var s struct{ Sequence int64 }
		_ = json.Unmarshal(f.Data, &s)
		f.Sequence = s.Sequence
		var err error
		if done, err = m.live(f); err != nil {
			t.Fatal(err)
		}
		if done && i != len(evs)-1 {
			t.Fatalf("the run ended at %v, before the last envelope", ev)
		}
	}
	return done
}

func typesOf(out []string) []string {
	var ts []string
	for _, raw := range out {
		var v struct{ Type string }
		_ = json.Unmarshal([]byte(raw), &v)
		ts = append(ts, v.Type)
	}
	return ts
}

func TestAGUIMap_StreamedTextKeepsOneID(t *testing.T) {
	m, out := mapperOf(t)
	feed(t, m,
		[2]string{"chat.select_speaker", `{"agent":"A","source":"native","is_visual":true,"sequence":1}`},
		[2]string{"stream.start", `{"message_id":"m1","agent":"A"}`},
		[2]string{"stream.text", `{"message_id":"m1","agent":"A","delta":"Hel"}`},
		[2]string{"stream.text", `{"message_id":"m1","agent":"A","delta":""}`},
		[2]string{"stream.text", `{"message_id":"m1","agent":"A","delta":"lo"}`},
		[2]string{"stream.completed", `{"message_id":"m1","agent":"A"}`},
		[2]string{"chat.text", `{"agent":"A","content":"Hello","agent_message_id":"m1","is_visual":true,"sequence":2}`},
	)
	want := []string{
		`{"type":"STEP_STARTED","stepName":"A"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","name":"A"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hel"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"lo"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
	}
	if !slices.Equal(*out, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(*out, "\n"), strings.Join(want, "\n"))
	}
}

// Deltas of a model call whose start this run did not see (it followed
// the chat from the middle of the call) are not sent: the recorded text
// comes whole instead, so no message starts in its middle.
func TestAGUIMap_JoinedMidCallSendsTheRecordedTextWhole(t *testing.T) {
	m, out := mapperOf(t)
	feed(t, m,
		[2]string{"stream.text", `{"message_id":"m1","agent":"A","delta":"lo"}`},
		[2]string{"chat.text", `{"agent":"A","content":"Hello","agent_message_id":"m1","sequence":2}`},
	)
	want := []string{
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","name":"A"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hello"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
	}
	if !slices.Equal(*out, want) {
		t.Fatalf("got\n%s", strings.Join(*out, "\n"))
	}
}

// Hidden, tool-only, feedback and system texts never show; the client's
// own message and the chat's start message are not echoed, another
// person's message (the web UI's) is.
func TestAGUIMap_WhatTextsShow(t *testing.T) {
	m, out := mapperOf(t, aguiMessage{ID: "u-1", Role: "user", Content: json.RawMessage(`"start here"`)}, aguiMessage{ID: "u-2", Role: "user", Content: json.RawMessage(`"mine"`)})
	m.own[inputEventID(scopeAda, "chat-1", aguiInputKey("u-2"))] = "u-2"
	feed(t, m,
		[2]string{"chat.text", `{"agent":"user","content":"start here","source":"api","sequence":1}`},
		[2]string{"chat.text", `{"agent":"user","content":"Tell me","source":"initial_message","ui_hidden":true,"sequence":2}`},
		[2]string{"chat.text", `{"agent":"A","content":"NEXT","agent_message_id":"m1","ui_hidden":true,"sequence":3}`},
		[2]string{"chat.text", `{"agent":"A","content":"Action completed","agent_message_id":"m2","tool_only":true,"sequence":4}`},
		[2]string{"chat.text", `{"agent":"system","content":"[SYSTEM_RESUME_SIGNAL]","sequence":5}`},
		[2]string{"chat.text", `{"agent":"user","content":"mine","input_id":"` + inputEventID(scopeAda, "chat-1", aguiInputKey("u-2")) + `","sequence":6}`},
		[2]string{"chat.text", `{"agent":"user","content":"from the web","source":"ws","input_id":"in-7","sequence":7}`},
	)
	want := []string{
		`{"type":"TEXT_MESSAGE_START","messageId":"in-7","role":"user"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"in-7","delta":"from the web"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"in-7"}`,
	}
	if !slices.Equal(*out, want) {
		t.Fatalf("got\n%s", strings.Join(*out, "\n"))
	}
}

// A secret form never goes out as a tool call, nor its arguments: the run
// ends with a message that points to the web UI.
func TestAGUIMap_SecretFormEndsTheRunWithALink(t *testing.T) {
	m, out := mapperOf(t)
	done := feed(t, m,
		[2]string{"chat.select_speaker", `{"agent":"A","source":"native","is_visual":true,"sequence":1}`},
		[2]string{"chat.tool_call", `{"agent":"Hidden","tool_name":"collect","tool_call_id":"lc_1","arguments":{"keys":["K"]},"ui_event_id":"ui_1","component_type":"SecretsInput","pending_kind":"secret","awaiting_response":true,"sequence":2}`},
	)
	if !done {
		t.Fatal("the run did not end at the secret form")
	}
	if got := typesOf(*out); !slices.Equal(got, []string{"STEP_STARTED", "STEP_FINISHED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}) {
		t.Fatalf("%v", got)
	}
	all := strings.Join(*out, "\n")
	if strings.Contains(all, "TOOL_CALL") || strings.Contains(all, `"K"`) || !strings.Contains(all, "http://localhost/#chat=chat-1") || strings.Contains(all, "Hidden") {
		t.Fatalf("%s", all)
	}
}

// A UI tool is a frontend tool call that ends the run, its id pending.
func TestAGUIMap_UIToolIsAPendingFrontendCall(t *testing.T) {
	m, out := mapperOf(t)
	done := feed(t, m,
		[2]string{"chat.tool_call", `{"agent":"P","tool_name":"action_plan","tool_call_id":"tc1","arguments":{"a":1},"ui_event_id":"ui_2","component_type":"ActionPlan","mode":"artifact","pending_kind":"ui_tool","awaiting_response":true,"sequence":2}`},
	)
	want := []string{
		`{"type":"TOOL_CALL_START","toolCallId":"tc1","toolCallName":"action_plan","metadata":{"baton":{"component":"ActionPlan","mode":"artifact","ui_event_id":"ui_2"}}}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"tc1","delta":"{\"a\":1}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"tc1"}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","result":{"chat_id":"chat-1"},"outcome":{"type":"success","pendingToolCallIds":["tc1"]}}`,
	}
	if !done || !slices.Equal(*out, want) {
		t.Fatalf("done %v\n%s", done, strings.Join(*out, "\n"))
	}
}

// State: a snapshot without the reserved variables, then JSON Patch
// deltas whose paths escape "~" and "/" (RFC 6901) and whose null
// removes a variable.
func TestAGUIMap_StateDeltas(t *testing.T) {
	m, out := mapperOf(t)
	if err := m.stateSnapshot(json.RawMessage(`{"a":1,"__secrets":"sealed","x/y":true}`)); err != nil {
		t.Fatal(err)
	}
	feed(t, m,
		[2]string{"chat.context_updated", `{"variables":{"a~b":2,"x/y":null,"gone":null,"__k":1},"sequence":3}`},
	)
	want := []string{
		`{"type":"STATE_SNAPSHOT","snapshot":{"a":1,"x/y":true}}`,
		`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a~0b","value":2},{"op":"remove","path":"/x~1y"}]}`,
	}
	if !slices.Equal(*out, want) {
		t.Fatalf("got\n%s", strings.Join(*out, "\n"))
	}
}

// The end of a run closes what is open, and chat.error is RUN_ERROR.
func TestAGUIMap_ErrorClosesWhatIsOpen(t *testing.T) {
	m, out := mapperOf(t)
	done := feed(t, m,
		[2]string{"chat.select_speaker", `{"agent":"A","source":"native","is_visual":true,"sequence":1}`},
		[2]string{"stream.start", `{"message_id":"m1","agent":"A"}`},
		[2]string{"stream.text", `{"message_id":"m1","agent":"A","delta":"Hel"}`},
		[2]string{"chat.error", `{"message":"the model failed","code":"provider_error","sequence":2}`},
	)
	if got := typesOf(*out); !done || !slices.Equal(got, []string{"STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"}) {
		t.Fatalf("%v", got)
	}
	if last := (*out)[len(*out)-1]; last != `{"type":"RUN_ERROR","message":"the model failed","code":"provider_error"}` {
		t.Fatal(last)
	}
}

// A cancelled run finishes with the cancelled outcome; usage adds up per
// model.
func TestAGUIMap_CancelledAndUsage(t *testing.T) {
	m, out := mapperOf(t)
	feed(t, m,
		[2]string{"chat.usage_summary", `{"model":"m","prompt_tokens":10,"completion_tokens":2,"cached_tokens":4,"sequence":1}`},
		[2]string{"chat.usage_summary", `{"model":"m","prompt_tokens":5,"completion_tokens":1,"sequence":2}`},
		[2]string{"chat.run_complete", `{"status":"cancelled","reason":"asked","sequence":3}`},
	)
	want := `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","result":{"chat_id":"chat-1","reason":"asked","status":"cancelled"},"outcome":{"type":"cancelled"},"usage":[{"model":"m","inputTokens":15,"outputTokens":3,"totalTokens":18,"cachedInputTokens":4}]}`
	if len(*out) != 1 || (*out)[0] != want {
		t.Fatalf("%v", *out)
	}
}

// FuzzAGUIInput: the RunAgentInput decoder never panics, and what it
// accepts has what the route relies on.
func FuzzAGUIInput(f *testing.F) {
	f.Add([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"hi"}],"state":{},"tools":[{"name":"x","description":"d"}],"context":[],"forwardedProps":{}}`))
	f.Add([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","value":"u"}}]},{"id":"t","role":"tool","toolCallId":"c","content":"{}"}]}`))
	f.Add([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`))
	f.Add([]byte(`{"threadId":7}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := decodeAGUIInput(data)
		if err != nil {
			if baton.ErrorCode(err) != baton.EINVALID {
				t.Fatalf("error %v is not EINVALID", err)
			}
			return
		}
		if in.ThreadID == "" || in.RunID == "" || len(in.ThreadID) > maxAGUIID || in.Messages == nil {
			t.Fatalf("accepted %+v", in)
		}
		for _, m := range in.Messages {
			if m.ID == "" || m.Role == "" || (m.Role == "tool" && m.ToolCallID == "") {
				t.Fatalf("accepted message %+v", m)
			}
		}
		_ = aguiChatID(scopeAda, "wf", in.ThreadID)
		_ = in.newestInput()
	})
}
