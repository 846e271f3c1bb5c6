package mem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/mem"
	"github.com/batonhq/baton/store/storetest"
)

// TestConformance runs the store conformance suite (all of it: a memory
// store has no crash to survive, so the crash tests do not apply).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) baton.Store {
		s := mem.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestTwoWriters: two goroutines' worth of appenders on one store (one
// process: the only sharing a memory store has) leave sequences 1..n.
func TestTwoWriters(t *testing.T) {
	s := mem.New()
	defer s.Close()
	storetest.RunTwoWriters(t, s, s)
}

func TestStats(t *testing.T) {
	s := mem.New()
	defer s.Close()
	storetest.RunStats(t, s)
}

// TestCopies: the store shares no memory with its callers. Changing what
// was given (an appended event's payload and metadata, an input, a task's
// input, a chat's context) or what was returned (events, chats, pending
// requests, inputs, tasks, effects) changes nothing in the store.
func TestCopies(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	defer s.Close()
	scope := storetest.NewScope()
	give := json.RawMessage(`{"k":1}`)
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w", Context: give,
		Pending: []baton.PendingRequest{{UIEventID: "p1", Kind: baton.PendingInput, Agent: "A"}}})
	if err != nil {
		t.Fatal(err)
	}
	give[5] = '9'
	c.Context[5], c.Pending[0].Agent = '8', "changed"

	e := storetest.TextEvent("A", "hello")
	e.Metadata.Extra = map[string]json.RawMessage{"x": json.RawMessage(`"y"`)}
	wantPayload := string(e.Payload)
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{e}, nil); err != nil {
		t.Fatal(err)
	}
	e.Payload[2] = 'X'
	e.Metadata.Extra["x"][1] = 'Z'
	e.Metadata.Extra["new"] = json.RawMessage(`1`)
	got, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got[0].Payload[2] = 'Q'
	got[0].Payload = append(got[0].Payload, ' ')
	got[0].Metadata.Extra["x"][1] = 'W'
	got[0].Metadata.Extra["other"] = json.RawMessage(`2`)

	in := storetest.TextEvent("user", "q")
	in.Type, in.Metadata.TriggerSessionID = baton.TypeUserQuery, c.ID
	wantInput := string(in.Payload)
	if _, _, err := s.AddInput(ctx, scope, in); err != nil {
		t.Fatal(err)
	}
	in.Payload[2] = 'X'
	waiting, err := s.Inputs(ctx, scope, c.ID)
	if err != nil || len(waiting) != 1 {
		t.Fatalf("Inputs = %v, %v", waiting, err)
	}
	waiting[0].Event.Payload[2] = 'Y'

	taskIn := json.RawMessage(`{"q":1}`)
	task, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k", Input: taskIn})
	if err != nil {
		t.Fatal(err)
	}
	taskIn[2], task.Input[3] = 'X', 'Y'
	if _, err := s.ClaimEffect(ctx, scope, c.ID, "k", baton.EffectHolder{}); err != nil {
		t.Fatal(err)
	}
	result := json.RawMessage(`{"r":1}`)
	if err := s.RecordEffect(ctx, scope, c.ID, "k", result); err != nil {
		t.Fatal(err)
	}
	result[2] = 'X'
	eff, _ := s.ClaimEffect(ctx, scope, c.ID, "k", baton.EffectHolder{})
	eff.Result[2] = 'Y'

	// Everything reads back as it was stored.
	ch, err := s.GetChat(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(ch.Context) != `{"k":1}` || len(ch.Pending) != 1 || ch.Pending[0].Agent != "A" {
		t.Errorf("chat = %s %+v", ch.Context, ch.Pending)
	}
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Events = %v, %v", evs, err)
	}
	if string(evs[0].Payload) != wantPayload || len(evs[0].Metadata.Extra) != 1 || string(evs[0].Metadata.Extra["x"]) != `"y"` {
		t.Errorf("event = %s %s, want %s with x \"y\"", evs[0].Payload, evs[0].Metadata.Extra, wantPayload)
	}
	if waiting, _ := s.Inputs(ctx, scope, c.ID); string(waiting[0].Event.Payload) != wantInput {
		t.Errorf("input = %s, want %s", waiting[0].Event.Payload, wantInput)
	}
	if tk, _ := s.GetTask(ctx, scope, task.ID); string(tk.Input) != `{"q":1}` {
		t.Errorf("task input = %s", tk.Input)
	}
	if eff, _ := s.ClaimEffect(ctx, scope, c.ID, "k", baton.EffectHolder{}); string(eff.Result) != `{"r":1}` {
		t.Errorf("effect result = %s", eff.Result)
	}
}

// TestEventsPayloadsCapped: the events of one read share a buffer, each
// payload capped, so that appending to one leaves the next as it was.
func TestEventsPayloadsCapped(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	defer s.Close()
	scope := storetest.NewScope()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{storetest.TextEvent("A", "one"), storetest.TextEvent("A", "two")}, nil); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	second := string(evs[1].Payload)
	_ = append(evs[0].Payload, "xxxxxxxx"...)
	if string(evs[1].Payload) != second {
		t.Fatalf("an append to one payload changed the next: %s, want %s", evs[1].Payload, second)
	}
}

// TestChatsByStatusFollowsChanges: ChatsByStatus reads an index of chats
// by status, which every way a status changes keeps: a chat created with
// a status, an append's update, UpdateChat, a delete (in no list after).
func TestChatsByStatusFollowsChanges(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	defer s.Close()
	scope := storetest.NewScope()
	ids := func(st baton.ChatStatus) []string {
		t.Helper()
		cs, err := s.ChatsByStatus(ctx, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cs {
			if c.Status != st {
				t.Fatalf("ChatsByStatus(%s) returned a %s chat", st, c.Status)
			}
			out = append(out, c.ID)
		}
		return out
	}
	want := func(st baton.ChatStatus, w ...string) {
		t.Helper()
		if got := ids(st); !slices.Equal(got, w) {
			t.Fatalf("ChatsByStatus(%s) = %v, want %v", st, got, w)
		}
	}
	var chats []string
	for _, st := range []baton.ChatStatus{"", baton.ChatWaitingInput, "", baton.ChatWaitingUITool} {
		c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w", Status: st})
		if err != nil {
			t.Fatal(err)
		}
		chats = append(chats, c.ID)
	}
	want(baton.ChatRunning, chats[0], chats[2])
	want(baton.ChatWaitingInput, chats[1])
	want(baton.ChatWaitingUITool, chats[3])

	ui := baton.ChatWaitingUITool
	if _, err := s.Append(ctx, scope, chats[0], []baton.Event{storetest.TextEvent("A", "x")}, &baton.ChatUpdate{Status: &ui}); err != nil {
		t.Fatal(err)
	}
	want(baton.ChatRunning, chats[2])
	want(baton.ChatWaitingUITool, chats[0], chats[3]) // oldest first

	// A failed append changes no status.
	bad := baton.ChatCompleted
	if _, err := s.Append(ctx, scope, chats[2], nil, &baton.ChatUpdate{Status: &bad, ResolvePending: []string{"nope"}}); err == nil {
		t.Fatal("append resolving an unknown request succeeded")
	}
	want(baton.ChatRunning, chats[2])
	want(baton.ChatCompleted)

	done := baton.ChatCompleted
	if _, err := s.UpdateChat(ctx, scope, chats[3], baton.ChatUpdate{Status: &done}); err != nil {
		t.Fatal(err)
	}
	want(baton.ChatWaitingUITool, chats[0])
	want(baton.ChatCompleted, chats[3])

	if err := s.DeleteChat(ctx, scope, chats[1]); err != nil {
		t.Fatal(err)
	}
	want(baton.ChatWaitingInput)
	if cs, err := s.ChatsByStatus(ctx, baton.ChatRunning, 1); err != nil || len(cs) != 1 || cs[0].ID != chats[2] {
		t.Fatalf("ChatsByStatus(running, limit 1) = %v, %v", cs, err)
	}
}

// TestEventsWhileAppending: a replay taken while appends go on (copied
// after the chat's lock is let go) is always a gapless prefix 1..n with the
// payloads appended, never a torn one; run with -race.
func TestEventsWhileAppending(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	defer s.Close()
	scope := storetest.NewScope()
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"})
	if err != nil {
		t.Fatal(err)
	}
	const appends = 300
	done := make(chan error, 1)
	go func() {
		for i := range appends {
			if _, err := s.Append(ctx, scope, c.ID, []baton.Event{storetest.TextEvent("A", fmt.Sprint(i*2)), storetest.TextEvent("A", fmt.Sprint(i*2+1))}, nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		evs, err := s.Events(ctx, scope, c.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs)%2 != 0 {
			t.Fatalf("a replay saw half of an append: %d events", len(evs))
		}
		for i, e := range evs {
			if e.Sequence != int64(i+1) || baton.MessageOf(e).Content != fmt.Sprint(i) {
				t.Fatalf("replay[%d] = sequence %d, content %q", i, e.Sequence, baton.MessageOf(e).Content)
			}
		}
	}
	if evs, _ := s.Events(ctx, scope, c.ID, 0, 0); len(evs) != 2*appends {
		t.Fatalf("%d events, want %d", len(evs), 2*appends)
	}
}
