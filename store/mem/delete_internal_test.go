package mem

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/batonhq/baton"
)

// TestDeleteFrees: a deleted chat keeps no events, inbox, requests or
// effects (nothing reads them again), and keeps its usage, which AppUsage
// still counts.
func TestDeleteFrees(t *testing.T) {
	ctx := context.Background()
	s := New()
	defer s.Close()
	scope := baton.Scope{App: "a", User: "u"}
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w",
		Pending: []baton.PendingRequest{{UIEventID: "p", Kind: baton.PendingInput}}})
	if err != nil {
		t.Fatal(err)
	}
	ev := baton.NewEvent(baton.TypeChatText, baton.Metadata{}, json.RawMessage(`{"content":"x"}`))
	if _, err := s.Append(ctx, scope, c.ID, []baton.Event{ev}, &baton.ChatUpdate{Usage: []baton.UsageRecord{{Agent: "A", Usage: baton.Usage{PromptTokens: 3}}}}); err != nil {
		t.Fatal(err)
	}
	in := baton.NewEvent(baton.TypeUserQuery, baton.Metadata{TriggerSessionID: c.ID}, json.RawMessage(`{"content":"q"}`))
	if _, _, err := s.AddInput(ctx, scope, in); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimEffect(ctx, scope, c.ID, "k", baton.EffectHolder{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChat(ctx, scope, c.ID); err != nil {
		t.Fatal(err)
	}
	ch := s.lookup(c.ID)
	if ch.events != nil || ch.ids != nil || ch.pending != nil || ch.used != nil || ch.inputs != nil || ch.inputID != nil || ch.effects != nil {
		t.Fatalf("a deleted chat still holds its data: %d events, %d inputs, %d effects, %d pending", len(ch.events), len(ch.inputs), len(ch.effects), len(ch.pending))
	}
	if u, err := s.AppUsage(ctx, scope); err != nil || u.Calls != 1 || u.PromptTokens != 3 {
		t.Fatalf("AppUsage after the delete = %+v, %v; want the deleted chat's call", u, err)
	}
	if _, err := s.CreateChat(ctx, scope, baton.Chat{ID: c.ID, Workflow: "w"}); baton.ErrorCode(err) != baton.ECONFLICT {
		t.Fatalf("a deleted chat's id reused: %v", err)
	}
}
