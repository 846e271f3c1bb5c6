package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// a2aClient resolves the workflow's agent card at its well-known path with
// a2a-go's resolver and returns a2a-go's client for it, with key.
func (e *env) a2aClient(t *testing.T, app, wf, key string) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	return e.a2aClientTB(t, app, wf, key)
}

func (e *env) a2aClientTB(t testing.TB, app, wf, key string) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	ctx := context.Background()
	hc := &http.Client{Transport: bearerTransport{key: key}}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, e.ts.URL+"/a2a/"+app+"/"+wf)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c, card
}

func userMessage(id string, parts ...a2a.Part) *a2a.Message {
	return &a2a.Message{ID: id, Role: a2a.MessageRoleUser, Parts: parts}
}

func TestA2ACard(t *testing.T) {
	e := newEnv(t)
	_, card := e.a2aClient(t, "acme", "hello", e.keys[scopeAda])
	if card.Name != "hello" || !strings.HasPrefix(card.Description, "The smallest complete workflow") {
		t.Errorf("name %q, description %q", card.Name, card.Description)
	}
	if card.URL != e.ts.URL+"/a2a/acme/hello" || card.PreferredTransport != a2a.TransportProtocolJSONRPC {
		t.Errorf("url %q, transport %q", card.URL, card.PreferredTransport)
	}
	if !card.Capabilities.Streaming || len(card.Skills) != 1 || card.Skills[0].ID != "hello" {
		t.Errorf("capabilities %+v, skills %+v", card.Capabilities, card.Skills)
	}
	sch, ok := card.SecuritySchemes["bearer"].(a2a.HTTPAuthSecurityScheme)
	if !ok || sch.Scheme != "bearer" || len(card.Security) != 1 {
		t.Errorf("security schemes %+v, security %+v", card.SecuritySchemes, card.Security)
	}
	for _, c := range []struct {
		name, path, key string
		want            int
	}{
		{"no key", "/a2a/acme/hello/.well-known/agent-card.json", "", 401},
		{"another app's key", "/a2a/acme/hello/.well-known/agent-card.json", e.keys[scopeMallory], 404},
		{"unknown workflow", "/a2a/acme/nope/.well-known/agent-card.json", e.keys[scopeAda], 404},
	} {
		if r := e.do(t, "GET", c.path, c.key, nil); r.status != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.want, r.body)
		}
	}
}

// TestA2ASendHello: message/send, blocking, returns the completed task with
// the visual agent's text; tasks/get returns the same; a retried message
// (same messageId) is the same task, not a second chat.
func TestA2ASendHello(t *testing.T) {
	e := newEnv(t)
	c, _ := e.a2aClient(t, "acme", "hello", e.keys[scopeAda])
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMessage("m-1", a2a.TextPart{Text: "What time is it?"})})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("result %T, want a task", res)
	}
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("state %s, want completed: %+v", task.Status.State, task)
	}
	if got := historyText(task); !strings.Contains(got, "user: What time is it?") || !strings.Contains(got, "agent: Hello! I checked the clock") {
		t.Errorf("history:\n%s", got)
	}
	if string(task.ID) != task.ContextID+".1" {
		t.Errorf("task id %q, context %q", task.ID, task.ContextID)
	}
	got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(task)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		t.Errorf("tasks/get:\n%s\nmessage/send:\n%s", b, a)
	}
	one := 1
	if got, err = c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID, HistoryLength: &one}); err != nil || len(got.History) != 1 {
		t.Errorf("historyLength 1: %v, %d messages", err, len(got.History))
	}
	again, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMessage("m-1", a2a.TextPart{Text: "What time is it?"}),
		Config: &a2a.MessageSendConfig{Blocking: new(bool)}})
	if err != nil {
		t.Fatal(err)
	}
	if again.(*a2a.Task).ID != task.ID {
		t.Errorf("retried message: task %s, want %s", again.(*a2a.Task).ID, task.ID)
	}
	if chats := e.do(t, "GET", "/api/chats/acme", e.keys[scopeAda], nil).json(t)["chats"].([]any); len(chats) != 1 {
		t.Errorf("%d chats after a retried message, want 1", len(chats))
	}
}

func historyText(t *a2a.Task) string {
	var b strings.Builder
	for _, m := range t.History {
		for _, p := range m.Parts {
			if tp, ok := p.(a2a.TextPart); ok {
				fmt.Fprintf(&b, "%s: %s\n", m.Role, tp.Text)
			}
		}
	}
	return b.String()
}

// collect reads a stream to its end.
func collect(t *testing.T, seq func(func(a2a.Event, error) bool)) []a2a.Event {
	t.Helper()
	var evs []a2a.Event
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("stream: %v (after %d events)", err, len(evs))
		}
		evs = append(evs, ev)
	}
	return evs
}

// lastStatus returns the stream's final status update.
func lastStatus(t *testing.T, evs []a2a.Event) *a2a.TaskStatusUpdateEvent {
	t.Helper()
	su, ok := evs[len(evs)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || !su.Final {
		t.Fatalf("stream ended with %T %+v, want a final status update", evs[len(evs)-1], evs[len(evs)-1])
	}
	return su
}

func dataPart(m *a2a.Message) map[string]any {
	if m == nil {
		return nil
	}
	for _, p := range m.Parts {
		if d, ok := p.(a2a.DataPart); ok {
			return d.Data
		}
	}
	return nil
}

// TestA2AStreamGenerator drives the generator workflow over message/stream:
// each pause (an input request, a secret form, a UI tool) is input-required
// with a status message saying what is needed, and a message with the
// task's id answers it; the structured output arrives as a data artifact;
// the secret never comes back.
func TestA2AStreamGenerator(t *testing.T) {
	e := newEnv(t)
	c, _ := e.a2aClient(t, "acme", "generator", e.keys[scopeAda])
	ctx := context.Background()
	evs := collect(t, c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMessage("g-1", a2a.TextPart{Text: "I want to automate things."})}))
	task, ok := evs[0].(*a2a.Task)
	if !ok {
		t.Fatalf("first event %T, want the task", evs[0])
	}
	su := lastStatus(t, evs)
	if su.Status.State != a2a.TaskStateInputRequired || dataPart(su.Status.Message)["kind"] != "input" {
		t.Fatalf("status %+v, want input-required for an input", su.Status)
	}
	var said []string
	for _, ev := range evs {
		if s, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && s.Status.State == a2a.TaskStateWorking {
			said = append(said, s.Status.Message.Parts[0].(a2a.TextPart).Text)
		}
	}
	if !strings.Contains(strings.Join(said, "|"), "What would you like to automate?") {
		t.Errorf("agent messages %q", said)
	}
	send := func(id string, parts ...a2a.Part) *a2a.TaskStatusUpdateEvent {
		m := userMessage(id, parts...)
		m.TaskID = task.ID
		evs = collect(t, c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: m}))
		return lastStatus(t, evs)
	}
	su = send("g-2", a2a.TextPart{Text: "A weekly newsletter from our team notes."})
	if d := dataPart(su.Status.Message); su.Status.State != a2a.TaskStateInputRequired || d["kind"] != baton.PendingSecret || d["ui_event_id"] == "" {
		t.Fatalf("status %+v, want input-required for a secret", su.Status)
	}
	if !strings.Contains(su.Status.Message.Parts[0].(a2a.TextPart).Text, "web UI") {
		t.Errorf("the secret form's status message %+v does not name the web UI", su.Status.Message)
	}
	// A secret is never answered over A2A: the data part is refused,
	// naming the web UI, and the person answers there.
	m := userMessage("g-3", a2a.DataPart{Data: map[string]any{"NEWSLETTER_API_KEY": testSecret}})
	m.TaskID = task.ID
	if _, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: m}); !errors.Is(err, a2a.ErrUnsupportedOperation) || !strings.Contains(err.Error(), "web UI") {
		t.Fatalf("a secret over A2A: %v, want refused with a web UI link", err)
	}
	e.submitHTTP(t, &clientMessage{Type: msgUIResponse, ChatID: task.ContextID, UIEventID: dataPart(su.Status.Message)["ui_event_id"].(string),
		Status: "success", Data: json.RawMessage(`{"NEWSLETTER_API_KEY":"` + testSecret + `"}`)})
	testenv.Eventually(t, 10*time.Second, "the task waits for the UI tool", func() error {
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
		if err != nil {
			return err
		}
		if got.Status.State != a2a.TaskStateInputRequired || dataPart(got.Status.Message)["kind"] != baton.PendingUITool {
			return fmt.Errorf("status %+v", got.Status)
		}
		var artifacts int
		for _, a := range got.Artifacts {
			if strings.HasPrefix(string(a.ID), "structured-") {
				artifacts++
				if d, ok := a.Parts[0].(a2a.DataPart); !ok || d.Data["ActionPlan"] == nil {
					t.Errorf("structured artifact %+v", a)
				}
			}
		}
		if artifacts != 1 {
			return fmt.Errorf("%d structured artifacts, want 1", artifacts)
		}
		return nil
	})
	// A text answer to a UI tool is refused, naming what is needed.
	m = userMessage("g-wrong", a2a.TextPart{Text: "here"})
	m.TaskID = task.ID
	if _, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: m}); err == nil || !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), "data part") {
		t.Errorf("text answer to a UI tool: %v", err)
	}
	su = send("g-4", a2a.DataPart{Data: map[string]any{"action": "approve"}})
	if su.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("status %+v, want completed", su.Status)
	}
	if first := evs[0].(*a2a.Task); len(first.History) != 1 || len(first.History[0].Parts) != 0 {
		t.Errorf("the stream's first task echoes the message's data part: %+v", first.History)
	}
	final, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(final)
	if strings.Contains(string(b), testSecret) {
		t.Errorf("the secret is in the task: %s", b)
	}
	if final.Status.State != a2a.TaskStateCompleted || len(final.Artifacts) != 1 {
		t.Errorf("task %s", b)
	}
	// The completed task takes no more messages.
	m = userMessage("g-5", a2a.TextPart{Text: "more"})
	m.TaskID = task.ID
	if _, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: m}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("message to a completed task: %v", err)
	}
}

// TestA2AStreamDeltas: a streaming client gets the model's deltas as
// appended chunks of one artifact, which add up to the agent's message.
func TestA2AStreamDeltas(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	c, _ := e.a2aClient(t, "acme", "benchpaced", e.keys[scopeAda])
	evs := collect(t, c.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: userMessage("d-1", a2a.TextPart{Text: "Tell me."})}))
	var chunks strings.Builder
	var n int
	var final string
	for _, ev := range evs {
		switch ev := ev.(type) {
		case *a2a.TaskArtifactUpdateEvent:
			if n > 0 != ev.Append {
				t.Errorf("chunk %d: append %v", n, ev.Append)
			}
			n++
			chunks.WriteString(ev.Artifact.Parts[0].(a2a.TextPart).Text)
		case *a2a.TaskStatusUpdateEvent:
			if ev.Status.State == a2a.TaskStateWorking {
				final = ev.Status.Message.Parts[0].(a2a.TextPart).Text
			}
		}
	}
	if n < 10 || chunks.String() != final {
		t.Errorf("%d chunks %q, message %q", n, chunks.String(), final)
	}
	if lastStatus(t, evs).Status.State != a2a.TaskStateCompleted {
		t.Errorf("not completed")
	}
}

// seqs returns the baton_sequence of each recorded event of a stream (not
// of the task, whose sequence is the cursor it stands at).
func seqs(evs []a2a.Event) []int64 {
	var out []int64
	for _, ev := range evs {
		if _, ok := ev.(*a2a.Task); ok {
			continue
		}
		if v, ok := ev.Meta()[a2aSeqKey].(float64); ok {
			out = append(out, int64(v))
		}
	}
	return out
}

// TestA2AResubscribe: tasks/resubscribe from any baton_last_sequence yields
// exactly the recorded events after it (no gap, no duplicate); without one
// it starts with the task as it stands; a stream dropped mid-run and
// resubscribed at its last sequence adds up to the whole.
func TestA2AResubscribe(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	c, _ := e.a2aClient(t, "acme", "benchpaced", e.keys[scopeAda])
	ctx := context.Background()
	sctx, drop := context.WithCancel(ctx)
	var first []a2a.Event
	var id a2a.TaskID
	var cursor, chunks int
	for ev, err := range c.SendStreamingMessage(sctx, &a2a.MessageSendParams{Message: userMessage("r-1", a2a.TextPart{Text: "Tell me."})}) {
		if err != nil {
			t.Fatal(err)
		}
		if task, ok := ev.(*a2a.Task); ok {
			id = task.ID
		}
		if v, ok := ev.Meta()[a2aSeqKey].(float64); ok {
			cursor = int(v)
		}
		if _, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
			chunks++
		}
		first = append(first, ev)
		if chunks == 5 {
			break // the stream is dropped mid-run
		}
	}
	drop()
	if chunks != 5 {
		t.Fatalf("the stream ended after %d chunks", chunks)
	}
	got := seqs(first)
	rest := collect(t, c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id, Metadata: map[string]any{a2aLastSeqKey: cursor}}))
	got = append(got, seqs(rest)...)
	whole := seqs(collect(t, c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id, Metadata: map[string]any{a2aLastSeqKey: 0}})))
	if fmt.Sprint(got) != fmt.Sprint(whole) {
		t.Errorf("dropped and resubscribed: %v\nfrom the start:        %v", got, whole)
	}
	for i := 1; i < len(whole); i++ {
		if whole[i] <= whole[i-1] {
			t.Errorf("sequences out of order: %v", whole)
		}
	}
	if lastStatus(t, rest).Status.State != a2a.TaskStateCompleted {
		t.Errorf("resubscribed stream did not end completed")
	}
	// Without a cursor: the ended task, once.
	evs := collect(t, c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}))
	if task, ok := evs[0].(*a2a.Task); len(evs) != 1 || !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Errorf("resubscribe to an ended task: %d events, first %T", len(evs), evs[0])
	}
}

// TestA2ACancel: tasks/cancel stops a running task, which ends canceled; an
// ended task is not cancelable.
func TestA2ACancel(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	c, _ := e.a2aClient(t, "acme", "benchpaced", e.keys[scopeAda])
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMessage("c-1", a2a.TextPart{Text: "Tell me."}),
		Config: &a2a.MessageSendConfig{Blocking: new(bool)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	task, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("state %s, want canceled", task.Status.State)
	}
	if _, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); err != nil {
		t.Errorf("cancel a canceled task again: %v", err)
	}
	// The canceled task is immutable: a message naming it is refused; one
	// naming only its context starts the context's next task.
	m := userMessage("c-next", a2a.TextPart{Text: "Go on."})
	m.TaskID = id
	if _, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: m}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("message to a canceled task: %v", err)
	}
	m.TaskID, m.ContextID = "", task.ContextID
	next, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	if got := next.(*a2a.Task); string(got.ID) != task.ContextID+".2" || !got.Status.State.Terminal() {
		t.Errorf("next task %s %s, want %s.2 ended", got.ID, got.Status.State, task.ContextID)
	}
	if again, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: id}); err != nil || again.Status.State != a2a.TaskStateCanceled {
		t.Errorf("the first task after the second: %v %+v", err, again)
	}
	e2 := newEnv(t)
	c2, _ := e2.a2aClient(t, "acme", "hello", e2.keys[scopeAda])
	done, err := c2.SendMessage(ctx, &a2a.MessageSendParams{Message: userMessage("c-2", a2a.TextPart{Text: "hi"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.CancelTask(ctx, &a2a.TaskIDParams{ID: done.(*a2a.Task).ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Errorf("cancel a completed task: %v", err)
	}
}

// rpc posts one raw JSON-RPC request and returns the response's error code
// (0 for a result) and its body.
func (e *env) rpc(t *testing.T, path, key, body string) (int, string) {
	t.Helper()
	r := e.do(t, "POST", path, key, []byte(body))
	if r.status != http.StatusOK {
		return -r.status, string(r.body)
	}
	raw := r.body
	if i := strings.Index(string(raw), "data: "); i >= 0 && strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		raw = []byte(strings.SplitN(string(raw[i+6:]), "\n", 2)[0]) // a stream's first event
	}
	var resp struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("%s: %v", r.body, err)
	}
	if resp.Error == nil {
		return 0, string(raw)
	}
	return resp.Error.Code, string(raw)
}

// TestA2AErrors pins each method's JSON-RPC error codes (A2A §8): unknown
// tasks, another tenant's task, malformed and invalid params, unknown
// methods, unsupported features.
func TestA2AErrors(t *testing.T) {
	e := newEnv(t)
	c, _ := e.a2aClient(t, "acme", "hello", e.keys[scopeAda])
	res, err := c.SendMessage(context.Background(), &a2a.MessageSendParams{Message: userMessage("e-1", a2a.TextPart{Text: "hi"})})
	if err != nil {
		t.Fatal(err)
	}
	id := string(res.(*a2a.Task).ID)
	ada, bob, mallory := e.keys[scopeAda], e.keys[scopeBob], e.keys[scopeMallory]
	req := func(method, params string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":` + params + `}`
	}
	for _, c := range []struct {
		name, path, key, body string
		code                  int
		says                  string
	}{
		{"get", "/a2a/acme/hello", ada, req("tasks/get", `{"id":"`+id+`"}`), 0, `"state":"completed"`},
		{"get unknown", "/a2a/acme/hello", ada, req("tasks/get", `{"id":"nope.1"}`), -32001, "task not found"},
		{"get malformed id", "/a2a/acme/hello", ada, req("tasks/get", `{"id":"nope"}`), -32001, "task not found"},
		{"get later run", "/a2a/acme/hello", ada, req("tasks/get", `{"id":"`+strings.TrimSuffix(id, ".1")+`.2"}`), -32001, "task not found"},
		{"get other user", "/a2a/acme/hello", bob, req("tasks/get", `{"id":"`+id+`"}`), -32001, "task not found"},
		{"get other app", "/a2a/umbrella/hello", mallory, req("tasks/get", `{"id":"`+id+`"}`), -32001, "task not found"},
		{"get other workflow", "/a2a/acme/generator", ada, req("tasks/get", `{"id":"`+id+`"}`), -32001, "task not found"},
		{"get bad history", "/a2a/acme/hello", ada, req("tasks/get", `{"id":"`+id+`","historyLength":-1}`), -32602, "historyLength"},
		{"get params mistyped", "/a2a/acme/hello", ada, req("tasks/get", `{"id":42}`), -32700, "parse error"},
		{"cancel unknown", "/a2a/acme/hello", ada, req("tasks/cancel", `{"id":"nope.1"}`), -32001, "task not found"},
		{"cancel other app", "/a2a/umbrella/hello", mallory, req("tasks/cancel", `{"id":"`+id+`"}`), -32001, "task not found"},
		{"cancel completed", "/a2a/acme/hello", ada, req("tasks/cancel", `{"id":"`+id+`"}`), -32002, "canceled"},
		{"send no message", "/a2a/acme/hello", ada, req("message/send", `{}`), -32602, "message: required"},
		{"send bad history", "/a2a/acme/hello", ada, req("message/send", `{"message":{"messageId":"neg","role":"user","parts":[{"kind":"text","text":"x"}]},"configuration":{"historyLength":-1}}`), -32602, "historyLength"},
		{"send no id", "/a2a/acme/hello", ada, req("message/send", `{"message":{"role":"user","parts":[{"kind":"text","text":"x"}]}}`), -32602, "message.messageId"},
		{"send agent role", "/a2a/acme/hello", ada, req("message/send", `{"message":{"messageId":"x","role":"agent","parts":[{"kind":"text","text":"x"}]}}`), -32602, "message.role"},
		{"send file part", "/a2a/acme/hello", ada, req("message/send", `{"message":{"messageId":"x","role":"user","parts":[{"kind":"file","file":{"uri":"http://x"}}]}}`), -32602, "message.parts[0]"},
		{"send unknown context", "/a2a/acme/hello", ada, req("message/send", `{"message":{"messageId":"x","role":"user","contextId":"nope","parts":[{"kind":"text","text":"x"}]}}`), -32001, "not found"},
		{"send other app's task", "/a2a/umbrella/hello", mallory, req("message/send", `{"message":{"messageId":"x","role":"user","taskId":"`+id+`","parts":[{"kind":"text","text":"x"}]}}`), -32001, "not found"},
		{"send bad context var", "/a2a/acme/hello", ada, req("message/send", `{"message":{"messageId":"y","role":"user","parts":[{"kind":"data","data":{"nope":1}}]}}`), -32602, "nope"},
		{"stream unknown task", "/a2a/acme/hello", ada, req("message/stream", `{"message":{"messageId":"x","role":"user","taskId":"nope.1","parts":[{"kind":"text","text":"x"}]}}`), -32001, "task not found"},
		{"resubscribe unknown", "/a2a/acme/hello", ada, req("tasks/resubscribe", `{"id":"nope.1"}`), -32001, "task not found"},
		{"resubscribe bad cursor", "/a2a/acme/hello", ada, req("tasks/resubscribe", `{"id":"`+id+`","metadata":{"baton_last_sequence":"x"}}`), -32602, "baton_last_sequence"},
		{"unknown method", "/a2a/acme/hello", ada, req("tasks/list", `{}`), -32601, "method not found"},
		{"push config", "/a2a/acme/hello", ada, req("tasks/pushNotificationConfig/get", `{"id":"`+id+`"}`), -32003, "push notification"},
		{"not json", "/a2a/acme/hello", ada, `{"jsonrpc":`, -32700, "parse error"},
		{"wrong version", "/a2a/acme/hello", ada, `{"jsonrpc":"1.0","id":1,"method":"tasks/get"}`, -32600, "invalid request"},
		{"no key", "/a2a/acme/hello", "", req("tasks/get", `{"id":"`+id+`"}`), -401, "API key"},
		{"unknown workflow", "/a2a/acme/nope", ada, req("tasks/get", `{"id":"`+id+`"}`), -404, "nope"},
	} {
		code, body := e.rpc(t, c.path, c.key, c.body)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: code %d, want %d saying %q: %s", c.name, code, c.code, c.says, body)
		}
		if c.key != ada && strings.Contains(body, "Hello!") {
			t.Errorf("%s: another tenant sees the task: %s", c.name, body)
		}
	}
}

// TestA2AInputAcrossTurns: a conversational pause is input-required; the
// next message/send in the same context (no task id) answers it in the same
// task, exactly once when retried.
func TestA2AInputAcrossTurns(t *testing.T) {
	e := newEnv(t)
	c, _ := e.a2aClient(t, "acme", "generator", e.keys[scopeAda])
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMessage("t-1", a2a.TextPart{Text: "hi"})})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("state %s", task.Status.State)
	}
	m := userMessage("t-2", a2a.TextPart{Text: "A newsletter."})
	m.ContextID = task.ContextID
	for range 2 { // the retry is the same input
		res, err = c.SendMessage(ctx, &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: new(bool)}})
		if err != nil {
			t.Fatal(err)
		}
		if res.(*a2a.Task).ID != task.ID {
			t.Fatalf("task %s, want %s", res.(*a2a.Task).ID, task.ID)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the task waits for the secret form", func() error {
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
		if err != nil {
			return err
		}
		if got.Status.State != a2a.TaskStateInputRequired || dataPart(got.Status.Message)["kind"] != baton.PendingSecret {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	// A blocking retry once the message was applied (the chat waits for a
	// form now, which a text would not answer) is still the same input: it
	// returns the task as the input left it.
	res, err = c.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatalf("blocking retry: %v", err)
	}
	if got := res.(*a2a.Task); got.ID != task.ID || got.Status.State != a2a.TaskStateInputRequired {
		t.Errorf("blocking retry: task %s %s", got.ID, got.Status.State)
	}
	got, _ := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
	if n := strings.Count(historyText(got), "user: A newsletter."); n != 1 {
		t.Errorf("the message is in the history %d times:\n%s", n, historyText(got))
	}
}
