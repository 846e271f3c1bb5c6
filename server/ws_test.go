package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm"
	"github.com/coder/websocket"
)

// reply is what the person answers to an envelope of the generator chat,
// or nil when the envelope asks nothing of them.
func (e *env) reply(t testing.TB, chatID string, v envelope) *clientMessage {
	t.Helper()
	switch v.Type {
	case baton.TypeChatInputRequest:
		content := "A weekly newsletter from our team notes."
		return &clientMessage{Type: msgSubmit, ChatID: chatID, Content: &content}
	case baton.TypeChatToolCall:
		id := v.str("ui_event_id")
		if id == "" {
			return nil
		}
		c, err := e.store.GetChat(context.Background(), scopeAda, chatID)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Pending {
			if p.UIEventID != id {
				continue
			}
			if p.Kind == baton.PendingSecret {
				return &clientMessage{Type: msgUIResponse, ChatID: chatID, UIEventID: id, Status: "success", Data: json.RawMessage(`{"NEWSLETTER_API_KEY":"` + testSecret + `"}`)}
			}
			return &clientMessage{Type: msgUIResponse, ChatID: chatID, UIEventID: id, Status: "success", Data: json.RawMessage(`{"action":"approve"}`)}
		}
	}
	return nil
}

// submitHTTP sends m through POST /api/input/submit.
func (e *env) submitHTTP(t testing.TB, m *clientMessage) {
	t.Helper()
	body := map[string]any{"chat_id": m.ChatID}
	if m.Content != nil {
		body["content"] = *m.Content
	} else {
		body["ui_event_id"], body["status"], body["data"] = m.UIEventID, m.Status, m.Data
	}
	if r := e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], body); r.status != http.StatusAccepted {
		t.Fatalf("submit %+v: %d %s", m, r.status, r.body)
	}
}

func writeMsg(ctx context.Context, t testing.TB, c *websocket.Conn, m any) {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// chatEnvelopes keeps the recorded (sequenced) envelopes of a list.
func chatEnvelopes(vs []envelope) [][]byte {
	var out [][]byte
	for _, v := range vs {
		if v.seq() > 0 {
			out = append(out, v.raw)
		}
	}
	return out
}

func sameEnvelopes(t *testing.T, what string, got [][]byte, want []json.RawMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d envelopes, history has %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: envelope %d differs from history:\n got  %s\n want %s", what, i, got[i], want[i])
		}
	}
}

// TestWS_GeneratorChat runs the whole generator chat over one WebSocket:
// the interview answer, the secret form and the plan approval are sent as
// client messages; run_complete arrives; what the client saw equals the
// history; the secret is in nothing it received.
func TestWS_GeneratorChat(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "generator", nil)
	c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
	defer c.CloseNow()
	var got []envelope
	acks, streams := 0, 0
	last := int64(0)
	for done := false; !done; {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (received %d envelopes)", err, len(got))
		}
		if bytes.Contains(raw, []byte(testSecret)) {
			t.Fatalf("the secret reached the client: %s", raw)
		}
		v := decodeEnvelope(t, raw)
		switch {
		case v.Type == "ack":
			acks++
			continue
		case v.Type == "error":
			t.Fatalf("error reply: %s", raw)
		case baton.IsStreamType(v.Type):
			streams++
			if v.str("chat_id") != id {
				t.Fatalf("stream event without the chat id: %s", raw)
			}
			continue
		}
		if v.seq() <= last {
			t.Fatalf("sequence %d after %d", v.seq(), last)
		}
		last = v.seq()
		for _, k := range []string{"is_visual", "is_structured_capable", "is_tool_agent"} {
			if _, ok := v.Data[k]; !ok {
				t.Fatalf("envelope without %s: %s", k, raw)
			}
		}
		got = append(got, v)
		if m := e.reply(t, id, v); m != nil {
			writeMsg(ctx, t, c, m)
		}
		done = v.Type == baton.TypeChatRunComplete
	}
	// The last answer's ack and the events of the run it resumed are
	// written by different goroutines: the ack may come after run_complete.
	actx, acancel := context.WithTimeout(ctx, 5*time.Second)
	defer acancel()
	for acks < 3 {
		_, raw, err := c.Read(actx)
		if err != nil {
			break
		}
		if decodeEnvelope(t, raw).Type == "ack" {
			acks++
		}
	}
	if acks != 3 {
		t.Errorf("acks: %d, want 3 (message, secret, approval)", acks)
	}
	if streams == 0 {
		t.Errorf("no stream.* events reached the client")
	}
	e.waitStatus(t, id, baton.ChatCompleted)
	sameEnvelopes(t, "websocket", chatEnvelopes(got), e.history(t, id))
	// The filter hid the internal agent and kept what the UI needs.
	seen := map[string]bool{}
	for _, v := range got {
		seen[v.Type+"/"+v.str("agent")] = true
		if v.str("agent") == "ContextVariablesAgent" && v.Type == baton.TypeChatText {
			t.Errorf("text of the non-visual ContextVariablesAgent reached the client: %s", v.raw)
		}
	}
	for _, want := range []string{"chat.input_request/InterviewAgent", "chat.tool_call/ContextVariablesAgent", "chat.text/user", "chat.run_complete/"} {
		if !seen[want] {
			t.Errorf("client did not see %s; saw %v", want, seen)
		}
	}
}

// TestWS_ReconnectRandomDrops drops the connection at random moments 50
// times while the generator chat runs, reconnecting each time with the
// last sequence seen — in the URL, and on about half of the connections
// also as a resume message, which the socket may get after it has sent
// newer events; the person answers over HTTP. Put together, what the
// client saw has every sequence once, in order, and equals the history.
func TestWS_ReconnectRandomDrops(t *testing.T) {
	e := newEnv(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := e.start(t, "generator", nil)
	var got [][]byte
	last := int64(0)
	complete := false
	for drop := 0; drop < 50 || !complete; drop++ {
		if drop > 500 {
			t.Fatalf("chat did not complete after %d connections", drop)
		}
		c := e.dial(ctx, t, id, last, e.keys[scopeAda])
		if rng.IntN(2) == 0 {
			writeMsg(ctx, t, c, map[string]any{"type": "resume", "last_sequence": last})
		}
		// Read for a random while (0 to 4 ms), then drop the connection
		// without a close handshake.
		rctx, rcancel := context.WithTimeout(ctx, time.Duration(rng.IntN(4000))*time.Microsecond)
		for {
			_, raw, err := c.Read(rctx)
			if err != nil {
				break
			}
			v := decodeEnvelope(t, raw)
			if v.seq() == 0 {
				continue
			}
			if v.seq() <= last {
				t.Fatalf("connection %d: sequence %d after %d: duplicate or out of order", drop, v.seq(), last)
			}
			last = v.seq()
			got = append(got, raw)
			if m := e.reply(t, id, v); m != nil {
				e.submitHTTP(t, m)
			}
			complete = complete || v.Type == baton.TypeChatRunComplete
		}
		rcancel()
		c.CloseNow()
	}
	e.waitStatus(t, id, baton.ChatCompleted)
	sameEnvelopes(t, "union of 50+ connections", got, e.history(t, id))
}

// readUntilComplete collects a client's recorded envelopes until run_complete.
func readUntilComplete(ctx context.Context, c *websocket.Conn) ([][]byte, error) {
	var got [][]byte
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			return got, err
		}
		var v envelope
		if err := json.Unmarshal(raw, &v); err != nil {
			return got, err
		}
		v.raw = raw
		if v.seq() > 0 {
			got = append(got, raw)
		}
		if v.Type == baton.TypeChatRunComplete {
			return got, nil
		}
	}
}

// TestWS_TwoClientsSameSequence connects two clients to one chat before it
// runs; both see the same envelopes, equal to the history.
func TestWS_TwoClientsSameSequence(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chat, err := e.eng.Start(ctx, scopeAda, "bench", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([][][]byte, 2)
	errs := make([]error, 2)
	for i := range 2 {
		c := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
		defer c.CloseNow()
		wg.Go(func() { results[i], errs[i] = readUntilComplete(ctx, c) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	h := e.history(t, chat.ID)
	sameEnvelopes(t, "client 0", results[0], h)
	sameEnvelopes(t, "client 1", results[1], h)
}

// TestWS_SlowClientCutOff records thousands of large events in a chat while
// one client never reads: it is closed with CloseReconnect, the fast client
// receives everything, and recording never waits. The slow client then
// reconnects with its last sequence and gets exactly the rest.
func TestWS_SlowClientCutOff(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.QueueLen = 256 }))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	slow := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer slow.CloseNow()
	fast := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer fast.CloseNow()
	waitStreams(t, e, 2)

	const n, batch = 1600, 10
	text := bytes.Repeat([]byte("x"), 8<<10)
	fastGot := make(chan int, 1)
	var fastRead atomic.Int64
	go func() {
		count := 0
		for count < n {
			if _, _, err := fast.Read(ctx); err != nil {
				t.Logf("fast client: %v", err)
				break
			}
			count++
			fastRead.Store(int64(count))
		}
		fastGot <- count
	}()
	recorded := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += batch {
			// A fast client keeps up: the run records no further ahead of
			// it than half its queue (a client in this process shares the
			// two cores with the run, and would otherwise fall behind by
			// chance). The slow client reads nothing and falls behind.
			for int64(i)-fastRead.Load() > 128 && ctx.Err() == nil {
				time.Sleep(time.Millisecond) // pacing the run by the fast client
			}
			evs := make([]baton.Event, 0, batch)
			for j := range batch {
				payload, _ := json.Marshal(map[string]any{"kind": "text", "agent": "Talker", "content": string(text), "index": i + j})
				evs = append(evs, baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: chat.ID, TriggerAgentName: "Talker", Source: baton.SourceLLM}, payload))
			}
			if _, err := e.rec.Record(ctx, scopeAda, chat.ID, evs, nil); err != nil {
				recorded <- err
				return
			}
		}
		recorded <- nil
	}()
	// The slow client reads nothing until the hub has cut it off; the run
	// goes on meanwhile.
	waitStreams(t, e, -1)
	if err := <-recorded; err != nil {
		t.Fatal(err)
	}
	if got := <-fastGot; got != n {
		t.Fatalf("fast client received %d of %d", got, n)
	}
	// The slow client drains what the network buffered, then finds the close.
	last := int64(0)
	for {
		_, raw, err := slow.Read(ctx)
		if err != nil {
			// The close frame comes after everything the socket buffered;
			// when the client has read nothing for longer than the
			// server's close handshake waits (a loaded machine), the
			// server gives up on it and drops the connection instead: the
			// client sees the end of the stream. Either way it was cut off
			// (waitStreams above), and it reconnects and replays below.
			if st := websocket.CloseStatus(err); st != CloseReconnect && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("slow client ended with %v (status %d), want close %d or the connection's end", err, st, CloseReconnect)
			}
			break
		}
		v := decodeEnvelope(t, raw)
		if v.seq() != last+1 {
			t.Fatalf("slow client: sequence %d after %d", v.seq(), last)
		}
		last = v.seq()
	}
	if last >= n {
		t.Fatalf("slow client received all %d events: it was not cut off", n)
	}
	// Reconnect and replay: exactly the rest.
	again := e.dial(ctx, t, chat.ID, last, e.keys[scopeAda])
	defer again.CloseNow()
	for last < n {
		_, raw, err := again.Read(ctx)
		if err != nil {
			t.Fatalf("replay after %d: %v", last, err)
		}
		v := decodeEnvelope(t, raw)
		if v.seq() != last+1 {
			t.Fatalf("replay: sequence %d after %d", v.seq(), last)
		}
		last = v.seq()
	}
}

// TestWS_StalledClientTimesOut: a client that stops reading while its queue
// still has room (the hub would not cut it off for a long while) is closed
// once a write has waited WriteTimeout for the network, and the writes of
// the run go on.
func TestWS_StalledClientTimesOut(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) {
		c.QueueLen = 1 << 12
		c.WriteTimeout = 100 * time.Millisecond
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	stalled := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer stalled.CloseNow()
	waitStreams(t, e, 1)
	// 32 MiB of deltas, more than loopback's socket buffers hold, far fewer
	// than the queue's 4,096 frames.
	delta := strings.Repeat("x", 64<<10)
	for i := range 512 {
		ev, _ := llm.StreamEvent(chat.ID, "Talker", "m1", baton.Delta{Kind: baton.DeltaText, Text: delta})
		ev.Metadata.TriggerAgentName = "Talker"
		if err := e.bus.Broadcast(ev); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the stalled stream to be closed", func() error {
		if n := e.srv.Streams(); n > 0 {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
}

// waitStreams waits until the server has n streams open; n < 0 waits until
// at most one is left.
func waitStreams(t *testing.T, e *env, n int) {
	t.Helper()
	what := fmt.Sprintf("%d streams open", n)
	if n < 0 {
		what = "at most one stream open"
	}
	testenv.Eventually(t, 30*time.Second, what, func() error {
		if s := e.srv.Streams(); (n >= 0 && s < n) || (n < 0 && s > 1) {
			return fmt.Errorf("%d streams", s)
		}
		return nil
	})
}

// TestWS_ResumeMessage: a resume message replays exactly the events after
// its last_sequence on the open connection.
func TestWS_ResumeMessage(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "bench", nil)
	e.waitStatus(t, id, baton.ChatCompleted)
	h := e.history(t, id)
	c := e.dial(ctx, t, id, decodeEnvelope(t, h[len(h)-1]).seq(), e.keys[scopeAda])
	defer c.CloseNow()
	from := decodeEnvelope(t, h[1]).seq()
	writeMsg(ctx, t, c, map[string]any{"type": "resume", "last_sequence": from})
	got, err := readUntilComplete(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	sameEnvelopes(t, "after resume", got, h[2:])
}

// TestWS_ShutdownClosesWithRestart: Close ends streams with 1012.
func TestWS_ShutdownClosesWithRestart(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c.CloseNow()
	waitStreams(t, e, 1)
	e.srv.Close()
	_, _, err = c.Read(ctx)
	if st := websocket.CloseStatus(err); st != websocket.StatusServiceRestart {
		t.Fatalf("read after Close: %v, want close 1012", err)
	}
	// A stream opened after Close is told the same.
	if c2, err := e.tryDial(ctx, chat.ID, 0, e.keys[scopeAda]); err == nil {
		defer c2.CloseNow()
		_, _, err = c2.Read(ctx)
		if st := websocket.CloseStatus(err); st != websocket.StatusServiceRestart {
			t.Fatalf("read on a stream opened after Close: %v, want close 1012", err)
		}
	}
}

// TestHub_ResubscribesWhenDropped: when the hub's own bus subscription
// falls behind and is dropped, every stream is closed with CloseReconnect
// (it missed events) and the hub subscribes again, so new streams work.
func TestHub_ResubscribesWhenDropped(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.HubBuffer = 1 }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c.CloseNow()
	waitStreams(t, e, 1)
	// Flood the bus faster than a one-event buffer can take.
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				closed <- err
				return
			}
		}
	}()
	// Until the first drop (the hub's: its buffer holds one event, the
	// others' thousands), and no event after it: the hub subscribes again
	// and asks its streams to reconnect once, so that a stream opened once
	// the first has closed is not asked again by a later drop.
	drops := e.bus.Stats().ObserverDrops
	for i := 0; e.bus.Stats().ObserverDrops == drops; i++ {
		ev := baton.NewEvent(baton.TypeStreamText, baton.Metadata{TriggerSessionID: chat.ID, TriggerAgentName: "Talker", Source: baton.SourceLLM},
			json.RawMessage(`{"message_id":"m","agent":"Talker","delta":"x"}`))
		_ = e.bus.Broadcast(ev)
		if i > 5_000_000 {
			t.Fatal("the hub never fell behind")
		}
	}
	var err2 error
	select {
	case err2 = <-closed:
	case <-ctx.Done():
		t.Fatal("the stream was not asked to reconnect after the hub's subscription was dropped")
	}
	if st := websocket.CloseStatus(err2); st != CloseReconnect {
		t.Fatalf("stream ended with %v, want close %d", err2, CloseReconnect)
	}
	// A new stream gets a newly recorded event: the hub is subscribed again.
	c2 := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c2.CloseNow()
	waitStreams(t, e, 1)
	payload := json.RawMessage(`{"kind":"text","agent":"Talker","content":"after","index":0}`)
	ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerSessionID: chat.ID, TriggerAgentName: "Talker", Source: baton.SourceLLM}, payload)
	if _, err := e.rec.Record(ctx, scopeAda, chat.ID, []baton.Event{ev}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		_, raw, err := c2.Read(ctx)
		if err != nil {
			t.Fatalf("new stream: %v", err)
		}
		if v := decodeEnvelope(t, raw); v.seq() == 1 && v.str("content") == "after" {
			return
		}
	}
}

// TestWS_Keepalive: the server pings every PingInterval, and closes a
// connection whose peer does not answer within WriteTimeout. The live peer
// gets a WriteTimeout far longer than a pong can take on a loaded machine;
// only the dead peer's server has a short one, which it must run out.
func TestWS_Keepalive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// dial opens a WebSocket to a new server pinging every 20ms with
	// writeTimeout; its peer answers the pings if answer, and tells pings
	// of each.
	dial := func(writeTimeout time.Duration, answer bool, pings chan<- struct{}) *websocket.Conn {
		t.Helper()
		e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) {
			c.PingInterval, c.WriteTimeout = 20*time.Millisecond, writeTimeout
		}))
		chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
		if err != nil {
			t.Fatal(err)
		}
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws/acme/"+chat.ID, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + e.keys[scopeAda]}},
			OnPingReceived: func(context.Context, []byte) bool {
				select {
				case pings <- struct{}{}:
				default:
				}
				return answer
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// A live peer is pinged again and again, and stays. The server sends a
	// ping only once the last one was answered, so five pings received mean
	// four answered.
	pings := make(chan struct{}, 16)
	live := dial(10*time.Second, true, pings)
	defer live.CloseNow()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	readErr := make(chan error, 1)
	go func() { _, _, err := live.Read(rctx); readErr <- err }() // control frames are handled inside Read
	for i := range 5 {
		select {
		case <-pings:
		case err := <-readErr:
			t.Fatalf("a peer that answers pings was disconnected after %d: %v", i, err)
		case <-ctx.Done():
			t.Fatalf("%d pings in 30 s", i)
		}
	}
	rcancel()
	<-readErr
	// A peer that never answers is cut off once a ping has waited 200ms.
	dead := dial(200*time.Millisecond, false, make(chan struct{}, 1))
	defer dead.CloseNow()
	if _, _, err := dead.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("a peer that does not answer pings: %v", err)
	}
}

// slowEvents makes every read of a chat's events take a while, as a
// loaded store does.
type slowEvents struct {
	baton.Store
	delay time.Duration
}

func (s slowEvents) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	time.Sleep(s.delay) // a slow store, not a wait for something
	return s.Store.Events(ctx, scope, chatID, after, limit)
}

// TestWS_WriteTimeoutPerWrite: WriteTimeout bounds each write, not a whole
// replay: a replay of two pages that takes longer than WriteTimeout, because
// the store is slow (each read takes 1.5 WriteTimeouts, so a timer running
// across the read between the pages, or from the connection's start, would
// fire), reaches a client that reads every write at once. WriteTimeout is
// long enough that a write descheduled on a loaded machine is not cut off.
func TestWS_WriteTimeoutPerWrite(t *testing.T) {
	const writeTimeout = time.Second
	e := newEnv(t, withWorkflows(benchDir),
		withServerStore(func(s baton.Store) baton.Store { return slowEvents{Store: s, delay: writeTimeout * 3 / 2} }),
		withConfig(func(c *Config) { c.WriteTimeout = writeTimeout }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	const n = replayPage + 10 // two pages
	evs := make([]baton.Event, n)
	for i := range evs {
		evs[i] = baton.NewEvent(baton.TypeChatText, baton.Metadata{Source: baton.SourceUser}, json.RawMessage(`{"kind":"text","agent":"user","content":"x"}`))
	}
	if _, err := e.store.Append(ctx, scopeAda, chat.ID, evs, nil); err != nil {
		t.Fatal(err)
	}
	c := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c.CloseNow()
	for i := range n {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("replay cut off after %d of %d envelopes: %v", i, n, err)
		}
		if v := decodeEnvelope(t, raw); v.seq() != int64(i+1) {
			t.Fatalf("envelope %d: %s", i, raw)
		}
	}
}

// emptyWhenDeleted answers a deleted chat's events with none instead of
// ENOTFOUND, which baton.EventStore.Events forbids: an SSE stream must
// answer 404 even so, since its check before the replay is what says so.
type emptyWhenDeleted struct{ baton.Store }

func (s emptyWhenDeleted) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	evs, err := s.Store.Events(ctx, scope, chatID, after, limit)
	if baton.ErrorCode(err) == baton.ENOTFOUND {
		return nil, nil
	}
	return evs, err
}

// TestStream_ChatDeletedWhileConnecting: a chat deleted between a stream's
// scope check and its subscription (its delete kicked the streams it had,
// not this one yet) closes the WebSocket with 4404 and answers SSE 404,
// rather than leaving them open on a chat that is gone. The WebSocket
// learns it from its replay's read (the real store, which says ENOTFOUND
// after any sequence); SSE from its check before the replay, with a store
// whose replay would not tell.
func TestStream_ChatDeletedWhileConnecting(t *testing.T) {
	for _, kind := range []string{"ws", "sse"} {
		t.Run(kind, func(t *testing.T) {
			var e *env
			opts := []envOption{withWorkflows(benchDir), withConfig(func(c *Config) {
				c.Watch = func(chatID string) func() {
					// The delete lands while the stream subscribes.
					_ = e.store.DeleteChat(context.Background(), scopeAda, chatID)
					return func() {}
				}
			})}
			if kind == "sse" {
				opts = append(opts, withServerStore(func(s baton.Store) baton.Store { return emptyWhenDeleted{s} }))
			}
			e = newEnv(t, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Append(ctx, scopeAda, chat.ID, []baton.Event{baton.NewChatEvent(baton.TypeChatText, chat.ID, "user", baton.TextPayload{Kind: "text", Agent: "user", Content: "hi"})}, nil); err != nil {
				t.Fatal(err)
			}
			if kind == "sse" {
				req, _ := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/api/chats/acme/"+chat.ID+"/stream", nil)
				req.Header.Set("Authorization", "Bearer "+e.keys[scopeAda])
				resp, err := e.ts.Client().Do(req) // returns with the headers: a stream would go on
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("SSE of a chat deleted while it subscribed: %d", resp.StatusCode)
				}
				return
			}
			// From its last sequence: the replay has nothing newer to send,
			// and still finds the chat gone.
			c := e.dial(ctx, t, chat.ID, 1, e.keys[scopeAda])
			defer c.CloseNow()
			if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != CloseNotFound {
				t.Fatalf("WebSocket of a chat deleted while it subscribed: %v, want 4404", err)
			}
		})
	}
}

// pagesHeld holds a replay's reads after its first page until release is
// closed, and says on entered when one starts.
type pagesHeld struct {
	baton.Store
	entered chan struct{}
	release chan struct{}
}

func (s pagesHeld) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	if after > 0 {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Events(ctx, scope, chatID, after, limit)
}

// TestWS_ClientCloseDuringReplay: a client that closes its WebSocket while
// the server replays a long chat (the writer waiting for the store's next
// page, with the writes of a batch gathered) gets the server's close frame:
// its close is clean, not an EOF. (The library's reply goes out while the
// writer gathers, and the connection closes right after it.)
func TestWS_ClientCloseDuringReplay(t *testing.T) {
	held := pagesHeld{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, withWorkflows(benchDir), withServerStore(func(s baton.Store) baton.Store {
		held.Store = s
		return held
	}))
	defer close(held.release) // before the server closes (its cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatWaitingInput})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // more than two replay pages
		evs := make([]baton.Event, replayPage/2+1)
		for i := range evs {
			evs[i] = baton.NewChatEvent(baton.TypeChatText, chat.ID, "user", baton.TextPayload{Kind: "text", Agent: "user", Content: "hi"})
		}
		if _, err := e.store.Append(ctx, scopeAda, chat.ID, evs, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := e.dial(ctx, t, chat.ID, 0, e.keys[scopeAda])
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatalf("the replay's first envelope: %v", err)
	}
	select {
	case <-held.entered: // the writer waits for the second page
	case <-ctx.Done():
		t.Fatal("the replay never asked for its second page")
	}
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("the client's close during the replay: %v, want a clean close", err)
	}
}

// collectUntilPong reads a socket's recorded envelopes until the pong that
// answers the ping sent last: the writer handles client messages in order,
// so everything a resume sent before it has arrived.
func collectUntilPong(ctx context.Context, t *testing.T, c *websocket.Conn) []int64 {
	t.Helper()
	var seqs []int64
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (after %v)", err, seqs)
		}
		v := decodeEnvelope(t, raw)
		if v.Type == "pong" {
			return seqs
		}
		if v.seq() > 0 {
			seqs = append(seqs, v.seq())
		}
	}
}

// TestWS_ResumeCombinations: every combination of ?last_sequence and resume
// messages on one socket gives each sequence at most once, exactly the
// ones after the point named (the cursor only moves forward once the
// socket has sent a recorded event; the first resume of a socket that has
// sent none sets it).
func TestWS_ResumeCombinations(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := e.start(t, "bench", nil)
	e.waitStatus(t, id, baton.ChatCompleted)
	var hist []int64
	for _, raw := range e.history(t, id) {
		hist = append(hist, decodeEnvelope(t, raw).seq())
	}
	if len(hist) < 6 {
		t.Fatalf("history too short for the test: %v", hist)
	}
	end := hist[len(hist)-1]
	after := func(n int64) []int64 {
		var out []int64
		for _, s := range hist {
			if s > n {
				out = append(out, s)
			}
		}
		return out
	}
	third, fifth := hist[2], hist[4]
	for _, tc := range []struct {
		name    string
		query   string
		resumes []int64
		want    []int64
	}{
		{"neither: from 1 at once", "", nil, hist},
		{"no query, then resume 3: nothing again", "", []int64{third}, hist},
		{"query 3", "last_sequence=" + itoa(third), nil, after(third)},
		{"query 3, then resume 3", "last_sequence=" + itoa(third), []int64{third}, after(third)},
		{"query 3, then resume 5: already sent", "last_sequence=" + itoa(third), []int64{fifth}, after(third)},
		{"query at the end, then resume 3: the first resume sets it", "last_sequence=" + itoa(end), []int64{third}, after(third)},
		{"query at the end, resume 3, resume 3 again", "last_sequence=" + itoa(end), []int64{third, third}, after(third)},
		{"query at the end, resume 5, then resume 3: never back", "last_sequence=" + itoa(end), []int64{fifth, third}, after(fifth)},
		{"query 0, resume 0", "last_sequence=0", []int64{0}, hist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.tryDialQuery(ctx, id, tc.query, e.keys[scopeAda])
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			for _, r := range tc.resumes {
				writeMsg(ctx, t, c, map[string]any{"type": "resume", "last_sequence": r})
			}
			writeMsg(ctx, t, c, map[string]any{"type": "ping"})
			got := collectUntilPong(ctx, t, c)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
