package metrics_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/metrics"
)

// workflowStats keeps the rollups' workflows by chat.
type workflowStats struct {
	mu  sync.Mutex
	wfs map[string]string
}

func (s *workflowStats) AddChatStats(_ context.Context, d baton.ChatStats) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wfs[d.ChatID] = d.Workflow
	return nil
}

func (s *workflowStats) WorkflowStats(context.Context, string, string, int) ([]baton.ChatStats, error) {
	return nil, nil
}

func (s *workflowStats) AppStats(context.Context, string) (baton.ChatStats, error) {
	return baton.ChatStats{}, nil
}

// TestCollector_SessionCreatedNamesTheWorkflow: a chat whose session.created
// the collector saw is rolled up under the workflow it names, without
// looking the chat up in the store (a read per new chat); a chat started
// without one is looked up, once, as before.
func TestCollector_SessionCreatedNamesTheWorkflow(t *testing.T) {
	bs := bus.New()
	defer bs.Close(context.Background())
	var lookups atomic.Int64
	lookup := func(_ context.Context, _ baton.Scope, id string) (baton.Chat, error) {
		lookups.Add(1)
		return baton.Chat{ID: id, Workflow: "looked-up"}, nil
	}
	st := &workflowStats{wfs: map[string]string{}}
	c, err := metrics.New(metrics.Options{Bus: bs, Stats: st, Chats: lookup, Queue: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	scope := baton.Scope{App: "acme", User: "ada"}
	created := func(chatID, wf string) baton.Event {
		p, _ := json.Marshal(map[string]any{"chat_id": chatID, "workflow": wf, "status": "running", "sequence": 0})
		ev := baton.NewInput(scope, baton.TypeSessionCreated, chatID, p)
		ev.Metadata.Source = baton.SourceSystem
		return ev
	}
	turn := func(chatID, input string) {
		c.Observe(baton.NewInput(scope, input, chatID, json.RawMessage(`{"message":"hi"}`)))
		for _, ev := range turnEvents(chatID, 0) {
			c.Observe(ev)
		}
	}
	c.Observe(created("new", "announced"))
	turn("new", baton.TypeRunStart)
	if n := lookups.Load(); n != 0 {
		t.Errorf("%d lookups for a chat whose session.created was seen, want 0", n)
	}
	// No session.created: started before the collector, or elsewhere, and
	// resumed here. (A run.start tells nothing: its chat may not exist yet.)
	turn("old", baton.TypeRunResume)
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups after a chat without session.created, want 1", n)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.wfs["new"] != "announced" || st.wfs["old"] != "looked-up" {
		t.Errorf("rollups' workflows %v, want new: announced, old: looked-up", st.wfs)
	}
}
