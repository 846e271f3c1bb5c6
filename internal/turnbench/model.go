package turnbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Words is how many words the fake model's reply streams, one chunk each.
const Words = 20

// ModelName is the model the fake server answers as, and the workflow's.
const ModelName = "gpt-4o-mini"

// replyWords is the reply the fake model streams after the tool's result.
var replyWords = strings.Fields("The echo tool answered, so here is a short reply of exactly twenty words that streams one chunk per word.")

// ToolArgs is the argument object of the fake model's echo call.
const ToolArgs = `{"text":"What is a baton?"}`

// Model is a fake OpenAI-compatible model on a real loopback HTTP
// listener. It speaks the Chat Completions streaming wire format (SSE
// `data:` lines, one flush per chunk, a usage chunk and `data: [DONE]`):
// to a request whose last message is not a tool result it streams a call
// of the tool echo, its arguments in three chunks; to one that carries the
// tool's result it streams Words words, one chunk per word. Every variant
// of the benchmark talks to the same server, so its cost is the same in
// all of them.
type Model struct {
	// URL is the base URL an OpenAI client is given (…/v1).
	URL string

	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	requests atomic.Int64
	conns    atomic.Int64 // connections accepted
	toolCall [][]byte     // the chunks of the tool-call reply, SSE-framed
	text     [][]byte     // the chunks of the text reply, SSE-framed
}

// StartModel starts a fake model on 127.0.0.1 on a free port. Close stops it.
func StartModel() (*Model, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake model: listen: %w", err)
	}
	m := &Model{ln: ln, URL: "http://" + ln.Addr().String() + "/v1", done: make(chan struct{})}
	m.toolCall, m.text = toolCallChunks(), textChunks()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.complete)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.conns.Add(1)
		}
	}}
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(ln) // ErrServerClosed after Close
	}()
	return m, nil
}

// Requests returns how many completions the model has answered.
func (m *Model) Requests() int64 { return m.requests.Load() }

// Conns returns how many connections the model has accepted: a client
// that keeps its connections alive opens one per request in flight, not
// one per request.
func (m *Model) Conns() int64 { return m.conns.Load() }

// Close stops the server and closes its connections.
func (m *Model) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, m.srv.Close())
	}
	<-m.done
	return err
}

// toolRole is how a tool result appears in a request body; a new chat per
// turn means only the turn's second request has one.
var toolRole = []byte(`"role":"tool"`)

func (m *Model) complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
	if err != nil {
		http.Error(w, `{"error":{"message":"reading the body: `+err.Error()+`"}}`, http.StatusBadRequest)
		return
	}
	m.requests.Add(1)
	chunks := m.toolCall
	if bytes.Contains(body, toolRole) {
		chunks = m.text
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, c := range chunks {
		if _, err := w.Write(c); err != nil {
			return // the client went away
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// chunk is one Chat Completions stream chunk.
type chunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []chunkChoice  `json:"choices"`
	Usage   map[string]int `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []chunkToolCall `json:"tool_calls,omitempty"`
}

type chunkToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function chunkFunction `json:"function"`
}

type chunkFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// sse frames v as one `data:` event.
func sse(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the types above always encode
	}
	return append(append([]byte("data: "), b...), '\n', '\n')
}

func newChunk(id string, choices ...chunkChoice) chunk {
	if choices == nil {
		choices = []chunkChoice{}
	}
	return chunk{ID: id, Object: "chat.completion.chunk", Created: 1764000000, Model: ModelName, Choices: choices}
}

func ptr[T any](v T) *T { return &v }

// done ends every stream.
var doneChunk = []byte("data: [DONE]\n\n")

func toolCallChunks() [][]byte {
	const id = "chatcmpl-bench-tool"
	args := []string{`{"text"`, `:"What is `, `a baton?"}`}
	if strings.Join(args, "") != ToolArgs {
		panic("turnbench: tool arguments out of step")
	}
	out := [][]byte{sse(newChunk(id, chunkChoice{Delta: chunkDelta{Role: "assistant", ToolCalls: []chunkToolCall{{
		ID: "call_bench_echo", Type: "function", Function: chunkFunction{Name: "echo"},
	}}}}))}
	for _, a := range args {
		out = append(out, sse(newChunk(id, chunkChoice{Delta: chunkDelta{ToolCalls: []chunkToolCall{{Function: chunkFunction{Arguments: a}}}}})))
	}
	out = append(out,
		sse(newChunk(id, chunkChoice{FinishReason: ptr("tool_calls")})),
		sse(usageChunk(id, 60, 18)),
		doneChunk)
	return out
}

func textChunks() [][]byte {
	if len(replyWords) != Words {
		panic("turnbench: the reply is not Words words")
	}
	const id = "chatcmpl-bench-text"
	out := [][]byte{sse(newChunk(id, chunkChoice{Delta: chunkDelta{Role: "assistant", Content: ptr("")}}))}
	for i, w := range replyWords {
		if i > 0 {
			w = " " + w
		}
		out = append(out, sse(newChunk(id, chunkChoice{Delta: chunkDelta{Content: ptr(w)}})))
	}
	out = append(out,
		sse(newChunk(id, chunkChoice{FinishReason: ptr("stop")})),
		sse(usageChunk(id, 90, Words)),
		doneChunk)
	return out
}

func usageChunk(id string, prompt, completion int) chunk {
	c := newChunk(id)
	c.Usage = map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
	return c
}

// Reply is the text the fake model's reply streams, whole.
func Reply() string { return strings.Join(replyWords, " ") }
