package storetest

import (
	"encoding/json"
	"testing"

	"github.com/batonhq/baton"
)

// testDeletedChat: after DeleteChat every method that names the chat says
// ENOTFOUND, and the runtime's lists (ChatsByStatus, TasksByStatus) leave
// the chat and its tasks out — recovery must not find, again and again,
// tasks it can never report.
func testDeletedChat(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "x")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimEffect(ctx, scope, c.ID, "claimed", baton.EffectHolder{}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordUsage(ctx, scope, baton.UsageRecord{ChatID: c.ID, Agent: "A", Usage: baton.Usage{PromptTokens: 1}}); err != nil {
		t.Fatal(err)
	}
	queued, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	running, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k", Status: baton.TaskRunning})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChat(ctx, scope, c.ID); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"GetChat": func() error { _, err := s.GetChat(ctx, scope, c.ID); return err },
		"UpdateChat": func() error {
			_, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{Status: ptr(baton.ChatFailed)})
			return err
		},
		"UpdateChat (nothing)": func() error { _, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{}); return err },
		"Append": func() error {
			_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "y")}, nil)
			return err
		},
		"Append (no events)": func() error {
			_, err := s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{TurnAgent: ptr("B")})
			return err
		},
		"Events": func() error { _, err := s.Events(ctx, scope, c.ID, 0, 0); return err },
		// A stream's replay asks after the last sequence it has: nothing
		// is newer, and still the store says the chat is gone.
		"Events (after the last)": func() error { _, err := s.Events(ctx, scope, c.ID, 1000, 0); return err },
		"ClaimEffect (new)":       func() error { _, err := s.ClaimEffect(ctx, scope, c.ID, "new", baton.EffectHolder{}); return err },
		"ClaimEffect (known)":     func() error { _, err := s.ClaimEffect(ctx, scope, c.ID, "claimed", baton.EffectHolder{}); return err },
		"RecordEffect":            func() error { return s.RecordEffect(ctx, scope, c.ID, "claimed", json.RawMessage(`1`)) },
		"TakeOverEffect": func() error {
			_, err := s.TakeOverEffect(ctx, scope, c.ID, baton.Effect{Key: "claimed"}, baton.EffectHolder{Boot: "b"})
			return err
		},
		"RecordUsage": func() error {
			return s.RecordUsage(ctx, scope, baton.UsageRecord{ChatID: c.ID, Agent: "A", Usage: baton.Usage{PromptTokens: 1}})
		},
		"ChatUsage":  func() error { _, _, err := s.ChatUsage(ctx, scope, c.ID); return err },
		"CreateTask": func() error { _, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k"}); return err },
		"GetTask":    func() error { _, err := s.GetTask(ctx, scope, queued.ID); return err },
		"UpdateTask": func() error {
			_, err := s.UpdateTask(ctx, scope, queued.ID, baton.TaskFailed, nil, "x")
			return err
		},
	}
	for name, call := range calls {
		wantCode(t, name+" of a deleted chat", call(), baton.ENOTFOUND)
	}
	for _, st := range []baton.TaskStatus{baton.TaskQueued, baton.TaskRunning} {
		list, err := s.TasksByStatus(ctx, st, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range list {
			if tk.ID == queued.ID || tk.ID == running.ID {
				t.Errorf("TasksByStatus(%s) lists task %s of a deleted chat", st, tk.ID)
			}
		}
	}
	list, err := s.ChatsByStatus(ctx, baton.ChatRunning, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list {
		if x.ID == c.ID {
			t.Errorf("ChatsByStatus lists a deleted chat")
		}
	}
}
