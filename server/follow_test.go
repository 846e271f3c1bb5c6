package server

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/batonhq/baton"
)

// followAll follows chat from last until the segment ends, returning the
// recorded envelopes' sequences and types.
func followAll(t *testing.T, e *env, scope baton.Scope, chatID string, last int64, kickAfter int) (seqs []int64, types []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = e.srv.follow(ctx, scope, chat, last, func(f *Followed) error {
		if f.Sequence == 0 {
			return nil // a delta
		}
		seqs = append(seqs, f.Sequence)
		types = append(types, f.Type)
		if n++; n == kickAfter {
			// As if the hub had cut the follower off for being slow: it
			// must subscribe again and replay, with no gap and no duplicate.
			e.srv.hub.kickChat(chatID, kickSlow)
		}
		if f.EndsSegment() {
			return errStopFollow
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	return seqs, types
}

func TestFollow_ReplayThenLiveIsTheHistory(t *testing.T) {
	e := newEnv(t)
	id := e.start(t, "hello", nil)
	seqs, types := followAll(t, e, scopeAda, id, 0, 2)
	if len(types) == 0 || types[len(types)-1] != baton.TypeChatRunComplete {
		t.Fatalf("followed %v: want it to end at %s", types, baton.TypeChatRunComplete)
	}
	e.waitStatus(t, id, baton.ChatCompleted)
	var want []int64
	for _, raw := range e.history(t, id) {
		want = append(want, decodeEnvelope(t, raw).seq())
	}
	if len(seqs) != len(want) {
		t.Fatalf("followed sequences %v, the history endpoint's %v", seqs, want)
	}
	for i := range want {
		if seqs[i] != want[i] {
			t.Fatalf("followed sequences %v, the history endpoint's %v", seqs, want)
		}
	}
	// From the middle: exactly the rest.
	mid := want[len(want)/2]
	rest, _ := followAll(t, e, scopeAda, id, mid, 0)
	if len(rest) == 0 || rest[0] <= mid || len(rest) != len(want)-len(want)/2-1 {
		t.Fatalf("after %d followed %v of %v", mid, rest, want)
	}
}

func TestFollow_DeletedChatIsNotFound(t *testing.T) {
	e := newEnv(t)
	id := e.start(t, "hello", nil)
	e.waitStatus(t, id, baton.ChatCompleted)
	chat, err := e.store.GetChat(context.Background(), scopeAda, id)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "DELETE", "/api/chats/acme/"+id, e.keys[scopeAda], nil); r.status/100 != 2 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	err = e.srv.follow(context.Background(), scopeAda, chat, 0, func(*Followed) error { return nil })
	if baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("follow a deleted chat: %v, want ENOTFOUND", err)
	}
	// Another tenant's chat is not found either, never its events.
	id2 := e.start(t, "hello", nil)
	chat2, _ := e.store.GetChat(context.Background(), scopeAda, id2)
	got := 0
	err = e.srv.follow(context.Background(), scopeMallory, chat2, 0, func(*Followed) error { got++; return nil })
	if baton.ErrorCode(err) != baton.ENOTFOUND || got != 0 {
		t.Fatalf("another tenant follows: %v after %d events, want ENOTFOUND and none", err, got)
	}
}

// TestFollowEnvelopes_TypeIsTheEnvelopes checks what the adapters that skip
// follow's decoding rely on: followEnvelopes hands each envelope with its
// own type and the sequence follow gives it, deltas included.
func TestFollowEnvelopes_TypeIsTheEnvelopes(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chatID := e.start(t, "bench", nil)
	chat, err := e.store.GetChat(ctx, scopeAda, chatID)
	if err != nil {
		t.Fatal(err)
	}
	deltas, recorded := 0, 0
	err = e.srv.followEnvelopes(ctx, scopeAda, chat, 0, func(seq int64, typ string, envelope []byte, _ int) error {
		var f Followed
		if err := json.Unmarshal(envelope, &f.Envelope); err != nil {
			t.Fatalf("envelope %s: %v", envelope, err)
		}
		f.Sequence = seq
		if f.Type != typ {
			t.Fatalf("type %q handed with the envelope %s", typ, envelope)
		}
		if (seq == 0) != baton.IsStreamType(typ) {
			t.Fatalf("sequence %d for %s", seq, envelope)
		}
		if seq == 0 {
			deltas++
		} else {
			recorded++
		}
		if f.EndsSegment() {
			return errStopFollow
		}
		return nil
	})
	if err != nil {
		t.Fatalf("followEnvelopes: %v", err)
	}
	if recorded == 0 {
		t.Fatal("no recorded event followed")
	}
	t.Logf("%d recorded events, %d deltas", recorded, deltas)
}

// TestRevokedKey_AdaptersEnd: a protocol adapter's stream (AG-UI run,
// OpenAI streamed completion, A2A message/stream, MCP tool call) follows
// a chat whose model is stuck; revoking the key ends it, as it ends a
// WebSocket or SSE stream (TestRevokedKey_StreamsEnd).
func TestRevokedKey_AdaptersEnd(t *testing.T) {
	m := newStuckModel()
	e := newEnv(t, withProvider(m.providers), withConfig(func(c *Config) {
		c.KeyRecheck, c.KeyCacheTTL = 10*time.Millisecond, time.Millisecond
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Each adapter's request with a fresh key of ada's, returning what
	// tells it ended for the revoked key.
	adapters := map[string]func(key string) string{
		"agui": func(key string) string {
			r := e.agui(t, "hello", key, map[string]any{"threadId": "revoked", "runId": "r1",
				"messages": []any{userMsg("u1", "What time is it?")}})
			return strings.Join(r.types(), " ") + " " + string(bytes.Join(r.raw, nil))
		},
		"openai": func(key string) string {
			c := openai.NewClient(option.WithBaseURL(e.ts.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0), option.WithHTTPClient(e.ts.Client()))
			s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: "hello", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What time is it?")},
			})
			for s.Next() {
			}
			if s.Err() == nil {
				return "no error"
			}
			return s.Err().Error()
		},
		"a2a": func(key string) string {
			c, _ := e.a2aClient(t, "acme", "hello", key)
			for _, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMessage("m-1", a2a.TextPart{Text: "What time is it?"})}) {
				if err != nil {
					return err.Error()
				}
			}
			return "no error"
		},
		"mcp": func(key string) string {
			c := e.mcpConnect(t, key, "", nil)
			res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "hello", Arguments: map[string]any{"input": "What time is it?"}})
			if err != nil {
				return err.Error()
			}
			return resultText(res)
		},
	}
	for name, run := range adapters {
		t.Run(name, func(t *testing.T) {
			key, hash, err := NewKey()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.CreateKey(ctx, baton.APIKey{Hash: hash, App: scopeAda.App, User: scopeAda.User, Name: name}); err != nil {
				t.Fatal(err)
			}
			m.stuck.Store(true)
			got := make(chan string, 1)
			go func() { got <- run(key) }()
			m.wait(t)
			if err := e.store.RevokeKey(ctx, hash); err != nil {
				t.Fatal(err)
			}
			select {
			case s := <-got:
				if !strings.Contains(s, "revoked") {
					t.Errorf("%s request of a revoked key ended with %q, want it to say the key was revoked", name, s)
				}
			case <-ctx.Done():
				t.Fatalf("the %s request of a revoked key did not end", name)
			}
		})
	}
}

// A follower that fell behind subscribes again without the deltas sent in
// between (Followed.Subscription counts the subscriptions): a message
// whose deltas were cut short gets the rest of its recorded text, in the
// OpenAI reply as in the AG-UI run, not the deltas around the gap and not
// the whole text again.
func TestFollow_ResubscribedStreamSendsTheRest(t *testing.T) {
	evs := []struct {
		typ, data string
		sub       int
	}{
		{"stream.start", `{"message_id":"m1","agent":"A"}`, 0},
		{"stream.text", `{"message_id":"m1","agent":"A","delta":"Hel"}`, 0},
		// Kicked here: "lo " was lost.
		{"stream.text", `{"message_id":"m1","agent":"A","delta":"world"}`, 1},
		{"stream.completed", `{"message_id":"m1","agent":"A"}`, 1},
		{"chat.text", `{"agent":"A","content":"Hello world","agent_message_id":"m1","is_visual":true,"sequence":2}`, 1},
		// A message streamed whole after the kick: its text is not repeated.
		{"stream.start", `{"message_id":"m2","agent":"A"}`, 1},
		{"stream.text", `{"message_id":"m2","agent":"A","delta":"Bye"}`, 1},
		{"stream.completed", `{"message_id":"m2","agent":"A"}`, 1},
		{"chat.text", `{"agent":"A","content":"Bye","agent_message_id":"m2","is_visual":true,"sequence":3}`, 1},
	}
	t.Run("openai", func(t *testing.T) {
		o := &oaiReply{}
		var ev oaiEvent
		for _, e := range evs {
			if err := ev.decode(e.typ, json.RawMessage(e.data)); err != nil {
				t.Fatal(err)
			}
			ev.sub = e.sub
			if _, err := o.add(&ev); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := o.content.String(), "Hello world\n\nBye"; got != want {
			t.Fatalf("reply %q, want %q", got, want)
		}
	})
	t.Run("agui", func(t *testing.T) {
		m, out := mapperOf(t)
		for _, e := range evs {
			f := &Followed{Subscription: e.sub, Envelope: baton.Envelope{Type: e.typ, Data: json.RawMessage(e.data)}}
			if _, err := m.live(f); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","name":"A"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hel"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"lo world"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant","name":"A"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m2","delta":"Bye"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m2"}`,
		}
		if !slices.Equal(*out, want) {
			t.Fatalf("got\n%s\nwant\n%s", strings.Join(*out, "\n"), strings.Join(want, "\n"))
		}
	})
}
