// Package storetest is the conformance suite every baton.Store runs:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) baton.Store { … })
//	}
//
// newStore must return an open store (closing it in t.Cleanup; Close may be
// called twice). Stores handed to different subtests may share data: every
// subtest works in scopes of its own.
//
// It also holds the two halves of the crash test, AppendLoop (the child that
// gets killed) and VerifyAfterCrash (the parent's check), which each store
// package drives with a real subprocess.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) baton.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s baton.Store)
	}{
		{"Chats", testChats},
		{"AppendAndReplay", testAppendAndReplay},
		{"LongReplay", testLongReplay},
		{"GaplessOneChat", testGaplessOneChat},
		{"GaplessManyChats", testGaplessManyChats},
		{"AtomicAppend", testAtomicAppend},
		{"ExpectNext", testExpectNext},
		{"Pending", testPending},
		{"PendingToolInput", testPendingToolInput},
		{"Fork", testFork},
		{"Inbox", testInbox},
		{"CreateChatWithInput", testCreateChatWithInput},
		{"CreateChatAndAppend", testCreateChatAndAppend},
		{"TenantIsolation", testTenantIsolation},
		{"EffectLedger", testEffectLedger},
		{"EffectHolder", testEffectHolder},
		{"LargeAndUnicode", testLargeAndUnicode},
		{"Usage", testUsage},
		{"UsageWithAppend", testUsageWithAppend},
		{"AppUsage", testAppUsage},
		{"Tasks", testTasks},
		{"Leases", testLeases},
		{"Validation", testValidation},
		{"Content", testContent},
		{"DeletedChat", testDeletedChat},
		{"CancelledWrites", testCancelledWrites},
		{"GetChatNotTorn", testGetChatNotTorn},
		{"Keys", func(t *testing.T, s baton.Store) { RunKeys(t, s) }},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

// NewScope returns a scope no other test uses.
func NewScope() baton.Scope {
	return baton.Scope{App: "app-" + baton.NewID(), User: "user-" + baton.NewID()}
}

// TextEvent returns a chat.text event with the given content.
func TextEvent(agent, content string) baton.Event {
	p, _ := json.Marshal(map[string]any{"kind": "text", "agent": agent, "content": content})
	return baton.NewEvent(baton.TypeChatText, baton.Metadata{Source: baton.SourceLLM}, p)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustChat(t *testing.T, s baton.Store, scope baton.Scope, workflow string) baton.Chat {
	t.Helper()
	c, err := s.CreateChat(ctxT(t), scope, baton.Chat{Workflow: workflow})
	if err != nil {
		t.Fatalf("CreateChat: %v", err)
	}
	return c
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if baton.ErrorCode(err) != code {
		t.Errorf("%s: error %v (code %q), want code %q", what, err, baton.ErrorCode(err), code)
	}
}

func ptr[T any](v T) *T { return &v }

// checkSequences fails unless events are numbered 1..n in order.
func checkSequences(t *testing.T, evs []baton.Event, n int) {
	t.Helper()
	if len(evs) != n {
		t.Fatalf("got %d events, want %d", len(evs), n)
	}
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d, want %d (gap or repeat)", i, e.Sequence, i+1)
		}
	}
}

func contextMap(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("context %s: %v", raw, err)
	}
	return m
}

func testChats(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	id := baton.NewID()
	c, err := s.CreateChat(ctx, scope, baton.Chat{ID: id, Workflow: "hello", Context: json.RawMessage(`{"a":1,"b":"x"}`), TurnAgent: "Planner"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != id || c.App != scope.App || c.User != scope.User || c.Status != baton.ChatRunning || c.CacheSeed == 0 || c.CreatedAt.IsZero() {
		t.Fatalf("created chat %+v", c)
	}
	if _, err := s.CreateChat(ctx, scope, baton.Chat{ID: id, Workflow: "hello"}); baton.ErrorCode(err) != baton.ECONFLICT {
		t.Fatalf("duplicate CreateChat: %v, want conflict", err)
	}
	got, err := s.GetChat(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Workflow != "hello" || got.TurnAgent != "Planner" || got.CacheSeed != c.CacheSeed || got.LastSequence != 0 {
		t.Fatalf("GetChat = %+v", got)
	}
	if m := contextMap(t, got.Context); m["a"] != float64(1) || m["b"] != "x" {
		t.Fatalf("context = %s", got.Context)
	}
	// Update: status, speaker, and a context patch that sets, adds and deletes.
	up, err := s.UpdateChat(ctx, scope, id, baton.ChatUpdate{
		Status:    ptr(baton.ChatWaitingInput),
		TurnAgent: ptr("Writer"),
		Context:   map[string]json.RawMessage{"a": json.RawMessage(`2`), "b": json.RawMessage(`null`), "c": json.RawMessage(`{"d":[1,2]}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if up.Status != baton.ChatWaitingInput || up.TurnAgent != "Writer" {
		t.Fatalf("UpdateChat = %+v", up)
	}
	m := contextMap(t, up.Context)
	if _, has := m["b"]; has || m["a"] != float64(2) || m["c"] == nil {
		t.Fatalf("context after patch = %s", up.Context)
	}
	if !up.UpdatedAt.After(c.UpdatedAt) && !up.UpdatedAt.Equal(c.UpdatedAt) {
		t.Fatalf("updated_at went back: %v < %v", up.UpdatedAt, c.UpdatedAt)
	}
	// List: newest first, with filters.
	ids := []string{id}
	for i := range 3 {
		wf := "other"
		if i == 2 {
			wf = "hello"
		}
		ids = append(ids, mustChat(t, s, scope, wf).ID)
	}
	all, err := s.ListChats(ctx, scope, baton.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("ListChats: %d chats, want 4", len(all))
	}
	for i := range all {
		if all[i].ID != ids[len(ids)-1-i] {
			t.Fatalf("ListChats order: got %s at %d, want %s (newest first)", all[i].ID, i, ids[len(ids)-1-i])
		}
	}
	hello, err := s.ListChats(ctx, scope, baton.ListOptions{Workflow: "hello"})
	if err != nil || len(hello) != 2 {
		t.Fatalf("ListChats(workflow=hello) = %d chats, %v; want 2", len(hello), err)
	}
	waiting, err := s.ListChats(ctx, scope, baton.ListOptions{Status: baton.ChatWaitingInput})
	if err != nil || len(waiting) != 1 || waiting[0].ID != id {
		t.Fatalf("ListChats(status=waiting_input) = %v, %v", waiting, err)
	}
	limited, err := s.ListChats(ctx, scope, baton.ListOptions{Limit: 2})
	if err != nil || len(limited) != 2 {
		t.Fatalf("ListChats(limit=2) = %d chats, %v", len(limited), err)
	}
	byStatus, err := s.ChatsByStatus(ctx, baton.ChatWaitingInput, 100000)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range byStatus {
		found = found || c.ID == id
		if c.Status != baton.ChatWaitingInput {
			t.Fatalf("ChatsByStatus returned a %s chat", c.Status)
		}
	}
	if !found {
		t.Fatalf("ChatsByStatus(waiting_input) misses chat %s", id)
	}
	// Soft delete.
	if err := s.DeleteChat(ctx, scope, id); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetChat(ctx, scope, id)
	wantCode(t, "GetChat after delete", err, baton.ENOTFOUND)
	wantCode(t, "DeleteChat twice", s.DeleteChat(ctx, scope, id), baton.ENOTFOUND)
	_, err = s.Append(ctx, scope, id, []baton.Event{TextEvent("a", "x")}, nil)
	wantCode(t, "Append after delete", err, baton.ENOTFOUND)
	all, _ = s.ListChats(ctx, scope, baton.ListOptions{})
	if len(all) != 3 {
		t.Fatalf("ListChats after delete: %d chats, want 3", len(all))
	}
	_, err = s.GetChat(ctx, scope, "no-such-chat")
	wantCode(t, "GetChat unknown", err, baton.ENOTFOUND)
}

// testLongReplay reads a chat longer than a store reads at once (SQLite:
// blocks of 256), from every kind of start and with limits across the
// blocks' edges, with events of every shape: no payload, extra metadata,
// multi-byte texts, every named metadata field.
func testLongReplay(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	const total = 700
	var sent []baton.Event
	for len(sent) < total {
		var batch []baton.Event
		for range min(7, total-len(sent)) {
			i := len(sent) + len(batch)
			var e baton.Event
			switch i % 4 {
			case 0:
				e = TextEvent("A é", fmt.Sprint("m ", i, " ✓"))
			case 1:
				e = baton.NewEvent(baton.TypeChatSelectSpeaker, baton.Metadata{}, nil)
			case 2:
				e = TextEvent("B", strings.Repeat("x", i))
				e.Metadata.Extra = map[string]json.RawMessage{"k": json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
			default:
				e = TextEvent("", "")
				e.Metadata = baton.Metadata{TriggerAgentID: "id 1", TriggerAgentName: "Ünï", EnvName: "env", Source: baton.SourceUser}
			}
			switch i % 50 {
			case 10: // a large event (SQLite reads those one row each)
				e = TextEvent("big", strings.Repeat("é", 20<<10))
			case 30: // large extra metadata
				e.Metadata.Extra = map[string]json.RawMessage{"big": json.RawMessage(`"` + strings.Repeat("y", 40<<10) + `"`)}
			}
			batch = append(batch, e)
		}
		got, err := s.Append(ctx, scope, c.ID, batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, got...)
	}
	// Events after a negative sequence are all of them (sequence > after).
	if evs, err := s.Events(ctx, scope, c.ID, -1, 0); err != nil || len(evs) != total || evs[0].Sequence != 1 {
		t.Fatalf("Events(after=-1): %d events, %v", len(evs), err)
	}
	for _, r := range []struct{ after, limit int64 }{{0, 0}, {0, 256}, {0, 257}, {100, 300}, {255, 2}, {511, 0}, {650, 0}, {699, 10}, {700, 0}, {700, 5}} {
		evs, err := s.Events(ctx, scope, c.ID, r.after, int(r.limit))
		if err != nil {
			t.Fatal(err)
		}
		want := total - r.after
		if r.limit > 0 {
			want = min(want, r.limit)
		}
		if int64(len(evs)) != want {
			t.Fatalf("Events(after=%d, limit=%d): %d events, want %d", r.after, r.limit, len(evs), want)
		}
		for i, e := range evs {
			w := sent[int(r.after)+i]
			if e.Sequence != r.after+int64(i)+1 || e.ID != w.ID || e.Type != w.Type || e.Timestamp != w.Timestamp ||
				!bytes.Equal(e.Payload, w.Payload) || e.ChatID() != c.ID || e.Metadata.TriggerAgentID != w.Metadata.TriggerAgentID ||
				e.Metadata.TriggerAgentName != w.Metadata.TriggerAgentName || e.Metadata.EnvName != w.Metadata.EnvName ||
				e.Metadata.Source != w.Metadata.Source || fmt.Sprint(e.Metadata.Extra) != fmt.Sprint(w.Metadata.Extra) {
				t.Fatalf("Events(after=%d, limit=%d)[%d] = %+v, want %+v", r.after, r.limit, i, e, w)
			}
		}
	}
}

func testAppendAndReplay(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil || len(evs) != 0 {
		t.Fatalf("Events of a new chat = %v, %v", evs, err)
	}
	var sent []baton.Event
	for i := range 10 {
		batch := []baton.Event{TextEvent("A", fmt.Sprint("m", 3*i)), TextEvent("B", fmt.Sprint("m", 3*i+1)), TextEvent("C", fmt.Sprint("m", 3*i+2))}
		got, err := s.Append(ctx, scope, c.ID, batch, &baton.ChatUpdate{Context: map[string]json.RawMessage{"i": json.RawMessage(fmt.Sprint(i))}})
		if err != nil {
			t.Fatal(err)
		}
		for j, e := range got {
			if e.Sequence != int64(3*i+j+1) || e.ChatID() != c.ID || e.ID != batch[j].ID {
				t.Fatalf("Append returned %+v at %d", e, 3*i+j)
			}
		}
		sent = append(sent, got...)
	}
	got, err := s.GetChat(ctx, scope, c.ID)
	if err != nil || got.LastSequence != 30 {
		t.Fatalf("LastSequence = %d, %v; want 30", got.LastSequence, err)
	}
	if m := contextMap(t, got.Context); m["i"] != float64(9) {
		t.Fatalf("context = %s", got.Context)
	}
	for after := int64(0); after <= 31; after++ {
		evs, err := s.Events(ctx, scope, c.ID, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := max(0, 30-int(after))
		if len(evs) != want {
			t.Fatalf("Events(after=%d): %d events, want %d", after, len(evs), want)
		}
		for i, e := range evs {
			w := sent[int(after)+i]
			if e.Sequence != after+int64(i)+1 || e.ID != w.ID || e.Type != w.Type || e.Timestamp != w.Timestamp ||
				!bytes.Equal(e.Payload, w.Payload) || e.Metadata.Source != w.Metadata.Source || e.ChatID() != c.ID {
				t.Fatalf("Events(after=%d)[%d] = %+v, want %+v", after, i, e, w)
			}
		}
	}
	evs, err = s.Events(ctx, scope, c.ID, 5, 4)
	if err != nil || len(evs) != 4 || evs[0].Sequence != 6 || evs[3].Sequence != 9 {
		t.Fatalf("Events(after=5, limit=4) = %d events, %v", len(evs), err)
	}
	msg := baton.MessageOf(evs[0])
	if msg.Role != "assistant" || msg.Name != "C" || msg.Content != "m5" || msg.Sequence != 6 || msg.EventType != baton.TypeChatText {
		t.Fatalf("MessageOf(stored event) = %+v", msg)
	}
}

func testGaplessOneChat(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	const writers, each = 50, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent(fmt.Sprint("w", w), fmt.Sprint(i))}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs, writers*each)
	// Each writer's events keep their order.
	last := map[string]int{}
	for _, e := range evs {
		m := baton.MessageOf(e)
		var n int
		fmt.Sscan(m.Content, &n)
		if prev, ok := last[m.Name]; ok && n != prev+1 {
			t.Fatalf("writer %s: event %d after %d", m.Name, n, prev)
		}
		last[m.Name] = n
	}
}

func testGaplessManyChats(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	const chats, each = 200, 5
	ids := make([]string, chats)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "hello"})
			if err != nil {
				t.Error(err)
			}
			ids[i] = c.ID
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	errs := make(chan error, 2*chats)
	for i := range chats {
		for range 2 { // two appenders per chat
			wg.Go(func() {
				for j := range each {
					if _, err := s.Append(ctx, scope, ids[i], []baton.Event{TextEvent("A", fmt.Sprint(j))}, nil); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range ids {
		evs, err := s.Events(ctx, scope, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs, 2*each)
	}
}

// testAtomicAppend: an append that fails leaves neither its events nor its
// snapshot change.
func testAtomicAppend(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	first, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "one")}, &baton.ChatUpdate{Context: map[string]json.RawMessage{"k": json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	patch := &baton.ChatUpdate{Status: ptr(baton.ChatFailed), TurnAgent: ptr("X"), Context: map[string]json.RawMessage{"k": json.RawMessage(`2`)}}
	dup := TextEvent("A", "dup")
	dup.ID = first[0].ID
	cases := []struct {
		name   string
		events []baton.Event
		u      baton.ChatUpdate
		code   string
	}{
		{"duplicate event id", []baton.Event{TextEvent("A", "two"), dup}, *patch, baton.ECONFLICT},
		{"duplicate id in batch", func() []baton.Event { e := TextEvent("A", "x"); return []baton.Event{e, e} }(), *patch, baton.ECONFLICT},
		{"unknown pending", []baton.Event{TextEvent("A", "two")}, withResolve(*patch, "nope"), baton.ENOTFOUND},
		{"stale fence", []baton.Event{TextEvent("A", "two")}, withFence(*patch, 99), baton.ECONFLICT},
		{"behind expect_next", []baton.Event{TextEvent("A", "two")}, withExpect(*patch, 1), baton.ECONFLICT},
		{"ahead expect_next", []baton.Event{TextEvent("A", "two")}, withExpect(*patch, 3), baton.ECONFLICT},
		{"expect_next, no events", nil, withExpect(*patch, 1), baton.ECONFLICT},
	}
	for _, tc := range cases {
		_, err := s.Append(ctx, scope, c.ID, tc.events, &tc.u)
		wantCode(t, tc.name, err, tc.code)
		got, err := s.GetChat(ctx, scope, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.LastSequence != 1 || got.Status != baton.ChatRunning || got.TurnAgent != "" || contextMap(t, got.Context)["k"] != float64(1) {
			t.Fatalf("%s: a failed append changed the chat: %+v %s", tc.name, got, got.Context)
		}
		evs, _ := s.Events(ctx, scope, c.ID, 0, 0)
		checkSequences(t, evs, 1)
	}
	// The next append still gets sequence 2.
	got, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "two")}, patch)
	if err != nil || got[0].Sequence != 2 {
		t.Fatalf("append after failures: %v, %v", got, err)
	}
	ch, _ := s.GetChat(ctx, scope, c.ID)
	if ch.Status != baton.ChatFailed || ch.TurnAgent != "X" || contextMap(t, ch.Context)["k"] != float64(2) {
		t.Fatalf("update applied with the append: %+v %s", ch, ch.Context)
	}
}

func withResolve(u baton.ChatUpdate, ids ...string) baton.ChatUpdate {
	u.ResolvePending = ids
	return u
}
func withFence(u baton.ChatUpdate, f int64) baton.ChatUpdate  { u.Fence = f; return u }
func withExpect(u baton.ChatUpdate, n int64) baton.ChatUpdate { u.ExpectNext = n; return u }

// testExpectNext: an append whose ChatUpdate.ExpectNext is the chat's next
// sequence is made; one whose is not fails with ErrStale and writes
// nothing, also when it waits for the store's writer with other chats'
// appends (stores that commit appends together must attribute it to it).
func testExpectNext(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	got, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "one"), TextEvent("A", "two")}, &baton.ChatUpdate{ExpectNext: 1})
	if err != nil || got[0].Sequence != 1 || got[1].Sequence != 2 {
		t.Fatalf("append at the expected sequence: %v, %v", got, err)
	}
	if _, err := s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{Status: ptr(baton.ChatWaitingInput), ExpectNext: 3}); err != nil {
		t.Fatalf("an update of no events at the expected sequence: %v", err)
	}
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "late")}, &baton.ChatUpdate{ExpectNext: 2}); !errors.Is(err, baton.ErrStale) || errors.Is(err, baton.ErrFenced) {
		t.Fatalf("append behind the chat: %v, want baton.ErrStale", err)
	}
	// Another tenant learns nothing of the chat, stale or not: not found,
	// never ErrStale (which would say the chat exists, and its error its
	// last sequence).
	for _, expect := range []int64{2, 3} { // behind the chat, and its very next sequence
		_, err := s.Append(ctx, NewScope(), c.ID, []baton.Event{TextEvent("A", "other tenant")}, &baton.ChatUpdate{ExpectNext: expect})
		if baton.ErrorCode(err) != baton.ENOTFOUND || errors.Is(err, baton.ErrStale) || strings.Contains(err.Error(), "sequence") {
			t.Fatalf("another tenant's append expecting %d: %v, want ENOTFOUND", expect, err)
		}
	}
	// UpdateChat does not check it.
	if _, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{ExpectNext: 99, TurnAgent: ptr("B")}); err != nil {
		t.Fatalf("UpdateChat with expect_next: %v", err)
	}
	if _, err := s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{ExpectNext: -1}); baton.ErrorCode(err) != baton.EINVALID {
		t.Fatalf("a negative expect_next: %v, want EINVALID", err)
	}

	// Many chats at once, one in three stale: each append gets its own
	// outcome.
	const n = 24
	chats := make([]baton.Chat, n)
	for i := range chats {
		chats[i] = mustChat(t, s, scope, "hello")
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range chats {
		wg.Go(func() {
			expect := int64(1)
			if i%3 == 0 {
				expect = 2
			}
			_, errs[i] = s.Append(ctx, scope, chats[i].ID, []baton.Event{TextEvent("A", "x")}, &baton.ChatUpdate{ExpectNext: expect, TurnAgent: ptr("A")})
		})
	}
	wg.Wait()
	for i, err := range errs {
		ch, gerr := s.GetChat(ctx, scope, chats[i].ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if i%3 == 0 {
			if !errors.Is(err, baton.ErrStale) || ch.LastSequence != 0 || ch.TurnAgent != "" {
				t.Fatalf("chat %d, stale: %v, chat %+v; want baton.ErrStale and nothing written", i, err, ch)
			}
			continue
		}
		if err != nil || ch.LastSequence != 1 || ch.TurnAgent != "A" {
			t.Fatalf("chat %d: %v, chat %+v; want the append made", i, err, ch)
		}
	}
}

func testPending(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	other := mustChat(t, s, scope, "hello")
	ui, in := baton.NewID(), baton.NewID()
	_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "asks")}, &baton.ChatUpdate{
		Status: ptr(baton.ChatWaitingUITool),
		AddPending: []baton.PendingRequest{
			{UIEventID: ui, Kind: baton.PendingUITool, ToolCallID: "call_1", ToolName: "pick", Agent: "A"},
			{UIEventID: in, Kind: baton.PendingInput, Agent: "A"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetChat(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != baton.ChatWaitingUITool || len(got.Pending) != 2 {
		t.Fatalf("pending = %+v", got.Pending)
	}
	var p baton.PendingRequest
	for _, x := range got.Pending {
		if x.UIEventID == ui {
			p = x
		}
	}
	if p.Kind != baton.PendingUITool || p.ToolCallID != "call_1" || p.ToolName != "pick" || p.Agent != "A" || p.CreatedAt.IsZero() {
		t.Fatalf("pending request = %+v", p)
	}
	// Another chat cannot resolve it.
	_, err = s.Append(ctx, scope, other.ID, []baton.Event{TextEvent("user", "hi")}, &baton.ChatUpdate{ResolvePending: []string{ui}})
	wantCode(t, "resolve another chat's request", err, baton.ENOTFOUND)
	// Resolve it with the answer event.
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("user", "answer")}, &baton.ChatUpdate{Status: ptr(baton.ChatRunning), ResolvePending: []string{ui}}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetChat(ctx, scope, c.ID)
	if len(got.Pending) != 1 || got.Pending[0].UIEventID != in || got.Status != baton.ChatRunning {
		t.Fatalf("after resolve: %+v", got)
	}
	// A second answer is a conflict and writes nothing.
	_, err = s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("user", "again")}, &baton.ChatUpdate{ResolvePending: []string{ui}})
	wantCode(t, "answer twice", err, baton.ECONFLICT)
	got, _ = s.GetChat(ctx, scope, c.ID)
	if got.LastSequence != 2 {
		t.Fatalf("second answer appended: last_sequence %d", got.LastSequence)
	}
	// Adding a ui_event_id in use is a conflict.
	_, err = s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{AddPending: []baton.PendingRequest{{UIEventID: in, Kind: baton.PendingInput}}})
	wantCode(t, "reused ui_event_id", err, baton.ECONFLICT)
	if _, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{ResolvePending: []string{in}}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetChat(ctx, scope, c.ID)
	if len(got.Pending) != 0 {
		t.Fatalf("pending after resolving all: %+v", got.Pending)
	}
}

// testPendingToolInput: a tool call waiting for the person's answer
// (PendingToolInput) is kept with its call, tool and agent, and the
// answer's append resolves it once.
func testPendingToolInput(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	id := "toolinput_0_" + baton.NewID() + "_1"
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "asks")}, &baton.ChatUpdate{
		Status:     ptr(baton.ChatWaitingInput),
		AddPending: []baton.PendingRequest{{UIEventID: id, Kind: baton.PendingToolInput, ToolCallID: "call_9", ToolName: "ask_remote", Agent: "A"}},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetChat(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != baton.ChatWaitingInput || len(got.Pending) != 1 {
		t.Fatalf("chat %s, pending %+v", got.Status, got.Pending)
	}
	if p := got.Pending[0]; p.UIEventID != id || p.Kind != baton.PendingToolInput || p.ToolCallID != "call_9" || p.ToolName != "ask_remote" || p.Agent != "A" {
		t.Fatalf("pending request = %+v", p)
	}
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("user", "Ada")}, &baton.ChatUpdate{Status: ptr(baton.ChatRunning), ResolvePending: []string{id}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("user", "Ada")}, &baton.ChatUpdate{ResolvePending: []string{id}})
	wantCode(t, "answer twice", err, baton.ECONFLICT)
	got, _ = s.GetChat(ctx, scope, c.ID)
	if len(got.Pending) != 0 || got.Status != baton.ChatRunning || got.LastSequence != 2 {
		t.Fatalf("after the answer: %+v", got)
	}
}

// testTenantIsolation: another app or user can never read, list, change,
// append to, or learn of a chat; every method answers ENOTFOUND.
func testTenantIsolation(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	owner := NewScope()
	c := mustChat(t, s, owner, "hello")
	if _, err := s.Append(ctx, owner, c.ID, []baton.Event{TextEvent("A", "secret")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimEffect(ctx, owner, c.ID, "k", baton.EffectHolder{}); err != nil {
		t.Fatal(err)
	}
	task, err := s.CreateTask(ctx, owner, baton.Task{ChatID: c.ID, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordUsage(ctx, owner, baton.UsageRecord{ChatID: c.ID, Agent: "A", Usage: baton.Usage{PromptTokens: 5}}); err != nil {
		t.Fatal(err)
	}
	strangers := map[string]baton.Scope{
		"other app":  {App: "x" + owner.App, User: owner.User},
		"other user": {App: owner.App, User: "x" + owner.User},
		"empty":      {},
	}
	for name, sc := range strangers {
		t.Run(name, func(t *testing.T) {
			calls := map[string]func() error{
				"GetChat": func() error { _, err := s.GetChat(ctx, sc, c.ID); return err },
				"UpdateChat": func() error {
					_, err := s.UpdateChat(ctx, sc, c.ID, baton.ChatUpdate{Status: ptr(baton.ChatFailed)})
					return err
				},
				"DeleteChat": func() error { return s.DeleteChat(ctx, sc, c.ID) },
				"Append": func() error {
					_, err := s.Append(ctx, sc, c.ID, []baton.Event{TextEvent("A", "intruder")}, nil)
					return err
				},
				"Events": func() error { _, err := s.Events(ctx, sc, c.ID, 0, 0); return err },
				"Events (after the last)": func() error {
					_, err := s.Events(ctx, sc, c.ID, 1000, 0)
					return err
				},
				"ClaimEffect":  func() error { _, err := s.ClaimEffect(ctx, sc, c.ID, "k2", baton.EffectHolder{}); return err },
				"RecordEffect": func() error { return s.RecordEffect(ctx, sc, c.ID, "k", json.RawMessage(`1`)) },
				"RecordUsage": func() error {
					return s.RecordUsage(ctx, sc, baton.UsageRecord{ChatID: c.ID, Usage: baton.Usage{PromptTokens: 1}})
				},
				"ChatUsage":  func() error { _, _, err := s.ChatUsage(ctx, sc, c.ID); return err },
				"CreateTask": func() error { _, err := s.CreateTask(ctx, sc, baton.Task{ChatID: c.ID, Kind: "k"}); return err },
				"GetTask":    func() error { _, err := s.GetTask(ctx, sc, task.ID); return err },
				"UpdateTask": func() error {
					_, err := s.UpdateTask(ctx, sc, task.ID, baton.TaskFailed, nil, "x")
					return err
				},
			}
			for m, call := range calls {
				wantCode(t, m, call(), baton.ENOTFOUND)
			}
			list, err := s.ListChats(ctx, sc, baton.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range list {
				if x.ID == c.ID {
					t.Fatalf("ListChats of %s lists the chat", name)
				}
			}
		})
	}
	// Nothing the strangers tried changed anything.
	got, err := s.GetChat(ctx, owner, c.ID)
	if err != nil || got.Status != baton.ChatRunning || got.LastSequence != 1 {
		t.Fatalf("owner's chat after strangers: %+v, %v", got, err)
	}
	eff, err := s.ClaimEffect(ctx, owner, c.ID, "k", baton.EffectHolder{})
	if err != nil || eff.State != baton.EffectPending {
		t.Fatalf("owner's effect after strangers: %+v, %v", eff, err)
	}
	// A stranger's claim of k2 wrote no row: the owner's is the first.
	if eff, err := s.ClaimEffect(ctx, owner, c.ID, "k2", baton.EffectHolder{}); err != nil || eff.State != baton.EffectNew {
		t.Fatalf("owner's claim of a key only strangers tried: %+v, %v; want new", eff, err)
	}
	tk, err := s.GetTask(ctx, owner, task.ID)
	if err != nil || tk.Status != baton.TaskQueued {
		t.Fatalf("owner's task after strangers: %+v, %v", tk, err)
	}
	total, _, err := s.ChatUsage(ctx, owner, c.ID)
	if err != nil || total.Calls != 1 {
		t.Fatalf("owner's usage after strangers: %+v, %v", total, err)
	}
}

func testEffectLedger(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	const claimers = 20
	states := make(chan baton.EffectState, claimers)
	var wg sync.WaitGroup
	for range claimers {
		wg.Go(func() {
			e, err := s.ClaimEffect(ctx, scope, c.ID, "turn-1/call-1", baton.EffectHolder{})
			if err != nil {
				t.Error(err)
				return
			}
			states <- e.State
		})
	}
	wg.Wait()
	close(states)
	count := map[baton.EffectState]int{}
	for st := range states {
		count[st]++
	}
	if count[baton.EffectNew] != 1 || count[baton.EffectPending] != claimers-1 {
		t.Fatalf("concurrent claims: %v; want exactly one new and %d pending", count, claimers-1)
	}
	if err := s.RecordEffect(ctx, scope, c.ID, "turn-1/call-1", json.RawMessage(`{"ok":true,"n":"é"}`)); err != nil {
		t.Fatal(err)
	}
	e, err := s.ClaimEffect(ctx, scope, c.ID, "turn-1/call-1", baton.EffectHolder{})
	if err != nil || e.State != baton.EffectDone || string(e.Result) != `{"ok":true,"n":"é"}` {
		t.Fatalf("claim after record = %+v (%s), %v", e, e.Result, err)
	}
	wantCode(t, "record twice", s.RecordEffect(ctx, scope, c.ID, "turn-1/call-1", json.RawMessage(`1`)), baton.ECONFLICT)
	wantCode(t, "record unclaimed", s.RecordEffect(ctx, scope, c.ID, "never", json.RawMessage(`1`)), baton.ENOTFOUND)
	// The same key in another chat is another effect.
	c2 := mustChat(t, s, scope, "hello")
	e, err = s.ClaimEffect(ctx, scope, c2.ID, "turn-1/call-1", baton.EffectHolder{})
	if err != nil || e.State != baton.EffectNew {
		t.Fatalf("same key, other chat = %+v, %v", e, err)
	}
}

// testEffectHolder: a claim records its holder (instance and boot id),
// every later claim returns it; a take-over moves a pending claim to a new
// holder once — a second take-over of the same claim, one of a recorded
// effect, or one naming a stale holder changes nothing — and an unknown
// key or another tenant's chat is not found.
func testEffectHolder(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	a1 := baton.EffectHolder{Instance: "a", Boot: "boot-1 é"}
	a2 := baton.EffectHolder{Instance: "a", Boot: "boot-2"}
	b1 := baton.EffectHolder{Instance: "b", Boot: "boot-3"}
	first, err := s.ClaimEffect(ctx, scope, c.ID, "k", a1)
	if err != nil || first.State != baton.EffectNew || first.Holder != a1 {
		t.Fatalf("first claim = %+v, %v", first, err)
	}
	prev, err := s.ClaimEffect(ctx, scope, c.ID, "k", b1)
	if err != nil || prev.State != baton.EffectPending || prev.Holder != a1 || !prev.ClaimedAt.Equal(first.ClaimedAt) {
		t.Fatalf("claim of a pending key = %+v, %v; want its holder %+v and claim time %v", prev, err, a1, first.ClaimedAt)
	}
	if ok, err := s.TakeOverEffect(ctx, scope, c.ID, prev, a2); !ok || err != nil {
		t.Fatalf("take-over: %v, %v", ok, err)
	}
	now, err := s.ClaimEffect(ctx, scope, c.ID, "k", b1)
	if err != nil || now.State != baton.EffectPending || now.Holder != a2 || now.ClaimedAt.Before(prev.ClaimedAt) {
		t.Fatalf("after the take-over = %+v, %v; want holder %+v", now, err, a2)
	}
	if ok, err := s.TakeOverEffect(ctx, scope, c.ID, prev, b1); ok || err != nil {
		t.Fatalf("take-over of a claim already taken over: %v, %v; want false", ok, err)
	}
	// Concurrent take-overs of one claim: exactly one wins.
	const racers = 10
	wins := make(chan bool, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			ok, err := s.TakeOverEffect(ctx, scope, c.ID, now, baton.EffectHolder{Instance: "r", Boot: strconv.Itoa(i)})
			if err != nil {
				t.Error(err)
			}
			wins <- ok
		})
	}
	wg.Wait()
	close(wins)
	n := 0
	for ok := range wins {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d of %d concurrent take-overs won, want 1", n, racers)
	}
	cur, err := s.ClaimEffect(ctx, scope, c.ID, "k", a1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordEffect(ctx, scope, c.ID, "k", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TakeOverEffect(ctx, scope, c.ID, cur, a1); ok || err != nil {
		t.Fatalf("take-over of a recorded effect: %v, %v; want false", ok, err)
	}
	if e, err := s.ClaimEffect(ctx, scope, c.ID, "k", a1); err != nil || e.State != baton.EffectDone || e.Holder != cur.Holder {
		t.Fatalf("recorded effect = %+v, %v", e, err)
	}
	_, err = s.TakeOverEffect(ctx, scope, c.ID, baton.Effect{Key: "never", State: baton.EffectPending}, a1)
	wantCode(t, "take over an unclaimed key", err, baton.ENOTFOUND)
	_, err = s.TakeOverEffect(ctx, NewScope(), c.ID, cur, a1)
	wantCode(t, "take over in another tenant's chat", err, baton.ENOTFOUND)
	_, err = s.ClaimEffect(ctx, scope, c.ID, "k2", baton.EffectHolder{Instance: "a\x00"})
	wantCode(t, "holder with a NUL", err, baton.EINVALID)
	// A claim without a holder (a caller that names none) keeps it empty.
	if e, err := s.ClaimEffect(ctx, scope, c.ID, "k3", baton.EffectHolder{}); err != nil || e.Holder != (baton.EffectHolder{}) {
		t.Fatalf("claim without a holder = %+v, %v", e, err)
	}
}

func testLargeAndUnicode(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	big := strings.Repeat("é漢🙂\"\\\n\t<>&\u2028x", 1<<20/24)
	payload, _ := json.Marshal(map[string]string{"kind": "text", "content": big})
	if len(payload) < 1<<20 {
		t.Fatalf("payload only %d bytes", len(payload))
	}
	e1 := baton.NewEvent(baton.TypeChatText, baton.Metadata{TriggerAgentName: "Agënt 🤖", App: "äpp", User: "üser", Extra: map[string]json.RawMessage{"ui_hidden": json.RawMessage(`true`)}}, payload)
	uni := json.RawMessage(`{"kind":"text","content":"مرحبا — こんにちは — \u0000 — 𝄞","agent":"Ünï"}`)
	e2 := baton.NewEvent(baton.TypeChatText, baton.Metadata{}, uni)
	e3 := baton.NewEvent(baton.TypeChatRunComplete, baton.Metadata{}, nil)
	ctxPatch := map[string]json.RawMessage{"名前": json.RawMessage(`"値 🙂"`)}
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{e1, e2, e3}, &baton.ChatUpdate{Context: ctxPatch}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs, 3)
	if !bytes.Equal(evs[0].Payload, payload) {
		t.Fatalf("1 MiB payload changed (len %d, want %d)", len(evs[0].Payload), len(payload))
	}
	if md := evs[0].Metadata; md.TriggerAgentName != "Agënt 🤖" || md.App != "äpp" || md.User != "üser" || string(md.Extra["ui_hidden"]) != "true" || len(md.Extra) != 1 {
		t.Fatalf("metadata = %+v", evs[0].Metadata)
	}
	if !bytes.Equal(evs[1].Payload, uni) {
		t.Fatalf("unicode payload = %s, want %s", evs[1].Payload, uni)
	}
	if evs[2].Payload != nil {
		t.Fatalf("null payload = %q", evs[2].Payload)
	}
	got, _ := s.GetChat(ctx, scope, c.ID)
	if contextMap(t, got.Context)["名前"] != "値 🙂" {
		t.Fatalf("unicode context = %s", got.Context)
	}
}

func testUsage(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	rows := []baton.UsageRecord{
		{ChatID: c.ID, Workflow: "hello", Agent: "A", Model: "m", Usage: baton.Usage{PromptTokens: 10, CompletionTokens: 5, CachedTokens: 2}, Cost: 0.5},
		{ChatID: c.ID, Workflow: "hello", Agent: "B", Model: "m", Usage: baton.Usage{PromptTokens: 1, CompletionTokens: 1, ReasoningTokens: 1}, Cost: 0.25},
		{ChatID: c.ID, Workflow: "hello", Agent: "A", Model: "m", Usage: baton.Usage{PromptTokens: 20, CompletionTokens: 7}, Cost: 1},
	}
	for _, r := range rows {
		if err := s.RecordUsage(ctx, scope, r); err != nil {
			t.Fatal(err)
		}
	}
	total, per, err := s.ChatUsage(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if total.Calls != 3 || total.PromptTokens != 31 || total.CompletionTokens != 13 || total.CachedTokens != 2 || total.ReasoningTokens != 1 || total.Cost != 1.75 {
		t.Fatalf("total = %+v", total)
	}
	if len(per) != 2 || per[0].Agent != "A" || per[0].Calls != 2 || per[0].PromptTokens != 30 || per[0].Cost != 1.5 || per[1].Agent != "B" {
		t.Fatalf("per agent = %+v", per)
	}
}

func testTasks(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	task, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "research", Input: json.RawMessage(`{"q":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if task.ID == "" || task.Status != baton.TaskQueued || task.App != scope.App {
		t.Fatalf("created task %+v", task)
	}
	task, err = s.UpdateTask(ctx, scope, task.ID, baton.TaskRunning, nil, "")
	if err != nil || task.Status != baton.TaskRunning || string(task.Input) != `{"q":"x"}` {
		t.Fatalf("UpdateTask(running) = %+v, %v", task, err)
	}
	running, err := s.TasksByStatus(ctx, baton.TaskRunning, 100000)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range running {
		if r.ID == task.ID {
			found = r.App == scope.App && r.User == scope.User && r.ChatID == c.ID
		}
	}
	if !found {
		t.Fatalf("TasksByStatus(running) misses task %s or its scope", task.ID)
	}
	task, err = s.UpdateTask(ctx, scope, task.ID, baton.TaskCompleted, json.RawMessage(`{"answer":42}`), "")
	if err != nil || task.Status != baton.TaskCompleted || string(task.Result) != `{"answer":42}` {
		t.Fatalf("UpdateTask(completed) = %+v, %v", task, err)
	}
	_, err = s.UpdateTask(ctx, scope, task.ID, "bogus", nil, "")
	wantCode(t, "bad task status", err, baton.EINVALID)
	_, err = s.UpdateTask(ctx, scope, task.ID, baton.TaskFailed, nil, "too late")
	wantCode(t, "update of an ended task", err, baton.ECONFLICT)
	if got, _ := s.GetTask(ctx, scope, task.ID); got.Status != baton.TaskCompleted || got.Error != "" {
		t.Fatalf("an ended task changed: %+v", got)
	}
	_, err = s.GetTask(ctx, scope, "no-such-task")
	wantCode(t, "unknown task", err, baton.ENOTFOUND)
	_, err = s.CreateTask(ctx, scope, baton.Task{ChatID: "no-such-chat", Kind: "k"})
	wantCode(t, "task of unknown chat", err, baton.ENOTFOUND)

	// An owned task: its owner renews it; another owner's touch leaves it.
	owner := "inst-" + baton.NewID()
	exp := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	owned, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k", Owner: owner, Expires: exp})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTask(ctx, scope, owned.ID)
	if err != nil || got.Owner != owner || !got.Expires.Equal(exp) {
		t.Fatalf("owned task = %+v, %v; want owner %s expiring %v", got, err, owner, exp)
	}
	if n, err := s.TouchTasks(ctx, "someone-else-"+baton.NewID(), time.Hour); err != nil || n != 0 {
		t.Fatalf("TouchTasks(another owner) = %d, %v; want 0", n, err)
	}
	if n, err := s.TouchTasks(ctx, owner, time.Hour); err != nil || n != 1 {
		t.Fatalf("TouchTasks(owner) = %d, %v; want 1", n, err)
	}
	got, _ = s.GetTask(ctx, scope, owned.ID)
	if !got.Expires.After(exp.Add(30 * time.Minute)) {
		t.Fatalf("TouchTasks did not renew: expires %v", got.Expires)
	}
	if _, err := s.UpdateTask(ctx, scope, owned.ID, baton.TaskFailed, nil, "boom"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TouchTasks(ctx, owner, time.Hour); err != nil || n != 0 {
		t.Fatalf("TouchTasks after the task ended = %d, %v; want 0", n, err)
	}
}

func testLeases(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	if l, err := s.GetLease(ctx, c.ID); err != nil || l.Owner != "" {
		t.Fatalf("GetLease before any = %+v, %v; want no owner", l, err)
	}
	l1, err := s.AcquireLease(ctx, c.ID, "i1", time.Minute)
	if err != nil || l1.Token < 1 || l1.Owner != "i1" {
		t.Fatalf("AcquireLease = %+v, %v", l1, err)
	}
	if l, err := s.GetLease(ctx, c.ID); err != nil || l.Owner != "i1" || l.Token != l1.Token || !l.Expires.After(time.Now()) {
		t.Fatalf("GetLease = %+v, %v; want i1's live lease %d", l, err, l1.Token)
	}
	again, err := s.AcquireLease(ctx, c.ID, "i1", time.Minute)
	if err != nil || again.Token != l1.Token {
		t.Fatalf("re-acquire by owner = %+v, %v; want same token", again, err)
	}
	_, err = s.AcquireLease(ctx, c.ID, "i2", time.Minute)
	wantCode(t, "acquire held lease", err, baton.ECONFLICT)
	if _, err := s.RenewLease(ctx, c.ID, "i1", l1.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The fence admits the owner's token and nothing else.
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "fenced")}, &baton.ChatUpdate{Fence: l1.Token}); err != nil {
		t.Fatalf("append with current fence: %v", err)
	}
	if err := s.ReleaseLease(ctx, c.ID, "i1", l1.Token); err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLease(ctx, c.ID); err != nil || l.Owner != "" {
		t.Fatalf("GetLease after release = %+v, %v; want no owner", l, err)
	}
	l2, err := s.AcquireLease(ctx, c.ID, "i2", time.Minute)
	if err != nil || l2.Token <= l1.Token {
		t.Fatalf("takeover = %+v, %v; want a token above %d", l2, err, l1.Token)
	}
	_, err = s.RenewLease(ctx, c.ID, "i1", l1.Token, time.Minute)
	wantCode(t, "renew after takeover", err, baton.ECONFLICT)
	wantCode(t, "release after takeover", s.ReleaseLease(ctx, c.ID, "i1", l1.Token), baton.ECONFLICT)
	_, err = s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "stale")}, &baton.ChatUpdate{Fence: l1.Token})
	wantCode(t, "append with stale fence", err, baton.ECONFLICT)
	if !errors.Is(err, baton.ErrFenced) {
		t.Fatalf("append with stale fence: %v, want baton.ErrFenced", err)
	}
	// An expired lease is taken over.
	short, err := s.AcquireLease(ctx, c.ID, "i2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, c.ID, "i2", short.Token); err != nil {
		t.Fatal(err)
	}
	exp, err := s.AcquireLease(ctx, c.ID, "i3", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l4, err := s.AcquireLease(ctx, c.ID, "i4", time.Minute)
		if err == nil {
			if l4.Token <= exp.Token {
				t.Fatalf("takeover of expired lease: token %d, want > %d", l4.Token, exp.Token)
			}
			break
		}
		if baton.ErrorCode(err) != baton.ECONFLICT || time.Now().After(deadline) {
			t.Fatalf("expired lease not taken over: %v", err)
		}
	}
}

func testValidation(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	stream := baton.NewEvent(baton.TypeStreamText, baton.Metadata{}, json.RawMessage(`{"delta":"x"}`))
	foreign := TextEvent("A", "x")
	foreign.Metadata.TriggerSessionID = "another-chat"
	bad := TextEvent("A", "x")
	bad.Payload = json.RawMessage(`{"broken"`)
	noID := TextEvent("A", "x")
	noID.ID = ""
	// A scope either store could not keep the same way (invalid UTF-8,
	// NUL, too long) creates no chat in any store.
	for _, bad := range []baton.Scope{{App: "\xff", User: "u"}, {App: "a\x00", User: "u"}, {App: "a", User: ""}, {App: strings.Repeat("a", 129), User: "u"}} {
		_, err := s.CreateChat(ctx, bad, baton.Chat{Workflow: "hello"})
		wantCode(t, fmt.Sprintf("CreateChat in scope %q", bad), err, baton.EINVALID)
	}
	cases := map[string]baton.Event{"stream event": stream, "other chat's event": foreign, "invalid payload": bad, "no id": noID}
	for name, e := range cases {
		_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "ok"), e}, nil)
		wantCode(t, name, err, baton.EINVALID)
	}
	_, err := s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{Status: ptr(baton.ChatStatus("sleeping"))})
	wantCode(t, "bad status", err, baton.EINVALID)
	_, err = s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{Context: map[string]json.RawMessage{"k": json.RawMessage(`{`)}})
	wantCode(t, "bad context value", err, baton.EINVALID)
	_, err = s.CreateChat(ctx, scope, baton.Chat{Workflow: "w", Context: json.RawMessage(`[1]`)})
	wantCode(t, "non-object context", err, baton.EINVALID)
	got, _ := s.GetChat(ctx, scope, c.ID)
	if got.LastSequence != 0 {
		t.Fatalf("invalid appends wrote events: last_sequence %d", got.LastSequence)
	}
	// An append with no events still applies its update.
	if _, err := s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{TurnAgent: ptr("B")}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetChat(ctx, scope, c.ID)
	if got.TurnAgent != "B" || got.LastSequence != 0 {
		t.Fatalf("empty append: %+v", got)
	}
}

// testClosed: every method of a closed store returns an error, never panics.
func testClosed(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	task, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, c.ID, "i", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]func() error{
		"Ping":       func() error { return s.Ping(ctx) },
		"CreateChat": func() error { _, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w"}); return err },
		"GetChat":    func() error { _, err := s.GetChat(ctx, scope, c.ID); return err },
		"ListChats":  func() error { _, err := s.ListChats(ctx, scope, baton.ListOptions{}); return err },
		"UpdateChat": func() error { _, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{}); return err },
		"DeleteChat": func() error { return s.DeleteChat(ctx, scope, c.ID) },
		"Append": func() error {
			_, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "x")}, nil)
			return err
		},
		"Events":      func() error { _, err := s.Events(ctx, scope, c.ID, 0, 0); return err },
		"ClaimEffect": func() error { _, err := s.ClaimEffect(ctx, scope, c.ID, "k", baton.EffectHolder{}); return err },
		"TakeOverEffect": func() error {
			_, err := s.TakeOverEffect(ctx, scope, c.ID, baton.Effect{Key: "k"}, baton.EffectHolder{})
			return err
		},
		"RecordEffect": func() error { return s.RecordEffect(ctx, scope, c.ID, "k", nil) },
		"RecordUsage":  func() error { return s.RecordUsage(ctx, scope, baton.UsageRecord{ChatID: c.ID}) },
		"ChatUsage":    func() error { _, _, err := s.ChatUsage(ctx, scope, c.ID); return err },
		"CreateTask":   func() error { _, err := s.CreateTask(ctx, scope, baton.Task{ChatID: c.ID}); return err },
		"AcquireLease": func() error { _, err := s.AcquireLease(ctx, c.ID, "i", time.Second); return err },
		"GetLease":     func() error { _, err := s.GetLease(ctx, c.ID); return err },
		"TouchTasks":   func() error { _, err := s.TouchTasks(ctx, "i", time.Second); return err },
		"GetTask":      func() error { _, err := s.GetTask(ctx, scope, task.ID); return err },
		"UpdateTask": func() error {
			_, err := s.UpdateTask(ctx, scope, task.ID, baton.TaskRunning, nil, "")
			return err
		},
		"TasksByStatus": func() error { _, err := s.TasksByStatus(ctx, baton.TaskQueued, 10); return err },
		"ChatsByStatus": func() error { _, err := s.ChatsByStatus(ctx, baton.ChatRunning, 10); return err },
		"RenewLease": func() error {
			_, err := s.RenewLease(ctx, c.ID, "i", lease.Token, time.Second)
			return err
		},
		"ReleaseLease": func() error { return s.ReleaseLease(ctx, c.ID, "i", lease.Token) },
		"CreateKey": func() error {
			_, err := s.CreateKey(ctx, baton.APIKey{Hash: strings.Repeat("ab", 32), App: scope.App, User: scope.User})
			return err
		},
		"LookupKey": func() error { _, err := s.LookupKey(ctx, strings.Repeat("ab", 32)); return err },
		"RevokeKey": func() error { return s.RevokeKey(ctx, strings.Repeat("ab", 32)) },
	}
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Errorf("%s on a closed store: no error", name)
		} else if !errors.Is(err, baton.ErrUnavailable) {
			t.Errorf("%s on a closed store: %v (code %q), want unavailable", name, err, baton.ErrorCode(err))
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// RunTwoWriters checks that two stores on one database (two pools, as two
// processes would have) appending to one chat at once leave sequences 1..n
// with no gap and no repeat.
func RunTwoWriters(t *testing.T, a, b baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, a, scope, "hello")
	const perStore, each = 20, 10
	var wg sync.WaitGroup
	for _, s := range []baton.Store{a, b} {
		for range perStore {
			wg.Go(func() {
				for i := range each {
					if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", fmt.Sprint(i)), TextEvent("B", fmt.Sprint(i))}, nil); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for _, s := range []baton.Store{a, b} {
		evs, err := s.Events(ctx, scope, c.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs, 2*perStore*each*2)
	}
}
