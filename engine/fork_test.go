package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
)

// rowRecorder keeps, for every append a chat's run makes, the chat row as
// the store held it right after (by the sequence of its last event): what
// the chat was at that sequence, by the store's own word.
type rowRecorder struct {
	baton.Recorder
	store interface {
		GetChat(ctx context.Context, scope baton.Scope, id string) (baton.Chat, error)
	}
	mu   sync.Mutex
	rows map[string]map[int64]baton.Chat // chat → sequence → row
}

func (r *rowRecorder) Record(ctx context.Context, scope baton.Scope, chatID string, events []baton.Event, u *baton.ChatUpdate) ([]baton.Event, error) {
	out, err := r.Recorder.Record(ctx, scope, chatID, events, u)
	if err != nil {
		return out, err
	}
	c, gerr := r.store.GetChat(ctx, scope, chatID)
	if gerr == nil {
		r.mu.Lock()
		if r.rows[chatID] == nil {
			r.rows[chatID] = map[int64]baton.Chat{}
		}
		r.rows[chatID][c.LastSequence] = c
		r.mu.Unlock()
	}
	return out, err
}

func (r *rowRecorder) row(chatID string, seq int64) (baton.Chat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.rows[chatID][seq]
	return c, ok
}

// clientVars returns a context snapshot's variables without the reserved ones.
func clientVars(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("context %s: %v", raw, err)
	}
	maps.DeleteFunc(m, func(k string, _ json.RawMessage) bool { return baton.IsReservedVariable(k) })
	return m
}

func sameVars(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		var x, y any
		if json.Unmarshal(v, &x) != nil || json.Unmarshal(b[k], &y) != nil {
			return false
		}
		xj, _ := json.Marshal(x)
		yj, _ := json.Marshal(y)
		if !bytes.Equal(xj, yj) {
			return false
		}
	}
	return true
}

// pendingKey is a pending request without its ui_event_id, which a fork
// renews.
func pendingKey(ps []baton.PendingRequest) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Kind+"/"+p.ToolName+"/"+p.Agent+"/"+p.ToolCallID)
	}
	slices.Sort(out)
	return out
}

// finish answers whatever the chat waits for, as driveGenerator does, until
// it completes.
func finish(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := context.Background()
	for range 20 {
		c := h.waitStatus(id, baton.ChatWaitingInput, baton.ChatWaitingSecret, baton.ChatWaitingUITool, baton.ChatCompleted, baton.ChatFailed, baton.ChatCancelled)
		var err error
		switch c.Status {
		case baton.ChatCompleted:
			return
		case baton.ChatWaitingInput:
			err = h.eng.Submit(ctx, testScope, id, "A weekly newsletter from our team notes.", "ws")
		case baton.ChatWaitingSecret:
			err = h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingSecret).UIEventID, "success", json.RawMessage(`{"NEWSLETTER_API_KEY":"`+testSecret+`"}`))
		case baton.ChatWaitingUITool:
			err = h.eng.RespondUI(ctx, testScope, id, h.pending(id, baton.PendingUITool).UIEventID, "success", json.RawMessage(`{"action":"approve"}`))
		default:
			t.Errorf("chat %s is %s:\n%s", id, c.Status, dump(h.events(id)))
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		// Wait for the answer to be taken: the status moves on.
		waitMoved(t, h, id, c)
	}
	t.Fatalf("chat %s did not complete after 20 answers:\n%s", id, dump(h.events(id)))
}

// waitMoved waits until the chat has moved past the row before.
func waitMoved(t *testing.T, h *harness, id string, before baton.Chat) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "chat "+id+" to take the answer", func() error {
		c, err := h.store.GetChat(context.Background(), testScope, id)
		if err != nil {
			return err
		}
		if c.LastSequence == before.LastSequence && c.Status == before.Status {
			return fmt.Errorf("still %s at %d", c.Status, c.LastSequence)
		}
		return nil
	})
}

// TestFork_EveryPrefixOfGenerator forks a recorded generator chat (real
// SQLite; the secret form and the plan's UI tool answered) after every one
// of its events. Each fork's row — status, speaker, context variables,
// pending requests — equals the fold of the first N events, and, where N
// ends an append, the row the store held for the original at N; its events
// are the original's first N; it goes on and completes. The original does
// not change; another tenant cannot fork.
func TestFork_EveryPrefixOfGenerator(t *testing.T) {
	rows := &rowRecorder{rows: map[string]map[int64]baton.Chat{}}
	h := newHarness(t, withRecorder(func(r baton.Recorder) baton.Recorder { rows.Recorder = r; return rows }))
	rows.store = h.store
	h, id := driveGenerator(t, h, nil)
	ctx := context.Background()
	orig, err := h.store.GetChat(ctx, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	evs := h.events(id)
	boundaries, moved := 0, 0
	for asked := int64(1); asked <= orig.LastSequence; asked++ {
		// A sequence inside a model reply is moved to the reply's end.
		n := engine.StepEnd(evs, asked)
		if n != asked {
			moved++
			if evs[asked-1].Type == baton.TypeChatHandoff || evs[asked-1].Type == baton.TypeChatInputRequest {
				t.Fatalf("fork at %d (%s) moved to %d", asked, evs[asked-1].Type, n)
			}
		}
		fork, err := h.eng.Fork(ctx, testScope, id, asked)
		if err != nil {
			t.Fatalf("fork at %d: %v", n, err)
		}
		at := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("fork at %d (%s, %s): %s\n%s", n, evs[n-1].Type, fork.ID, fmt.Sprintf(format, args...), dump(evs[:n]))
		}
		want, err := h.eng.Fold(orig, evs, n)
		if err != nil {
			t.Fatal(err)
		}
		if fork.Status != want.Status || fork.TurnAgent != want.TurnAgent {
			at("status %s, turn agent %q; the fold says %s, %q", fork.Status, fork.TurnAgent, want.Status, want.TurnAgent)
		}
		if got := clientVars(t, fork.Context); !sameVars(got, want.Variables) {
			at("variables %v; the fold says %v", got, want.Variables)
		}
		if got, w := pendingKey(fork.Pending), pendingKey(want.Pending); !slices.Equal(got, w) {
			at("pending %v; the fold says %v", got, w)
		}
		for i, p := range fork.Pending {
			if p.UIEventID == want.Pending[i].UIEventID {
				at("pending request keeps the original's ui_event_id %s", p.UIEventID)
			}
		}
		if ff := baton.ForkedFromOf(fork); ff == nil || ff.ChatID != id || ff.Sequence != n {
			at("forked_from = %+v", ff)
		}
		if strings.Contains(string(fork.Context), testSecret) {
			at("the secret's value is in the copy's context")
		}
		// The store's own row at n, where an append ended there.
		if row, ok := rows.row(id, n); ok {
			boundaries++
			if fork.Status != row.Status || fork.TurnAgent != row.TurnAgent {
				at("status %s, turn agent %q; the original was %s, %q", fork.Status, fork.TurnAgent, row.Status, row.TurnAgent)
			}
			if got, w := clientVars(t, fork.Context), clientVars(t, row.Context); !sameVars(got, w) {
				at("variables %v; the original had %v", got, w)
			}
			if got, w := pendingKey(fork.Pending), pendingKey(row.Pending); !slices.Equal(got, w) {
				at("pending %v; the original had %v", got, w)
			}
		}
		copied, err := h.store.Events(ctx, testScope, fork.ID, 0, int(n))
		if err != nil {
			t.Fatal(err)
		}
		for i := range copied {
			if copied[i].ID != evs[i].ID || copied[i].Type != evs[i].Type || copied[i].Sequence != evs[i].Sequence {
				at("event %d = %s %s, the original's is %s %s", i+1, copied[i].Type, copied[i].ID, evs[i].Type, evs[i].ID)
			}
		}
		finish(t, h, fork.ID)
		got := h.events(fork.ID)
		checkSequences(t, got)
		checkSpeakers(t, got)
	}
	if moved == 0 {
		t.Fatal("no sequence fell inside a model reply: StepEnd was not exercised")
	}
	if boundaries < 5 {
		t.Fatalf("only %d of %d sequences end an append: the oracle of the store's rows was not used", boundaries, orig.LastSequence)
	}
	// The original is as it was.
	after, err := h.store.GetChat(ctx, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.LastSequence != orig.LastSequence || after.Status != orig.Status || !sameVars(clientVars(t, after.Context), clientVars(t, orig.Context)) {
		t.Fatalf("original changed: %+v, was %+v", after, orig)
	}
	// Another tenant cannot fork, and learns nothing.
	for _, other := range []baton.Scope{{App: testScope.App, User: "mallory"}, {App: "other", User: testScope.User}} {
		_, err := h.eng.Fork(ctx, other, id, 1)
		if baton.ErrorCode(err) != baton.ENOTFOUND {
			t.Fatalf("fork by %+v: %v, want not found", other, err)
		}
		if cs, _ := h.store.ListChats(ctx, other, baton.ListOptions{}); len(cs) != 0 {
			t.Fatalf("a refused fork created %d chats for %+v", len(cs), other)
		}
	}
	for _, n := range []int64{0, -3, orig.LastSequence + 1} {
		_, err := h.eng.Fork(ctx, testScope, id, n)
		if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), "at_sequence") {
			t.Fatalf("fork at %d: %v, want invalid at_sequence", n, err)
		}
	}
}
