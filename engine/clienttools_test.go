package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/workflow"
)

// requestLog records, per agent, the tools each model request offered and
// its tool messages, in front of the workflows' scripted providers.
type requestLog struct {
	mu    sync.Mutex
	tools map[string][][]string // agent → per request, the tool names offered
	tool  map[string][]string   // agent → the content of every tool message it was sent
}

func (l *requestLog) provider() harnessOption {
	l.tools, l.tool = map[string][][]string{}, map[string][]string{}
	return withProvider(func(wf *workflow.Workflow) (baton.Provider, error) {
		sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		if err != nil {
			return nil, err
		}
		return providerFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
			var names []string
			for _, d := range req.Tools {
				names = append(names, d.Name)
			}
			l.mu.Lock()
			l.tools[req.Agent] = append(l.tools[req.Agent], names)
			l.tool[req.Agent] = nil
			for _, m := range req.Messages {
				if m.Role == baton.RoleTool {
					l.tool[req.Agent] = append(l.tool[req.Agent], m.Content)
				}
			}
			l.mu.Unlock()
			return sp.Stream(ctx, req)
		}), nil
	})
}

// offered returns the tool names of each of agent's requests so far.
func (l *requestLog) offered(agent string) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.tools[agent])
}

// toolMessages returns the tool messages of agent's last request.
func (l *requestLog) toolMessages(agent string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.tool[agent])
}

var locationTool = baton.ClientTool{
	Name:        "get_location",
	Description: "Where the person is, from their browser.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"precision":{"enum":["city","street"]}},"required":["precision"]}`),
}

// startDesk starts the desk workflow with the client's tools and the
// person's first message.
func startDesk(t *testing.T, h *harness, tools ...baton.ClientTool) string {
	t.Helper()
	c, err := h.eng.Start(context.Background(), testScope, "desk", baton.StartOptions{Message: "Where am I?", ClientTools: tools})
	if err != nil {
		t.Fatalf("start desk: %v", err)
	}
	return c.ID
}

// TestClientTools_CallPausesUntilTheClientAnswers: the agent that opted
// in is offered the client's tool; its call pauses the chat (a client_tool
// request, waiting_ui_tool) and survives a restart; the client's answer is
// the tool's result exactly as given, and the model goes on. The agent
// that did not opt in never sees the tool.
func TestClientTools_CallPausesUntilTheClientAnswers(t *testing.T) {
	var log requestLog
	h := newHarness(t, withWorkflows("testdata/clienttools"), log.provider())
	ctx := context.Background()
	id := startDesk(t, h, locationTool)
	h.waitStatus(id, baton.ChatWaitingUITool)
	p := h.pending(id, baton.PendingClientTool)
	if p.ToolName != "get_location" || p.Agent != "Desk" || p.UIEventID == "" {
		t.Fatalf("pending = %+v", p)
	}
	var call baton.ToolCallPayload
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolCall {
			if err := json.Unmarshal(ev.Payload, &call); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !call.AwaitingResponse || call.PendingKind != baton.PendingClientTool || call.UIEventID != p.UIEventID || call.ToolCallID != p.ToolCallID {
		t.Fatalf("chat.tool_call = %+v, want awaiting, pending_kind client_tool, ui_event_id %s", call, p.UIEventID)
	}
	if got := log.offered("Desk"); len(got) != 1 || !slices.Contains(got[0], "get_location") {
		t.Fatalf("Desk was offered %v, want get_location", got)
	}

	h = h.restart() // paused on the client: nothing in memory is needed to go on
	const answer = `Paris, "Rue de Rivoli"`
	raw, _ := json.Marshal(answer)
	for _, other := range []baton.Scope{{App: testScope.App, User: "bob"}, {App: "umbrella", User: testScope.User}} {
		if err := h.eng.RespondUIWithTools(ctx, other, id, "other-1", p.UIEventID, "success", json.RawMessage(`"Lyon"`), nil); baton.ErrorCode(err) != baton.ENOTFOUND {
			t.Fatalf("%v answers the call: %v, want ENOTFOUND", other, err)
		}
	}
	if err := h.eng.RespondUI(ctx, testScope, id, p.UIEventID, "success", raw); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	var resp baton.ToolResponsePayload
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolResponse {
			if err := json.Unmarshal(ev.Payload, &resp); err != nil {
				t.Fatal(err)
			}
		}
	}
	if resp.Content != answer || resp.Status != baton.ToolStatusOK || resp.ToolCallID != p.ToolCallID || resp.UIEventID != p.UIEventID {
		t.Fatalf("chat.tool_response = %+v, want the client's content %q as given", resp, answer)
	}
	if got := log.toolMessages("Desk"); !slices.Equal(got, []string{answer}) {
		t.Fatalf("Desk's model was sent tool messages %q, want [%q]", got, answer)
	}
	clerk := log.offered("Clerk")
	if len(clerk) == 0 {
		t.Fatal("Clerk was never called")
	}
	for _, names := range clerk {
		if slices.Contains(names, "get_location") {
			t.Fatalf("Clerk, which did not opt in, was offered the client's tool: %v", names)
		}
		if !slices.Contains(names, "file_ticket") {
			t.Fatalf("Clerk was offered %v, want its own file_ticket", names)
		}
	}
	c, err := h.store.GetChat(ctx, testScope, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pending) != 0 {
		t.Fatalf("pending after the answer: %+v", c.Pending)
	}
}

// TestClientTools_InvalidArgumentsGoBackToTheModel: a call whose arguments
// fail the client tool's schema is answered with the error at once; the
// chat never waits for the client.
func TestClientTools_InvalidArgumentsGoBackToTheModel(t *testing.T) {
	var log requestLog
	h := newHarness(t, withWorkflows("testdata/clienttools"), log.provider())
	strict := locationTool
	strict.Parameters = json.RawMessage(`{"type":"object","properties":{"precision":{"enum":["country"]}},"required":["precision"]}`)
	id := startDesk(t, h, strict)
	h.waitStatus(id, baton.ChatWaitingInput)
	var resp baton.ToolResponsePayload
	for _, ev := range h.events(id) {
		switch ev.Type {
		case baton.TypeChatToolCall:
			if strings.Contains(string(ev.Payload), `"awaiting_response":true`) {
				t.Fatalf("a call with invalid arguments waits for the client: %s", ev.Payload)
			}
		case baton.TypeChatToolResponse:
			if err := json.Unmarshal(ev.Payload, &resp); err != nil {
				t.Fatal(err)
			}
		}
	}
	if resp.Status != baton.ToolStatusError || !strings.Contains(resp.Content, "Invalid arguments for get_location") || !strings.Contains(resp.Content, "/precision") {
		t.Fatalf("chat.tool_response = %+v, want the schema error for the model", resp)
	}
}

// TestClientTools_NewestSetWins: a message that comes with no tools takes
// the client's tools away: the agent's next request offers none, and its
// call of the tool is answered as for an unknown tool, with no pause. The
// set lives in the chat, not in the engine: the restart in between loses
// nothing.
func TestClientTools_NewestSetWins(t *testing.T) {
	var log requestLog
	h := newHarness(t, withWorkflows("testdata/clienttools"), log.provider())
	ctx := context.Background()
	id := startDesk(t, h, locationTool)
	h.waitStatus(id, baton.ChatWaitingUITool)
	p := h.pending(id, baton.PendingClientTool)
	if err := h.eng.RespondUIWithTools(ctx, testScope, id, "answer-1", p.UIEventID, "success", json.RawMessage(`"Paris"`), []baton.ClientTool{locationTool}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	h = h.restart()
	if err := h.eng.SubmitWithTools(ctx, testScope, id, "msg-2", "And now?", "agui", nil); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(id, baton.ChatWaitingInput)
	desk := log.offered("Desk")
	if len(desk) != 4 {
		t.Fatalf("Desk made %d requests, want 4 (a call and a text in each turn): %v\n%s", len(desk), desk, h.dump(id))
	}
	if !slices.Contains(desk[1], "get_location") {
		t.Fatalf("Desk was offered %v in its second request, want get_location (the answer offered it again)", desk[1])
	}
	for _, names := range desk[2:] {
		if slices.Contains(names, "get_location") {
			t.Fatalf("after a message offering no tools Desk was still offered %v", names)
		}
	}
	for _, ev := range h.events(id) {
		if ev.Type == baton.TypeChatToolCall && strings.Contains(string(ev.Payload), `"precision":"street"`) && strings.Contains(string(ev.Payload), `"awaiting_response":true`) {
			t.Fatalf("a call of a tool no longer offered waits for the client: %s", ev.Payload)
		}
	}
}

// TestClientTools_CheckRefusesTheWorkflowsNames: a client's tool may not
// take the name of a workflow tool, a transfer tool or a built-in, nor come
// with a schema that does not compile; the error names the field.
func TestClientTools_CheckRefusesTheWorkflowsNames(t *testing.T) {
	h := newHarness(t, withWorkflows("testdata/clienttools"))
	many := make([]baton.ClientTool, baton.MaxClientTools+1)
	for i := range many {
		many[i] = baton.ClientTool{Name: fmt.Sprintf("t%d", i)}
	}
	big := baton.ClientTool{Name: "big", Description: strings.Repeat("x", baton.MaxClientToolBytes)}
	for _, tc := range []struct {
		tools []baton.ClientTool
		want  string
	}{
		{many, "tools: more than 64 tools"},
		{[]baton.ClientTool{locationTool, big}, "tools[1]: larger than"},
		{[]baton.ClientTool{locationTool, {Name: "file_ticket"}}, `tools[1].name: "file_ticket" is a tool of workflow "desk"`},
		{[]baton.ClientTool{{Name: "transfer_to_Clerk"}}, `tools[0].name: "transfer_to_Clerk" is a tool of workflow`},
		{[]baton.ClientTool{{Name: "get_event_info"}}, `tools[0].name: "get_event_info"`},
		{[]baton.ClientTool{{Name: "x", Parameters: json.RawMessage(`{"type":"string"}`)}}, `tools[0].parameters: not a usable JSON Schema`},
		{[]baton.ClientTool{{Name: "x"}, {Name: "x"}}, `tools[1].name: "x" is offered twice`},
		{[]baton.ClientTool{{Name: "a b"}}, `tools[0].name:`},
	} {
		err := h.eng.CheckClientTools("desk", tc.tools)
		if baton.ErrorCode(err) != baton.EINVALID || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckClientTools(%v) = %v, want EINVALID %q", tc.tools, err, tc.want)
		}
		if _, err := h.eng.Start(context.Background(), testScope, "desk", baton.StartOptions{ClientTools: tc.tools}); baton.ErrorCode(err) != baton.EINVALID {
			t.Errorf("Start with %v = %v, want EINVALID", tc.tools, err)
		}
	}
	if err := h.eng.CheckClientTools("desk", []baton.ClientTool{locationTool}); err != nil {
		t.Errorf("CheckClientTools(get_location) = %v", err)
	}
}
