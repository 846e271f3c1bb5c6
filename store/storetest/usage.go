package storetest

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/batonhq/baton"
)

// testUsageWithAppend checks ChatUpdate.Usage: the rows are written with the
// append (or update) that carries them, in the chat appended to, and not at
// all when the append fails.
func testUsageWithAppend(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	c := mustChat(t, s, scope, "hello")
	other := mustChat(t, s, NewScope(), "hello")
	calls := func(id string, sc baton.Scope) int64 {
		t.Helper()
		total, _, err := s.ChatUsage(ctx, sc, id)
		if err != nil {
			t.Fatal(err)
		}
		return total.Calls
	}
	row := func(agent string, prompt int64) baton.UsageRecord {
		return baton.UsageRecord{Workflow: "hello", Agent: agent, Model: "m", Usage: baton.Usage{PromptTokens: prompt, CompletionTokens: 1}, Cost: 0.5}
	}

	// An append with two rows; one names another chat and app, which the
	// store ignores: a row belongs to the chat it is appended with.
	stray := row("B", 2)
	stray.ChatID, stray.App = other.ID, other.App
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{TextEvent("A", "one")}, &baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 10), stray}}); err != nil {
		t.Fatal(err)
	}
	total, per, err := s.ChatUsage(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if total.Calls != 2 || total.PromptTokens != 12 || total.CompletionTokens != 2 || total.Cost != 1 || len(per) != 2 || per[0].Agent != "A" || per[1].Agent != "B" {
		t.Fatalf("after an append with two rows: total %+v, per agent %+v", total, per)
	}
	if n := calls(other.ID, scopeOf(other)); n != 0 {
		t.Fatalf("a row naming another chat went to it: %d calls", n)
	}

	// Usage alone, without events, and through UpdateChat.
	if _, err := s.Append(ctx, scope, c.ID, nil, &baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 1)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 1)}}); err != nil {
		t.Fatal(err)
	}
	if n := calls(c.ID, scope); n != 4 {
		t.Fatalf("after usage without events: %d calls, want 4", n)
	}

	// A failed append writes none of its rows.
	first, err := s.Events(ctx, scope, c.ID, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	dup := TextEvent("A", "dup")
	dup.ID = first[0].ID
	bad := row("\xff", 1)
	nan := row("A", 1)
	nan.Cost = math.NaN()
	for _, tc := range []struct {
		name   string
		scope  baton.Scope
		events []baton.Event
		u      baton.ChatUpdate
		code   string
	}{
		{"duplicate event id", scope, []baton.Event{TextEvent("A", "two"), dup}, baton.ChatUpdate{}, baton.ECONFLICT},
		{"stale fence", scope, []baton.Event{TextEvent("A", "two")}, baton.ChatUpdate{Fence: 99}, baton.ECONFLICT},
		{"unknown pending", scope, []baton.Event{TextEvent("A", "two")}, baton.ChatUpdate{ResolvePending: []string{"nope"}}, baton.ENOTFOUND},
		{"another scope", NewScope(), []baton.Event{TextEvent("A", "two")}, baton.ChatUpdate{}, baton.ENOTFOUND},
		{"invalid row", scope, []baton.Event{TextEvent("A", "two")}, baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 1), bad}}, baton.EINVALID},
		{"a cost that is not a number", scope, []baton.Event{TextEvent("A", "two")}, baton.ChatUpdate{Usage: []baton.UsageRecord{nan}}, baton.EINVALID},
	} {
		if tc.u.Usage == nil {
			tc.u.Usage = []baton.UsageRecord{row("A", 1)}
		}
		_, err := s.Append(ctx, tc.scope, c.ID, tc.events, &tc.u)
		wantCode(t, tc.name, err, tc.code)
		if n := calls(c.ID, scope); n != 4 {
			t.Fatalf("%s: the failed append wrote usage: %d calls, want 4", tc.name, n)
		}
	}
	nan.ChatID = c.ID
	wantCode(t, "RecordUsage with a cost that is not a number", s.RecordUsage(ctx, scope, nan), baton.EINVALID)
	if n := calls(c.ID, scope); n != 4 {
		t.Fatalf("a refused RecordUsage wrote usage: %d calls, want 4", n)
	}
	if _, err := s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{Fence: 99, Usage: []baton.UsageRecord{row("A", 1)}}); err == nil {
		t.Fatal("UpdateChat with a stale fence succeeded")
	}
	if n := calls(c.ID, scope); n != 4 {
		t.Fatalf("a failed UpdateChat wrote usage: %d calls, want 4", n)
	}

	// Many chats at once, two appenders per chat and refused appends among
	// them (duplicates, and appends under another tenant's scope), so that
	// a store that writes a batch of appends together must attribute each
	// row to its own append, including two appends of one chat in a batch.
	const chats, appenders, appends = 20, 2, 10
	ids := make([]string, chats)
	for i := range ids {
		ids[i] = mustChat(t, s, scope, "hello").ID
	}
	var wg sync.WaitGroup
	errs := make(chan error, chats*(appenders+1))
	for _, id := range ids {
		for range appenders {
			wg.Go(func() {
				for i := range appends {
					u := &baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 1)}}
					got, err := s.Append(ctx, scope, id, []baton.Event{TextEvent("A", fmt.Sprint(i))}, u)
					if err != nil {
						errs <- fmt.Errorf("chat %s, append %d: %w", id, i, err)
						return
					}
					// A duplicate, refused: its row must not be written.
					dup := TextEvent("A", "dup")
					dup.ID = got[0].ID
					if _, err := s.Append(ctx, scope, id, []baton.Event{dup}, &baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 100)}}); baton.ErrorCode(err) != baton.ECONFLICT {
						errs <- fmt.Errorf("chat %s: duplicate append returned %v, want conflict", id, err)
						return
					}
				}
			})
		}
		wg.Go(func() { // another tenant: refused, and writes nothing
			foreign := NewScope()
			for i := range appends {
				u := &baton.ChatUpdate{Usage: []baton.UsageRecord{row("A", 1000)}}
				if _, err := s.Append(ctx, foreign, id, []baton.Event{TextEvent("A", fmt.Sprint("foreign ", i))}, u); baton.ErrorCode(err) != baton.ENOTFOUND {
					errs <- fmt.Errorf("chat %s: append under another scope returned %v, want not found", id, err)
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
	for _, id := range ids {
		total, _, err := s.ChatUsage(ctx, scope, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(appenders * appends); total.Calls != want || total.PromptTokens != want {
			t.Fatalf("chat %s: %d calls, %d prompt tokens; want %d of each", id, total.Calls, total.PromptTokens, want)
		}
		evs, err := s.Events(ctx, scope, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs, appenders*appends)
	}
}

// scopeOf returns the scope chat c belongs to.
func scopeOf(c baton.Chat) baton.Scope { return baton.Scope{App: c.App, User: c.User} }

// testAppUsage checks AppUsage: the sum of a tenant's rows, or of an app's
// over its users' chats, deleted chats included, other tenants' and apps'
// rows not; the zero scope sums every app.
func testAppUsage(t *testing.T, s baton.Store) {
	ctx := ctxT(t)
	scope := NewScope()
	if total, err := s.AppUsage(ctx, baton.Scope{App: scope.App}); err != nil || total.Calls != 0 || total.Cost != 0 {
		t.Fatalf("an app without chats: %+v, %v", total, err)
	}
	other := baton.Scope{App: scope.App, User: NewScope().User} // same app, another user
	a, b := mustChat(t, s, scope, "hello"), mustChat(t, s, other, "hello")
	stranger := NewScope()
	x := mustChat(t, s, stranger, "hello")
	rec := func(c baton.Chat, prompt int64, cost float64) {
		t.Helper()
		r := baton.UsageRecord{ChatID: c.ID, Workflow: "hello", Agent: "A", Model: "m",
			Usage: baton.Usage{PromptTokens: prompt, CompletionTokens: 2, CachedTokens: 1, ReasoningTokens: 1}, Cost: cost}
		if err := s.RecordUsage(ctx, scopeOf(c), r); err != nil {
			t.Fatal(err)
		}
	}
	rec(a, 10, 0.25)
	rec(a, 20, 0.25)
	rec(b, 5, 0.5)
	rec(x, 1000, 9)
	if err := s.DeleteChat(ctx, other, b.ID); err != nil {
		t.Fatal(err)
	}
	total, err := s.AppUsage(ctx, baton.Scope{App: scope.App})
	if err != nil {
		t.Fatal(err)
	}
	want := baton.UsageTotal{Calls: 3, Usage: baton.Usage{PromptTokens: 35, CompletionTokens: 6, CachedTokens: 3, ReasoningTokens: 3}, Cost: 1}
	if total != want {
		t.Fatalf("AppUsage(%s) = %+v, want %+v (a deleted chat's calls count, another app's do not)", scope.App, total, want)
	}
	mine, err := s.AppUsage(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if want := (baton.UsageTotal{Calls: 2, Usage: baton.Usage{PromptTokens: 30, CompletionTokens: 4, CachedTokens: 2, ReasoningTokens: 2}, Cost: 0.5}); mine != want {
		t.Fatalf("AppUsage(%v) = %+v, want %+v (the tenant's own calls only)", scope, mine, want)
	}
	theirs, err := s.AppUsage(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if theirs.Calls != 1 || theirs.Cost != 0.5 {
		t.Fatalf("AppUsage(%v) = %+v, want the deleted chat's one call", other, theirs)
	}
	all, err := s.AppUsage(ctx, baton.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	if all.Calls < 4 || all.PromptTokens < 1035 || all.Cost < 10 {
		t.Fatalf("AppUsage(\"\") = %+v, want at least the 4 rows of this test", all)
	}
}
