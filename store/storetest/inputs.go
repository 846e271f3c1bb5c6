package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/batonhq/baton"
)

// inputEvent returns a user_query for chatID with the given content.
func inputEvent(chatID, content string) baton.Event {
	p, _ := json.Marshal(map[string]string{"content": content, "source": "http"})
	return baton.NewEvent(baton.TypeUserQuery, baton.Metadata{TriggerSessionID: chatID, Source: baton.SourceUser,
		App: "a", Extra: map[string]json.RawMessage{"inbox": json.RawMessage(`true`)}}, p)
}

// testInbox checks the chat inbox: inputs kept in the order accepted, a
// retried id kept once, taken exactly once in the append that records them
// (atomically with its events), and scoped like every chat method.
func testInbox(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	chat := mustChat(t, s, scope, "wf")
	first, second := inputEvent(chat.ID, "one"), inputEvent(chat.ID, "two")
	in, added, err := s.AddInput(ctx, scope, first)
	if err != nil || !added || in.Seq == 0 || in.Event.ID != first.ID || in.AcceptedAt.IsZero() {
		t.Fatalf("AddInput: %+v added=%v err=%v", in, added, err)
	}
	if _, added, err := s.AddInput(ctx, scope, second); err != nil || !added {
		t.Fatalf("AddInput second: added=%v err=%v", added, err)
	}
	// A retry (the same id, whatever it carries) is kept once.
	retry := first
	retry.Payload = json.RawMessage(`{"content":"changed"}`)
	again, added, err := s.AddInput(ctx, scope, retry)
	if err != nil || added || again.Seq != in.Seq || string(again.Event.Payload) != string(first.Payload) {
		t.Fatalf("AddInput retry: %+v added=%v err=%v, want the first input and false", again, added, err)
	}
	waiting, err := s.Inputs(ctx, scope, chat.ID)
	if err != nil || len(waiting) != 2 || waiting[0].Event.ID != first.ID || waiting[1].Event.ID != second.ID {
		t.Fatalf("Inputs: %+v err=%v, want [one two]", waiting, err)
	}
	got := waiting[0].Event
	if got.Type != baton.TypeUserQuery || got.ChatID() != chat.ID || got.Metadata.App != "a" || string(got.Metadata.Extra["inbox"]) != "true" || got.Timestamp != first.Timestamp {
		t.Errorf("stored input event %+v, want %+v", got, first)
	}
	found := false
	chats, err := s.ChatsWithInputs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chats {
		found = found || c.ID == chat.ID && c.App == scope.App && c.User == scope.User
	}
	if !found {
		t.Errorf("ChatsWithInputs misses chat %s", chat.ID)
	}

	// Another scope sees no inbox and can add nothing to it.
	other := NewScope()
	if _, err := s.Inputs(ctx, other, chat.ID); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("Inputs in another scope: %v, want ENOTFOUND", err)
	}
	if _, _, err := s.AddInput(ctx, other, inputEvent(chat.ID, "x")); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("AddInput in another scope: %v, want ENOTFOUND", err)
	}
	// Not an input: a recorded type, or no chat.
	if _, _, err := s.AddInput(ctx, scope, TextEvent("user", "x")); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("AddInput without a chat: %v, want EINVALID", err)
	}
	bad := TextEvent("user", "x")
	bad.Metadata.TriggerSessionID = chat.ID
	if _, _, err := s.AddInput(ctx, scope, bad); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("AddInput of a chat.text: %v, want EINVALID", err)
	}

	// Taking an unknown input fails the whole append.
	if _, err := s.Append(ctx, scope, chat.ID, []baton.Event{TextEvent("user", "one")}, &baton.ChatUpdate{ConsumeInputs: []string{"nope"}}); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("consume an unknown input: %v, want ENOTFOUND", err)
	}
	// Taken with the append that records it: one of concurrent appends wins.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Append(ctx, scope, chat.ID, []baton.Event{TextEvent("user", "one")}, &baton.ChatUpdate{ConsumeInputs: []string{first.ID}})
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, baton.ErrConflict):
			t.Errorf("a losing consume: %v, want ECONFLICT", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d appends took the input, want 1", wins)
	}
	c, err := s.GetChat(ctx, scope, chat.ID)
	if err != nil || c.LastSequence != 1 {
		t.Errorf("after the consumes: last sequence %d (err %v), want 1: a failed consume wrote its event", c.LastSequence, err)
	}
	waiting, err = s.Inputs(ctx, scope, chat.ID)
	if err != nil || len(waiting) != 1 || waiting[0].Event.ID != second.ID {
		t.Fatalf("Inputs after taking one: %+v err=%v, want [two]", waiting, err)
	}
	// A taken input's retry is still kept once, and reports it was taken.
	again, added, err = s.AddInput(ctx, scope, first)
	if err != nil || added || again.ConsumedAt.IsZero() {
		t.Errorf("AddInput of a taken input: %+v added=%v err=%v, want it, taken, and false", again, added, err)
	}
	// UpdateChat takes inputs too (an input that is dropped, recording nothing).
	if _, err := s.UpdateChat(ctx, scope, chat.ID, baton.ChatUpdate{ConsumeInputs: []string{second.ID}}); err != nil {
		t.Fatalf("UpdateChat consume: %v", err)
	}
	if waiting, err = s.Inputs(ctx, scope, chat.ID); err != nil || len(waiting) != 0 {
		t.Errorf("Inputs after taking all: %+v err=%v, want none", waiting, err)
	}
	chats, err = s.ChatsWithInputs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chats {
		if c.ID == chat.ID {
			t.Errorf("ChatsWithInputs lists chat %s whose inbox is empty", chat.ID)
		}
	}
	// A deleted chat's inputs wait for no one.
	gone := mustChat(t, s, scope, "wf")
	if _, _, err := s.AddInput(ctx, scope, inputEvent(gone.ID, "x")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChat(ctx, scope, gone.ID); err != nil {
		t.Fatal(err)
	}
	chats, _ = s.ChatsWithInputs(ctx, 0)
	for _, c := range chats {
		if c.ID == gone.ID {
			t.Errorf("ChatsWithInputs lists a deleted chat")
		}
	}
}
