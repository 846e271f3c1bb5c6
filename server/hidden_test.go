package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// rawSSE follows a chat over SSE as a client other than the bundled UI
// would: it answers what the chat asks over HTTP and returns every envelope
// it received until run_complete (or until stop returns true).
func (e *env) rawSSE(ctx context.Context, t *testing.T, chatID string, stop func(envelope) bool) []envelope {
	t.Helper()
	resp, r := e.openSSE(ctx, t, chatID, "")
	defer resp.Body.Close()
	var got []envelope
	readSSE(t, r, func(ev sseEvent) bool {
		v := decodeEnvelope(t, []byte(ev.data))
		got = append(got, v)
		if m := e.reply(t, chatID, v); m != nil {
			e.submitHTTP(t, m)
		}
		return v.Type == baton.TypeChatRunComplete || (stop != nil && stop(v))
	})
	if len(got) == 0 || (got[len(got)-1].Type != baton.TypeChatRunComplete && stop == nil) {
		t.Fatalf("the stream ended before run_complete (%d envelopes)", len(got))
	}
	return got
}

// TestSSE_GeneratorHiddenTextNeverStreams follows the generator chat with
// a raw SSE client: no stream.text delta of the hidden NEXT trigger or of
// ActionPlanAgent's structured-output JSON (shown by its component) reaches
// it, while the visible agents' text still streams.
func TestSSE_GeneratorHiddenTextNeverStreams(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "generator", nil)
	got := e.rawSSE(ctx, t, id, nil)

	deltas := map[string]string{} // message id → the text its deltas carried
	hidden := map[string]string{} // message id → content of a ui_hidden chat.text
	for _, v := range got {
		switch v.Type {
		case baton.TypeStreamText:
			deltas[v.str("message_id")] += v.str("delta")
			if v.str("agent") == "ActionPlanAgent" {
				t.Errorf("a delta of the auto-tool agent's JSON reached the client: %s", v.raw)
			}
		case baton.TypeChatText:
			if v.Data["ui_hidden"] == true && v.str("agent_message_id") != "" {
				hidden[v.str("agent_message_id")] = v.str("content")
			}
		}
	}
	if len(hidden) < 2 {
		t.Fatalf("the client saw %d hidden agent texts, want NEXT and the plan: %v", len(hidden), hidden)
	}
	for id, content := range hidden {
		if d, ok := deltas[id]; ok {
			t.Errorf("hidden message %s (%.40q) streamed to the client as %q", id, content, d)
		}
	}
	for id, d := range deltas {
		if strings.TrimSpace(d) == "NEXT" || strings.Contains(d, `"ActionPlan"`) {
			t.Errorf("message %s streamed hidden text: %q", id, d)
		}
	}
	if len(deltas) == 0 {
		t.Errorf("no text of a visible agent streamed")
	}
}

// TestSSE_GeneratorInternalSpeakerShown: the select_speaker of the
// non-visual ContextVariablesAgent reaches a raw client after the person's
// message and again after the secret form, so the person sees who works;
// its text does not.
func TestSSE_GeneratorInternalSpeakerShown(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "generator", nil)
	got := e.rawSSE(ctx, t, id, nil)

	const internal = "ContextVariablesAgent"
	afterMessage, afterForm := false, false
	phase := ""
	for _, v := range got {
		switch {
		case v.Type == baton.TypeChatText && v.str("agent") == "user" && v.Data["ui_hidden"] != true:
			phase = "message"
		case v.Type == baton.TypeChatToolResponse && v.str("agent") == internal && v.str("tool_name") == "collect_api_keys":
			phase = "form"
		case v.Type == baton.TypeChatText && v.str("agent") == internal:
			t.Errorf("text of the non-visual agent reached the client: %s", v.raw)
		case v.Type == baton.TypeChatSelectSpeaker && v.str("agent") == internal:
			switch phase {
			case "message":
				afterMessage = true
			case "form":
				afterForm = true
			}
			phase = ""
		}
	}
	if !afterMessage || !afterForm {
		t.Fatalf("select_speaker of %s: after the message %v, after the secret form %v, want both", internal, afterMessage, afterForm)
	}
}

// TestSSE_HiddenAfterStreamingIsRetracted: a reply hidden only once it is
// complete (an agent_text_contains ui_hidden trigger) has streamed to a raw
// SSE client; its chat.text then names that streamed message in
// retract_message_id, live and in the history.
func TestSSE_HiddenAfterStreamingIsRetracted(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "retract", nil)
	resp, r := e.openSSE(ctx, t, id, "")
	defer resp.Body.Close()
	content := "Please note the weekly reports."
	e.submitHTTP(t, &clientMessage{Type: msgSubmit, ChatID: id, Content: &content})
	streamed := map[string]string{}
	var text envelope
	readSSE(t, r, func(ev sseEvent) bool {
		v := decodeEnvelope(t, []byte(ev.data))
		switch v.Type {
		case baton.TypeStreamText:
			streamed[v.str("message_id")] += v.str("delta")
		case baton.TypeChatText:
			if v.str("agent") == "Assistant" {
				text = v
			}
		}
		return v.Type == baton.TypeChatRunComplete
	})
	msgID := text.str("agent_message_id")
	if text.Data["ui_hidden"] != true || msgID == "" {
		t.Fatalf("the assistant's reply is not a hidden text: %s", text.raw)
	}
	if !strings.Contains(streamed[msgID], "[[CLOSED]]") {
		t.Fatalf("the reply did not stream before it was hidden (nothing to retract): %q", streamed)
	}
	if got := text.str("retract_message_id"); got != msgID {
		t.Fatalf("retract_message_id = %q, want the streamed message %q: %s", got, msgID, text.raw)
	}
	found := false
	for _, raw := range e.history(t, id) {
		v := decodeEnvelope(t, raw)
		found = found || (v.Type == baton.TypeChatText && v.str("retract_message_id") == msgID)
	}
	if !found {
		t.Errorf("the history's chat.text does not carry the retraction")
	}
}
