package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
)

// countingEvents counts the events the server reads from the store.
type countingEvents struct {
	baton.Store
	read *atomic.Int64
}

func (c countingEvents) Events(ctx context.Context, scope baton.Scope, chatID string, after int64, limit int) ([]baton.Event, error) {
	evs, err := c.Store.Events(ctx, scope, chatID, after, limit)
	c.read.Add(int64(len(evs)))
	return evs, err
}

// longChat records a chat of hello whose conversation is the person's
// texts, each followed by a Greeter reply of replyEvents recorded texts.
func longChat(t testing.TB, e *env, replyEvents int, said ...string) baton.Chat {
	t.Helper()
	ctx := context.Background()
	c, err := e.store.CreateChat(ctx, scopeAda, baton.Chat{Workflow: "hello", Status: baton.ChatCompleted})
	if err != nil {
		t.Fatal(err)
	}
	var evs []baton.Event
	for _, text := range said {
		evs = append(evs, baton.NewChatEvent(baton.TypeChatText, c.ID, agentUser, baton.TextPayload{Kind: "text", Agent: agentUser, Content: text}))
		for j := range replyEvents {
			evs = append(evs, baton.NewChatEvent(baton.TypeChatText, c.ID, "Greeter", baton.TextPayload{Kind: "text", Agent: "Greeter", Content: fmt.Sprintf("part %d", j)}))
		}
	}
	if _, err := e.store.Append(ctx, scopeAda, c.ID, evs, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestChatCompletions_FindReadsAPagePerChat: matching a history against the
// caller's chats reads each candidate only until it differs (or holds the
// whole request), not whole: a history whose first message no chat has
// reads at most a page of each, however long the chats are.
func TestChatCompletions_FindReadsAPagePerChat(t *testing.T) {
	var read atomic.Int64
	e := newEnv(t, withServerStore(func(s baton.Store) baton.Store { return countingEvents{Store: s, read: &read} }))
	ctx := oaiCtx(t)
	const chats, replyEvents = 4, 300
	var long []baton.Chat
	for i := range chats {
		long = append(long, longChat(t, e, replyEvents, fmt.Sprintf("conversation %d", i), fmt.Sprintf("and then %d", i)))
	}
	user := func(s string) oaiItem { return oaiItem{role: "user", content: s} }
	asst := oaiItem{role: "assistant"}

	// No chat has the first message: a page of each at most.
	read.Store(0)
	c, _, kind, err := e.srv.oaiFind(ctx, scopeAda, "hello", []oaiItem{user("something else"), asst, user("next")})
	if err != nil || c.ID != "" || kind != matchNone {
		t.Fatalf("a history no chat has: chat %q kind %d err %v", c.ID, kind, err)
	}
	if n := read.Load(); n > chats*oaiFindPage {
		t.Errorf("a history no chat has read %d events of %d chats of %d, want at most a page (%d) of each", n, chats, 2*(replyEvents+1), oaiFindPage)
	}

	// A resent request (the chat has every message, and more): read up to
	// its last message, not the reply after it.
	read.Store(0)
	c, tr, kind, err := e.srv.oaiFind(ctx, scopeAda, "hello", []oaiItem{user("conversation 1"), asst, user("and then 1")})
	if err != nil || c.ID != long[1].ID || kind != matchResend {
		t.Fatalf("a resent history: chat %q (want %s) kind %d err %v", c.ID, long[1].ID, kind, err)
	}
	if tr[2].seq != int64(replyEvents+2) {
		t.Errorf("the resent request's last message is at sequence %d, want %d", tr[2].seq, replyEvents+2)
	}
	if n := read.Load(); n > int64(chats*oaiFindPage+replyEvents+oaiFindPage) {
		t.Errorf("a resent history read %d events, want the other chats' first pages and the events up to its last message", n)
	}

	// A continued conversation is still found (read to its end).
	c, _, kind, err = e.srv.oaiFind(ctx, scopeAda, "hello", []oaiItem{user("conversation 2"), asst, user("and then 2"), asst, user("new")})
	if err != nil || c.ID != long[2].ID || kind != matchContinue {
		t.Fatalf("a continued history: chat %q (want %s) kind %d err %v", c.ID, long[2].ID, kind, err)
	}
	// A history that differs at the second message matches none.
	c, _, kind, err = e.srv.oaiFind(ctx, scopeAda, "hello", []oaiItem{user("conversation 3"), asst, user("and then 2"), asst, user("new")})
	if err != nil || c.ID != "" || kind != matchNone {
		t.Fatalf("a history that differs later: chat %q kind %d err %v", c.ID, kind, err)
	}
}

// BenchmarkOAIFind matches a history no chat has against 20 chats of 600
// events: "whole" reads each transcript whole (as oaiFind did before it
// paged), "paged" is oaiFind.
func BenchmarkOAIFind(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	var chats []baton.Chat
	for i := range 20 {
		chats = append(chats, longChat(b, e, 299, fmt.Sprintf("conversation %d", i), fmt.Sprintf("and then %d", i)))
	}
	items := []oaiItem{{role: "user", content: "something else"}, {role: "assistant"}, {role: "user", content: "next"}}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			for _, c := range chats {
				tr, err := e.srv.oaiTranscript(ctx, scopeAda, c)
				if err != nil || oaiMatch(tr, items) != matchNone {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("paged", func(b *testing.B) {
		for b.Loop() {
			if c, _, _, err := e.srv.oaiFind(ctx, scopeAda, "hello", items); err != nil || c.ID != "" {
				b.Fatal(err)
			}
		}
	})
}
