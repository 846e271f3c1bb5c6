package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/store/storetest"
)

func openTemp(t testing.TB, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "baton.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// createChats creates n chats of workflow in scope and returns their ids.
func createChats(t testing.TB, s *sqlite.Store, scope baton.Scope, workflow string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		c, err := s.CreateChat(context.Background(), scope, baton.Chat{Workflow: workflow})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	return ids
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) baton.Store { return openTemp(t) })
}

func TestTwoHandlesOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baton.db")
	var stores []*sqlite.Store
	for range 2 {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	storetest.RunTwoWriters(t, stores[0], stores[1])
}

// GetChat reads the chat and its pending requests in one query, packed
// (texts with spaces and multi-byte characters, a large context), and
// orders the requests itself: by creation time, then by ui_event_id.
func TestGetChatPendingOrder(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	scope := baton.Scope{App: "app 1 ✓", User: "u ü"}
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	big := `{"k":"` + strings.Repeat("é 1 ", 600) + `"}`
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "w 2", TurnAgent: "Agent ✓", Context: json.RawMessage(big), Pending: []baton.PendingRequest{
		{UIEventID: "c", Kind: baton.PendingInput, CreatedAt: t0.Add(time.Second)},
		{UIEventID: "b", Kind: baton.PendingInput, CreatedAt: t0},
		{UIEventID: "a", Kind: baton.PendingUITool, ToolCallID: "call", ToolName: "pick", Agent: "A", CreatedAt: t0},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetChat(ctx, scope, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range got.Pending {
		ids = append(ids, p.UIEventID)
	}
	if fmt.Sprint(ids) != "[a b c]" || got.Pending[0] != c.Pending[2] || got.Pending[2] != c.Pending[0] {
		t.Fatalf("pending = %+v", got.Pending)
	}
	got.Pending, c.Pending = nil, nil
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c) || string(got.Context) != big {
		t.Fatalf("chat = %+v\nwant %+v", got, c)
	}
	if _, err := s.GetChat(ctx, baton.Scope{App: "app", User: "other"}, c.ID); baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("other scope: %v", err)
	}
}
