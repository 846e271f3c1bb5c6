package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/llm/openai"
	"github.com/batonhq/baton/workflow"
)

// sseModel is a fake OpenAI-compatible server speaking the Chat Completions
// SSE wire format: request n gets handlers[n] (the last one repeats). It
// keeps every request's messages.
type sseModel struct {
	*httptest.Server
	mu       sync.Mutex
	handlers []http.HandlerFunc
	requests [][]map[string]any // the messages of each request
}

func newSSEModel(t *testing.T, handlers ...http.HandlerFunc) *sseModel {
	t.Helper()
	m := &sseModel{handlers: handlers}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []map[string]any `json:"messages"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		m.mu.Lock()
		n := len(m.requests)
		m.requests = append(m.requests, body.Messages)
		h := m.handlers[min(n, len(m.handlers)-1)]
		m.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(m.Close)
	return m
}

// provider is an openai provider on the fake with a small backoff. Its
// stall timeouts are long: the short ones that make a stall cost the test
// milliseconds come from the workflow's llm block, through the engine.
func (m *sseModel) provider() harnessOption {
	p := openai.New(openai.WithBaseURL(m.URL+"/v1"), openai.WithAPIKey("sk-test"), openai.WithLogger(discardLogger()),
		openai.WithBackoff(time.Millisecond, 5*time.Millisecond), openai.WithStallTimeouts(time.Minute, time.Minute))
	return withProvider(func(*workflow.Workflow) (baton.Provider, error) { return p, nil })
}

func sseChunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

func sseText(s string) string {
	b, _ := json.Marshal(s)
	return sseChunk(`{"content":`+string(b)+`}`, "")
}

// sseReply streams text in three pieces, the finish and [DONE].
func sseReply(text string) http.HandlerFunc {
	return sseThen(nil, sseText(text[:len(text)/3]), sseText(text[len(text)/3:2*len(text)/3]), sseText(text[2*len(text)/3:]), sseChunk(`{}`, "stop"))
}

// sseThen writes the chunks, flushes, then ends as end says: nil sends
// [DONE]; otherwise end does what it does (hang, drop).
func sseThen(end func(w http.ResponseWriter, r *http.Request), chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		w.(http.Flusher).Flush()
		if end == nil {
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		end(w, r)
	}
}

func hangUntilGone(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
func dropConnection(http.ResponseWriter, *http.Request)    { panic(http.ErrAbortHandler) }

// TestModelRetry_ClientSeesRetractionAndNotice runs a turn of the person
// against a model server that fails the first attempt in each of the ways
// a real one does: it hangs before the first token, stalls after three
// chunks, drops the connection mid-stream, or sends one malformed chunk.
// A subscriber of the chat (what the recorder publishes and the deltas the
// engine broadcasts: what a client's hub gets) must see the failed
// attempt's stream.error naming its message id as void and retried, the
// chat.notice, and the retry under a new message id; the store holds the
// reply once, and the notice enters neither the model's history nor the
// state (a restart resumes from the store and the next call's messages have
// no trace of it).
func TestModelRetry_ClientSeesRetractionAndNotice(t *testing.T) {
	const answer = "A baton is passed from one runner to the next."
	for _, tc := range []struct {
		name  string
		first http.HandlerFunc
		code  string
	}{
		{"hang before first token", sseThen(hangUntilGone, sseChunk(`{"role":"assistant","content":""}`, "")), "timeout_first_token"},
		{"stall after three chunks", sseThen(hangUntilGone, sseText("A ba"), sseText("ton is"), sseText(" pass")), "timeout_idle"},
		{"connection dropped", sseThen(dropConnection, sseText("A ba"), sseText("ton is")), "connection_dropped"},
		{"malformed chunk", sseThen(nil, sseText("A ba"), `{"id":"x","choices":[{"index":0,"delta":{"content":`), "malformed_chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSSEModel(t, tc.first, sseReply(answer), sseReply("Again: "+answer))
			h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), m.provider())
			id := start(t, h, "assistant")
			h.waitStatus(id, baton.ChatWaitingInput)
			sub, err := h.bus.Subscribe([]string{"chat.*", "stream.*"}, bus.ForChat(id), bus.Buffer(1024))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if err := h.eng.Submit(context.Background(), testScope, id, "What is a baton?", "api"); err != nil {
				t.Fatal(err)
			}
			var seen []baton.Event
			timeout := time.After(20 * time.Second) // only catches a hang
		read:
			for {
				select {
				case ev := <-sub.C():
					seen = append(seen, ev)
					if ev.Type == baton.TypeChatInputRequest {
						break read
					}
				case <-timeout:
					t.Fatalf("no input request after the turn; saw %d events", len(seen))
				}
			}
			h.waitStatus(id, baton.ChatWaitingInput)

			// What the client saw.
			deltas := map[string]string{} // message id -> its streamed text
			void := map[string]bool{}
			var notice map[string]any
			var final map[string]any
			for _, ev := range seen {
				p := payloadOf(t, ev)
				msg, _ := p["message_id"].(string)
				switch ev.Type {
				case baton.TypeStreamText:
					if void[msg] {
						t.Fatalf("a delta of %s after its stream.error", msg)
					}
					deltas[msg] += p["delta"].(string)
				case baton.TypeStreamError:
					if p["void"] != true || p["will_retry"] != true || p["retryable"] != true || p["code"] != tc.code {
						t.Fatalf("stream.error %s, want void, will_retry, retryable, code %s", ev.Payload, tc.code)
					}
					void[msg] = true
				case baton.TypeChatNotice:
					if len(void) != 1 {
						t.Fatalf("notice before the failed attempt's stream.error")
					}
					notice = p
				case baton.TypeChatText:
					if p["agent"] == "Assistant" {
						final = p
					}
				}
			}
			if len(void) != 1 {
				t.Fatalf("stream.errors for %v, want one failed attempt", void)
			}
			if notice == nil || notice["code"] != baton.NoticeModelRetry || notice["attempt"] != 2.0 || notice["max_attempts"] != 4.0 ||
				!strings.Contains(notice["message"].(string), "retrying (2/4)") || notice["agent"] != "Assistant" {
				t.Fatalf("notice %v", notice)
			}
			if final == nil || final["content"] != answer {
				t.Fatalf("final text %v, want %q", final, answer)
			}
			finalID := final["agent_message_id"].(string)
			if void[finalID] || deltas[finalID] != answer {
				t.Fatalf("final message %s (void %v) streamed %q", finalID, void[finalID], deltas[finalID])
			}
			for msg, text := range deltas {
				if msg != finalID && !void[msg] {
					t.Fatalf("deltas %q of %s were never retracted", text, msg)
				}
			}

			// What the store holds: the reply once, and the notice.
			evs := h.events(id)
			checkSequences(t, evs)
			texts, notices := 0, 0
			for _, ev := range evs {
				p := payloadOf(t, ev)
				switch {
				case ev.Type == baton.TypeChatText && p["agent"] == "Assistant":
					texts++
				case ev.Type == baton.TypeChatNotice:
					notices++
				}
			}
			if texts != 1 || notices != 1 {
				t.Fatalf("recorded %d texts of the assistant and %d notices, want 1 and 1", texts, notices)
			}

			// Resumed from the store alone, the chat goes on; the model's
			// history has the reply once and no notice.
			h = h.restart()
			if err := h.eng.Submit(context.Background(), testScope, id, "And again?", "api"); err != nil {
				t.Fatal(err)
			}
			h.waitStatus(id, baton.ChatWaitingInput)
			m.mu.Lock()
			last := m.requests[len(m.requests)-1]
			m.mu.Unlock()
			var roles []string
			for _, msg := range last {
				roles = append(roles, fmt.Sprint(msg["role"]))
				if c, _ := msg["content"].(string); strings.Contains(c, "retrying") {
					t.Fatalf("the notice reached the model: %v", msg)
				}
			}
			if got := strings.Join(roles, ","); got != "system,user,assistant,user" {
				t.Fatalf("the next call's messages are %s, want system,user,assistant,user", got)
			}
		})
	}
}
