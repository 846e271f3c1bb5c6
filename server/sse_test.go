package server

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id    string
	event string
	data  string
}

// readSSE reads events from an SSE body until stop returns true or the body ends.
func readSSE(t *testing.T, r *bufio.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return out
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if cur.data != "" || cur.event != "" {
				out = append(out, cur)
				if stop(cur) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"): // heartbeat
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
}

func (e *env) openSSE(ctx context.Context, t *testing.T, chatID, lastEventID string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/api/chats/acme/"+chatID+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.keys[scopeAda])
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp, bufio.NewReader(resp.Body)
}

// TestSSE_ReplayLastEventID streams a chat live over SSE from its start,
// then reconnects with Last-Event-ID at every point of it: each time the
// stream carries exactly the history after that id, with "id:" lines equal
// to the sequences.
func TestSSE_ReplayLastEventID(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Heartbeat = 5 * time.Millisecond }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench", Status: baton.ChatRunning})
	if err != nil {
		t.Fatal(err)
	}
	resp, r := e.openSSE(ctx, t, chat.ID, "")
	waitStreams(t, e, 1)
	// Heartbeats come from the live loop: after one, the stream has replayed
	// and is live, so the run's transient deltas reach it in their place
	// (deltas that arrive while a stream replays are best-effort).
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ": heartbeat") {
			break
		}
	}
	if err := e.eng.Resume(ctx, scopeAda, chat.ID); err != nil { // runs the chat created above
		t.Fatal(err)
	}
	live := readSSE(t, r, func(ev sseEvent) bool { return ev.event == baton.TypeChatRunComplete })
	resp.Body.Close()
	e.waitStatus(t, chat.ID, baton.ChatCompleted)
	h := e.history(t, chat.ID)

	recorded := func(evs []sseEvent) []sseEvent {
		var out []sseEvent
		for _, ev := range evs {
			if ev.id != "" {
				out = append(out, ev)
			}
		}
		return out
	}
	check := func(what string, got []sseEvent, want [][]byte) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range got {
			v := decodeEnvelope(t, want[i])
			if got[i].data != string(want[i]) || got[i].id != strconv.FormatInt(v.seq(), 10) || got[i].event != v.Type {
				t.Fatalf("%s: event %d = id %s %s %s, want id %d %s", what, i, got[i].id, got[i].event, got[i].data, v.seq(), want[i])
			}
		}
	}
	var hist [][]byte
	for _, raw := range h {
		hist = append(hist, raw)
	}
	check("live", recorded(live), hist)
	streamed := 0
	for _, ev := range live {
		if strings.HasPrefix(ev.event, "stream.") {
			streamed++
		}
	}
	if streamed == 0 {
		var types []string
		for _, ev := range live {
			types = append(types, ev.event)
		}
		t.Errorf("no stream.* events over SSE: %v", types)
	}
	for i := range hist {
		last := strconv.FormatInt(decodeEnvelope(t, hist[i]).seq(), 10)
		if i == len(hist)-1 {
			break // after run_complete there is nothing to wait for
		}
		resp, r := e.openSSE(ctx, t, chat.ID, last)
		got := readSSE(t, r, func(ev sseEvent) bool { return ev.event == baton.TypeChatRunComplete })
		resp.Body.Close()
		check("after Last-Event-ID "+last, recorded(got), hist[i+1:])
	}
	// A heartbeat arrives on an idle stream.
	resp, r = e.openSSE(ctx, t, chat.ID, strconv.FormatInt(decodeEnvelope(t, hist[len(hist)-1]).seq(), 10))
	defer resp.Body.Close()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no heartbeat: %v", err)
		}
		if strings.HasPrefix(line, ": heartbeat") {
			break
		}
		if strings.HasPrefix(line, "id: ") {
			t.Fatalf("event after the last one: %s", line)
		}
	}
}

// TestSSE_OutlivesReadTimeout: the http.Server's ReadTimeout bounds reading
// a request, not the life of a stream.
func TestSSE_OutlivesReadTimeout(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir), withConfig(func(c *Config) { c.Heartbeat = 10 * time.Millisecond }),
		func(e *env) { e.readTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chat, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	resp, r := e.openSSE(ctx, t, chat.ID, "")
	defer resp.Body.Close()
	until := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(until) {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("stream ended after %v: %v", 500*time.Millisecond-time.Until(until), err)
		}
	}
}
