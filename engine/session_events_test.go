package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/store/sqlite"
)

// capture is a bus rule's handler that keeps the events it receives.
type capture struct {
	mu  sync.Mutex
	evs []baton.Event
}

func (c *capture) handle(_ context.Context, ev baton.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, ev)
	return nil
}

func (c *capture) events() []baton.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]baton.Event(nil), c.evs...)
}

// TestSessionRule_SeesChatStartAndStatusChanges: a rule on session.*
// receives session.created when a chat is started and session.updated for
// every change of its recorded status — paused for the person, resumed by
// the person's message, paused again — with the previous status, each for
// the chat and once.
func TestSessionRule_SeesChatStartAndStatusChanges(t *testing.T) {
	eh := newEnvHarness(t)
	var c capture
	mustRule(t, eh.bus, bus.Rule{Name: "session-watch", Types: []string{"session.*"}, Priority: 60, Handler: c.handle})
	id := eh.pausedChat(t) // start → waiting_input → (hello) running → waiting_input
	eh.settle()
	var got []string
	for _, ev := range c.events() {
		if ev.ChatID() != id {
			t.Fatalf("session event for chat %q, want %q: %s", ev.ChatID(), id, ev.Payload)
		}
		var p struct {
			ChatID   string `json:"chat_id"`
			Workflow string `json:"workflow"`
			Status   string `json:"status"`
			Prev     string `json:"previous_status"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil || p.ChatID != id || p.Workflow != "assistant" {
			t.Fatalf("payload %s: %v", ev.Payload, err)
		}
		got = append(got, ev.Type+" "+p.Prev+">"+p.Status)
	}
	want := []string{
		"session.created >running",
		"session.updated running>waiting_input",
		"session.updated waiting_input>running",
		"session.updated running>waiting_input",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("session events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestToolErrorRule_ReceivesToolError: a tool call that fails goes back to
// the model as today and is also published as tool.error, which a rule
// receives with the chat, agent, tool and error.
func TestToolErrorRule_ReceivesToolError(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), fake(func(req *baton.Request) ([]baton.Delta, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == baton.RoleTool {
			return reply("The lookup failed: " + last.Content), nil
		}
		if last.Role == baton.RoleUser && strings.Contains(last.Content, "look") {
			return callTool("c1", "lookup", `{"word": 5}`), nil // not a string: the tool refuses it
		}
		return reply("ok"), nil
	}))
	var c capture
	mustRule(t, h.bus, bus.Rule{Name: "tool-errors", Types: []string{baton.TypeToolError}, Priority: 60, Handler: c.handle})
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "look up baton", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	h.settle()
	evs := c.events()
	if len(evs) != 1 {
		t.Fatalf("%d tool.error events reached the rule, want 1", len(evs))
	}
	var p struct {
		ChatID   string `json:"chat_id"`
		Agent    string `json:"agent"`
		ToolName string `json:"tool_name"`
		Error    string `json:"error"`
	}
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.ChatID != id || evs[0].ChatID() != id || p.Agent != "Assistant" || p.ToolName != "lookup" || !strings.Contains(p.Error, "word") {
		t.Fatalf("tool.error payload %s (chat %s)", evs[0].Payload, evs[0].ChatID())
	}
	// And the model got the error, as before.
	if text := lastOfType(t, h.events(id), baton.TypeChatText); !strings.Contains(text["content"].(string), "The lookup failed") {
		t.Fatalf("the model did not get the tool's error: %v", text)
	}
}

// TestToolErrorRule_WakesEventAgent: a rule that routes tool.error to the
// event-handler agent (spec §5.3) gets it observed in the chat — the
// event's messages recorded, the agent run on it — not dropped as an event
// of no chat.
func TestToolErrorRule_WakesEventAgent(t *testing.T) {
	var woken sync.Once
	wake := make(chan struct{})
	h := newHarness(t, withWorkflows(loopDir), withTools(lookupTool), fake(func(req *baton.Request) ([]baton.Delta, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == baton.RoleTool && last.Name == "get_event_info":
			woken.Do(func() { close(wake) })
			return reply("A tool failed; I will try another way."), nil
		case last.Role == baton.RoleTool:
			return reply("The lookup failed."), nil
		case last.Role == baton.RoleUser && strings.Contains(last.Content, "look"):
			return callTool("c1", "lookup", `{"word": 5}`), nil
		}
		return reply("ok"), nil
	}))
	mustRule(t, h.bus, h.eng.AgentRule("tool-errors", []string{baton.TypeToolError}, 60, "A tool failed. Recover.", "", 0))
	id := start(t, h, "assistant")
	h.waitStatus(id, baton.ChatWaitingInput)
	if err := h.eng.Submit(context.Background(), testScope, id, "look up baton", "ws"); err != nil {
		t.Fatal(err)
	}
	h.settle()
	select {
	case <-wake:
	default:
		t.Fatalf("the event-handler agent was not run on tool.error; events:\n%s", h.dump(id))
	}
	found := false
	for _, ev := range h.events(id) {
		found = found || (ev.Type == baton.TypeChatText && strings.Contains(string(ev.Payload), "Observed event: tool.error"))
	}
	if !found {
		t.Fatalf("tool.error was not recorded as an observed event:\n%s", h.dump(id))
	}
}

// dump lists a chat's recorded events, one a line, for a failure message.
func (h *harness) dump(chatID string) string {
	var b strings.Builder
	for _, ev := range h.events(chatID) {
		b.WriteString(ev.Type + " " + string(ev.Payload) + "\n")
	}
	return b.String()
}

// TestSessionRule_SeesRetryAfterFailure: a retry of a failed chat turns
// failed into running in an append of no events, at the sequence of the
// failure; its session.updated is still published (its id names the
// change, not only the sequence), so a rule on session.* sees every change.
func TestSessionRule_SeesRetryAfterFailure(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, withWorkflows(loopDir), withTools(bumpTool(new(atomic.Int64))),
		fake(func(req *baton.Request) ([]baton.Delta, error) {
			if calls.Add(1) == 1 {
				return nil, &baton.ProviderError{Kind: baton.ProviderRateLimit, Status: 429, Message: "slow down", Endpoint: "http://fake", Model: "m"}
			}
			return reply("ok"), nil
		}))
	var c capture
	mustRule(t, h.bus, bus.Rule{Name: "session-watch", Types: []string{"session.*"}, Priority: 60, Handler: c.handle})
	id := start(t, h, "loop")
	h.waitStatus(id, baton.ChatFailed)
	h.settle()
	if err := h.eng.Resume(context.Background(), testScope, id); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	h.settle()
	var got []string
	for _, ev := range c.events() {
		var p struct {
			Status string `json:"status"`
			Prev   string `json:"previous_status"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatalf("payload %s: %v", ev.Payload, err)
		}
		got = append(got, ev.Type+" "+p.Prev+">"+p.Status)
	}
	want := []string{
		"session.created >running",
		"session.updated running>failed",
		"session.updated failed>running",
		"session.updated running>completed",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("session events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestStartOnce_PendingClaimOfADeadProcess: a process that died between
// claiming a start's key and recording its request left the claim pending.
// The next retry is taken as the first (its request recorded), and a later
// request with another message is a conflict — not a 200 whose message is
// silently dropped.
func TestStartOnce_PendingClaimOfADeadProcess(t *testing.T) {
	h := newHarness(t, withWorkflows(loopDir))
	ctx := context.Background()
	chat, err := h.eng.Start(ctx, testScope, "assistant", baton.StartOptions{ChatID: "chat-key-1"})
	if err != nil {
		t.Fatal(err)
	}
	// The dead process's claim: another boot of this instance.
	if eff, err := h.store.ClaimEffect(ctx, testScope, chat.ID, "start.idempotency", baton.EffectHolder{Boot: "a-dead-boot"}); err != nil || eff.State != baton.EffectNew {
		t.Fatalf("claim: %v %v", eff.State, err)
	}
	h.waitStatus(chat.ID, baton.ChatWaitingInput)
	got, created, err := h.eng.StartOnce(ctx, testScope, "assistant", "key-1", baton.StartOptions{ChatID: chat.ID})
	if err != nil || created || got.ID != chat.ID {
		t.Fatalf("retry after the crash: %v created=%v chat=%s", err, created, got.ID)
	}
	if _, _, err := h.eng.StartOnce(ctx, testScope, "assistant", "key-1", baton.StartOptions{ChatID: chat.ID}); err != nil {
		t.Fatalf("the same request again: %v", err)
	}
	_, _, err = h.eng.StartOnce(ctx, testScope, "assistant", "key-1", baton.StartOptions{ChatID: chat.ID, Message: "another"})
	if !errors.Is(err, baton.ErrConflict) || !strings.Contains(err.Error(), "key-1") {
		t.Fatalf("another request with the key: %v, want ECONFLICT naming the key", err)
	}
}

// cancelAfterClaim cancels the caller's context once a claim of the start's
// key has been written: the client went away (a killed caller, a closed
// connection) between the claim and the record of its request.
type cancelAfterClaim struct {
	*sqlite.Store
	cancel context.CancelFunc
}

func (s cancelAfterClaim) ClaimEffect(ctx context.Context, scope baton.Scope, chatID, key string, holder baton.EffectHolder) (baton.Effect, error) {
	eff, err := s.Store.ClaimEffect(ctx, scope, chatID, key, holder)
	if key == "start.idempotency" {
		s.cancel()
	}
	return eff, err
}

// TestStartOnce_ClientGoneAfterTheChatIsCreated: a start whose client goes
// away once the chat is created still records the request under its key,
// so that the client's retry gets the chat at once, not "still being
// recorded" until the claim is old (the A2A caller's retry after a crash).
func TestStartOnce_ClientGoneAfterTheChatIsCreated(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHarness(t, withWorkflows(loopDir), withStoreWrap(func(s *sqlite.Store) engine.Store {
		return cancelAfterClaim{Store: s, cancel: cancel}
	}))
	opts := baton.StartOptions{ChatID: "chat-gone-1", Message: "hello"}
	chat, created, err := h.eng.StartOnce(ctx, testScope, "assistant", "key-gone", opts)
	if err != nil || !created {
		t.Fatalf("first start: created=%v err=%v", created, err)
	}
	again, created, err := h.eng.StartOnce(context.Background(), testScope, "assistant", "key-gone", opts)
	if err != nil || created || again.ID != chat.ID {
		t.Fatalf("the client's retry: chat %q created=%v err=%v, want chat %s, not created", again.ID, created, err, chat.ID)
	}
}
