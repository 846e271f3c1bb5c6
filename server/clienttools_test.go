package server

import (
	"bytes"
	"context"
	"iter"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/workflow"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// clientToolsDir holds the desk workflow: Desk may call the client's
// get_location, Clerk did not opt in.
const clientToolsDir = "../engine/testdata/clienttools"

// offeredTools records the tool names of every model request, per agent,
// in front of the workflows' scripted providers.
type offeredTools struct {
	mu    sync.Mutex
	names map[string][][]string
}

func (o *offeredTools) providers(wf *workflow.Workflow) (baton.Provider, error) {
	sp, err := scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
	if err != nil {
		return nil, err
	}
	return streamFunc(func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
		var names []string
		for _, d := range req.Tools {
			names = append(names, d.Name)
		}
		o.mu.Lock()
		if o.names == nil {
			o.names = map[string][][]string{}
		}
		o.names[req.Agent] = append(o.names[req.Agent], names)
		o.mu.Unlock()
		return sp.Stream(ctx, req)
	}), nil
}

func (o *offeredTools) of(agent string) [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.names[agent])
}

// checkNeverOffered fails unless agent was called, never with tool name.
func (o *offeredTools) checkNeverOffered(t *testing.T, agent, name string) {
	t.Helper()
	reqs := o.of(agent)
	if len(reqs) == 0 {
		t.Fatalf("%s was never called", agent)
	}
	for _, names := range reqs {
		if slices.Contains(names, name) {
			t.Fatalf("%s, which did not opt in, was offered the client's %s: %v", agent, name, names)
		}
	}
}

type streamFunc func(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error]

func (f streamFunc) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return f(ctx, req)
}

var locationToolJSON = map[string]any{
	"name":        "get_location",
	"description": "Where the person is, from their browser.",
	"parameters":  map[string]any{"type": "object", "properties": map[string]any{"precision": map[string]any{"enum": []string{"city", "street"}}}, "required": []string{"precision"}},
}

// toolResponses returns the chat's recorded chat.tool_response payloads.
func (e *env) toolResponses(t *testing.T, chatID string) []baton.ToolResponsePayload {
	t.Helper()
	evs, err := e.store.Events(context.Background(), scopeAda, chatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []baton.ToolResponsePayload
	for i := range evs {
		if evs[i].Type == baton.TypeChatToolResponse {
			p, err := baton.DecodePayload[baton.ToolResponsePayload](&evs[i])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// TestAGUI_ClientTools: a tool the client offers in RunAgentInput.tools is
// called by the agent that may use it: the call streams as TOOL_CALL_*
// and the run ends with it pending; the next run's tool message is the
// tool's result, as the client gave it, and the model goes on. Clerk, which
// did not opt in, never sees the tool; nobody else can answer the call;
// a tool named as one of the workflow's is refused.
func TestAGUI_ClientTools(t *testing.T) {
	var offered offeredTools
	e := newEnv(t, withWorkflows(clientToolsDir), withProvider(offered.providers))
	key := e.keys[scopeAda]
	withTools := func(in map[string]any) map[string]any {
		in["tools"] = []any{locationToolJSON}
		return in
	}

	first := e.agui(t, "desk", key, withTools(aguiInputOf("desk-1", "r1", userMsg("u-1", "Where am I?"))))
	verifyAGUI(t, first)
	checkAGUISchema(t, first)
	outcome, result := first.outcome(t)
	chatID, _ := result["chat_id"].(string)
	pending := pendingCalls(outcome)
	if len(pending) != 1 {
		t.Fatalf("first run's outcome %v: want one pending tool call", outcome)
	}
	var start aguiEv
	for _, ev := range first.find("TOOL_CALL_START") {
		if ev.str("toolCallId") == pending[0] {
			start = ev
		}
	}
	if start == nil || start.str("toolCallName") != "get_location" {
		t.Fatalf("no TOOL_CALL_START of get_location for the pending call %s: %v", pending[0], first.types())
	}
	args := ""
	for _, ev := range first.find("TOOL_CALL_ARGS") {
		if ev.str("toolCallId") == pending[0] {
			args += ev.str("delta")
		}
	}
	if !strings.Contains(args, `"precision":"city"`) {
		t.Fatalf("the call's arguments %q", args)
	}
	for _, raw := range first.raw {
		if bytes.Contains(raw, []byte("__client_tools")) || bytes.Contains(raw, []byte("from their browser")) {
			t.Fatalf("the chat's reserved client tools reached the client: %s", raw)
		}
	}
	chat := e.waitStatus(t, chatID, baton.ChatWaitingUITool)
	if len(chat.Pending) != 1 || chat.Pending[0].Kind != baton.PendingClientTool || chat.Pending[0].ToolCallID != pending[0] {
		t.Fatalf("pending %+v, want the client_tool call %s", chat.Pending, pending[0])
	}

	// Another user of the app, another app: the call is not theirs (404);
	// ada herself cannot answer it through the generic input route.
	body := map[string]any{"chat_id": chatID, "ui_event_id": chat.Pending[0].UIEventID, "status": "success", "data": "Lyon"}
	for _, sc := range []baton.Scope{scopeBob, scopeMallory} {
		if r := e.do(t, "POST", "/api/input/submit", e.keys[sc], body); r.status != http.StatusNotFound {
			t.Fatalf("%v answers ada's client tool: %d %s", sc, r.status, r.body)
		}
	}
	if r := e.do(t, "POST", "/api/input/submit", key, body); r.status != http.StatusConflict || !strings.Contains(string(r.body), "client application") {
		t.Fatalf("the client tool answered through /api/input/submit: %d %s", r.status, r.body)
	}

	history := []map[string]any{
		userMsg("u-1", "Where am I?"),
		{"id": "a-1", "role": "assistant", "toolCalls": []any{map[string]any{"id": pending[0], "type": "function", "function": map[string]any{"name": "get_location", "arguments": args}}}},
		{"id": "t-1", "role": "tool", "toolCallId": pending[0], "content": `{"city":"Paris"}`},
	}
	second := e.agui(t, "desk", key, withTools(aguiInputOf("desk-1", "r2", history...)))
	verifyAGUI(t, second)
	checkAGUISchema(t, second)
	if _, result := second.outcome(t); result["waiting"] != "input" {
		t.Fatalf("second run's result %v, want it waiting for input", result)
	}
	_, text := second.texts()
	var all []string
	for _, s := range text {
		all = append(all, s)
	}
	if !slices.Contains(all, "Noted where you are.") || !slices.Contains(all, "Filed.") {
		t.Fatalf("second run's messages %q: want Desk's and Clerk's", all)
	}
	resp := e.toolResponses(t, chatID)
	if len(resp) != 1 || resp[0].Content != `{"city":"Paris"}` || resp[0].Status != baton.ToolStatusOK || resp[0].ToolCallID != pending[0] {
		t.Fatalf("tool responses %+v, want the client's content once, as given", resp)
	}
	offered.checkNeverOffered(t, "Clerk", "get_location")
	if desk := offered.of("Desk"); len(desk) != 2 || !slices.Contains(desk[0], "get_location") || !slices.Contains(desk[1], "get_location") {
		t.Fatalf("Desk was offered %v, want get_location in both requests", desk)
	}

	// A client tool named as the workflow's own tool is refused.
	bad := aguiInputOf("desk-2", "r1", userMsg("u-1", "hi"))
	bad["tools"] = []any{locationToolJSON, map[string]any{"name": "file_ticket", "description": "mine"}}
	if r := e.agui(t, "desk", key, bad); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "tools[1].name") {
		t.Fatalf("a client tool named file_ticket: %d %s", r.status, r.body)
	}
}

// TestOpenAI_ClientTools: with the official client, a request's function
// tools reach the agent that may use them; its call comes back as
// tool_calls (finish_reason tool_calls), the tool message answers it, and
// the final text arrives. A tool named as the workflow's is a 400 naming
// tools[i].name; a tool of another type is refused.
func TestOpenAI_ClientTools(t *testing.T) {
	var offered offeredTools
	e := newEnv(t, withWorkflows(clientToolsDir), withProvider(offered.providers))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.oaiClient(scopeAda)
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_location",
		Description: openai.String("Where the person is, from their browser."),
		Parameters:  shared.FunctionParameters(locationToolJSON["parameters"].(map[string]any)),
	})}
	hist := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where am I?")}
	var hr *http.Response
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: hist, Tools: tools}, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	msg := first.Choices[0].Message
	if first.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_location" ||
		!strings.Contains(msg.ToolCalls[0].Function.Arguments, `"precision":"city"`) {
		t.Fatalf("first reply: %s", first.RawJSON())
	}
	chatID := hr.Header.Get("X-Baton-Chat-Id")
	chat := e.waitStatus(t, chatID, baton.ChatWaitingUITool)
	if len(chat.Pending) != 1 || chat.Pending[0].Kind != baton.PendingClientTool || chat.Pending[0].UIEventID != msg.ToolCalls[0].ID {
		t.Fatalf("pending %+v, want the client_tool call %s", chat.Pending, msg.ToolCalls[0].ID)
	}

	hist = append(hist, msg.ToParam(), openai.ToolMessage("Paris, 4th arrondissement", msg.ToolCalls[0].ID))
	second, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: hist, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if second.Choices[0].FinishReason != "stop" || !strings.Contains(second.Choices[0].Message.Content, "Noted where you are.") {
		t.Fatalf("second reply: %s", second.RawJSON())
	}
	resp := e.toolResponses(t, chatID)
	if len(resp) != 1 || resp[0].Content != "Paris, 4th arrondissement" || resp[0].Status != baton.ToolStatusOK {
		t.Fatalf("tool responses %+v, want the client's content once, as given", resp)
	}
	offered.checkNeverOffered(t, "Clerk", "get_location")

	// Streamed, a new conversation: the call arrives in the chunks, the
	// tool message answers it, the final text streams.
	sh := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where am I now?")}
	sfirst, _ := oaiStreamAll(t, c, ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: sh, Tools: tools})
	smsg := sfirst.Choices[0].Message
	if sfirst.Choices[0].FinishReason != "tool_calls" || len(smsg.ToolCalls) != 1 || smsg.ToolCalls[0].Function.Name != "get_location" {
		t.Fatalf("first streamed reply: %+v", sfirst.Choices)
	}
	sh = append(sh, smsg.ToParam(), openai.ToolMessage("Lyon", smsg.ToolCalls[0].ID))
	ssecond, _ := oaiStreamAll(t, c, ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: sh, Tools: tools})
	if ssecond.Choices[0].FinishReason != "stop" || !strings.Contains(ssecond.Choices[0].Message.Content, "Noted where you are.") {
		t.Fatalf("second streamed reply: %+v", ssecond.Choices)
	}

	// Another user's tool message to ada's chat finds no chat.
	_, err = e.oaiClient(scopeBob).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "desk", Tools: tools,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.ToolMessage("Lyon", msg.ToolCalls[0].ID)}}, option.WithHeader("X-Baton-Chat-Id", chatID))
	if apiErr := asAPIError(t, err); apiErr.StatusCode != 404 || apiErr.Code != "chat_not_found" {
		t.Fatalf("bob answers ada's client tool: %d %s %s", apiErr.StatusCode, apiErr.Code, apiErr.Message)
	}

	clash := append(tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "file_ticket"}))
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, Tools: clash})
	if apiErr := asAPIError(t, err); apiErr.StatusCode != 400 || apiErr.Param != "tools[1].name" {
		t.Fatalf("a client tool named file_ticket: %d %q %s", apiErr.StatusCode, apiErr.Param, apiErr.Message)
	}
	r := e.do(t, "POST", "/v1/chat/completions", e.keys[scopeAda], map[string]any{
		"model": "desk", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"tools": []any{map[string]any{"type": "custom", "custom": map[string]any{"name": "x"}}},
	})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "tools[0].type") {
		t.Fatalf("a custom tool: %d %s", r.status, r.body)
	}
}

// TestClientTools_OtherProtocolsSaySo: a chat paused on a client's tool
// cannot be answered over MCP (which offers no tools), nor resumed: they
// say so instead of hanging or asking the person; an MCP client that can
// elicit is not asked.
func TestClientTools_OtherProtocolsSaySo(t *testing.T) {
	e := newEnv(t, withWorkflows(clientToolsDir))
	in := aguiInputOf("desk-mcp", "r1", userMsg("u-1", "Where am I?"))
	in["tools"] = []any{locationToolJSON}
	first := e.agui(t, "desk", e.keys[scopeAda], in)
	_, result := first.outcome(t)
	chatID, _ := result["chat_id"].(string)
	e.waitStatus(t, chatID, baton.ChatWaitingUITool)

	asked := 0
	c := e.mcpConnect(t, e.keys[scopeAda], "", func(*mcp.ElicitParams) *mcp.ElicitResult {
		asked++
		return &mcp.ElicitResult{Action: "decline"}
	})
	res := c.call(t, "desk", map[string]any{"chat_id": chatID})
	if sc := structured(t, res); sc["status"] != string(baton.ChatWaitingUITool) || !strings.Contains(resultText(res), "client application") || asked != 0 {
		t.Fatalf("MCP on a chat waiting for a client tool: %v %q (elicited %d times)", sc, resultText(res), asked)
	}
	res = c.call(t, "desk", map[string]any{"chat_id": chatID, "input": "Paris"})
	if !res.IsError || !strings.Contains(resultText(res), "client application") {
		t.Fatalf("MCP answering a client tool: %q, want it refused, saying why", resultText(res))
	}
	// A2A: a message to the chat's context is refused, saying why.
	ac, _ := e.a2aClient(t, "acme", "desk", e.keys[scopeAda])
	m := userMessage("a2a-1", a2a.TextPart{Text: "Paris"})
	m.ContextID = chatID
	if _, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m}); err == nil || !strings.Contains(err.Error(), "client application") {
		t.Fatalf("A2A answering a client tool: %v, want it refused, saying why", err)
	}
	if r := e.do(t, "POST", "/api/chats/acme/"+chatID+"/resume", e.keys[scopeAda], nil); r.status != http.StatusConflict || !strings.Contains(string(r.body), "client application") {
		t.Fatalf("resume of a chat waiting for a client tool: %d %s", r.status, r.body)
	}
	if resp := e.toolResponses(t, chatID); len(resp) != 0 {
		t.Fatalf("the call was answered: %+v", resp)
	}
}

// bombParameters is a client tool schema whose validation costs 2^depth:
// each definition refers twice to the one before it.
func bombParameters(depth int) map[string]any {
	defs := map[string]any{"d0": map[string]any{"required": []string{"x"}}}
	for i := 1; i <= depth; i++ {
		ref := map[string]any{"$ref": "#/$defs/d" + strconv.Itoa(i-1)}
		defs["d"+strconv.Itoa(i)] = map[string]any{"anyOf": []any{ref, ref}}
	}
	return map[string]any{"type": "object", "$defs": defs, "$ref": "#/$defs/d" + strconv.Itoa(depth)}
}

// TestClientTools_SchemaBombRefused: over AG-UI and Chat Completions (the
// official client), a client tool whose parameters refer to other schemas
// is a 400 naming tools[i].parameters and the keyword, before any run; a
// plain nested schema is accepted and its tool called.
func TestClientTools_SchemaBombRefused(t *testing.T) {
	e := newEnv(t, withWorkflows(clientToolsDir))
	key := e.keys[scopeAda]
	bomb := map[string]any{"name": "bomb", "description": "never validated", "parameters": bombParameters(40)}

	in := aguiInputOf("desk-bomb", "r1", userMsg("u-1", "Where am I?"))
	in["tools"] = []any{locationToolJSON, bomb}
	if r := e.agui(t, "desk", key, in); r.status != http.StatusBadRequest ||
		!strings.Contains(string(r.body), "tools[1].parameters") || !strings.Contains(string(r.body), `$ref`) {
		t.Fatalf("AG-UI with a schema bomb: %d %s", r.status, r.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.oaiClient(scopeAda)
	tool := func(name string, params map[string]any) openai.ChatCompletionToolUnionParam {
		return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: name, Parameters: shared.FunctionParameters(params)})
	}
	hi := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where am I?")}
	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: hi,
		Tools: []openai.ChatCompletionToolUnionParam{tool("bomb", bombParameters(40))}})
	if apiErr := asAPIError(t, err); apiErr.StatusCode != 400 || apiErr.Param != "tools[0].parameters" || !strings.Contains(apiErr.Message, `"$ref" is not allowed`) {
		t.Fatalf("Chat Completions with a schema bomb: %d %q %s", apiErr.StatusCode, apiErr.Param, apiErr.Message)
	}

	// A plain schema, nested, is still accepted.
	nestedParams := map[string]any{"type": "object", "properties": map[string]any{
		"precision": map[string]any{"enum": []string{"city", "street"}},
		"near": map[string]any{"type": "object", "properties": map[string]any{
			"at": map[string]any{"type": "array", "items": map[string]any{"type": "number"}},
			"by": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}},
		}},
	}, "required": []string{"precision"}}
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "desk", Messages: hi,
		Tools: []openai.ChatCompletionToolUnionParam{tool("get_location", nestedParams)}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Choices[0].FinishReason != "tool_calls" || first.Choices[0].Message.ToolCalls[0].Function.Name != "get_location" {
		t.Fatalf("with a nested schema: %s", first.RawJSON())
	}
}
