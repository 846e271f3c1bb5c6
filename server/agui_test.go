package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/workflow"
)

// aguiEvent is a received AG-UI event, decoded.
type aguiEv map[string]any

func (v aguiEv) typ() string         { s, _ := v["type"].(string); return s }
func (v aguiEv) str(k string) string { s, _ := v[k].(string); return s }

// aguiResult is an AG-UI run's answer: its status and, for a stream, its
// events and their raw data lines.
type aguiResult struct {
	status int
	body   []byte // an error's body
	events []aguiEv
	raw    [][]byte
}

func (r aguiResult) types() []string {
	var out []string
	for _, ev := range r.events {
		out = append(out, ev.typ())
	}
	return out
}

// aguiInputOf builds a RunAgentInput.
func aguiInputOf(thread, run string, msgs ...map[string]any) map[string]any {
	if msgs == nil {
		msgs = []map[string]any{}
	}
	return map[string]any{"threadId": thread, "runId": run, "messages": msgs, "tools": []any{}, "context": []any{}, "state": map[string]any{}, "forwardedProps": map[string]any{}}
}

func userMsg(id, content string) map[string]any {
	return map[string]any{"id": id, "role": "user", "content": content}
}

// agui posts input to /agui/acme/{wf} with key and reads the whole answer.
func (e *env) agui(t testing.TB, wf, key string, input any) aguiResult {
	t.Helper()
	return e.aguiPath(t, "/agui/acme/"+wf, key, input)
}

func (e *env) aguiPath(t testing.TB, path, key string, input any) aguiResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body []byte
	switch b := input.(type) {
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, "POST", e.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	res := aguiResult{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		res.body, _ = io.ReadAll(resp.Body)
		return res
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("POST %s: Content-Type %q", path, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var ev aguiEv
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("event is not JSON: %v: %s", err, data)
		}
		res.events = append(res.events, ev)
		res.raw = append(res.raw, append([]byte(nil), data...))
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	return res
}

// verifyAGUI checks the rules of an AG-UI run that @ag-ui/client's
// verifier enforces (so that they are checked where node is missing too):
// RUN_STARTED first, RUN_FINISHED or RUN_ERROR last and nothing after it,
// text messages and tool calls opened once, continued and closed in order,
// no step, message or call open at the end; a step closed by name.
func verifyAGUI(t testing.TB, r aguiResult) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("AG-UI run: %d %s", r.status, r.body)
	}
	evs := r.events
	if len(evs) < 2 || evs[0].typ() != "RUN_STARTED" {
		t.Fatalf("AG-UI run: want RUN_STARTED first, got %v", r.types())
	}
	if last := evs[len(evs)-1].typ(); last != "RUN_FINISHED" && last != "RUN_ERROR" {
		t.Fatalf("AG-UI run: want RUN_FINISHED or RUN_ERROR last, got %v", r.types())
	}
	texts, calls, steps := map[string]bool{}, map[string]bool{}, map[string]bool{}
	seenText, seenCall := map[string]bool{}, map[string]bool{}
	for i, ev := range evs {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("AG-UI event %d %s: %s\nall: %v", i, ev.typ(), fmt.Sprintf(format, args...), r.types())
		}
		if i > 0 && (ev.typ() == "RUN_STARTED") {
			fail("a second RUN_STARTED")
		}
		if i < len(evs)-1 && (ev.typ() == "RUN_FINISHED" || ev.typ() == "RUN_ERROR") {
			fail("events after the run ended")
		}
		switch ev.typ() {
		case "TEXT_MESSAGE_START":
			id := ev.str("messageId")
			if texts[id] || seenText[id] || id == "" {
				fail("message %q started twice (or no id)", id)
			}
			texts[id], seenText[id] = true, true
		case "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END":
			id := ev.str("messageId")
			if !texts[id] {
				fail("message %q is not open", id)
			}
			if ev.typ() == "TEXT_MESSAGE_END" {
				delete(texts, id)
			} else if ev.str("delta") == "" {
				fail("empty delta")
			}
		case "TOOL_CALL_START":
			id := ev.str("toolCallId")
			if calls[id] || seenCall[id] || id == "" || ev.str("toolCallName") == "" {
				fail("tool call %q started twice (or no id or name)", id)
			}
			calls[id], seenCall[id] = true, true
		case "TOOL_CALL_ARGS", "TOOL_CALL_END":
			id := ev.str("toolCallId")
			if !calls[id] {
				fail("tool call %q is not open", id)
			}
			if ev.typ() == "TOOL_CALL_END" {
				delete(calls, id)
			}
		case "TOOL_CALL_RESULT":
			if !seenCall[ev.str("toolCallId")] {
				fail("a result of tool call %q, never started", ev.str("toolCallId"))
			}
		case "STEP_STARTED":
			if steps[ev.str("stepName")] {
				fail("step %q started twice", ev.str("stepName"))
			}
			steps[ev.str("stepName")] = true
		case "STEP_FINISHED":
			if !steps[ev.str("stepName")] {
				fail("step %q is not open", ev.str("stepName"))
			}
			delete(steps, ev.str("stepName"))
		case "RUN_FINISHED", "RUN_ERROR":
			if len(texts)+len(calls)+len(steps) > 0 {
				fail("still open: messages %v, calls %v, steps %v", texts, calls, steps)
			}
		}
	}
}

// find returns the events of type typ.
func (r aguiResult) find(typ string) []aguiEv {
	var out []aguiEv
	for _, ev := range r.events {
		if ev.typ() == typ {
			out = append(out, ev)
		}
	}
	return out
}

// texts returns the text of each message of the run, by id, in order.
func (r aguiResult) texts() (ids []string, text map[string]string) {
	text = map[string]string{}
	for _, ev := range r.events {
		switch ev.typ() {
		case "TEXT_MESSAGE_START":
			ids = append(ids, ev.str("messageId"))
		case "TEXT_MESSAGE_CONTENT":
			text[ev.str("messageId")] += ev.str("delta")
		}
	}
	return ids, text
}

func (r aguiResult) last() aguiEv { return r.events[len(r.events)-1] }

// outcome returns RUN_FINISHED's outcome and result.
func (r aguiResult) outcome(t testing.TB) (outcome, result map[string]any) {
	t.Helper()
	last := r.last()
	if last.typ() != "RUN_FINISHED" {
		t.Fatalf("run ended with %v, want RUN_FINISHED", last)
	}
	outcome, _ = last["outcome"].(map[string]any)
	result, _ = last["result"].(map[string]any)
	return outcome, result
}

func pendingCalls(outcome map[string]any) []string {
	var ids []string
	for _, v := range outcome["pendingToolCallIds"].([]any) {
		ids = append(ids, v.(string))
	}
	return ids
}

// chatTexts returns the person's and the agents' recorded texts of a chat.
func (e *env) chatTexts(t testing.TB, scope baton.Scope, chatID string) []baton.TextPayload {
	t.Helper()
	evs, err := e.store.Events(context.Background(), scope, chatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []baton.TextPayload
	for _, ev := range evs {
		if ev.Type == baton.TypeChatText {
			p, err := baton.DecodePayload[baton.TextPayload](&ev)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

func TestAGUI_HelloRun(t *testing.T) {
	e := newEnv(t)
	r := e.agui(t, "hello", e.keys[scopeAda], aguiInputOf("hello-1", "run-1"))
	verifyAGUI(t, r)
	types := r.types()
	for _, want := range []string{"STATE_SNAPSHOT", "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "STATE_DELTA", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED"} {
		if !slices.Contains(types, want) {
			t.Errorf("no %s in %v", want, types)
		}
	}
	if slices.Contains(types, "MESSAGES_SNAPSHOT") {
		t.Errorf("a first run sent MESSAGES_SNAPSHOT: %v", types)
	}
	start := r.events[0]
	if start.str("threadId") != "hello-1" || start.str("runId") != "run-1" {
		t.Errorf("RUN_STARTED %v: want the input's threadId and runId", start)
	}
	outcome, result := r.outcome(t)
	if outcome["type"] != "success" || result["status"] != "success" {
		t.Errorf("RUN_FINISHED outcome %v result %v", outcome, result)
	}
	chatID, _ := result["chat_id"].(string)
	if chatID != aguiChatID(scopeAda, "hello", "hello-1") {
		t.Fatalf("result.chat_id %q", chatID)
	}
	// The text is the agent's, under its model call's id from start to end.
	ids, text := r.texts()
	var agentMsg baton.TextPayload
	for _, p := range e.chatTexts(t, scopeAda, chatID) {
		if p.Agent == "Greeter" && !p.ToolOnly {
			agentMsg = p
		}
	}
	if len(ids) != 1 || ids[0] != agentMsg.AgentMessageID || text[ids[0]] != agentMsg.Content {
		t.Fatalf("text messages %v %q, want one, %s: %q", ids, text, agentMsg.AgentMessageID, agentMsg.Content)
	}
	if got := r.find("TEXT_MESSAGE_START")[0].str("name"); got != "Greeter" {
		t.Errorf("TEXT_MESSAGE_START name %q, want the agent", got)
	}
	call := r.find("TOOL_CALL_START")[0]
	if call.str("toolCallName") != "get_time" || r.find("TOOL_CALL_ARGS")[0].str("delta") != `{"tz":"UTC"}` {
		t.Errorf("tool call %v %v", call, r.find("TOOL_CALL_ARGS"))
	}
	res := r.find("TOOL_CALL_RESULT")[0]
	if res.str("toolCallId") != call.str("toolCallId") || !strings.Contains(res.str("content"), `"time"`) {
		t.Errorf("tool result %v", res)
	}
	// The state: the snapshot, then the tool's variable as a JSON Patch.
	snap := r.find("STATE_SNAPSHOT")[0]["snapshot"].(map[string]any)
	if snap["time_told"] != false {
		t.Errorf("STATE_SNAPSHOT %v", snap)
	}
	delta := r.find("STATE_DELTA")[0]["delta"].([]any)
	if op := delta[0].(map[string]any); op["op"] != "add" || op["path"] != "/time_told" || op["value"] != true {
		t.Errorf("STATE_DELTA %v", delta)
	}
	usage, _ := r.last()["usage"].([]any)
	if len(usage) != 1 || usage[0].(map[string]any)["totalTokens"].(float64) <= 0 {
		t.Errorf("RUN_FINISHED usage %v", usage)
	}
	checkAGUISchema(t, r)

	// The same input again (the client lost the answer): the same chat,
	// not a second one; the history as MESSAGES_SNAPSHOT, and the run ends.
	e.waitStatus(t, chatID, baton.ChatCompleted)
	before := len(e.history(t, chatID))
	again := e.agui(t, "hello", e.keys[scopeAda], aguiInputOf("hello-1", "run-1"))
	verifyAGUI(t, again)
	if got := again.types(); !slices.Equal(got, []string{"RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"}) {
		t.Fatalf("reconnect to an ended thread: %v", got)
	}
	msgs := again.find("MESSAGES_SNAPSHOT")[0]["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if !slices.Equal(roles, []string{"assistant", "tool", "assistant"}) {
		t.Fatalf("MESSAGES_SNAPSHOT roles %v: %s", roles, again.raw[2])
	}
	if got := msgs[2].(map[string]any)["id"]; got != ids[0] {
		t.Errorf("the snapshot's message id %v, the stream's %s", got, ids[0])
	}
	if after := len(e.history(t, chatID)); after != before {
		t.Fatalf("the reconnect changed the chat: %d events, then %d", before, after)
	}
	checkAGUISchema(t, again)
}

// TestAGUI_GeneratorRun drives the generator over AG-UI as a client would:
// the interview's question ends a run (an input request); the answer's run
// ends at the secret form with a pointer to the web UI (the secret never
// passes over AG-UI); once it is answered there, the next run replays the
// thread (MESSAGES_SNAPSHOT) and ends at the action plan, a frontend tool
// call; its result, a tool message, finishes the chat.
func TestAGUI_GeneratorRun(t *testing.T) {
	e := newEnv(t)
	key := e.keys[scopeAda]
	var all []aguiResult

	ask := e.agui(t, "generator", key, aguiInputOf("gen-1", "r1"))
	verifyAGUI(t, ask)
	all = append(all, ask)
	_, result := ask.outcome(t)
	chatID := result["chat_id"].(string)
	if result["waiting"] != "input" {
		t.Fatalf("first run: result %v, want it waiting for input", result)
	}
	ids, text := ask.texts()
	if len(ids) != 1 || text[ids[0]] != "What would you like to automate?" {
		t.Fatalf("first run's messages %v %v", ids, text)
	}
	history := []map[string]any{{"id": ids[0], "role": "assistant", "content": text[ids[0]]}, userMsg("u-1", "A weekly newsletter from our team notes.")}

	answer := e.agui(t, "generator", key, aguiInputOf("gen-1", "r2", history...))
	verifyAGUI(t, answer)
	all = append(all, answer)
	_, result = answer.outcome(t)
	if result["waiting"] != "secret" || !strings.Contains(result["web_url"].(string), "#chat="+chatID) {
		t.Fatalf("second run's result %v: want it waiting for the secret form, with the web UI's link", result)
	}
	_, text = answer.texts()
	notice := text["secret-"+result["ui_event_id"].(string)]
	if !strings.Contains(notice, result["web_url"].(string)) {
		t.Fatalf("no message points to the web UI: %v", text)
	}
	for _, ev := range answer.events {
		if ev.typ() == "TOOL_CALL_START" {
			t.Fatalf("the secret form went out as a tool call: %v", ev)
		}
	}
	// The hidden "NEXT" never shows; the user's message is not echoed.
	for id, s := range text {
		if strings.Contains(s, "NEXT") || strings.Contains(s, "weekly newsletter from our") {
			t.Fatalf("message %s %q: hidden or echoed", id, s)
		}
	}
	// Posting the answer again while the secret waits: the same message,
	// not sent twice.
	again := e.agui(t, "generator", key, aguiInputOf("gen-1", "r2", history...))
	verifyAGUI(t, again)
	users := 0
	for _, p := range e.chatTexts(t, scopeAda, chatID) {
		if p.Agent == "user" && p.Source == "agui" {
			users++
		}
	}
	if users != 1 {
		t.Fatalf("the person's message recorded %d times", users)
	}

	e.submitHTTP(t, &clientMessage{ChatID: chatID, UIEventID: result["ui_event_id"].(string), Status: "success", Data: json.RawMessage(`{"NEWSLETTER_API_KEY":"` + testSecret + `"}`)})
	plan := e.agui(t, "generator", key, aguiInputOf("gen-1", "r3", history...))
	verifyAGUI(t, plan)
	all = append(all, plan)
	if plan.events[2].typ() != "MESSAGES_SNAPSHOT" {
		t.Fatalf("a run without new input: want MESSAGES_SNAPSHOT after the state, got %v", plan.types())
	}
	outcome, _ := plan.outcome(t)
	pending := pendingCalls(outcome)
	// The call is live, or in the snapshot when the chat reached it
	// before this run read the chat.
	var call aguiEv
	for _, ev := range plan.find("TOOL_CALL_START") {
		if ev.str("toolCallId") == pending[0] {
			call = ev
		}
	}
	for _, msg := range plan.events[2]["messages"].([]any) {
		calls, _ := msg.(map[string]any)["toolCalls"].([]any)
		for _, c := range calls {
			if c := c.(map[string]any); c["id"] == pending[0] {
				call = aguiEv{"toolCallName": c["function"].(map[string]any)["name"], "metadata": c["metadata"]}
			}
		}
	}
	if len(pending) != 1 || call == nil || call.str("toolCallName") != "action_plan" {
		t.Fatalf("third run: pending %v, calls %v: want the action plan as a frontend tool call", pending, plan.find("TOOL_CALL_START"))
	}
	if md, _ := call["metadata"].(map[string]any); md == nil || md["baton"].(map[string]any)["component"] != "ActionPlan" {
		t.Errorf("the UI tool's call carries no component: %v", call)
	}
	for _, raw := range plan.raw {
		if bytes.Contains(raw, []byte(testSecret)) {
			t.Fatalf("the secret went out over AG-UI: %s", raw)
		}
	}
	history = append(history,
		map[string]any{"id": "a-plan", "role": "assistant", "toolCalls": []any{map[string]any{"id": pending[0], "type": "function", "function": map[string]any{"name": "action_plan", "arguments": "{}"}}}},
		map[string]any{"id": "t-1", "role": "tool", "toolCallId": pending[0], "content": `{"action":"approve"}`})
	done := e.agui(t, "generator", key, aguiInputOf("gen-1", "r4", history...))
	verifyAGUI(t, done)
	all = append(all, done)
	if _, result := done.outcome(t); result["status"] != "success" {
		t.Fatalf("last run's result %v", result)
	}
	for _, ev := range done.find("TOOL_CALL_RESULT") {
		if ev.str("toolCallId") == pending[0] {
			t.Errorf("the client's own tool result echoed: %v", ev)
		}
	}
	_, text = done.texts()
	found := false
	for _, s := range text {
		found = found || strings.Contains(s, "approved and ready")
	}
	if !found {
		t.Fatalf("the delivery's message is missing: %v", text)
	}
	// The response reached the UI tool once, as the engine's record says.
	if got := e.uiResponses(t, chatID, call["metadata"].(map[string]any)["baton"].(map[string]any)["ui_event_id"].(string)); len(got) != 1 {
		t.Fatalf("UI tool responses %v, want one", got)
	}
	// Sent again (a retry of the last run): nothing is sent twice.
	verifyAGUI(t, e.agui(t, "generator", key, aguiInputOf("gen-1", "r4", history...)))
	e.waitStatus(t, chatID, baton.ChatCompleted)
	for _, r := range all {
		checkAGUISchema(t, r)
	}
}

// gatedModel is the scripted provider, except that the call number gate
// (counted from 1 over the env's chats) stops after its first text delta
// until release is closed (or its context ends); entered receives then.
type gatedModel struct {
	gate    int32
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func newGatedModel(gate int32) *gatedModel {
	return &gatedModel{gate: gate, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (m *gatedModel) providers(wf *workflow.Workflow) (baton.Provider, error) {
	sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
	if err != nil {
		return nil, err
	}
	return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
		gated := m.calls.Add(1) == m.gate
		return func(yield func(baton.Delta, error) bool) {
			for d, err := range sp.Stream(ctx, req) {
				if !yield(d, err) {
					return
				}
				if gated && d.Kind == baton.DeltaText {
					gated = false
					m.entered <- struct{}{}
					select {
					case <-m.release:
					case <-ctx.Done():
						yield(baton.Delta{}, ctx.Err())
						return
					}
				}
			}
		}
	}), nil
}

// TestAGUI_ReconnectMidRun: a client loses the stream while the agent is
// speaking and posts the same input again. The second run sends the
// history up to then as MESSAGES_SNAPSHOT and the rest live: every message
// of the chat exactly once (no duplicate), the one being spoken whole (no
// gap), and the chat is not started again.
func TestAGUI_ReconnectMidRun(t *testing.T) {
	m := newGatedModel(2) // hello's second model call: the answer
	e := newEnv(t, withProvider(m.providers))
	key := e.keys[scopeAda]
	input := aguiInputOf("re-1", "run-1")
	body, _ := json.Marshal(input)

	// The first stream, cut off mid-answer.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/agui/acme/hello", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.ts.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first run: %v %v", resp, err)
	}
	select {
	case <-m.entered:
	case <-ctx.Done():
		t.Fatal("the answer's model call did not start")
	}
	var first []aguiEv
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			var ev aguiEv
			_ = json.Unmarshal(data, &ev)
			first = append(first, ev)
			if ev.typ() == "TEXT_MESSAGE_CONTENT" {
				break // the first words of the answer: the connection drops
			}
		}
	}
	resp.Body.Close()
	cancel()
	if len(first) == 0 || first[len(first)-1].typ() != "TEXT_MESSAGE_CONTENT" {
		t.Fatalf("first run: %v", first)
	}
	chatID := aguiChatID(scopeAda, "hello", "re-1")
	testenv.Eventually(t, 20*time.Second, "the server to notice the first client left", func() error {
		if n := e.srv.hub.subscribers(); n != 0 {
			return fmt.Errorf("%d followers", n)
		}
		return nil
	})

	// The same input again; the model goes on once it is connected.
	done := make(chan aguiResult, 1)
	go func() { done <- e.agui(t, "hello", key, input) }()
	testenv.Eventually(t, 20*time.Second, "the second run to follow the chat", func() error {
		if e.srv.hub.subscribers() == 0 {
			return fmt.Errorf("no follower")
		}
		return nil
	})
	close(m.release)
	second := <-done
	verifyAGUI(t, second)
	if second.events[2].typ() != "MESSAGES_SNAPSHOT" {
		t.Fatalf("reconnect: %v, want MESSAGES_SNAPSHOT after the state", second.types())
	}
	seen := map[string]string{}
	var order []string
	for _, msg := range second.events[2]["messages"].([]any) {
		m := msg.(map[string]any)
		id := m["id"].(string)
		c, _ := m["content"].(string)
		seen[id], order = c, append(order, id)
	}
	ids, text := second.texts()
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			t.Fatalf("message %s both in the snapshot and live", id)
		}
		seen[id], order = text[id], append(order, id)
	}
	for _, ev := range second.find("TOOL_CALL_RESULT") {
		if _, dup := seen[ev.str("messageId")]; dup {
			t.Fatalf("tool result %s both in the snapshot and live", ev.str("messageId"))
		}
	}
	// What the client has now is the chat's visible transcript.
	e.waitStatus(t, chatID, baton.ChatCompleted)
	var want []string
	for _, p := range e.chatTexts(t, scopeAda, chatID) {
		if p.Agent == "Greeter" {
			// A tool-only message is the snapshot's assistant message of
			// its calls.
			want = append(want, p.AgentMessageID)
			if !p.ToolOnly && seen[p.AgentMessageID] != p.Content {
				t.Fatalf("message %s reads %q, the chat's %q", p.AgentMessageID, seen[p.AgentMessageID], p.Content)
			}
		}
	}
	var got []string
	for _, id := range order {
		if strings.HasPrefix(id, "turn_") {
			got = append(got, id)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the client's agent messages %v, the chat's %v", got, want)
	}
	if n := len(e.chatTexts(t, scopeAda, chatID)); n != 3 {
		t.Fatalf("%d texts: the reconnect changed the chat", n)
	}
	checkAGUISchema(t, second)
}

// TestAGUI_Tenants: a thread is its scope's. Another user of the app who
// posts the same threadId gets a thread of their own, with none of the
// first one's messages, and leaves it as it was; a key of another app is
// not found at this app's route.
func TestAGUI_Tenants(t *testing.T) {
	e := newEnv(t)
	adaMsgs := []map[string]any{userMsg("u-1", "secret plans of ada")}
	r := e.agui(t, "generator", e.keys[scopeAda], aguiInputOf("shared-thread", "r1", adaMsgs...))
	verifyAGUI(t, r)
	_, result := r.outcome(t)
	adaChat := result["chat_id"].(string)
	e.waitStatus(t, adaChat, baton.ChatWaitingInput)
	before := len(e.history(t, adaChat))

	bob := e.agui(t, "generator", e.keys[scopeBob], aguiInputOf("shared-thread", "r1", userMsg("u-1", "bob's own words")))
	verifyAGUI(t, bob)
	_, result = bob.outcome(t)
	if result["chat_id"] == adaChat {
		t.Fatalf("bob's thread is ada's chat")
	}
	for _, raw := range bob.raw {
		if bytes.Contains(raw, []byte("secret plans")) || bytes.Contains(raw, []byte(adaChat)) {
			t.Fatalf("bob's stream carries ada's data: %s", raw)
		}
	}
	if after := len(e.history(t, adaChat)); after != before {
		t.Fatalf("bob's post changed ada's chat: %d events, then %d", before, after)
	}
	if _, err := e.store.GetChat(context.Background(), scopeBob, adaChat); baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Fatalf("bob reads ada's chat: %v", err)
	}
	// Another app's key at acme's route, and no key at all.
	if r := e.agui(t, "generator", e.keys[scopeMallory], aguiInputOf("shared-thread", "r1")); r.status != http.StatusNotFound || bytes.Contains(r.body, []byte("secret plans")) {
		t.Fatalf("another app's key: %d %s", r.status, r.body)
	}
	if r := e.agui(t, "generator", "", aguiInputOf("shared-thread", "r1")); r.status != http.StatusUnauthorized {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	// Mallory in her own app has a thread of the same name of her own.
	if r := e.aguiPath(t, "/agui/umbrella/generator", e.keys[scopeMallory], aguiInputOf("shared-thread", "r1")); r.status != http.StatusOK {
		t.Fatalf("mallory's own thread: %d %s", r.status, r.body)
	} else if _, res := r.outcome(t); res["chat_id"] == adaChat {
		t.Fatal("mallory's thread is ada's chat")
	}
}

// TestAGUI_BadInput: what the route refuses, with a 4xx naming the field.
func TestAGUI_BadInput(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.MaxBody = 64 << 10 }))
	key := e.keys[scopeAda]
	valid := func(mod func(map[string]any)) map[string]any {
		in := aguiInputOf("bad-1", "r1", userMsg("u-1", "hello"))
		mod(in)
		return in
	}
	big := strings.Repeat("x", 70<<10)
	cases := []struct {
		name   string
		wf     string
		body   any
		status int
		want   string
	}{
		{"malformed", "hello", `{"threadId":`, 400, "incomplete JSON"},
		{"not an object", "hello", `[1]`, 400, "body: must be a JSON object"},
		{"trailing", "hello", `{"threadId":"t","runId":"r","messages":[]} {}`, 400, "after the JSON"},
		{"empty", "hello", ``, 400, "body: required"},
		{"no threadId", "hello", valid(func(m map[string]any) { delete(m, "threadId") }), 400, "threadId: required"},
		{"threadId mistyped", "hello", valid(func(m map[string]any) { m["threadId"] = 7 }), 400, "threadId: must be a string"},
		{"threadId control", "hello", valid(func(m map[string]any) { m["threadId"] = "a\nb" }), 400, "threadId: contains a control character"},
		{"threadId long", "hello", valid(func(m map[string]any) { m["threadId"] = strings.Repeat("t", 300) }), 400, "threadId: longer than"},
		{"no runId", "hello", valid(func(m map[string]any) { m["runId"] = "" }), 400, "runId: required"},
		{"no messages", "hello", valid(func(m map[string]any) { delete(m, "messages") }), 400, "messages: required"},
		{"message without id", "hello", valid(func(m map[string]any) { m["messages"] = []any{map[string]any{"role": "user", "content": "x"}} }), 400, "messages[0].id: required"},
		{"message role", "hello", valid(func(m map[string]any) {
			m["messages"] = []any{map[string]any{"id": "m", "role": "robot", "content": "x"}}
		}), 400, "messages[0].role"},
		{"message content", "hello", valid(func(m map[string]any) { m["messages"] = []any{map[string]any{"id": "m", "role": "user", "content": 5}} }), 400, "messages[0].content"},
		{"tool without call id", "hello", valid(func(m map[string]any) {
			m["messages"] = []any{map[string]any{"id": "m", "role": "tool", "content": "x"}}
		}), 400, "messages[0].toolCallId: required"},
		// A new thread's chat starts with one message: the newest would be lost.
		{"first run with two user messages", "hello", valid(func(m map[string]any) {
			m["messages"] = []any{userMsg("u-1", "hello"), map[string]any{"id": "a-1", "role": "assistant", "content": "hi"}, userMsg("u-2", "and then?")}
		}), 400, "messages[2]: the thread has no chat yet"},
		{"state not an object", "hello", valid(func(m map[string]any) { m["state"] = []int{1} }), 400, "state: must be an object"},
		{"state unknown variable", "generator", valid(func(m map[string]any) { m["state"] = map[string]any{"nope": 1} }), 400, "state.nope"},
		{"state not settable", "generator", valid(func(m map[string]any) { m["state"] = map[string]any{"plan_name": "x"} }), 400, "state.plan_name"},
		{"tool without name", "hello", valid(func(m map[string]any) { m["tools"] = []any{map[string]any{"description": "d"}} }), 400, "tools[0].name: required"},
		{"unknown workflow", "nope", valid(func(map[string]any) {}), 404, `nope\" not found`},
		{"oversized", "hello", valid(func(m map[string]any) { m["messages"] = []any{userMsg("u", big)} }), 413, "body: larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.agui(t, c.wf, key, c.body)
			if r.status != c.status || !strings.Contains(string(r.body), c.want) {
				t.Fatalf("%d %s, want %d naming %q", r.status, r.body, c.status, c.want)
			}
		})
	}
	// A thread whose chat was deleted is not started again under its id.
	r0 := e.agui(t, "hello", key, aguiInputOf("deleted", "r1"))
	_, res0 := r0.outcome(t)
	if d := e.do(t, "DELETE", "/api/chats/acme/"+res0["chat_id"].(string), key, nil); d.status/100 != 2 {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	if r := e.agui(t, "hello", key, aguiInputOf("deleted", "r2")); r.status != http.StatusConflict || !strings.Contains(string(r.body), "threadId: ") {
		t.Fatalf("a deleted thread: %d %s", r.status, r.body)
	}
	// A user message while the chat waits for a secret form.
	r := e.agui(t, "generator", key, aguiInputOf("hitl", "r1"))
	_, res := r.outcome(t)
	chatID := res["chat_id"].(string)
	e.submitHTTP(t, &clientMessage{ChatID: chatID, Content: ptr("A newsletter.")})
	e.waitStatus(t, chatID, baton.ChatWaitingSecret)
	r = e.agui(t, "generator", key, aguiInputOf("hitl", "r2", userMsg("u-9", "what now?")))
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), "messages[0]") || !strings.Contains(string(r.body), "#chat="+chatID) {
		t.Fatalf("a message while a secret form waits: %d %s", r.status, r.body)
	}
}
