package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/workflow"
)

// flushRecorder is a ResponseWriter that records what reached the client
// (what was flushed) and the write deadlines set, on a test's clock.
type flushRecorder struct {
	t        *testing.T
	header   http.Header
	buf      bytes.Buffer
	flushed  int // bytes of buf flushed
	flushes  int
	deadline time.Time
	armings  int
	clock    time.Time
	timeout  time.Duration
}

func (r *flushRecorder) Header() http.Header { return r.header }
func (r *flushRecorder) WriteHeader(int)     {}
func (r *flushRecorder) Write(b []byte) (int, error) {
	// Every write has at least 15/16 of the timeout left.
	if left := r.deadline.Sub(r.clock); left < r.timeout-r.timeout/deadlineSlack {
		r.t.Errorf("a write with %v left of the %v timeout", left, r.timeout)
	}
	return r.buf.Write(b)
}
func (r *flushRecorder) FlushError() error {
	r.flushes++
	r.flushed = r.buf.Len()
	return nil
}
func (r *flushRecorder) SetWriteDeadline(t time.Time) error {
	r.deadline = t
	r.armings++
	return nil
}
func (r *flushRecorder) SetReadDeadline(time.Time) error { return nil }

// client is what the client has received.
func (r *flushRecorder) client() string { return r.buf.String()[:r.flushed] }

// TestEventStream_HoldCoalescesReleaseFlushes: a write outside hold reaches
// the client at once; the writes between hold and release reach it
// together, in order, at release; a release with nothing written flushes
// nothing. The write deadline is set once per timeout/16, never letting a
// write start with less than 15/16 of the timeout.
func TestEventStream_HoldCoalescesReleaseFlushes(t *testing.T) {
	const timeout = 16 * time.Second
	rec := &flushRecorder{t: t, header: http.Header{}, clock: time.Unix(1000, 0), timeout: timeout}
	es := newEventStream(rec, timeout)
	es.now = func() time.Time { return rec.clock }

	if err := es.write([]byte("data: 1\n\n")); err != nil {
		t.Fatal(err)
	}
	if got := rec.client(); got != "data: 1\n\n" || rec.flushes != 1 {
		t.Fatalf("after a write alone the client has %q (%d flushes)", got, rec.flushes)
	}
	es.hold()
	for _, ev := range []string{"data: 2\n\n", "data: 3\n\n", "data: 4\n\n"} {
		if err := es.write([]byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	if rec.flushes != 1 {
		t.Fatalf("%d flushes while held, want none since the first", rec.flushes-1)
	}
	if err := es.release(); err != nil {
		t.Fatal(err)
	}
	if got := rec.client(); got != "data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n" || rec.flushes != 2 {
		t.Fatalf("after release the client has %q (%d flushes), want all four in one more flush", got, rec.flushes)
	}
	es.hold()
	if err := es.release(); err != nil || rec.flushes != 2 {
		t.Fatalf("an empty release flushed (%d flushes, %v)", rec.flushes, err)
	}
	if rec.armings != 1 {
		t.Fatalf("%d deadlines set at one instant, want 1", rec.armings)
	}
	// Just under timeout/16 later the deadline stands; at timeout/16 it
	// moves to now+timeout.
	rec.clock = rec.clock.Add(timeout/deadlineSlack - time.Nanosecond)
	_ = es.write([]byte("data: 5\n\n"))
	if rec.armings != 1 {
		t.Fatalf("the deadline was set again before timeout/%d", deadlineSlack)
	}
	rec.clock = rec.clock.Add(time.Nanosecond)
	_ = es.write([]byte("data: 6\n\n"))
	if rec.armings != 2 || !rec.deadline.Equal(rec.clock.Add(timeout)) {
		t.Fatalf("after timeout/%d: %d deadlines, the last %v, want %v", deadlineSlack, rec.armings, rec.deadline, rec.clock.Add(timeout))
	}
}

// pausingModel is the scripted provider of the hello workflow (a tool
// call, then the answer), except that its first model call waits for start
// to be closed — the answer's stream.start then comes after the client's
// stream subscribed: one sent before is not the client's, the recorded text
// brings it — and its second, the answer, stops after its first text delta,
// sending that delta's text on paused, until resume is closed.
type pausingModel struct {
	calls  atomic.Int32
	start  chan struct{}
	paused chan string
	resume chan struct{}
}

func newPausingModel() *pausingModel {
	return &pausingModel{start: make(chan struct{}), paused: make(chan string, 1), resume: make(chan struct{})}
}

// begin lets the model go on once the client's stream follows the chat.
func (m *pausingModel) begin(t *testing.T, e *env) {
	t.Helper()
	waitUntil(t, "the client's stream to follow the chat", func() bool { return e.srv.hub.subscribers() == 1 })
	close(m.start)
}

func (m *pausingModel) providers(wf *workflow.Workflow) (baton.Provider, error) {
	sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
	if err != nil {
		return nil, err
	}
	wait := func(ctx context.Context, ch <-chan struct{}, yield func(baton.Delta, error) bool) bool {
		select {
		case <-ch:
			return true
		case <-ctx.Done():
			yield(baton.Delta{}, ctx.Err())
			return false
		}
	}
	return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
		call := m.calls.Add(1)
		return func(yield func(baton.Delta, error) bool) {
			if call == 1 && !wait(ctx, m.start, yield) {
				return
			}
			pause := call == 2
			for d, err := range sp.Stream(ctx, req) {
				if !yield(d, err) {
					return
				}
				if pause && d.Kind == baton.DeltaText {
					pause = false
					m.paused <- d.Text
					if !wait(ctx, m.resume, yield) {
						return
					}
				}
			}
		}
	}), nil
}

// helloAnswer is the hello workflow's scripted answer.
const helloAnswer = "Hello! I checked the clock in UTC for you. Have a wonderful day!"

// streamEnv is an env whose model pauses in the middle of hello's answer,
// with no heartbeat: only the stream's own flush can bring the answer's
// first delta to the client while nothing follows it.
func streamEnv(t *testing.T) (*env, *pausingModel) {
	m := newPausingModel()
	e := newEnv(t, withProvider(m.providers), withConfig(func(c *Config) { c.Heartbeat = time.Hour }))
	return e, m
}

// TestAGUI_DeltaAloneReachesTheClient: a delta that arrives alone — the
// model has paused after it — reaches the AG-UI client at once, not with
// the next event; then the run goes on to RUN_FINISHED, its deltas in
// order.
func TestAGUI_DeltaAloneReachesTheClient(t *testing.T) {
	e, m := streamEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, _ := json.Marshal(aguiInputOf("alone-1", "run-1", userMsg("u1", "What time is it?")))
	req, _ := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/agui/acme/hello", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.keys[scopeAda])
	resp, err := e.ts.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("AG-UI run: %v %v", resp, err)
	}
	defer resp.Body.Close()
	m.begin(t, e)
	var first string
	select {
	case first = <-m.paused:
	case <-ctx.Done():
		t.Fatal("the model did not stream")
	}
	sc := bufio.NewScanner(resp.Body)
	var seen []string
	next := func() aguiEv {
		t.Helper()
		for sc.Scan() {
			if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
				var ev aguiEv
				if err := json.Unmarshal(data, &ev); err != nil {
					t.Fatalf("%s: %v", data, err)
				}
				seen = append(seen, ev.typ())
				return ev
			}
		}
		t.Fatalf("the stream ended after %v: %v", seen, sc.Err())
		return nil
	}
	// Until the model resumes, nothing follows the first delta: the read
	// returns only if the stream flushed it.
	for {
		ev := next()
		if ev.typ() == "TEXT_MESSAGE_CONTENT" {
			if ev.str("delta") != first {
				t.Fatalf("first content %q, the model's first delta %q", ev.str("delta"), first)
			}
			break
		}
	}
	close(m.resume)
	text := first
	for {
		ev := next()
		if ev.typ() == "TEXT_MESSAGE_CONTENT" {
			text += ev.str("delta")
		}
		if ev.typ() == "RUN_FINISHED" {
			break
		}
	}
	if text != helloAnswer {
		t.Fatalf("the streamed text %q, want %q", text, helloAnswer)
	}
}

// TestChatCompletions_DeltaAloneReachesTheClient: the same for a streamed
// chat completion (openai-go): the chunk of a delta that arrives alone is
// read while the model is paused; the rest follows to finish_reason.
func TestChatCompletions_DeltaAloneReachesTheClient(t *testing.T) {
	e, m := streamEnv(t)
	ctx := oaiCtx(t)
	s := e.oaiClient(scopeAda).Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "hello",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What time is it?")},
	})
	defer s.Close()
	m.begin(t, e)
	var first string
	select {
	case first = <-m.paused:
	case <-ctx.Done():
		t.Fatal("the model did not stream")
	}
	var text strings.Builder
	for text.Len() == 0 && s.Next() {
		for _, c := range s.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if text.String() != first {
		t.Fatalf("content %q before the model resumed, want its first delta %q (err %v)", text.String(), first, s.Err())
	}
	close(m.resume)
	finish := ""
	for s.Next() {
		for _, c := range s.Current().Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if finish != "stop" || text.String() != helloAnswer {
		t.Fatalf("finish %q, text %q, want %q", finish, text.String(), helloAnswer)
	}
}
