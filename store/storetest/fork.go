package storetest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton"
)

// testFork: ForkChat copies a prefix of a chat's events into a new chat of
// the same scope in one step — same sequences, ids, types, timestamps and
// metadata, payloads with the renames applied — with the chat row the
// caller gives; the source does not change; bad sequences, other scopes and
// deleted chats copy nothing.
func testFork(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	src := mustChat(t, s, scope, "hello")
	ui := "ui_" + baton.NewID()
	var evs []baton.Event
	for i, content := range []string{"one", "two", "three with " + ui, "four", "five"} {
		ev := TextEvent("A", content)
		if i == 1 {
			ev.Metadata.Extra = map[string]json.RawMessage{"x_trace": json.RawMessage(`"t-1"`)}
		}
		evs = append(evs, ev)
	}
	rec, err := s.Append(ctx, scope, src.ID, evs[:3], &baton.ChatUpdate{
		Status:     ptr(baton.ChatWaitingUITool),
		AddPending: []baton.PendingRequest{{UIEventID: ui, Kind: baton.PendingUITool, ToolCallID: "call_1", ToolName: "pick", Agent: "A"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	more, err := s.Append(ctx, scope, src.ID, evs[3:], nil)
	if err != nil {
		t.Fatal(err)
	}
	rec = append(rec, more...)

	newUI := "ui_" + baton.NewID()
	f := baton.Fork{From: src.ID, At: 3, Rename: map[string]string{ui: newUI}, Chat: baton.Chat{
		Workflow: "hello", Status: baton.ChatWaitingUITool, Context: json.RawMessage(`{"a":1}`), TurnAgent: "A", CacheSeed: 7,
		Pending: []baton.PendingRequest{{UIEventID: newUI, Kind: baton.PendingUITool, ToolCallID: "call_1", ToolName: "pick", Agent: "A"}},
	}}
	fork, err := s.ForkChat(ctx, scope, f)
	if err != nil {
		t.Fatalf("ForkChat: %v", err)
	}
	if fork.ID == "" || fork.ID == src.ID || fork.LastSequence != 3 || fork.App != scope.App || fork.User != scope.User {
		t.Fatalf("fork = %+v", fork)
	}
	got, err := s.GetChat(ctx, scope, fork.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastSequence != 3 || got.Status != baton.ChatWaitingUITool || got.TurnAgent != "A" || got.CacheSeed != 7 ||
		contextMap(t, got.Context)["a"] != float64(1) || got.Workflow != "hello" {
		t.Fatalf("forked chat as stored = %+v", got)
	}
	if len(got.Pending) != 1 || got.Pending[0].UIEventID != newUI || got.Pending[0].ToolCallID != "call_1" {
		t.Fatalf("forked chat's pending = %+v", got.Pending)
	}
	copied, err := s.Events(ctx, scope, fork.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, copied, 3)
	for i, e := range copied {
		o := rec[i]
		if e.ID != o.ID || e.Type != o.Type || e.Timestamp != o.Timestamp || e.Metadata.Source != o.Metadata.Source ||
			e.Metadata.TriggerAgentName != o.Metadata.TriggerAgentName || e.ChatID() != fork.ID {
			t.Errorf("copied event %d = %+v, want a copy of %+v in chat %s", i+1, e, o, fork.ID)
		}
		want := bytes.ReplaceAll(o.Payload, []byte(ui), []byte(newUI))
		var a, b any
		_ = json.Unmarshal(e.Payload, &a)
		_ = json.Unmarshal(want, &b)
		if !jsonEqual(a, b) {
			t.Errorf("copied event %d payload %s, want %s", i+1, e.Payload, want)
		}
	}
	if string(copied[1].Metadata.Extra["x_trace"]) != `"t-1"` {
		t.Errorf("copied metadata extra = %v", copied[1].Metadata.Extra)
	}
	// The fork goes on from At; the source is as it was.
	next, err := s.Append(ctx, scope, fork.ID, []baton.Event{TextEvent("user", "answer")}, &baton.ChatUpdate{ResolvePending: []string{newUI}})
	if err != nil || next[0].Sequence != 4 {
		t.Fatalf("append to the fork: %v, %+v", err, next)
	}
	orig, err := s.GetChat(ctx, scope, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if orig.LastSequence != 5 || len(orig.Pending) != 1 || orig.Pending[0].UIEventID != ui {
		t.Fatalf("source after the fork = %+v", orig)
	}
	origEvs, _ := s.Events(ctx, scope, src.ID, 0, 0)
	checkSequences(t, origEvs, 5)
	if !strings.Contains(string(origEvs[2].Payload), ui) {
		t.Fatalf("source payload renamed: %s", origEvs[2].Payload)
	}
	// A fork of the whole chat, of a fork, and with a chosen id.
	id := baton.NewID()
	whole, err := s.ForkChat(ctx, scope, baton.Fork{From: src.ID, At: 5, Chat: baton.Chat{ID: id, Workflow: "hello"}})
	if err != nil || whole.ID != id || whole.LastSequence != 5 || whole.Status != baton.ChatRunning {
		t.Fatalf("fork at the end: %v %+v", err, whole)
	}
	if _, err := s.ForkChat(ctx, scope, baton.Fork{From: fork.ID, At: 4, Chat: baton.Chat{Workflow: "hello"}}); err != nil {
		t.Fatalf("fork of a fork: %v", err)
	}
	_, err = s.ForkChat(ctx, scope, baton.Fork{From: src.ID, At: 2, Chat: baton.Chat{ID: id, Workflow: "hello"}})
	wantCode(t, "fork to an id in use", err, baton.ECONFLICT)

	// Bad sequences name the field and create nothing.
	for _, at := range []int64{0, -1, 6} {
		id := baton.NewID()
		_, err := s.ForkChat(ctx, scope, baton.Fork{From: src.ID, At: at, Chat: baton.Chat{ID: id, Workflow: "hello"}})
		wantCode(t, "fork at a bad sequence", err, baton.EINVALID)
		if err != nil && !strings.Contains(err.Error(), "at_sequence") {
			t.Errorf("fork at %d: error %q does not name at_sequence", at, err)
		}
		_, err = s.GetChat(ctx, scope, id)
		wantCode(t, "chat of a refused fork", err, baton.ENOTFOUND)
	}
	// Another tenant cannot fork (and learns nothing); a deleted chat cannot be forked.
	for _, other := range []baton.Scope{{App: scope.App, User: "someone-else"}, {App: "other-app", User: scope.User}} {
		id := baton.NewID()
		_, err := s.ForkChat(ctx, other, baton.Fork{From: src.ID, At: 1, Chat: baton.Chat{ID: id, Workflow: "hello"}})
		wantCode(t, "fork from another scope", err, baton.ENOTFOUND)
		_, err = s.GetChat(ctx, other, id)
		wantCode(t, "chat of a refused fork", err, baton.ENOTFOUND)
	}
	gone := mustChat(t, s, scope, "hello")
	if _, err := s.Append(ctx, scope, gone.ID, []baton.Event{TextEvent("A", "x")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChat(ctx, scope, gone.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.ForkChat(ctx, scope, baton.Fork{From: gone.ID, At: 1, Chat: baton.Chat{Workflow: "hello"}})
	wantCode(t, "fork of a deleted chat", err, baton.ENOTFOUND)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
