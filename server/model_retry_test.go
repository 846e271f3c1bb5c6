package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/openai"
	"github.com/batonhq/baton/workflow"
)

// TestWS_ModelStallRetractedAndNoticed: a raw WebSocket client of a chat
// whose model stalls after three chunks sees those deltas retracted (the
// attempt's stream.error names its message id, void, will_retry), the
// chat.notice, and the retry under a new message id whose text is the one
// recorded; the history holds the notice and the text once.
func TestWS_ModelStallRetractedAndNoticed(t *testing.T) {
	const answer = "Hello! It is 12:00 UTC."
	gate := make(chan struct{})
	chunk := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
	}
	text := func(s string) string { b, _ := json.Marshal(s); return chunk(`{"content":`+string(b)+`}`, "") }
	var calls atomic.Int32
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if calls.Add(1) == 1 {
			<-gate // until the client is connected: it must see the deltas
			for _, c := range []string{text("Hel"), text("lo! It"), text(" is")} {
				fmt.Fprintf(w, "data: %s\n\n", c)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done() // stalls
			return
		}
		for _, c := range []string{text(answer[:7]), text(answer[7:]), chunk(`{}`, "stop")} {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer model.Close()
	defer close(gate)
	p := openai.New(openai.WithBaseURL(model.URL+"/v1"), openai.WithAPIKey("sk-test"), openai.WithLogger(quietLogger()),
		openai.WithBackoff(time.Millisecond, 5*time.Millisecond), openai.WithStallTimeouts(time.Minute, 200*time.Millisecond))
	e := newEnv(t, withModel(func(*workflow.Workflow) (baton.Provider, error) { return p, nil }))

	id := e.start(t, "hello", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // only catches a hang
	defer cancel()
	c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
	defer c.CloseNow()
	var seen []envelope
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read after %d envelopes: %v", len(seen), err)
		}
		v := decodeEnvelope(t, raw)
		if len(seen) == 0 {
			gate <- struct{}{} // the socket is live: let the model answer
		}
		seen = append(seen, v)
		if v.Type == baton.TypeChatRunComplete {
			break
		}
	}

	streamed := map[string]string{}
	void := map[string]bool{}
	var notice, final envelope
	for _, v := range seen {
		msg := v.str("message_id")
		switch v.Type {
		case baton.TypeStreamText:
			if void[msg] {
				t.Fatalf("a delta of %s after its stream.error", msg)
			}
			streamed[msg] += v.str("delta")
		case baton.TypeStreamError:
			if v.Data["void"] != true || v.Data["will_retry"] != true || v.str("code") != "timeout_idle" {
				t.Fatalf("stream.error %s", v.raw)
			}
			void[msg] = true
		case baton.TypeChatNotice:
			notice = v
		case baton.TypeChatText:
			if v.str("agent") == "Greeter" {
				final = v
			}
		}
	}
	if len(void) != 1 {
		t.Fatalf("retracted %v, want the stalled attempt", void)
	}
	for msg := range void {
		if streamed[msg] != "Hello! It is" {
			t.Fatalf("the stalled attempt %s streamed %q", msg, streamed[msg])
		}
	}
	if notice.seq() == 0 || notice.str("code") != baton.NoticeModelRetry || !strings.Contains(notice.str("message"), "the model is slow; retrying (2/") {
		t.Fatalf("notice %s", notice.raw)
	}
	finalID := final.str("agent_message_id")
	if final.str("content") != answer || void[finalID] || streamed[finalID] != answer {
		t.Fatalf("final %s; streamed under it %q", final.raw, streamed[finalID])
	}

	texts, notices := 0, 0
	for _, raw := range e.history(t, id) {
		v := decodeEnvelope(t, raw)
		switch {
		case v.Type == baton.TypeChatText && v.str("agent") == "Greeter":
			texts++
		case v.Type == baton.TypeChatNotice:
			notices++
		}
	}
	if texts != 1 || notices != 1 {
		t.Fatalf("history: %d texts of Greeter, %d notices; want 1 and 1", texts, notices)
	}
}
