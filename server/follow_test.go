package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// followAll follows chat from last until the segment ends, returning the
// recorded envelopes' sequences and types.
func followAll(t *testing.T, e *env, scope baton.Scope, chatID string, last int64, kickAfter int) (seqs []int64, types []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := e.store.GetChat(ctx, scope, chatID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = e.srv.follow(ctx, scope, chat, last, func(f *Followed) error {
		if f.Sequence == 0 {
			return nil // a delta
		}
		seqs = append(seqs, f.Sequence)
		types = append(types, f.Type)
		if n++; n == kickAfter {
			// As if the hub had cut the follower off for being slow: it
			// must subscribe again and replay, with no gap and no duplicate.
			e.srv.hub.kickChat(chatID, kickSlow)
		}
		if f.EndsSegment() {
			return errStopFollow
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	return seqs, types
}

func TestFollow_ReplayThenLiveIsTheHistory(t *testing.T) {
	e := newEnv(t)
	id := e.start(t, "hello", nil)
	seqs, types := followAll(t, e, scopeAda, id, 0, 2)
	if len(types) == 0 || types[len(types)-1] != baton.TypeChatRunComplete {
		t.Fatalf("followed %v: want it to end at %s", types, baton.TypeChatRunComplete)
	}
	e.waitStatus(t, id, baton.ChatCompleted)
	var want []int64
	for _, raw := range e.history(t, id) {
		want = append(want, decodeEnvelope(t, raw).seq())
	}
	if len(seqs) != len(want) {
		t.Fatalf("followed sequences %v, the history endpoint's %v", seqs, want)
	}
	for i := range want {
		if seqs[i] != want[i] {
			t.Fatalf("followed sequences %v, the history endpoint's %v", seqs, want)
		}
	}
	// From the middle: exactly the rest.
	mid := want[len(want)/2]
	rest, _ := followAll(t, e, scopeAda, id, mid, 0)
	if len(rest) == 0 || rest[0] <= mid || len(rest) != len(want)-len(want)/2-1 {
		t.Fatalf("after %d followed %v of %v", mid, rest, want)
	}
}

func TestFollow_DeletedChatIsNotFound(t *testing.T) {
	e := newEnv(t)
	id := e.start(t, "hello", nil)
	e.waitStatus(t, id, baton.ChatCompleted)
	chat, err := e.store.GetChat(context.Background(), scopeAda, id)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "DELETE", "/api/chats/acme/"+id, e.keys[scopeAda], nil); r.status/100 != 2 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	err = e.srv.follow(context.Background(), scopeAda, chat, 0, func(*Followed) error { return nil })
	if baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("follow a deleted chat: %v, want ENOTFOUND", err)
	}
	// Another tenant's chat is not found either, never its events.
	id2 := e.start(t, "hello", nil)
	chat2, _ := e.store.GetChat(context.Background(), scopeAda, id2)
	got := 0
	err = e.srv.follow(context.Background(), scopeMallory, chat2, 0, func(*Followed) error { got++; return nil })
	if baton.ErrorCode(err) != baton.ENOTFOUND || got != 0 {
		t.Fatalf("another tenant follows: %v after %d events, want ENOTFOUND and none", err, got)
	}
}

// TestFollowEnvelopes_TypeIsTheEnvelopes checks what the adapters that skip
// follow's decoding rely on: followEnvelopes hands each envelope with its
// own type and the sequence follow gives it, deltas included.
func TestFollowEnvelopes_TypeIsTheEnvelopes(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chatID := e.start(t, "bench", nil)
	chat, err := e.store.GetChat(ctx, scopeAda, chatID)
	if err != nil {
		t.Fatal(err)
	}
	deltas, recorded := 0, 0
	err = e.srv.followEnvelopes(ctx, scopeAda, chat, 0, func(seq int64, typ string, envelope []byte) error {
		var f Followed
		if err := json.Unmarshal(envelope, &f.Envelope); err != nil {
			t.Fatalf("envelope %s: %v", envelope, err)
		}
		f.Sequence = seq
		if f.Type != typ {
			t.Fatalf("type %q handed with the envelope %s", typ, envelope)
		}
		if (seq == 0) != baton.IsStreamType(typ) {
			t.Fatalf("sequence %d for %s", seq, envelope)
		}
		if seq == 0 {
			deltas++
		} else {
			recorded++
		}
		if f.EndsSegment() {
			return errStopFollow
		}
		return nil
	})
	if err != nil {
		t.Fatalf("followEnvelopes: %v", err)
	}
	if recorded == 0 {
		t.Fatal("no recorded event followed")
	}
	t.Logf("%d recorded events, %d deltas", recorded, deltas)
}
