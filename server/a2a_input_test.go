package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// askNameDir holds the remote workflow "askname": Asker asks the person's
// name (its task stops at input-required), and after the answer Greeter
// greets them (slowly: the scripted model is paced) and the chat ends.
const askNameDir = "testdata/a2ainput"

// remoteChatTexts returns the person's messages of the remote side's only
// chat, and that chat.
func remoteChatTexts(t *testing.T, remote *env) (string, []string) {
	t.Helper()
	chats := remoteChats(t, remote)
	if len(chats) != 1 {
		t.Fatalf("the remote side has %d chats, want 1", len(chats))
	}
	id := chats[0].(map[string]any)["chat_id"].(string)
	var texts []string
	for ev, err := range baton.EventsAfter(context.Background(), remote.store, scopeAda, id, 0, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != baton.TypeChatText {
			continue
		}
		p, err := baton.DecodePayload[baton.TextPayload](&ev)
		if err != nil {
			t.Fatal(err)
		}
		if p.Agent == agentUser {
			texts = append(texts, p.Content)
		}
	}
	return id, texts
}

// TestA2AToolInputAcrossBatons: baton A's agent calls baton B's askname
// workflow through an a2a tool; B's agent asks the person's name mid-run,
// so B's task stops at input-required and A's chat pauses with B's
// question. The person answers over A's WebSocket; the answer goes to the
// same remote task once, B greets them and completes, and A's model gets
// the remote outcome as the tool's result.
func TestA2AToolInputAcrossBatons(t *testing.T) {
	remote := newEnv(t, withWorkflows(askNameDir))
	t.Setenv("A2A_REMOTE_URL", remote.ts.URL)
	t.Setenv("A2A_REMOTE_TOKEN", remote.keys[scopeAda])
	caller := newEnv(t, withWorkflows(writeCallerWorkflow(t, "askname", "Register me.")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := caller.start(t, "caller", nil)
	c := caller.dial(ctx, t, id, 0, caller.keys[scopeAda])
	defer c.CloseNow()
	var asked envelope
	for asked.Type == "" {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read before the question: %v", err)
		}
		v := decodeEnvelope(t, raw)
		switch v.Type {
		case baton.TypeChatInputRequest:
			asked = v
		case baton.TypeChatRunComplete, baton.TypeChatError:
			t.Fatalf("the caller's chat ended without asking: %s", raw)
		}
	}
	// Labelled as the remote agent's question (its card's name), not the
	// calling agent's own words.
	if !strings.HasPrefix(asked.str("prompt"), "askname asks: ") || !strings.Contains(asked.str("prompt"), "What is your name?") || asked.str("tool_name") != "ask_remote" || asked.str("tool_call_id") == "" || asked.str("agent") != "Caller" {
		t.Fatalf("the person was asked %s", asked.raw)
	}
	chat := caller.waitStatus(t, id, baton.ChatWaitingInput)
	if len(chat.Pending) != 1 || chat.Pending[0].Kind != baton.PendingToolInput || chat.Pending[0].ToolCallID != asked.str("tool_call_id") {
		t.Fatalf("the caller's chat waits for %+v", chat.Pending)
	}
	remoteID, texts := remoteChatTexts(t, remote)
	if rc, err := remote.store.GetChat(ctx, scopeAda, remoteID); err != nil || rc.Status != baton.ChatWaitingInput {
		t.Fatalf("the remote chat is %s (%v), want waiting_input", rc.Status, err)
	}
	if len(texts) != 1 || texts[0] != "Register me." {
		t.Fatalf("the remote chat's messages of the person %q", texts)
	}
	answer := "Ada Lovelace"
	writeMsg(ctx, t, c, clientMessage{Type: msgSubmit, ChatID: id, Content: &answer})
	if _, err := readUntilComplete(ctx, c); err != nil {
		t.Fatalf("read to the end: %v", err)
	}
	if got := caller.waitStatus(t, id, baton.ChatCompleted, baton.ChatFailed); got.Status != baton.ChatCompleted {
		t.Fatalf("caller chat %s", got.Status)
	}
	res := toolResponses(t, caller, scopeAda, id, "ask_remote")
	if len(res) != 1 || !res[0].Success || !strings.Contains(res[0].Content, "Nice to meet you.") || !strings.Contains(res[0].Content, "[answered] Ada Lovelace") {
		t.Fatalf("tool responses %+v", res)
	}
	if rc := remote.waitStatus(t, remoteID, baton.ChatCompleted, baton.ChatFailed); rc.Status != baton.ChatCompleted {
		t.Fatalf("the remote chat %s", rc.Status)
	}
	if _, texts = remoteChatTexts(t, remote); strings.Join(texts, "|") != "Register me.|Ada Lovelace" {
		t.Fatalf("the remote chat's messages of the person %q, want the start and the answer once", texts)
	}
	// The caller's person sees their answer as their own message, once.
	n := 0
	for _, raw := range caller.history(t, id) {
		var v envelope
		_ = json.Unmarshal(raw, &v)
		if v.Type == baton.TypeChatText && v.str("content") == answer {
			n++
			if v.str("answers_tool_call_id") != asked.str("tool_call_id") {
				t.Errorf("the answer's envelope %s does not name the call", raw)
			}
		}
	}
	if n != 1 {
		t.Errorf("the caller's history has the answer %d times", n)
	}
}

// TestA2AToolInputToTheModel: with on_input_required "model" a remote
// task that asks is the tool's result, naming the task id, and the caller's
// chat does not pause: the remote chat still waits for its answer.
func TestA2AToolInputToTheModel(t *testing.T) {
	remote := newEnv(t, withWorkflows(askNameDir))
	t.Setenv("A2A_REMOTE_URL", remote.ts.URL)
	t.Setenv("A2A_REMOTE_TOKEN", remote.keys[scopeAda])
	caller := newEnv(t, withWorkflows(writeCallerWorkflowAsk(t, "askname", "Register me.", "model")))
	id := caller.start(t, "caller", nil)
	if c := caller.waitStatus(t, id, baton.ChatCompleted, baton.ChatFailed, baton.ChatWaitingInput); c.Status != baton.ChatCompleted {
		t.Fatalf("caller chat %s", c.Status)
	}
	remoteID, _ := remoteChatTexts(t, remote)
	res := toolResponses(t, caller, scopeAda, id, "ask_remote")
	want := fmt.Sprintf("The remote agent needs input (task_id %s.1)", remoteID)
	if len(res) != 1 || !res[0].Success || !strings.Contains(res[0].Content, "What is your name?") || !strings.Contains(res[0].Content, want) {
		t.Fatalf("tool responses %+v, want %q", res, want)
	}
	testenv.Eventually(t, 10*time.Second, "the remote chat waits for input", func() error {
		rc, err := remote.store.GetChat(context.Background(), scopeAda, remoteID)
		if err != nil || rc.Status != baton.ChatWaitingInput {
			return fmt.Errorf("remote chat %s (%v)", rc.Status, err)
		}
		return nil
	})
}

// TestA2AToolInputKill kills the calling baton (SIGKILL) after the
// person's answer to the remote question was recorded and sent, while the
// call follows the remote task to its end, and restarts it: the call is
// recovered under the answer's effect key, so the remote task received the
// answer once, and the caller's chat completes with the remote outcome.
func TestA2AToolInputKill(t *testing.T) {
	remote := newEnv(t, withWorkflows(askNameDir))
	dir := t.TempDir()
	childEnv := append(os.Environ(), a2aKillChildEnv+"=1",
		"A2A_KILL_STORE="+filepath.Join(dir, "caller.db"),
		"A2A_KILL_WORKFLOWS="+writeCallerWorkflow(t, "askname", "Register me."),
		"A2A_KILL_ANSWER=Ada",
		"A2A_REMOTE_URL="+remote.ts.URL, "A2A_REMOTE_TOKEN="+remote.keys[scopeAda])
	cmd, _ := startA2AKillChild(t, childEnv)
	// The answer reached the remote task: the caller recorded it, and its
	// call now follows the (paced) greeting.
	testenv.Eventually(t, time.Minute, "the remote chat has the answer", func() error {
		if len(remoteChats(t, remote)) == 0 {
			return fmt.Errorf("no remote chat yet")
		}
		if _, texts := remoteChatTexts(t, remote); !slices.Contains(texts, "Ada") {
			return fmt.Errorf("the remote chat has the person's messages %q", texts)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	remoteID, _ := remoteChatTexts(t, remote)
	rc, err := remote.store.GetChat(context.Background(), scopeAda, remoteID)
	if err != nil {
		t.Fatal(err)
	}
	inFlight := rc.Status == baton.ChatRunning // else the remote ended first: the caller may have recorded the result
	if !inFlight {
		t.Logf("the remote chat was %s when the caller was killed", rc.Status)
	}
	cmd, rd := startA2AKillChild(t, childEnv)
	waitA2AKillChild(t, cmd, rd)
	if rc := remote.waitStatus(t, remoteID, baton.ChatCompleted, baton.ChatFailed); rc.Status != baton.ChatCompleted {
		t.Fatalf("the remote chat %s", rc.Status)
	}
	if _, texts := remoteChatTexts(t, remote); strings.Join(texts, "|") != "Register me.|Ada" {
		t.Fatalf("the remote chat's messages of the person %q, want the start and the answer once", texts)
	}
	st := callerStore(t, dir)
	res := toolResponses(t, &env{store: st}, scopeAda, a2aKillChatID, "ask_remote")
	if len(res) != 1 || !res[0].Success || !strings.Contains(res[0].Content, "Nice to meet you.") || !strings.Contains(res[0].Content, "[answered] Ada") {
		t.Fatalf("tool responses %+v", res)
	}
	var asks, answers, recoveries int
	for ev, err := range baton.EventsAfter(context.Background(), st, scopeAda, a2aKillChatID, 0, 0) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case baton.TypeChatInputRequest:
			asks++
		case baton.TypeChatText:
			if p, _ := baton.DecodePayload[baton.TextPayload](&ev); p.AnswersToolCallID != "" {
				answers++
			}
		case baton.TypeChatNotice:
			if p, _ := baton.DecodePayload[baton.NoticePayload](&ev); p.Code == baton.NoticeToolRecovery {
				recoveries++
			}
		}
	}
	if asks != 1 || answers != 1 {
		t.Errorf("the caller asked %d times and took %d answers, want 1 and 1", asks, answers)
	}
	if inFlight && recoveries != 1 {
		t.Errorf("%d recovery notices after a kill during the call, want 1", recoveries)
	}
}

// TestA2AToolInputOverProtocols: the remote question a paused a2a call asks
// reaches the person through the other client protocols too: as the
// agent's text of an AG-UI run (which ends waiting for input) and as the
// content of a Chat Completions reply.
func TestA2AToolInputOverProtocols(t *testing.T) {
	remote := newEnv(t, withWorkflows(askNameDir))
	t.Setenv("A2A_REMOTE_URL", remote.ts.URL)
	t.Setenv("A2A_REMOTE_TOKEN", remote.keys[scopeAda])
	caller := newEnv(t, withWorkflows(writeCallerWorkflow(t, "askname", "Register me.")))

	r := caller.agui(t, "caller", caller.keys[scopeAda], aguiInputOf("thread-ask", "run-1", userMsg("m1", "Register me.")))
	verifyAGUI(t, r)
	var said strings.Builder
	for _, ev := range r.events {
		if ev.typ() == "TEXT_MESSAGE_CONTENT" {
			said.WriteString(ev.str("delta"))
		}
	}
	if !strings.Contains(said.String(), "What is your name?") {
		t.Errorf("the AG-UI run said %q, not the remote question; events %v", said.String(), r.types())
	}

	resp := caller.do(t, "POST", "/v1/chat/completions", caller.keys[scopeAda],
		map[string]any{"model": "caller", "messages": []any{map[string]any{"role": "user", "content": "Register me."}}})
	if resp.status != 200 {
		t.Fatalf("chat completions: %d %s", resp.status, resp.body)
	}
	var cc struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(resp.body, &cc); err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 1 || !strings.Contains(cc.Choices[0].Message.Content, "What is your name?") || cc.Choices[0].FinishReason != "stop" {
		t.Errorf("the Chat Completions reply %s does not ask the remote question", resp.body)
	}
}

// TestAGUI_ReconnectWaitsPastAnEarlierMessage: an AG-UI reconnect to a chat
// waiting for a tool's answer ends after the snapshot even when the inbox
// holds a message sent before the question (the engine keeps it for the
// model, after the call): only a message sent after the question, or any
// input to a chat that waits for something else, means the run goes on.
// The answer is decided by baton.AnswersToolInput, the engine's rule.
func TestAGUI_ReconnectWaitsPastAnEarlierMessage(t *testing.T) {
	asked := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	query := func(at time.Time) baton.Input {
		return baton.Input{Event: baton.Event{Type: baton.TypeUserQuery}, AcceptedAt: at}
	}
	toolInput := baton.Chat{Pending: []baton.PendingRequest{{Kind: baton.PendingToolInput, CreatedAt: asked}}}
	for _, tc := range []struct {
		name   string
		chat   baton.Chat
		inputs []baton.Input
		want   bool
	}{
		{"nothing queued", toolInput, nil, false},
		{"a message sent before the question", toolInput, []baton.Input{query(asked.Add(-time.Second))}, false},
		{"a message accepted in the instant the question was recorded", toolInput, []baton.Input{query(asked)}, false},
		{"and one after it", toolInput, []baton.Input{query(asked.Add(-time.Second)), query(asked.Add(time.Second))}, true},
		{"a UI response", toolInput, []baton.Input{{Event: baton.Event{Type: baton.TypeUIToolResponse}, AcceptedAt: asked.Add(-time.Second)}}, true},
		{"a chat waiting for a message", baton.Chat{}, []baton.Input{query(asked.Add(-time.Second))}, true},
	} {
		if got := takesInput(tc.chat, tc.inputs); got != tc.want {
			t.Errorf("%s: takesInput = %v, want %v", tc.name, got, tc.want)
		}
		if len(tc.chat.Pending) == 0 {
			continue
		}
		// The engine takes the message as the answer by the same rule.
		answered := false
		for _, in := range tc.inputs {
			answered = answered || baton.AnswersToolInput(tc.chat.Pending[0], in)
		}
		if wantAnswer := tc.want && tc.name != "a UI response"; answered != wantAnswer {
			t.Errorf("%s: baton.AnswersToolInput = %v, want %v", tc.name, answered, wantAnswer)
		}
	}
}
