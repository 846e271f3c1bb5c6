package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// askingCall is one run of askingTool's Call.
type askingCall struct {
	key      string
	answer   string
	round    int
	resume   string
	recovery bool
}

// askingTool is an in-process tool with side effects that asks the person
// twice (its result is ToolStatusInputRequired) and then answers with what
// it was told. With block set, the call that carries the first answer
// waits for its context to end instead (the process dies meanwhile), once.
type askingTool struct {
	mu      sync.Mutex
	calls   []askingCall
	block   bool
	blocked chan struct{} // closed when the blocking call has started
	// With gate set, the call of round gateRound (0: the first, before any
	// answer) closes started and waits for gate before it goes on.
	gate, started chan struct{}
	gateRound     int
	// always: every call asks again, never finishing.
	always bool
}

func (a *askingTool) Name() string        { return "ask_person" }
func (a *askingTool) Description() string { return "Asks the person for their name and city." }
func (a *askingTool) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{}}`)
}

func (a *askingTool) Call(ctx context.Context, cc *baton.CallContext, _ json.RawMessage) (baton.ToolResult, error) {
	c := askingCall{key: cc.EffectKey, recovery: cc.Recovery}
	if cc.Answer != nil {
		c.answer, c.round, c.resume = cc.Answer.Text, cc.Answer.Round, string(cc.Answer.Resume)
	}
	a.mu.Lock()
	a.calls = append(a.calls, c)
	block := a.block && c.round == 1
	if block {
		a.block = false
	}
	gate, started := a.gate, a.started
	if gate != nil && c.round == a.gateRound {
		a.gate = nil
	} else {
		gate = nil
	}
	a.mu.Unlock()
	if gate != nil {
		close(started)
		select {
		case <-gate:
		case <-ctx.Done():
			return baton.ToolResult{}, ctx.Err()
		}
	}
	switch {
	case a.always:
		return baton.ToolResult{Status: baton.ToolStatusInputRequired, Content: fmt.Sprintf("Question %d?", c.round+1), Resume: json.RawMessage(`{}`)}, nil
	case block:
		close(a.blocked)
		<-ctx.Done()
		return baton.ToolResult{}, ctx.Err()
	case cc.Answer == nil:
		return baton.ToolResult{Status: baton.ToolStatusInputRequired, Content: "What is your name?", Resume: json.RawMessage(`{"asked":"name"}`)}, nil
	case c.round == 1:
		return baton.ToolResult{Status: baton.ToolStatusInputRequired, Content: "And your city?",
			Resume: json.RawMessage(`{"asked":"city","name":` + strconvQuote(c.answer) + `}`)}, nil
	}
	var rs struct{ Name string }
	_ = json.Unmarshal(cc.Answer.Resume, &rs)
	return baton.ToolResult{Status: baton.ToolStatusOK, Content: "name=" + rs.Name + " city=" + c.answer}, nil
}

func (a *askingTool) runs() []askingCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// writeAskingWorkflow writes the workflow "asking": its agent calls
// ask_person (a go tool with side effects), then says it is done.
func writeAskingWorkflow(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "asking")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"workflow.json": `{"name": "asking", "description": "A tool that asks the person.", "version": "1.0.0", "visual_agents": ["Clerk"],
			"orchestration": {"initial_agent": "Clerk", "initial_message": "Register the person.", "startup_mode": "AgentDriven", "max_turns": 5},
			"llm": {"model": "gpt-4o-mini"}}`,
		"agents.json":             `{"agents": {"Clerk": {"system_message": "You register people.", "max_consecutive_auto_reply": 3}}}`,
		"context_variables.json":  `{"variables": {}, "derived_variables": []}`,
		"handoffs.json":           `{"handoff_rules": [{"source_agent": "Clerk", "handoff_type": "after_work", "transition_target": "TerminateTarget"}]}`,
		"structured_outputs.json": `{"structured_outputs": {"models": {}, "registry": {}}}`,
		"tools.json": `{"tools": [{"agent": "Clerk", "name": "ask_person", "function": "ask_person", "description": "Ask the person.",
			"tool_type": "Agent_Tool", "kind": "go", "side_effects": true}]}`,
		"scripted.json": `{"agents": {"Clerk": [
			{"tool_calls": [{"name": "ask_person", "arguments": {}}]},
			{"text": "Registered."}]}}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// messagesProvider keeps the messages of every model call.
type messagesProvider struct {
	baton.Provider
	mu   *sync.Mutex
	reqs *[][]baton.Message
}

func (p messagesProvider) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	p.mu.Lock()
	*p.reqs = append(*p.reqs, slices.Clone(req.Messages))
	p.mu.Unlock()
	return p.Provider.Stream(ctx, req)
}

func recording(mu *sync.Mutex, reqs *[][]baton.Message) engine.ProviderFunc {
	return func(wf *workflow.Workflow) (baton.Provider, error) {
		p, err := scriptedProviders(wf)
		return messagesProvider{Provider: p, mu: mu, reqs: reqs}, err
	}
}

// waitAsked waits for the chat to pause with the tool's question and
// returns the chat.input_request.
func waitAsked(t *testing.T, h *harness, id, prompt string) baton.InputRequestPayload {
	t.Helper()
	c := h.waitStatus(id, baton.ChatWaitingInput)
	call := toolCallOf(t, h, id).ToolCallID
	if len(c.Pending) != 1 || c.Pending[0].Kind != baton.PendingToolInput || c.Pending[0].ToolCallID != call || c.Pending[0].ToolName != "ask_person" {
		t.Fatalf("pending %+v, want one tool_input request of %s", c.Pending, call)
	}
	var last baton.InputRequestPayload
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatInputRequest {
			if err := json.Unmarshal(ev.Payload, &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if last.Prompt != prompt || last.ToolCallID != call || last.ToolName != "ask_person" || last.Agent != "Clerk" || last.RequestID != c.Pending[0].UIEventID {
		t.Fatalf("input request %+v, pending %+v; want the prompt %q", last, c.Pending[0], prompt)
	}
	return last
}

// checkAnswered checks a completed chat: the tool's answer is the model's
// tool message, the person's answers are their messages, shown once each and
// marked as answers, and the model never saw them as messages to it.
func checkAnswered(t *testing.T, h *harness, id string, reqs [][]baton.Message) {
	t.Helper()
	evs := h.events(id)
	checkSequences(t, evs)
	checkSpeakers(t, evs)
	call := toolCallOf(t, h, id).ToolCallID
	var answers []string
	var responses []baton.ToolResponsePayload
	for _, ev := range evs {
		switch ev.Type {
		case baton.TypeChatText:
			p, _ := baton.DecodePayload[baton.TextPayload](&ev)
			if p.Agent == workflow.UserAgent && !p.UIHidden { // the hidden one is the initial message
				if p.AnswersToolCallID != call || p.InputID == "" {
					t.Errorf("the person's text %+v does not answer %s", p, call)
				}
				answers = append(answers, p.Content)
			}
		case baton.TypeChatToolResponse:
			p, _ := baton.DecodePayload[baton.ToolResponsePayload](&ev)
			responses = append(responses, p)
		}
	}
	if !slices.Equal(answers, []string{"Ada", "Paris"}) {
		t.Errorf("the person's texts %q, want Ada then Paris once each", answers)
	}
	if countType(evs, baton.TypeChatInputRequest) != 2 || countType(evs, baton.TypeChatToolCall) != 1 {
		t.Errorf("%d input requests and %d tool calls, want 2 and 1:\n%s", countType(evs, baton.TypeChatInputRequest), countType(evs, baton.TypeChatToolCall), dump(evs))
	}
	if len(responses) != 1 || !responses[0].Success || responses[0].Content != "name=Ada city=Paris" || responses[0].ToolCallID != call {
		t.Fatalf("tool responses %+v", responses)
	}
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	msgs := reqs[1]
	for _, m := range msgs {
		if m.Role == baton.RoleUser && (m.Content == "Ada" || m.Content == "Paris") {
			t.Errorf("the model was sent the person's answer as a message: %+v", msgs)
		}
	}
	if last := msgs[len(msgs)-1]; last.Role != baton.RoleTool || last.ToolCallID != call || last.Content != "name=Ada city=Paris" {
		t.Errorf("the model's last message %+v, want the tool's answer", last)
	}
	c, err := h.store.GetChat(context.Background(), testScope, id)
	if err != nil || len(c.Pending) != 0 {
		t.Errorf("pending after the end: %+v %v", c.Pending, err)
	}
}

// startAsking starts a chat of the asking workflow whose tools are funcs
// (an askingTool, say), on a harness with opts, and returns the harness and
// the chat's id.
func startAsking(t *testing.T, funcs baton.Tool, opts ...harnessOption) (*harness, string) {
	t.Helper()
	h := newHarness(t, append([]harnessOption{withWorkflows(writeAskingWorkflow(t)), withTools(tool.WithFuncs(funcs))}, opts...)...)
	chat, err := h.eng.Start(context.Background(), testScope, "asking", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return h, chat.ID
}

// TestToolInput_PausesForThePerson: a tool that asks the person pauses the
// chat with its question (a chat.input_request naming the call, a pending
// tool_input request); each of the person's messages answers it and the
// call goes on with the answer, under an effect key per round; the tool's
// final result answers the model, and nothing happens twice.
func TestToolInput_PausesForThePerson(t *testing.T) {
	var mu sync.Mutex
	var reqs [][]baton.Message
	at := &askingTool{}
	h, id := startAsking(t, at, withProvider(recording(&mu, &reqs)))
	ctx := context.Background()
	first := waitAsked(t, h, id, "What is your name?")
	if first.Round != 1 || string(first.Resume) != `{"asked":"name"}` {
		t.Fatalf("first question %+v", first)
	}
	// A fork made at the question does not answer the original's remote
	// task: its copy of the call ends with an error for its model.
	src, err := h.store.GetChat(ctx, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := h.eng.Fork(ctx, testScope, id, src.LastSequence)
	if err != nil {
		t.Fatal(err)
	}
	checkForkEndsCall(t, h, fork.ID)
	mu.Lock()
	// The fork's model was told (the original still waits: the last call is the fork's).
	if last := reqs[len(reqs)-1]; last[len(last)-1].Role != baton.RoleTool || !strings.Contains(last[len(last)-1].Content, "forked from") {
		t.Errorf("the fork's model was sent %+v", last)
	}
	reqs = reqs[:len(reqs)-1]
	mu.Unlock()
	if err := h.eng.Submit(ctx, testScope, id, "Ada", "ws"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the second question", func() error {
		if n := countType(h.events(id), baton.TypeChatInputRequest); n != 2 {
			return fmt.Errorf("%d input requests", n)
		}
		return nil
	})
	second := waitAsked(t, h, id, "And your city?")
	if second.Round != 2 || second.RequestID == first.RequestID {
		t.Fatalf("second question %+v after %+v", second, first)
	}
	if err := h.eng.Submit(ctx, testScope, id, "Paris", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	mu.Lock()
	checkAnswered(t, h, id, reqs)
	mu.Unlock()
	// A fork made after the answer was recorded, before the call went on
	// with it, does not send it again: its call ends the same way.
	for _, ev := range h.events(id) {
		if p, _ := baton.DecodePayload[baton.TextPayload](&ev); ev.Type == baton.TypeChatText && p.Content == "Ada" {
			fork, err := h.eng.Fork(ctx, testScope, id, ev.Sequence)
			if err != nil {
				t.Fatal(err)
			}
			checkForkEndsCall(t, h, fork.ID)
		}
	}
	tc := toolCallOf(t, h, id)
	key := baton.EffectKey(id, tc.TurnKey, tc.ToolCallID)
	for _, r := range at.runs() {
		if !strings.HasPrefix(r.key, id+"/") {
			t.Errorf("the tool ran for a fork: %+v", r)
		}
	}
	var runs []askingCall
	for _, r := range at.runs() {
		if strings.HasPrefix(r.key, id+"/") { // not the fork's
			runs = append(runs, r)
		}
	}
	want := []askingCall{{key: key}, {key: baton.AnswerEffectKey(key, 1), answer: "Ada", round: 1, resume: `{"asked":"name"}`},
		{key: baton.AnswerEffectKey(key, 2), answer: "Paris", round: 2, resume: `{"asked":"city","name":"Ada"}`}}
	if !slices.Equal(runs, want) {
		t.Fatalf("tool runs\n got %+v\nwant %+v", runs, want)
	}
}

// TestToolInput_RestartDuringTheAnswer: the process dies while the call
// goes on with the person's recorded answer; after the restart the call is
// recovered under the answer's effect key (the same message, for a remote
// agent to take once), the person is not asked again for it, and the chat
// completes.
func TestToolInput_RestartDuringTheAnswer(t *testing.T) {
	var mu sync.Mutex
	var reqs [][]baton.Message
	at := &askingTool{block: true, blocked: make(chan struct{})}
	h, id := startAsking(t, at, withProvider(recording(&mu, &reqs)))
	ctx := context.Background()
	waitAsked(t, h, id, "What is your name?")
	if err := h.eng.Submit(ctx, testScope, id, "Ada", "ws"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-at.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not go on with the answer")
	}
	// The answer is recorded before the call goes on with it.
	if c, err := h.store.GetChat(ctx, testScope, id); err != nil || c.Status != baton.ChatRunning || len(c.Pending) != 0 {
		t.Fatalf("chat before the crash: %+v %v", c, err)
	}
	h = h.crash()
	running, err := h.store.ChatsByStatus(ctx, baton.ChatRunning, 10)
	if err != nil || len(running) != 1 {
		t.Fatalf("running chats: %v %v", running, err)
	}
	if _, err := h.eng.Recover(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitAsked(t, h, id, "And your city?")
	if err := h.eng.Submit(ctx, testScope, id, "Paris", "ws"); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatCompleted)
	mu.Lock()
	checkAnswered(t, h, id, reqs)
	mu.Unlock()
	tc := toolCallOf(t, h, id)
	key := baton.EffectKey(id, tc.TurnKey, tc.ToolCallID)
	var answer1 []askingCall
	for _, r := range at.runs() {
		if r.key == baton.AnswerEffectKey(key, 1) {
			answer1 = append(answer1, r)
		}
	}
	if len(answer1) != 2 || answer1[0].recovery || !answer1[1].recovery || answer1[1].answer != "Ada" {
		t.Fatalf("runs of the first answer %+v, want the interrupted one and its recovery", answer1)
	}
	if n := countType(h.events(id), baton.TypeChatNotice); n != 1 {
		t.Errorf("%d notices, want the recovery's", n)
	}
}

// crash stops the harness as a kill would, not waiting for the runs in
// progress to finish (their contexts end at once, so they record nothing
// more), and opens a new one on the same database.
func (h *harness) crash() *harness {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.bus.Close(ctx) // cancels the handlers and waits for them to return
	_ = h.eng.Close()
	if err := h.store.Close(); err != nil {
		h.t.Errorf("store close: %v", err)
	}
	h.bus = nil
	return newHarness(h.t, withDB(h.dbPath), withWorkflows(h.root), withProvider(h.prov), withTools(h.toolOpts...))
}

// toolCallOf returns the chat's first chat.tool_call.
func toolCallOf(t *testing.T, h *harness, id string) baton.ToolCallPayload {
	t.Helper()
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolCall {
			p, err := baton.DecodePayload[baton.ToolCallPayload](&ev)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatal("no tool call")
	return baton.ToolCallPayload{}
}

// TestToolInput_RestartBeforeTheQuestion: the process dies after the tool
// asked (its result is in the effect ledger) but before the question was
// recorded; after the restart the question comes from the ledger — the
// tool does not run again — and the chat pauses with it once.
func TestToolInput_RestartBeforeTheQuestion(t *testing.T) {
	var mu sync.Mutex
	var reqs [][]baton.Message
	var dead atomic.Bool
	at := &askingTool{}
	h := newHarness(t, withWorkflows(writeAskingWorkflow(t)), withProvider(recording(&mu, &reqs)), withTools(tool.WithFuncs(at)),
		withFaults(func(events []baton.Event) error {
			if dead.Load() {
				return errors.New("injected: the process is dead")
			}
			for _, ev := range events {
				if ev.Type == baton.TypeChatInputRequest && dead.CompareAndSwap(false, true) {
					return errors.New("injected: the process died here")
				}
			}
			return nil
		}))
	ctx := context.Background()
	chat, err := h.eng.Start(ctx, testScope, "asking", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := chat.ID
	testenv.Eventually(t, 10*time.Second, "the question's append to fail", func() error {
		if !dead.Load() || !h.settled() {
			return fmt.Errorf("dead %v, settled %v", dead.Load(), h.settled())
		}
		return nil
	})
	if n := countType(h.events(id), baton.TypeChatInputRequest); n != 0 {
		t.Fatalf("%d questions recorded before the restart", n)
	}
	h.close()
	h = newHarness(t, withDB(h.dbPath), withWorkflows(h.root), withProvider(h.prov), withTools(h.toolOpts...))
	running, err := h.store.ChatsByStatus(ctx, baton.ChatRunning, 10)
	if err != nil || len(running) != 1 {
		t.Fatalf("running chats: %v %v", running, err)
	}
	if _, err := h.eng.Recover(ctx, running); err != nil {
		t.Fatal(err)
	}
	if q := waitAsked(t, h, id, "What is your name?"); string(q.Resume) != `{"asked":"name"}` {
		t.Fatalf("the question from the ledger lost the tool's state: %+v", q)
	}
	if n := countType(h.events(id), baton.TypeChatInputRequest); n != 1 {
		t.Fatalf("%d questions, want 1", n)
	}
	if runs := at.runs(); len(runs) != 1 {
		t.Fatalf("the tool ran %d times (%+v), want once: the restart takes its result from the ledger", len(runs), runs)
	}
}

// TestToolInput_CancelWhilePaused: run.cancel while the chat waits for the
// tool's answer does what it does for any pause — nothing, no run being in
// progress — and the answer still goes on with the call.
func TestToolInput_CancelWhilePaused(t *testing.T) {
	var mu sync.Mutex
	var reqs [][]baton.Message
	at := &askingTool{}
	h, id := startAsking(t, at, withProvider(recording(&mu, &reqs)))
	ctx := context.Background()
	waitAsked(t, h, id, "What is your name?")
	before := len(h.events(id))
	if err := h.eng.Cancel(ctx, testScope, id); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if n := len(h.events(id)); n != before {
		t.Fatalf("the cancel recorded %d events:\n%s", n-before, dump(h.events(id)))
	}
	waitAsked(t, h, id, "What is your name?")
	for _, answer := range []string{"Ada", "Paris"} {
		if err := h.eng.Submit(ctx, testScope, id, answer, "ws"); err != nil {
			t.Fatal(err)
		}
		if answer == "Ada" {
			testenv.Eventually(t, 10*time.Second, "the second question", func() error {
				if n := countType(h.events(id), baton.TypeChatInputRequest); n != 2 {
					return fmt.Errorf("%d input requests:\n%s", n, dump(h.events(id)))
				}
				return nil
			})
			waitAsked(t, h, id, "And your city?")
		}
	}
	h.waitStatus(id, baton.ChatCompleted)
	mu.Lock()
	defer mu.Unlock()
	checkAnswered(t, h, id, reqs)
}

// TestToolInput_EarlierMessageIsNotTheAnswer: a message the person sent
// while the tool ran, before its question existed, is not sent to the tool
// as the answer (the person never saw the question); only the messages
// sent after the question answer it, and the earlier one stays queued and
// reaches the model, once, after the call has ended. The same holds for a
// message sent while the call goes on with the first answer, before the
// second question.
func TestToolInput_EarlierMessageIsNotTheAnswer(t *testing.T) {
	t.Run("first question", func(t *testing.T) { testEarlierMessage(t, 0) })
	t.Run("second question", func(t *testing.T) { testEarlierMessage(t, 1) })
}

// testEarlierMessage sends a message while the call of round round runs
// (0: the first, 1: the one with the first answer).
func testEarlierMessage(t *testing.T, round int) {
	var mu sync.Mutex
	var reqs [][]baton.Message
	gate, started := make(chan struct{}), make(chan struct{})
	at := &askingTool{gate: gate, started: started, gateRound: round}
	h, id := startAsking(t, at, withProvider(recording(&mu, &reqs)))
	ctx := context.Background()
	const early = "a note for the agent, typed while the tool ran"
	sendEarly := func() {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the tool was not called")
		}
		if err := h.eng.Submit(ctx, testScope, id, early, "ws"); err != nil { // accepted (durable) when Submit returns
			t.Fatal(err)
		}
		close(gate)
	}
	if round == 0 {
		sendEarly()
	}
	waitAsked(t, h, id, "What is your name?")
	if err := h.eng.Submit(ctx, testScope, id, "Ada", "ws"); err != nil {
		t.Fatal(err)
	}
	if round == 1 {
		sendEarly()
	}
	testenv.Eventually(t, 10*time.Second, "the second question", func() error {
		if n := countType(h.events(id), baton.TypeChatInputRequest); n != 2 {
			return fmt.Errorf("%d input requests:\n%s", n, dump(h.events(id)))
		}
		return nil
	})
	waitAsked(t, h, id, "And your city?")
	if err := h.eng.Submit(ctx, testScope, id, "Paris", "ws"); err != nil {
		t.Fatal(err)
	}
	// The early message is taken once the call has ended: a message to
	// the model, after the tool's result.
	var earlySeq, responseSeq int64
	testenv.Eventually(t, 10*time.Second, "the early message taken for the model", func() error {
		earlySeq, responseSeq = 0, 0
		for _, ev := range h.events(id) {
			switch ev.Type {
			case baton.TypeChatText:
				p, _ := baton.DecodePayload[baton.TextPayload](&ev)
				if p.Content == early {
					if p.AnswersToolCallID != "" {
						return fmt.Errorf("the early message answers %s", p.AnswersToolCallID)
					}
					earlySeq = ev.Sequence
				}
			case baton.TypeChatToolResponse:
				responseSeq = ev.Sequence
			}
		}
		if earlySeq == 0 || !h.settled() {
			return fmt.Errorf("early message at %d, settled %v", earlySeq, h.settled())
		}
		return nil
	})
	var answers []string
	for _, r := range at.runs() {
		if r.round > 0 {
			answers = append(answers, r.answer)
		}
	}
	if !slices.Equal(answers, []string{"Ada", "Paris"}) {
		t.Fatalf("the tool was answered %q, want Ada then Paris", answers)
	}
	if responseSeq == 0 || earlySeq < responseSeq {
		t.Fatalf("the early message recorded at %d, the tool's response at %d: want it after the call", earlySeq, responseSeq)
	}
	ins, err := h.store.Inputs(ctx, testScope, id)
	if err != nil || len(ins) != 0 {
		t.Fatalf("inbox after: %+v %v", ins, err)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := 0
	for _, req := range reqs {
		for _, m := range req {
			if m.Role == baton.RoleUser && m.Content == early {
				seen++
				break
			}
		}
	}
	if seen == 0 {
		t.Fatalf("the model never saw the early message in %d calls", len(reqs))
	}
}

// checkForkEndsCall checks a fork whose copied tool call had asked the
// person in the original chat: the fork does not wait for an answer, the
// call ends with an error response telling the model to call the tool
// again, and the fork goes on to its end.
func checkForkEndsCall(t *testing.T, h *harness, forkID string) {
	t.Helper()
	c := h.waitStatus(forkID, baton.ChatCompleted, baton.ChatFailed, baton.ChatWaitingInput)
	if c.Status != baton.ChatCompleted || len(c.Pending) != 0 {
		t.Fatalf("the fork is %s, pending %+v; want completed, waiting for nothing:\n%s", c.Status, c.Pending, dump(h.events(forkID)))
	}
	call := toolCallOf(t, h, forkID).ToolCallID
	var responses []baton.ToolResponsePayload
	for _, ev := range h.events(forkID) {
		if ev.Type == baton.TypeChatToolResponse {
			p, _ := baton.DecodePayload[baton.ToolResponsePayload](&ev)
			responses = append(responses, p)
		}
	}
	if len(responses) != 1 || responses[0].ToolCallID != call || responses[0].Success || !strings.Contains(responses[0].Content, "forked from; call the tool again") {
		t.Fatalf("the fork's tool responses %+v, want one error naming the fork", responses)
	}
}

// answerEveryRound answers the questions of a tool that keeps asking,
// engine.MaxToolInputRounds of them, waiting for each; asked, when not nil,
// checks the chat once question i is shown, before its answer.
func answerEveryRound(t *testing.T, h *harness, id string, asked func(i int)) {
	t.Helper()
	for i := 1; i <= engine.MaxToolInputRounds; i++ {
		waitAsked(t, h, id, fmt.Sprintf("Question %d?", i))
		if asked != nil {
			asked(i)
		}
		if err := h.eng.Submit(context.Background(), testScope, id, fmt.Sprintf("answer %d", i), "ws"); err != nil {
			t.Fatal(err)
		}
		if i < engine.MaxToolInputRounds {
			testenv.Eventually(t, 10*time.Second, "the next question", func() error {
				if n := countType(h.events(id), baton.TypeChatInputRequest); n != i+1 {
					return fmt.Errorf("%d input requests", n)
				}
				return nil
			})
		}
	}
}

// TestToolInput_RoundsAreBounded: a tool that keeps asking does not hold
// the person forever: past engine.MaxToolInputRounds questions the call
// ends with an error result for the model, and the chat goes on.
func TestToolInput_RoundsAreBounded(t *testing.T) {
	at := &askingTool{always: true}
	h, id := startAsking(t, at)
	answerEveryRound(t, h, id, nil)
	c := h.waitStatus(id, baton.ChatCompleted, baton.ChatFailed)
	evs := h.events(id)
	if c.Status != baton.ChatCompleted || len(c.Pending) != 0 || countType(evs, baton.TypeChatInputRequest) != engine.MaxToolInputRounds {
		t.Fatalf("chat %s pending %+v:\n%s", c.Status, c.Pending, dump(evs))
	}
	var responses []baton.ToolResponsePayload
	for _, ev := range evs {
		if ev.Type == baton.TypeChatToolResponse {
			p, _ := baton.DecodePayload[baton.ToolResponsePayload](&ev)
			responses = append(responses, p)
		}
	}
	if len(responses) != 1 || responses[0].Success || !strings.Contains(responses[0].Content, fmt.Sprintf("asked the person %d times", engine.MaxToolInputRounds)) {
		t.Fatalf("tool responses %+v, want one error", responses)
	}
	if n := len(at.runs()); n != engine.MaxToolInputRounds+1 {
		t.Fatalf("the tool ran %d times, want %d", n, engine.MaxToolInputRounds+1)
	}
}

// TestToolInput_AnswerKeepsNewClientTools: a client's new set of tools
// sent with the answer to a tool's question (an AG-UI run that answers it)
// is kept, as with any other message.
func TestToolInput_AnswerKeepsNewClientTools(t *testing.T) {
	at := &askingTool{}
	h, id := startAsking(t, at)
	ctx := context.Background()
	waitAsked(t, h, id, "What is your name?")
	if err := h.eng.SubmitWithTools(ctx, testScope, id, "answer-1", "Ada", "agui", []baton.ClientTool{locationTool}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the second question", func() error {
		if n := countType(h.events(id), baton.TypeChatInputRequest); n != 2 {
			return fmt.Errorf("%d input requests", n)
		}
		return nil
	})
	c, err := h.store.GetChat(ctx, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]json.RawMessage
	if err := json.Unmarshal(c.Context, &snap); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(snap["__client_tools"]), `"get_location"`) {
		t.Fatalf("the chat's client tools after the answer: %s", snap["__client_tools"])
	}
}

// TestToolInput_ForkAsksItsOwnQuestion: a fork made before the tool call
// runs the call itself, and when the tool asks, the fork waits for its own
// person's answer (its question is not taken for the original's, which
// would end the call with "forked from" and leave the request pending);
// the answer goes to the fork's tool run.
func TestToolInput_ForkAsksItsOwnQuestion(t *testing.T) {
	at := &askingTool{}
	h, id := startAsking(t, at)
	ctx := context.Background()
	waitAsked(t, h, id, "What is your name?")
	var before int64 // the last event before the tool call
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolCall {
			break
		}
		before = ev.Sequence
	}
	fork, err := h.eng.Fork(ctx, testScope, id, before)
	if err != nil {
		t.Fatal(err)
	}
	c := h.waitStatus(fork.ID, baton.ChatCompleted, baton.ChatFailed, baton.ChatWaitingInput)
	if c.Status != baton.ChatWaitingInput {
		t.Fatalf("the fork is %s, pending %+v; want it waiting for its own question:\n%s", c.Status, c.Pending, dump(h.events(fork.ID)))
	}
	waitAsked(t, h, fork.ID, "What is your name?")
	if err := h.eng.Submit(ctx, testScope, fork.ID, "Grace", "ws"); err != nil {
		t.Fatal(err)
	}
	waitAsked(t, h, fork.ID, "And your city?")
	var answers []string
	for _, r := range at.runs() {
		if strings.HasPrefix(r.key, fork.ID+"/") && r.round > 0 {
			answers = append(answers, r.answer)
		}
	}
	if !slices.Equal(answers, []string{"Grace"}) {
		t.Fatalf("the fork's tool was answered %q, want Grace", answers)
	}
}

// TestToolInput_MessageDuringTheRecordIsNotTheAnswer: a message the inbox
// accepts after the question was staged but before the append that
// records it committed is not the answer (baton.AnswersToolInput: the
// question's time is the store's, when it recorded it): the person could
// not see the question. The next message answers it.
func TestToolInput_MessageDuringTheRecordIsNotTheAnswer(t *testing.T) {
	const early = "typed while the question was being recorded"
	var h *harness
	var once sync.Once
	var id string
	ctx := context.Background()
	h = newHarness(t, withWorkflows(writeAskingWorkflow(t)), withTools(tool.WithFuncs(&askingTool{})), withFaults(func(events []baton.Event) error {
		for _, ev := range events {
			if ev.Type != baton.TypeChatInputRequest {
				continue
			}
			var err error
			once.Do(func() {
				// Past the staged event's millisecond, so that a rule
				// measuring from the staging would take the message.
				for time.Now().UnixMilli() <= ev.Timestamp {
					runtime.Gosched()
				}
				_, _, err = h.store.AddInput(ctx, testScope, baton.NewUserQuery(testScope, ev.ChatID(), early, "ws"))
			})
			return err
		}
		return nil
	}))
	chat, err := h.eng.Start(ctx, testScope, "asking", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id = chat.ID
	waitAsked(t, h, id, "What is your name?")
	testenv.Eventually(t, 10*time.Second, "the run settled, waiting", func() error {
		if !h.settled() {
			return fmt.Errorf("not settled")
		}
		return nil
	})
	for _, ev := range h.events(id) {
		if p, _ := baton.DecodePayload[baton.TextPayload](&ev); ev.Type == baton.TypeChatText && p.AnswersToolCallID != "" {
			t.Fatalf("%q answered the question:\n%s", p.Content, dump(h.events(id)))
		}
	}
	if err := h.eng.Submit(ctx, testScope, id, "Ada", "ws"); err != nil {
		t.Fatal(err)
	}
	waitAsked(t, h, id, "And your city?")
}

// pendingForks is a store whose ForkChat leaves a copied tool question
// pending in the fork, as a fork made before Fork learned to leave it out
// may hold it.
type pendingForks struct{ *sqlite.Store }

func (s *pendingForks) ForkChat(ctx context.Context, scope baton.Scope, f baton.Fork) (baton.Chat, error) {
	c, err := s.Store.ForkChat(ctx, scope, f)
	if err != nil {
		return c, err
	}
	evs, err := s.Events(ctx, scope, c.ID, 0, 0)
	if err != nil {
		return c, err
	}
	var q baton.InputRequestPayload
	for _, ev := range evs {
		if ev.Type == baton.TypeChatInputRequest {
			if err := json.Unmarshal(ev.Payload, &q); err != nil {
				return c, err
			}
		}
	}
	return s.UpdateChat(ctx, scope, c.ID, baton.ChatUpdate{AddPending: []baton.PendingRequest{{
		UIEventID: q.RequestID, Kind: baton.PendingToolInput, ToolCallID: q.ToolCallID, ToolName: q.ToolName, Agent: q.Agent,
	}}})
}

// TestToolInput_ForkResolvesAPendingInheritedQuestion: a fork holding the
// original's tool question as pending ends the call (an error for its
// model) and resolves the request with it, not left showing a question
// nobody takes.
func TestToolInput_ForkResolvesAPendingInheritedQuestion(t *testing.T) {
	h := newHarness(t, withWorkflows(writeAskingWorkflow(t)), withTools(tool.WithFuncs(&askingTool{})),
		withStoreWrap(func(s *sqlite.Store) engine.Store { return &pendingForks{Store: s} }))
	ctx := context.Background()
	chat, err := h.eng.Start(ctx, testScope, "asking", baton.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitAsked(t, h, chat.ID, "What is your name?")
	src, err := h.store.GetChat(ctx, testScope, chat.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := h.eng.Fork(ctx, testScope, chat.ID, src.LastSequence)
	if err != nil {
		t.Fatal(err)
	}
	checkForkEndsCall(t, h, fork.ID)
}
