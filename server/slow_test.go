package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm"
	"github.com/coder/websocket"
)

// hubSubscriber returns the chat's one subscriber in the hub (nil if none).
func (e *env) hubSubscriber(chatID string) *subscriber {
	h := e.srv.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chats[chatID]; c != nil && len(c.subs) == 1 {
		return c.subs[0]
	}
	return nil
}

// waitUntil polls cond until it holds; the deadline only catches a hang.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

// replyDeltas is the length of pausedReply's reply.
const replyDeltas = 2000

// pausedReply streams a reply of replyDeltas deltas to the chat (start,
// deltas, completed, then the recorded chat.text) while its one stream,
// sub, reads nothing, and returns once the hub has queued all of it for
// the stream — the stream's pause is that long. It fails the test if the
// stream was cut off or nothing was merged. It returns the reply's text
// and the chat.text's sequence.
func pausedReply(ctx context.Context, t *testing.T, e *env, chatID string, sub *subscriber) (string, int64) {
	t.Helper()
	before := e.srv.hub.delivered.Load()
	var full strings.Builder
	broadcast := func(ev baton.Event) {
		ev.Metadata.TriggerAgentName = "Talker"
		if err := e.bus.Broadcast(ev); err != nil {
			t.Fatal(err)
		}
	}
	broadcast(llm.StreamStartEvent(chatID, "Talker", "m1"))
	for i := range replyDeltas {
		d := fmt.Sprintf("word%d ", i)
		full.WriteString(d)
		ev, _ := llm.StreamEvent(chatID, "Talker", "m1", baton.Delta{Kind: baton.DeltaText, Text: d})
		broadcast(ev)
	}
	end, _ := llm.StreamEvent(chatID, "Talker", "m1", baton.Delta{Kind: baton.DeltaFinish, FinishReason: "stop"})
	broadcast(end)
	payload, _ := json.Marshal(map[string]any{"kind": "text", "agent": "Talker", "content": full.String(), "index": 0})
	recorded, err := e.rec.Record(ctx, scopeAda, chatID, []baton.Event{baton.NewEvent(baton.TypeChatText,
		baton.Metadata{TriggerSessionID: chatID, TriggerAgentName: "Talker", Source: baton.SourceLLM}, payload)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The pause: the client reads nothing until the hub has handled all
	// replyDeltas+3 events for it.
	waitUntil(t, "the hub to queue the reply", func() bool {
		select {
		case <-sub.kicked:
			return true // failed: reported below
		default:
			return e.srv.hub.delivered.Load()-before >= replyDeltas+3
		}
	})
	select {
	case <-sub.kicked:
		t.Fatalf("the paused reader was cut off (reason %d)", sub.reason.Load())
	default:
	}
	if sub.q.mergeCount() == 0 {
		t.Fatal("no delta was merged although the reader lagged")
	}
	return full.String(), recorded[0].Sequence
}

// TestWS_PausedReaderGetsMergedDeltas: a client that stops reading during
// a 2,000-delta reply — here for the whole reply: it reads nothing until
// the hub has queued every delta and the recorded text for it — is not cut
// off: it then receives the whole text in fewer, merged deltas, the
// recorded chat.text, and the connection goes on. (Before, its queue of
// 256 filled and it was closed with 4000, losing the deltas.) Small socket
// buffers make the pause a real one: the server's writes block at once.
// What it receives is the history (order kept), in far fewer network
// writes than envelopes.
func TestWS_PausedReaderGetsMergedDeltas(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withSmallSocketBuffers(4096))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dialSmall(ctx, t, chat.ID, 0, 4096)
	defer c.CloseNow()
	waitStreams(t, e, 1)
	sub := e.hubSubscriber(chat.ID)
	if sub == nil {
		t.Fatal("no subscriber in the hub")
	}
	before := e.srv.wsWrites.Load()
	full, seq := pausedReply(ctx, t, e, chat.ID, sub)

	var got strings.Builder
	var envs []envelope
	deltas := 0
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read after %d deltas: %v (close %d)", deltas, err, websocket.CloseStatus(err))
		}
		v := decodeEnvelope(t, raw)
		envs = append(envs, v)
		if v.Type == baton.TypeStreamText {
			got.WriteString(v.str("delta"))
			deltas++
		}
		if v.seq() == seq {
			break
		}
	}
	writes := e.srv.wsWrites.Load() - before
	if got.String() != full {
		t.Fatalf("the deltas put together (%d bytes) differ from the text (%d bytes): reordered or lost", got.Len(), len(full))
	}
	if deltas >= replyDeltas {
		t.Fatalf("%d deltas for %d: none merged", deltas, replyDeltas)
	}
	sameEnvelopes(t, "websocket", chatEnvelopes(envs), e.history(t, chat.ID))
	t.Logf("%d deltas arrived as %d; %d envelopes in %d network writes", replyDeltas, deltas, len(envs), writes)
	// The writer sends what it took from its queue as one network write
	// (batchConn): far fewer writes than envelopes, in order.
	if writes*2 > int64(len(envs)) {
		t.Fatalf("%d envelopes took %d network writes: queued envelopes are not sent together", len(envs), writes)
	}
	// Still connected.
	writeMsg(ctx, t, c, map[string]any{"type": "ping"})
	if _, raw, err := c.Read(ctx); err != nil || decodeEnvelope(t, raw).Type != "pong" {
		t.Fatalf("after the reply: %v %s", err, raw)
	}
}

// TestWS_NeverReadingClientCutOffWithCloseFrame: a client that reads
// nothing while recorded events pile up is cut off when QueueLen of them
// wait; the stream then sends what it had and the close frame 4000, which
// the client finds once it reads, after a gap-free run of sequences.
func TestWS_NeverReadingClientCutOffWithCloseFrame(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withSmallSocketBuffers(4096), withConfig(func(c *Config) { c.QueueLen = 16 }))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dialSmall(ctx, t, chat.ID, 0, 4096)
	defer c.CloseNow()
	waitStreams(t, e, 1)
	sub := e.hubSubscriber(chat.ID)
	text := strings.Repeat("x", 1024)
	for i := 0; ; i++ {
		select {
		case <-sub.kicked:
		default:
			if i > 10000 {
				t.Fatal("the client that never reads was not cut off")
			}
			payload, _ := json.Marshal(map[string]any{"kind": "text", "agent": "Talker", "content": text, "index": i})
			if _, err := e.rec.Record(ctx, scopeAda, chat.ID, []baton.Event{baton.NewEvent(baton.TypeChatText,
				baton.Metadata{TriggerSessionID: chat.ID, TriggerAgentName: "Talker", Source: baton.SourceLLM}, payload)}, nil); err != nil {
				t.Fatal(err)
			}
			continue
		}
		break
	}
	if r := sub.reason.Load(); r != kickSlow {
		t.Fatalf("cut off with reason %d, want kickSlow", r)
	}
	last := int64(0)
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != CloseReconnect {
				t.Fatalf("ended with %v (status %d), want the close frame %d", err, st, CloseReconnect)
			}
			break
		}
		v := decodeEnvelope(t, raw)
		if v.seq() != last+1 {
			t.Fatalf("sequence %d after %d", v.seq(), last)
		}
		last = v.seq()
	}
}

// TestSSE_PausedReaderGetsMergedDeltas: the same pause on an SSE stream,
// which shares the hub's queue: the whole text in merged deltas, the
// recorded chat.text with its id, and no "event: reconnect"; the events
// queued during the pause go out in far fewer writes than events.
func TestSSE_PausedReaderGetsMergedDeltas(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withSmallSocketBuffers(4096), withConfig(func(c *Config) { c.Heartbeat = time.Hour }))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/api/chats/acme/"+chat.ID+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.keys[scopeAda])
	resp, err := smallBufClient(t, 4096).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitStreams(t, e, 1)
	sub := e.hubSubscriber(chat.ID)
	if sub == nil {
		t.Fatal("no subscriber in the hub")
	}
	before := e.srv.sseWrites.Load()
	full, seq := pausedReply(ctx, t, e, chat.ID, sub)
	var got strings.Builder
	deltas := 0
	evs := readSSE(t, bufio.NewReader(resp.Body), func(ev sseEvent) bool {
		return ev.id == itoa(seq) || ev.event == "reconnect"
	})
	if writes := e.srv.sseWrites.Load() - before; writes*2 > int64(len(evs)) {
		t.Fatalf("%d events took %d writes: queued events are not written together", len(evs), writes)
	} else {
		t.Logf("%d events in %d writes", len(evs), writes)
	}
	for _, ev := range evs {
		switch ev.event {
		case "reconnect":
			t.Fatal("the paused SSE reader was cut off")
		case baton.TypeStreamText:
			var v struct {
				Data struct {
					Delta string `json:"delta"`
				} `json:"data"`
			}
			if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
				t.Fatalf("delta: %v: %s", err, ev.data)
			}
			got.WriteString(v.Data.Delta)
			deltas++
		}
	}
	if last := evs[len(evs)-1]; last.id != itoa(seq) || last.event != baton.TypeChatText {
		t.Fatalf("the stream ended at %+v before the recorded text %d", last, seq)
	}
	if got.String() != full || deltas >= replyDeltas {
		t.Fatalf("%d deltas (of %d) put together to %d bytes, want the %d of the text in fewer", deltas, replyDeltas, got.Len(), len(full))
	}
}
