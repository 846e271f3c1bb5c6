package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
)

// envHarness is a harness on the assistant workflow with the default rules
// of seed 004 §3.3 registered, a provider that records every request, and a
// "report" background task that waits for release.
type envHarness struct {
	*harness
	mu       sync.Mutex
	requests []*baton.Request
	release  chan struct{}
}

func newEnvHarness(t *testing.T, opts ...harnessOption) *envHarness {
	eh := &envHarness{release: make(chan struct{})}
	prov := fake(func(req *baton.Request) ([]baton.Delta, error) {
		eh.mu.Lock()
		eh.requests = append(eh.requests, req)
		eh.mu.Unlock()
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == baton.RoleUser && strings.Contains(last.Content, "report"):
			return callTool("", "start_background_task", `{"task":"report","input":{"weeks":2}}`), nil
		case last.Role == baton.RoleTool && last.Name == "start_background_task":
			return reply("Started your report; I will tell you when it is ready."), nil
		case last.Role == baton.RoleTool && last.Name == "get_event_info":
			return reply("Your report is ready: " + last.Content), nil
		}
		return reply("ok"), nil
	})
	eh.harness = newHarness(t, append([]harnessOption{withWorkflows(loopDir), withTools(lookupTool), prov,
		withTasks(map[string]engine.TaskFunc{"report": func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
			select {
			case <-eh.release:
				return json.RawMessage(`{"pages":12}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})}, opts...)...)
	for _, r := range eh.eng.DefaultRules() {
		mustRule(t, eh.bus, r)
	}
	return eh
}

func mustRule(t *testing.T, b *bus.Bus, r bus.Rule) {
	t.Helper()
	if err := b.RegisterRule(r); err != nil {
		t.Fatal(err)
	}
}

func (eh *envHarness) lastRequest() *baton.Request {
	eh.mu.Lock()
	defer eh.mu.Unlock()
	return eh.requests[len(eh.requests)-1]
}

// pausedChat starts an assistant chat and has one exchange, leaving it
// waiting for the person.
func (eh *envHarness) pausedChat(t *testing.T) string {
	id := start(t, eh.harness, "assistant")
	eh.waitStatus(id, baton.ChatWaitingInput)
	if err := eh.eng.Submit(context.Background(), testScope, id, "hello", "ws"); err != nil {
		t.Fatal(err)
	}
	eh.waitStatus(id, baton.ChatWaitingInput)
	return id
}

func (eh *envHarness) publish(t *testing.T, typ, chatID string, payload string) baton.Event {
	t.Helper()
	ev := baton.NewInput(testScope, typ, chatID, json.RawMessage(payload))
	ev.Metadata.Source = baton.SourceEnv
	if err := eh.bus.Publish(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// ---- §7.2 EventHandlerAgent ------------------------------------------------------------

func TestEventAgent_HandleNoSessionID(t *testing.T) {
	eh := newEnvHarness(t)
	eh.publish(t, "webhook.received", "", `{}`)
	eh.settle()
	if s := eh.bus.Stats(); s.HandlerErrors != 0 || s.Panics != 0 {
		t.Fatalf("stats %+v: a missing trigger_session_id is a warning, not an error", s)
	}
	if !strings.Contains(eh.logs.String(), "no trigger_session_id") {
		t.Fatalf("no warning logged:\n%s", eh.logs)
	}
}

func TestEventAgent_HandleSessionNotFound(t *testing.T) {
	eh := newEnvHarness(t)
	eh.publish(t, "webhook.received", "no-such-chat", `{}`)
	eh.settle()
	if s := eh.bus.Stats(); s.HandlerErrors != 0 {
		t.Fatalf("stats %+v: an unknown chat is a warning, not an error", s)
	}
	if !strings.Contains(eh.logs.String(), "chat not found") {
		t.Fatalf("no warning logged:\n%s", eh.logs)
	}
}

func TestEventAgent_HandleConstructsMessages(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	before := len(eh.events(id))
	ev := eh.publish(t, "webhook.received", id, `{"repo":"baton","action":"push"}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	evs := eh.events(id)[before:]
	var got []string
	for _, e := range evs[:4] {
		got = append(got, e.Type)
	}
	want := "chat.select_speaker,chat.text,chat.tool_call,chat.tool_response"
	if strings.Join(got, ",") != want {
		t.Fatalf("injected %v, want %s", got, want)
	}
	call, resp := payloadOf(t, evs[2]), payloadOf(t, evs[3])
	if call["tool_name"] != "get_event_info" || call["tool_call_id"] != "call_"+ev.ID || call["ui_hidden"] != true {
		t.Fatalf("assistant message: %v", call)
	}
	args := call["arguments"].(map[string]any)["event_ids"].([]any)
	if len(args) != 1 || args[0] != ev.ID {
		t.Fatalf("get_event_info arguments: %v", call["arguments"])
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(resp["content"].(string)), &info); err != nil {
		t.Fatal(err)
	}
	if info["event_id"] != ev.ID || info["event_type"] != "webhook.received" || info["payload"].(map[string]any)["repo"] != "baton" {
		t.Fatalf("tool result: %v", info)
	}
	if md := info["metadata"].(map[string]any); md["app"] != nil || md["source"] != "env" {
		t.Fatalf("the model must see the event's metadata without the engine's scope keys: %v", md)
	}
}

func TestEventAgent_HandleMessageContent(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	ev := eh.publish(t, "file.changed", id, `{"path":"a.txt"}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	for _, e := range eh.events(id) {
		if p := payloadOf(t, e); e.Type == baton.TypeChatText && strings.HasPrefix(fmt.Sprint(p["content"]), "Observed event:") {
			c := p["content"].(string)
			iso := time.UnixMilli(ev.Timestamp).UTC().Format(time.RFC3339Nano)
			if !strings.Contains(c, "Observed event: file.changed") || !strings.Contains(c, "Event ID: "+ev.ID) || !strings.Contains(c, "Time: "+iso) {
				t.Fatalf("message content %q", c)
			}
			if p["agent"] != "system" || p["ui_hidden"] != true {
				t.Fatalf("the observed-event message is the runtime's and hidden from people: %v", p)
			}
			return
		}
	}
	t.Fatal("no Observed event message")
}

func TestEventAgent_HandleInsertsToSession(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	before, err := eh.eng.Inspect(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	eh.publish(t, "file.changed", id, `{}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	after, err := eh.eng.Inspect(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	// The three injected messages, then the agent's answer.
	added := after.Messages[len(before.Messages):]
	if len(added) != 4 || added[0].Role != baton.RoleUser || added[1].Role != baton.RoleAssistant || len(added[1].ToolCalls) != 1 ||
		added[2].Role != baton.RoleTool || added[3].Role != baton.RoleAssistant {
		t.Fatalf("messages added: %+v", added)
	}
}

// TestEventAgent_DeliveredAgainObservedOnce: an environment event delivered
// again past the bus's idempotency window — as JetStream redelivers an
// input whose handling failed after it was recorded, or whose instance
// died — is observed once, and its agent does not run a second time.
func TestEventAgent_DeliveredAgainObservedOnce(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	ev := eh.publish(t, "file.changed", id, `{}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	eh.settle()
	before, err := eh.eng.Inspect(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	eh.mu.Lock()
	calls := len(eh.requests)
	eh.mu.Unlock()
	if err := eh.bus.PublishAgain(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	eh.settle()
	after, err := eh.eng.Inspect(context.Background(), testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	eh.mu.Lock()
	defer eh.mu.Unlock()
	if after.Chat.LastSequence != before.Chat.LastSequence || len(eh.requests) != calls {
		t.Fatalf("the event delivered again was recorded again (sequence %d → %d) or woke the agent again (%d → %d model calls)",
			before.Chat.LastSequence, after.Chat.LastSequence, calls, len(eh.requests))
	}
}

func TestEventAgent_HandleCallsHandleQuery(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	eh.publish(t, "file.changed", id, `{}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	req := eh.lastRequest()
	if req.ChatID != id || !strings.Contains(req.Messages[0].Content, engine.FallbackEventPrompt) {
		t.Fatalf("the agent's turn must carry the rule's prompt in its system message: %q", req.Messages[0].Content)
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != baton.RoleTool || last.Name != "get_event_info" {
		t.Fatalf("the agent must see the injected messages; last is %+v", last)
	}
}

// ---- §7.3 ServerEnvironment integration ---------------------------------------------------

func TestPublishEvent_Basic(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	before := eh.bus.Stats().Published
	eh.publish(t, "file.changed", id, `{}`)
	if eh.bus.Stats().Published != before+1 {
		t.Fatal("the event was not published")
	}
}

func TestInitEventRules_Registers(t *testing.T) {
	eh := newEnvHarness(t)
	want := map[string]int{"engine": 100, "background-tasks": 80, "sessions": 50, "fallback": 10}
	for _, r := range eh.bus.Rules() {
		if p, ok := want[r.Name]; ok {
			if r.Priority != p {
				t.Fatalf("rule %s has priority %d, want %d", r.Name, r.Priority, p)
			}
			delete(want, r.Name)
		}
	}
	if len(want) != 0 {
		t.Fatalf("rules missing: %v", want)
	}
	for typ, name := range map[string]string{baton.TypeUserQuery: "engine", baton.TypeSessionCreated: "sessions",
		baton.TypeBackgroundTaskCompleted: "background-tasks", baton.TypeBackgroundTaskFailed: "background-tasks", "anything.else": "fallback"} {
		if r, _ := eh.bus.Match(typ); r.Name != name {
			t.Fatalf("%s is handled by %q, want %q", typ, r.Name, name)
		}
	}
}

func TestUserQueryRule_Handles(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	evs := eh.events(id)
	if p := lastOfType(t, evs, baton.TypeChatText); p["content"] != "ok" {
		t.Fatalf("user_query did not run the agent: %v", p)
	}
}

func TestSessionRule_Logs(t *testing.T) {
	eh := newEnvHarness(t)
	ev := eh.publish(t, baton.TypeSessionCreated, "", `{}`)
	eh.settle()
	if !strings.Contains(eh.logs.String(), "event_type=session.created") || !strings.Contains(eh.logs.String(), ev.ID) {
		t.Fatalf("session event not logged:\n%s", eh.logs)
	}
}

func TestBackgroundTaskRule_CreatesAgent(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	eh.publish(t, baton.TypeBackgroundTaskCompleted, id, `{"taskId":"t-1","result":{"ok":true}}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	if req := eh.lastRequest(); !strings.Contains(req.Messages[0].Content, engine.BackgroundTaskPrompt) {
		t.Fatalf("background_task.completed was not handled by the background-task agent: %q", req.Messages[0].Content)
	}
}

func TestFallbackRule_Matches(t *testing.T) {
	eh := newEnvHarness(t)
	id := eh.pausedChat(t)
	eh.publish(t, "calendar.reminder", id, `{}`)
	eh.waitStatus(id, baton.ChatWaitingInput)
	if req := eh.lastRequest(); !strings.Contains(req.Messages[0].Content, engine.FallbackEventPrompt) {
		t.Fatalf("an unknown type was not handled by the fallback agent")
	}
}

// ---- §7.5 StreamEvent integration -----------------------------------------------------------

func TestStreamEvent_PublishedWithMetadata(t *testing.T) {
	eh := newEnvHarness(t)
	id := start(t, eh.harness, "assistant")
	eh.waitStatus(id, baton.ChatWaitingInput)
	a, _ := eh.bus.Subscribe([]string{"stream.*"}, bus.ForChat(id), bus.Buffer(1000))
	b, _ := eh.bus.Subscribe([]string{"stream.*"}, bus.ForChat(id), bus.Buffer(1000)) // an existing SSE/WS hub, say
	if err := eh.eng.Submit(context.Background(), testScope, id, "hello there", "ws"); err != nil {
		t.Fatal(err)
	}
	eh.waitStatus(id, baton.ChatWaitingInput)
	a.Close()
	b.Close()
	var text strings.Builder
	n := 0
	for ev := range a.C() {
		n++
		if ev.Metadata.TriggerSessionID != id || ev.Metadata.Source != baton.SourceLLM || ev.Metadata.TriggerAgentName != "Assistant" {
			t.Fatalf("stream event metadata: %+v", ev.Metadata)
		}
		if ev.Type == baton.TypeStreamText {
			var p struct{ Delta string }
			_ = json.Unmarshal(ev.Payload, &p)
			text.WriteString(p.Delta)
		}
	}
	if n == 0 || text.String() != "ok" {
		t.Fatalf("stream events: %d, text %q", n, text.String())
	}
	if m := len(b.C()); m != n {
		t.Fatalf("the second subscriber got %d stream events, the first %d", m, n)
	}
}

// ---- §8.5 background task end to end, and a restart while a task runs ------------------------

func TestBackgroundTask_WakesPausedChat(t *testing.T) {
	eh := newEnvHarness(t)
	id := start(t, eh.harness, "assistant")
	eh.waitStatus(id, baton.ChatWaitingInput)
	watch, _ := eh.bus.Subscribe([]string{baton.TypeChatText}, bus.ForChat(id), bus.Buffer(100))
	if err := eh.eng.Submit(context.Background(), testScope, id, "make me a report", "ws"); err != nil {
		t.Fatal(err)
	}
	eh.waitStatus(id, baton.ChatWaitingInput) // paused: the agent said it started the report
	if eh.eng.Active() != 0 {
		t.Fatal("a paused chat must hold no run")
	}
	close(eh.release) // the task completes
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := watch.Wait(ctx, func(ev baton.Event) bool { return strings.Contains(string(ev.Payload), "Your report is ready") })
	if err != nil {
		t.Fatalf("the woken agent's answer never reached a subscriber: %v", err)
	}
	if !strings.Contains(string(ev.Payload), `\"pages\":12`) {
		t.Fatalf("answer without the task's result: %s", ev.Payload)
	}
	eh.waitStatus(id, baton.ChatWaitingInput)
	tasks, _ := eh.store.TasksByStatus(context.Background(), baton.TaskCompleted, 10)
	if len(tasks) != 1 || string(tasks[0].Result) != `{"pages":12}` {
		t.Fatalf("completed tasks: %+v", tasks)
	}
}

func TestBackgroundTask_RestartReportsFailure(t *testing.T) {
	eh := newEnvHarness(t)
	id := start(t, eh.harness, "assistant")
	eh.waitStatus(id, baton.ChatWaitingInput)
	if err := eh.eng.Submit(context.Background(), testScope, id, "make me a report", "ws"); err != nil {
		t.Fatal(err)
	}
	eh.waitStatus(id, baton.ChatWaitingInput)
	running, _ := eh.store.TasksByStatus(context.Background(), baton.TaskRunning, 10)
	if len(running) != 1 {
		t.Fatalf("running tasks: %+v", running)
	}
	// The process stops while the task runs; a new one starts on the store.
	eh.close()
	eh2 := newEnvHarness(t, withDB(eh.dbPath))
	n, err := eh2.eng.RecoverTasks(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("RecoverTasks = %d, %v", n, err)
	}
	eh2.waitStatus(id, baton.ChatWaitingInput)
	failed, _ := eh2.store.TasksByStatus(context.Background(), baton.TaskFailed, 10)
	if len(failed) != 1 || !strings.Contains(failed[0].Error, "interrupted") {
		t.Fatalf("failed tasks: %+v", failed)
	}
	found := false
	for _, ev := range eh2.events(id) {
		if p := payloadOf(t, ev); ev.Type == baton.TypeChatText && strings.Contains(fmt.Sprint(p["content"]), "Observed event: background_task.failed") {
			found = true
		}
	}
	if !found || !strings.Contains(eh2.lastRequest().Messages[0].Content, engine.BackgroundTaskPrompt) {
		t.Fatal("the chat was not told the task failed")
	}
}

// ---- coalescing, rules file --------------------------------------------------------------------

func TestCoalescing_BurstWakesTheAgentOnce(t *testing.T) {
	eh := newEnvHarness(t)
	// The window comfortably exceeds the five publishes below, even on a loaded machine.
	mustRule(t, eh.bus, eh.eng.AgentRule("burst", []string{"sensor.*"}, 90, "Summarise the readings.", "", time.Second))
	id := eh.pausedChat(t)
	eh.mu.Lock()
	calls := len(eh.requests)
	eh.mu.Unlock()
	for i := 0; i < 5; i++ {
		eh.publish(t, "sensor.reading", id, fmt.Sprintf(`{"n":%d}`, i))
	}
	testenv.Eventually(t, 10*time.Second, "the burst to wake the agent (a model call)", func() error {
		eh.mu.Lock()
		defer eh.mu.Unlock()
		if len(eh.requests) == calls {
			return errors.New("no model call since the burst")
		}
		return nil
	})
	eh.waitStatus(id, baton.ChatWaitingInput)
	eh.mu.Lock()
	defer eh.mu.Unlock()
	if n := len(eh.requests) - calls; n != 1 {
		t.Fatalf("the agent was woken %d times for one burst", n)
	}
	seen := 0
	for _, m := range eh.requests[len(eh.requests)-1].Messages {
		if m.Role == baton.RoleTool && m.Name == "get_event_info" {
			seen++
		}
	}
	if seen != 5 {
		t.Fatalf("the woken agent saw %d of the 5 events", seen)
	}
}

func TestLoadRules(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, fmt.Sprintf("rules%d.json", time.Now().UnixNano()))
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(`{"rules": [
  {"name": "hooks", "types": ["webhook.*"], "priority": 60, "handler": {"agent": {"prompt": "Tell the person."}}, "coalesce_ms": 500},
  {"name": "quiet", "types": ["metrics.tick"], "priority": 60, "enabled": false, "handler": {"builtin": "ignore"}}
]}`)
	specs, err := engine.LoadRules(good)
	if err != nil || len(specs) != 2 {
		t.Fatalf("LoadRules = %v, %v", specs, err)
	}
	eh := newEnvHarness(t)
	rules := eh.eng.Rules(specs)
	if rules[1].Disabled != true || rules[0].Name != "hooks" {
		t.Fatalf("rules %+v", rules)
	}
	for _, tc := range []struct{ file, want string }{
		{`{"rules": [{"name": "a", "types": ["x"], "handler": {}}]}`, "rules[0].handler: give agent {prompt} or builtin"},
		{`{"rules": [{"name": "a", "types": ["[bad"], "handler": {"builtin": "log"}}]}`, "rules[0].types[0]: bad pattern"},
		{`{"rules": [{"name": "a", "types": [], "handler": {"builtin": "shout"}}]}`, `rules[0].handler.builtin: "shout" is not log or ignore`},
		{`{"rules": [{"name": "a", "typo": 1}]}`, `unknown field "typo"`},
		{"{\n  \"rules\": [\n    {\"name\": }\n  ]\n}", ":3:14: malformed JSON"},
		{`{"rules": [{"name": "a", "types": ["x"], "handler": {"builtin": "log"}}, {"name": "a", "types": ["y"], "handler": {"builtin": "log"}}]}`, `rules[1].name: "a" is used twice`},
	} {
		p := write(tc.file)
		_, err := engine.LoadRules(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) || !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("LoadRules(%s) = %v, want an invalid error naming the file and %q", tc.file, err, tc.want)
		}
	}
}

// ---- §8.6: 10,000 events across 100 chats ----------------------------------------------------------

// TestTenThousandEventsAcrossHundredChats publishes 10,000 events (with
// duplicates, failing and panicking handlers) across 100 chats from many
// goroutines through the default rule set: none lost, per-chat order kept,
// duplicates dropped, handler errors contained.
func TestTenThousandEventsAcrossHundredChats(t *testing.T) {
	b := bus.New(bus.WithLogger(discardLogger()))
	var mu sync.Mutex
	last := map[string]int{}
	var handled, broken atomic.Int64
	handler := func(_ context.Context, ev baton.Event) error {
		var p struct{ N int }
		_ = json.Unmarshal(ev.Payload, &p)
		mu.Lock()
		prev, seen := last[ev.ChatID()]
		if seen && p.N <= prev {
			broken.Add(1)
		}
		last[ev.ChatID()] = p.N
		mu.Unlock()
		handled.Add(1)
		switch p.N % 97 {
		case 13:
			return errors.New("handler error, contained")
		case 31:
			panic("handler panic, contained")
		}
		return nil
	}
	for _, r := range []bus.Rule{
		{Name: "engine", Types: []string{baton.TypeUserQuery}, Priority: 100, Handler: handler},
		{Name: "background-tasks", Types: []string{"background_task.*"}, Priority: 80, Handler: handler},
		{Name: "sessions", Types: []string{"session.*"}, Priority: 50, Handler: handler},
		{Name: "fallback", Types: []string{"*"}, Priority: 10, Handler: handler},
	} {
		mustRule(t, b, r)
	}
	types := []string{baton.TypeUserQuery, baton.TypeBackgroundTaskCompleted, "webhook.received", baton.TypeSessionUpdated}
	const chats, perChat = 100, 100
	var wg sync.WaitGroup
	for c := 0; c < chats; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chat := fmt.Sprint("chat-", c)
			for n := 0; n < perChat; n++ {
				ev := baton.NewEvent(types[n%len(types)], baton.Metadata{TriggerSessionID: chat, Source: baton.SourceEnv}, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)))
				if err := b.Publish(context.Background(), ev); err != nil {
					t.Error(err)
					return
				}
				if n%10 == 0 {
					_ = b.Publish(context.Background(), ev) // a retried publish: dropped
				}
			}
		}()
	}
	wg.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	if handled.Load() != chats*perChat || s.Duplicates != chats*perChat/10 || broken.Load() != 0 {
		t.Fatalf("handled %d (want %d), duplicates %d (want %d), out of order %d; stats %+v",
			handled.Load(), chats*perChat, s.Duplicates, chats*perChat/10, broken.Load(), s)
	}
	if s.HandlerErrors == 0 || s.Panics == 0 {
		t.Fatalf("errors and panics were not exercised: %+v", s)
	}
}

// TestBackgroundTask_CallRunAgainStartsOneTask: a start_background_task call
// run again after its run died between creating the task and recording
// the call's result (a lost lease, a crash) finds its task: one task runs,
// and one completion is reported.
func TestBackgroundTask_CallRunAgainStartsOneTask(t *testing.T) {
	// The append that records the call's result fails, once: the run dies
	// after the task was created and before its result was recorded.
	var lost atomic.Bool
	eh := newEnvHarness(t, withFaults(func(events []baton.Event) error {
		for _, ev := range events {
			if ev.Type == baton.TypeChatToolResponse && strings.Contains(string(ev.Payload), `"tool_name":"start_background_task"`) && lost.CompareAndSwap(false, true) {
				return errors.New("injected: the run died here")
			}
		}
		return nil
	}))
	id := start(t, eh.harness, "assistant")
	eh.waitStatus(id, baton.ChatWaitingInput)
	if err := eh.eng.Submit(context.Background(), testScope, id, "make me a report", "ws"); err != nil {
		t.Fatal(err)
	}
	eh.settle()
	if !lost.Load() {
		t.Fatal("the failure was not injected")
	}
	if err := eh.eng.Resume(context.Background(), testScope, id); err != nil { // the run is resumed, as after a takeover
		t.Fatal(err)
	}
	eh.waitStatus(id, baton.ChatWaitingInput)
	ctx := context.Background()
	var all []baton.Task
	for _, s := range []baton.TaskStatus{baton.TaskQueued, baton.TaskRunning, baton.TaskCompleted, baton.TaskFailed} {
		ts, err := eh.store.TasksByStatus(ctx, s, 100)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ts...)
	}
	if len(all) != 1 {
		t.Fatalf("the call run twice started %d tasks, want 1: %+v", len(all), all)
	}
	close(eh.release)
}
