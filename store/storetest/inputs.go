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

// testCreateChatWithInput checks CreateChatWithInput: the chat and its
// first input are written together (the input waits in the new chat's
// inbox, the append that records it takes it), a taken id writes neither
// (the existing chat's inbox is left as it was, whichever of concurrent
// creations wins), and a bad input creates no chat.
func testCreateChatWithInput(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	// No chat id anywhere: the store draws one and the input names it.
	first := inputEvent("", "hello")
	chat, in, err := s.CreateChatWithInput(ctx, scope, baton.Chat{Workflow: "wf"}, first)
	if err != nil {
		t.Fatalf("CreateChatWithInput: %v", err)
	}
	if chat.ID == "" || chat.App != scope.App || chat.User != scope.User || chat.Status != baton.ChatRunning || chat.CacheSeed == 0 || chat.CreatedAt.IsZero() {
		t.Errorf("created chat %+v", chat)
	}
	if in.Seq == 0 || in.Event.ID != first.ID || in.Event.ChatID() != chat.ID || in.AcceptedAt.IsZero() || !in.ConsumedAt.IsZero() {
		t.Errorf("kept input %+v, want %s of chat %s, waiting", in, first.ID, chat.ID)
	}
	got, err := s.GetChat(ctx, scope, chat.ID)
	if err != nil || got.Workflow != "wf" || got.LastSequence != 0 {
		t.Fatalf("GetChat: %+v err=%v", got, err)
	}
	waiting, err := s.Inputs(ctx, scope, chat.ID)
	if err != nil || len(waiting) != 1 || waiting[0].Seq != in.Seq || waiting[0].Event.ID != first.ID ||
		waiting[0].Event.ChatID() != chat.ID || string(waiting[0].Event.Metadata.Extra["inbox"]) != "true" {
		t.Fatalf("Inputs: %+v err=%v, want the first input", waiting, err)
	}
	var p struct{ Content string }
	if err := json.Unmarshal(waiting[0].Event.Payload, &p); err != nil || p.Content != "hello" {
		t.Errorf("kept payload %s (%v)", waiting[0].Event.Payload, err)
	}
	listed := false
	chats, err := s.ChatsWithInputs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chats {
		listed = listed || c.ID == chat.ID
	}
	if !listed {
		t.Errorf("ChatsWithInputs misses chat %s", chat.ID)
	}
	// Another scope sees neither.
	if _, err := s.Inputs(ctx, NewScope(), chat.ID); !errors.Is(err, baton.ErrNotFound) {
		t.Errorf("Inputs in another scope: %v, want ENOTFOUND", err)
	}
	// The append that records it takes it, once.
	if _, err := s.Append(ctx, scope, chat.ID, []baton.Event{TextEvent("user", "hello")}, &baton.ChatUpdate{ConsumeInputs: []string{first.ID}}); err != nil {
		t.Fatalf("Append taking the first input: %v", err)
	}
	if waiting, err := s.Inputs(ctx, scope, chat.ID); err != nil || len(waiting) != 0 {
		t.Errorf("Inputs after the take: %+v err=%v, want none", waiting, err)
	}
	if again, added, err := s.AddInput(ctx, scope, in.Event); err != nil || added || again.ConsumedAt.IsZero() {
		t.Errorf("AddInput of the taken first input: %+v added=%v err=%v, want it, taken, and false", again, added, err)
	}

	// An id in use, with its own chat id on the input: ECONFLICT, and the
	// existing chat (created with or without an input) gains no input.
	plain := mustChat(t, s, scope, "wf")
	for _, id := range []string{chat.ID, plain.ID} {
		_, _, err := s.CreateChatWithInput(ctx, scope, baton.Chat{ID: id, Workflow: "other"}, inputEvent(id, "again"))
		if !errors.Is(err, baton.ErrConflict) {
			t.Errorf("CreateChatWithInput of chat %s again: %v, want ECONFLICT", id, err)
		}
		if waiting, err := s.Inputs(ctx, scope, id); err != nil || len(waiting) != 0 {
			t.Errorf("chat %s's inbox after a refused creation: %+v err=%v, want empty", id, waiting, err)
		}
		if c, err := s.GetChat(ctx, scope, id); err != nil || c.Workflow != "wf" {
			t.Errorf("chat %s after a refused creation: %+v err=%v", id, c, err)
		}
	}

	// Concurrent creations of one id: one wins, and its input is the one
	// the inbox holds.
	id := baton.NewID()
	evs := make([]baton.Event, 6)
	errs := make([]error, len(evs))
	var wg sync.WaitGroup
	for i := range evs {
		evs[i] = inputEvent(id, "racer")
		wg.Go(func() {
			_, _, errs[i] = s.CreateChatWithInput(ctx, scope, baton.Chat{ID: id, Workflow: "wf"}, evs[i])
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("creations %d and %d of chat %s both succeeded", winner, i, id)
		case err == nil:
			winner = i
		case !errors.Is(err, baton.ErrConflict):
			t.Errorf("a losing creation: %v, want ECONFLICT", err)
		}
	}
	if winner < 0 {
		t.Fatalf("no creation of chat %s succeeded: %v", id, errs)
	}
	if waiting, err := s.Inputs(ctx, scope, id); err != nil || len(waiting) != 1 || waiting[0].Event.ID != evs[winner].ID {
		t.Errorf("inbox after the race: %+v err=%v, want only the winner's input %s", waiting, err, evs[winner].ID)
	}

	// A bad input or a bad chat: EINVALID, and no chat.
	bad := []struct {
		name string
		c    baton.Chat
		ev   baton.Event
	}{
		{"an input of another chat", baton.Chat{ID: baton.NewID(), Workflow: "wf"}, inputEvent(baton.NewID(), "x")},
		{"a recorded type", baton.Chat{ID: baton.NewID(), Workflow: "wf"}, TextEvent("user", "x")},
		{"an input without an id", baton.Chat{ID: baton.NewID(), Workflow: "wf"}, func() baton.Event { e := inputEvent("", "x"); e.ID = ""; return e }()},
		{"a bad status", baton.Chat{ID: baton.NewID(), Workflow: "wf", Status: "nope"}, inputEvent("", "x")},
	}
	for _, b := range bad {
		if _, _, err := s.CreateChatWithInput(ctx, scope, b.c, b.ev); !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("CreateChatWithInput with %s: %v, want EINVALID", b.name, err)
		}
		if _, err := s.GetChat(ctx, scope, b.c.ID); !errors.Is(err, baton.ErrNotFound) {
			t.Errorf("after CreateChatWithInput with %s: GetChat says %v, want ENOTFOUND", b.name, err)
		}
	}
}

// testCreateChatAndAppend: a chat created with its first append in one
// call (baton.CreateAppender, which a store may leave out) is the chat
// CreateChat, AddInput and Append would have left; a call that fails
// writes nothing, not even the chat.
func testCreateChatAndAppend(t *testing.T, s baton.Store) {
	ca, ok := s.(baton.CreateAppender)
	if !ok {
		t.Skip("the store has no CreateChatAndAppend (optional)")
	}
	ctx := ctxT(t)
	scope := NewScope()
	pend := baton.PendingRequest{UIEventID: "ui-" + baton.NewID(), Kind: baton.PendingUITool, ToolCallID: "call-1", ToolName: "form", Agent: "A"}
	u := &baton.ChatUpdate{Status: ptr(baton.ChatWaitingUITool), TurnAgent: ptr("A"),
		Context: map[string]json.RawMessage{"k": json.RawMessage(`1`)}, AddPending: []baton.PendingRequest{pend}}
	chat, evs, err := ca.CreateChatAndAppend(ctx, scope, baton.Chat{Workflow: "wf"}, nil, []baton.Event{TextEvent("A", "one"), TextEvent("A", "two")}, u)
	if err != nil {
		t.Fatalf("CreateChatAndAppend: %v", err)
	}
	if len(evs) != 2 || evs[0].Sequence != 1 || evs[1].Sequence != 2 || evs[0].ChatID() != chat.ID {
		t.Fatalf("appended %+v", evs)
	}
	got, err := s.GetChat(ctx, scope, chat.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastSequence != 2 || got.Status != baton.ChatWaitingUITool || got.TurnAgent != "A" || contextMap(t, got.Context)["k"] != float64(1) ||
		len(got.Pending) != 1 || got.Pending[0].UIEventID != pend.UIEventID {
		t.Fatalf("stored chat %+v %s", got, got.Context)
	}
	if chat.ID != got.ID || chat.LastSequence != got.LastSequence || chat.Status != got.Status || chat.TurnAgent != got.TurnAgent ||
		contextMap(t, chat.Context)["k"] != float64(1) || len(chat.Pending) != 1 || chat.Pending[0].UIEventID != pend.UIEventID ||
		!chat.CreatedAt.Equal(got.CreatedAt) || chat.App != scope.App || chat.User != scope.User || chat.Workflow != "wf" {
		t.Errorf("returned chat %+v, stored %+v", chat, got)
	}
	stored, err := s.Events(ctx, scope, chat.ID, 0, 0)
	if err != nil || len(stored) != 2 {
		t.Fatalf("events %v %v", stored, err)
	}
	checkSequences(t, stored, 2)
	if next, err := s.Append(ctx, scope, chat.ID, []baton.Event{TextEvent("A", "three")}, nil); err != nil || next[0].Sequence != 3 {
		t.Fatalf("the next append: %v %v", next, err)
	}

	// The first input, taken in the same call: kept as taken, never waiting.
	first := inputEvent("", "hello")
	chat2, _, err := ca.CreateChatAndAppend(ctx, scope, baton.Chat{Workflow: "wf"}, &first, []baton.Event{TextEvent("user", "hello")},
		&baton.ChatUpdate{ConsumeInputs: []string{first.ID}})
	if err != nil {
		t.Fatalf("CreateChatAndAppend with its input taken: %v", err)
	}
	if ins, err := s.Inputs(ctx, scope, chat2.ID); err != nil || len(ins) != 0 {
		t.Fatalf("inbox %+v %v, want nothing waiting", ins, err)
	}
	again := first
	again.Metadata.TriggerSessionID = chat2.ID
	if in, added, err := s.AddInput(ctx, scope, again); err != nil || added || in.Event.ID != first.ID || in.ConsumedAt.IsZero() {
		t.Fatalf("AddInput of the taken input again: %+v added=%v err=%v, want the one kept as taken", in, added, err)
	}
	if ins, _ := s.Inputs(ctx, scope, chat2.ID); len(ins) != 0 {
		t.Fatalf("the taken input waits again after AddInput: %+v", ins)
	}

	// Not taken: it waits.
	second := inputEvent("", "later")
	chat3, _, err := ca.CreateChatAndAppend(ctx, scope, baton.Chat{Workflow: "wf"}, &second, nil, &baton.ChatUpdate{Status: ptr(baton.ChatWaitingInput)})
	if err != nil {
		t.Fatalf("CreateChatAndAppend with its input kept: %v", err)
	}
	if ins, err := s.Inputs(ctx, scope, chat3.ID); err != nil || len(ins) != 1 || ins[0].Event.ID != second.ID {
		t.Fatalf("inbox %+v %v, want the input waiting", ins, err)
	}

	// Failures write nothing.
	for _, tc := range []struct {
		name string
		c    baton.Chat
		evs  []baton.Event
		u    *baton.ChatUpdate
		code string
	}{
		{"id in use", baton.Chat{ID: chat.ID, Workflow: "wf"}, []baton.Event{TextEvent("A", "x")}, nil, baton.ECONFLICT},
		{"unknown pending", baton.Chat{ID: baton.NewID(), Workflow: "wf"}, []baton.Event{TextEvent("A", "x")}, &baton.ChatUpdate{ResolvePending: []string{"nope"}}, baton.ENOTFOUND},
		{"unknown input", baton.Chat{ID: baton.NewID(), Workflow: "wf"}, nil, &baton.ChatUpdate{ConsumeInputs: []string{"nope"}}, baton.ENOTFOUND},
		{"not a chat event", baton.Chat{ID: baton.NewID(), Workflow: "wf"}, []baton.Event{baton.NewEvent("stream.text", baton.Metadata{}, json.RawMessage(`{}`))}, nil, baton.EINVALID},
	} {
		_, _, err := ca.CreateChatAndAppend(ctx, scope, tc.c, nil, tc.evs, tc.u)
		wantCode(t, tc.name, err, tc.code)
		if tc.c.ID == chat.ID {
			if again, _ := s.GetChat(ctx, scope, chat.ID); again.LastSequence != 3 {
				t.Fatalf("%s: the existing chat changed: %+v", tc.name, again)
			}
			continue
		}
		if _, err := s.GetChat(ctx, scope, tc.c.ID); !errors.Is(err, baton.ErrNotFound) {
			t.Fatalf("%s: the chat was created: %v", tc.name, err)
		}
	}
}
