package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// The MCP tests drive /mcp with the official go-sdk client over the live
// httptest server, with API keys; cmd/baton's tests drive `baton mcp` over
// stdio with the same client.

// mcpClient is a go-sdk client session on /mcp, and what it was asked.
type mcpClient struct {
	*mcp.ClientSession
	mu       sync.Mutex
	asked    []*mcp.ElicitParams
	progress []string
}

func (c *mcpClient) elicited() []*mcp.ElicitParams {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked)
}

func (c *mcpClient) progressed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.progress)
}

// mcpConnect connects a go-sdk client to /mcp with key, speaking version
// ("" for the SDK's latest). answer, when set, makes the client declare
// elicitation and answers each request with it.
func (e *env) mcpConnect(t *testing.T, key, version string, answer func(*mcp.ElicitParams) *mcp.ElicitResult) *mcpClient {
	t.Helper()
	c := &mcpClient{}
	opts := &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, r.Params.Message)
			c.mu.Unlock()
		},
	}
	if answer != nil {
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			c.mu.Lock()
			c.asked = append(c.asked, r.Params)
			c.mu.Unlock()
			return answer(r.Params), nil
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "baton-test", Version: "1"}, opts)
	hc := &http.Client{Transport: bearerTransport{key: key, next: e.ts.Client().Transport}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.ts.URL + "/mcp", HTTPClient: hc, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("mcp connect: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	c.ClientSession = sess
	return c
}

// call calls a workflow tool with a progress token.
func (c *mcpClient) call(t *testing.T, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	p.SetProgressToken("tok-" + tool)
	res, err := c.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

// resultText joins a result's text contents.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// structured decodes a result's structuredContent.
func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		t.Fatalf("structuredContent %s is not an object: %v", raw, err)
	}
	return m
}

func TestMCP_ListToolsAndCallHello(t *testing.T) {
	e := newEnv(t)
	c := e.mcpConnect(t, e.keys[scopeAda], "", nil)
	ctx := context.Background()
	tools, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		byName[tl.Name] = tl
	}
	for _, name := range []string{"hello", "generator"} {
		tl := byName[name]
		if tl == nil {
			t.Fatalf("tools %v: no %s", slices.Collect(mapKeys(byName)), name)
		}
		if wf := e.eng.Workflow(name); !strings.HasPrefix(tl.Description, wf.Config.Description) {
			t.Errorf("%s: description %q, want the workflow's", name, tl.Description)
		}
		schema, _ := json.Marshal(tl.InputSchema)
		if !strings.Contains(string(schema), `"input"`) || !strings.Contains(string(schema), `"chat_id"`) {
			t.Errorf("%s: input schema %s", name, schema)
		}
	}
	// generator's one visual agent with a model makes its output schema.
	out, _ := json.Marshal(byName["generator"].OutputSchema)
	if !strings.Contains(string(out), `"output"`) || !strings.Contains(string(out), `"ActionPlan"`) || !strings.Contains(string(out), `"$defs"`) {
		t.Errorf("generator's output schema has no ActionPlanOutput: %s", out)
	}

	res := c.call(t, "hello", map[string]any{"input": "What time is it?"})
	if res.IsError {
		t.Fatalf("hello: error result: %s", resultText(res))
	}
	if got := resultText(res); !strings.Contains(got, "Hello! I checked the clock in UTC") {
		t.Errorf("hello's text %q: want Greeter's answer", got)
	}
	sc := structured(t, res)
	id, _ := sc["chat_id"].(string)
	if sc["status"] != "completed" || id == "" {
		t.Fatalf("structured content %v: want completed with a chat_id", sc)
	}
	chat := e.waitStatus(t, id, baton.ChatCompleted)
	if chat.Workflow != "hello" {
		t.Errorf("chat %s is of %q", id, chat.Workflow)
	}
	// Progress came while the run streamed: the speaker, the tool call, the
	// answer. The server sends each notification before the result, but the
	// client may hand them to its handler after the call returned.
	testenv.Eventually(t, 10*time.Second, "progress messages with the speaker and its answer", func() error {
		got := c.progressed()
		if !slices.Contains(got, "Greeter is working") || !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "Greeter: Hello!") }) {
			return fmt.Errorf("progress messages %q", got)
		}
		return nil
	})
	// The chat is ada's: the API shows it, as the MCP call left it.
	if r := e.do(t, "GET", "/api/chats/acme/"+id, e.keys[scopeAda], nil); r.status != 200 {
		t.Errorf("the MCP chat through the API: %d %s", r.status, r.body)
	}
	// Called again with the chat id and no input, the tool gives the chat's
	// latest result again, reading the store.
	again := c.call(t, "hello", map[string]any{"chat_id": id})
	if resultText(again) != resultText(res) || structured(t, again)["status"] != "completed" {
		t.Errorf("again: %q %v, want %q", resultText(again), again.StructuredContent, resultText(res))
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestMCP_ElicitationAnswered runs generator through a client that takes
// elicitation, on the latest protocol (the call returns inputRequests and
// the client calls again: SEP-2322) and on 2025-11-25 (the server sends
// elicitation/create while the call runs): the interview question and the
// action plan are answered in the client; the secret form is not (MCP must
// not carry secrets): the result links to the web UI, and once the secret
// is given there, a call with the chat id goes on to the end.
func TestMCP_ElicitationAnswered(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		name := version
		if name == "" {
			name = "latest"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c := e.mcpConnect(t, e.keys[scopeAda], version, func(p *mcp.ElicitParams) *mcp.ElicitResult {
				schema, _ := json.Marshal(p.RequestedSchema)
				switch {
				case strings.Contains(string(schema), `"message"`):
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"message": "a weekly newsletter from our notes"}}
				case strings.Contains(string(schema), `"response"`):
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"response": "approve"}}
				}
				return &mcp.ElicitResult{Action: "decline"}
			})
			res := c.call(t, "generator", map[string]any{"input": "I want to automate something"})
			sc := structured(t, res)
			id, _ := sc["chat_id"].(string)
			if sc["status"] != "waiting_secret" || id == "" {
				t.Fatalf("first call: %v %q: want the chat waiting for the secret form", sc, resultText(res))
			}
			asked := c.elicited()
			if len(asked) != 1 || !strings.Contains(asked[0].Message, "What would you like to automate?") {
				t.Fatalf("elicited %d: %+v: want the interview question once", len(asked), asked)
			}
			if txt := resultText(res); !strings.Contains(txt, "web UI at "+e.ts.URL+"/?app=acme#chat="+id) || !strings.Contains(txt, id) {
				t.Errorf("secret form result %q: want the web UI link and the chat id", txt)
			}
			w, _ := sc["waiting_for"].(map[string]any)
			uiEventID, _ := w["ui_event_id"].(string)
			if w["tool"] != "collect_api_keys" || uiEventID == "" {
				t.Fatalf("waiting_for %v: want collect_api_keys and its ui_event_id", w)
			}
			// The person gives the secret in the web UI (here, its API).
			r := e.do(t, "POST", "/api/input/submit", e.keys[scopeAda], map[string]any{
				"app": "acme", "chat_id": id, "ui_event_id": uiEventID, "data": map[string]string{"NEWSLETTER_API_KEY": testSecret}})
			if r.status != http.StatusAccepted {
				t.Fatalf("submit the secret: %d %s", r.status, r.body)
			}
			// The chat goes on to the action plan; the call with its id shows the
			// plan in an elicitation, approved, and the run ends.
			e.waitStatus(t, id, baton.ChatWaitingUITool)
			res = c.call(t, "generator", map[string]any{"chat_id": id})
			sc = structured(t, res)
			if sc["status"] != "completed" || sc["chat_id"] != id {
				t.Fatalf("second call: %v %q: want completed", sc, resultText(res))
			}
			asked = c.elicited()
			if len(asked) != 2 || !strings.Contains(asked[1].Message, "Weekly Newsletter") {
				t.Fatalf("elicited %+v: want the action plan second", asked)
			}
			if txt := resultText(res); !strings.Contains(txt, "Your Weekly Newsletter workflow is approved") {
				t.Errorf("final text %q: want DeliveryAgent's", txt)
			}
			if strings.Contains(resultText(res), testSecret) {
				t.Fatal("the secret is in a result")
			}
			out, _ := sc["output"].(map[string]any)
			if plan, _ := out["ActionPlan"].(map[string]any); plan == nil {
				t.Errorf("output %v: want ActionPlanAgent's structured output", sc["output"])
			}
			e.waitStatus(t, id, baton.ChatCompleted)
			// Each answer went in once.
			users, uis := 0, 0
			for _, raw := range e.history(t, id) {
				v := decodeEnvelope(t, raw)
				if v.Type == baton.TypeChatText && v.str("agent") == "user" && v.str("content") == "a weekly newsletter from our notes" {
					users++
				}
				if v.Type == baton.TypeChatToolResponse && v.str("tool_name") == "action_plan" {
					uis++
				}
			}
			if users != 1 || uis != 1 {
				t.Errorf("the answer recorded %d times, the plan's response %d times: want once each", users, uis)
			}
		})
	}
}

// TestMCP_NoElicitationContinuesByChatID: a client without elicitation
// gets a result that says what the chat waits for and its id; a call with
// the id and the answer goes on.
func TestMCP_NoElicitationContinuesByChatID(t *testing.T) {
	e := newEnv(t)
	c := e.mcpConnect(t, e.keys[scopeAda], "", nil)
	res := c.call(t, "generator", nil)
	sc := structured(t, res)
	id, _ := sc["chat_id"].(string)
	if sc["status"] != "waiting_input" || id == "" || res.IsError {
		t.Fatalf("first call: %v %q: want waiting_input with a chat_id", sc, resultText(res))
	}
	txt := resultText(res)
	if !strings.Contains(txt, "What would you like to automate?") || !strings.Contains(txt, `chat_id "`+id+`"`) {
		t.Errorf("result %q: want the question and how to continue", txt)
	}
	// Bob, of the same app, and mallory, of another, do not see ada's chat.
	for _, sc := range []baton.Scope{scopeBob, scopeMallory} {
		other := e.mcpConnect(t, e.keys[sc], "", nil)
		r := other.call(t, "generator", map[string]any{"chat_id": id, "input": "hijack"})
		if !r.IsError || !strings.Contains(resultText(r), "not found") || strings.Contains(resultText(r), "automate") || r.StructuredContent != nil {
			t.Errorf("%s continues ada's chat: %v %q: want a not-found error and no data", sc.User, r.StructuredContent, resultText(r))
		}
	}
	res = c.call(t, "generator", map[string]any{"chat_id": id, "input": "a weekly newsletter"})
	sc = structured(t, res)
	if sc["status"] != "waiting_secret" || sc["chat_id"] != id {
		t.Fatalf("continued: %v %q: want the secret form next", sc, resultText(res))
	}
	if txt := resultText(res); !strings.Contains(txt, "MCP does not carry") {
		t.Errorf("result %q: want it to say secrets go to the web UI", txt)
	}
	// Input for the secret form over MCP is refused.
	r := c.call(t, "generator", map[string]any{"chat_id": id, "input": `{"NEWSLETTER_API_KEY":"x"}`})
	if !r.IsError || !strings.Contains(resultText(r), "secrets") {
		t.Errorf("a secret over MCP: %q: want it refused", resultText(r))
	}
	// A chat of another workflow is refused by name.
	r = c.call(t, "hello", map[string]any{"chat_id": id})
	if !r.IsError || !strings.Contains(resultText(r), "generator") {
		t.Errorf("generator's chat through hello: %q", resultText(r))
	}
	// Bad arguments name the field.
	r = c.call(t, "hello", map[string]any{"message": "hi"})
	if !r.IsError || !strings.Contains(resultText(r), "message: unknown argument") {
		t.Errorf("an unknown argument: %q", resultText(r))
	}
}

// TestMCP_RetryByChatIDWithKey: a call that continues a chat with a
// message and an idempotency_key, retried after the chat recorded the
// message and its answer (the client lost the result), gets the same
// result, and the message is recorded once.
func TestMCP_RetryByChatIDWithKey(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	c := e.mcpConnect(t, e.keys[scopeAda], "", nil)
	id, _ := structured(t, c.call(t, "notify", map[string]any{"input": "Is my report ready?"}))["chat_id"].(string)
	args := map[string]any{"chat_id": id, "input": "Please check the weekly one.", "idempotency_key": "k-1"}
	first := resultText(c.call(t, "notify", args))
	e.waitStatus(t, id, baton.ChatWaitingInput)
	again := resultText(c.call(t, "notify", args))
	if !strings.Contains(first, "Your report is ready") || again != first {
		t.Fatalf("results %q and %q: want the answer to the message twice", first, again)
	}
	if msgs := userTexts(t, e, id); len(msgs) != 2 {
		t.Fatalf("the person's messages %q: the retry is recorded again", msgs)
	}
}

// TestMCP_RetryAsksNoAnsweredQuestion: a keyed call retried after the
// person answered, within the first call, a question its message led to
// goes on from where the chat stands: the answered question is not asked
// again (its new answer would be dropped as the first one's retry), only
// the one still waiting is.
func TestMCP_RetryAsksNoAnsweredQuestion(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "notify"), os.DirFS(filepath.Join(benchDir, "notify"))); err != nil {
		t.Fatal(err)
	}
	script := `{"agents": {"Assistant": [{"text": "Hello! What can I do?"}, {"text": "Your report is ready: 12 pages."}, {"text": "The monthly one is ready too."}, {"text": "Nothing else."}]}}`
	if err := os.WriteFile(filepath.Join(dir, "notify", "scripted.json"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withWorkflows(dir))
	var mu sync.Mutex
	var asked []string
	accept := false
	c := e.mcpConnect(t, e.keys[scopeAda], "", func(p *mcp.ElicitParams) *mcp.ElicitResult {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, p.Message)
		if accept {
			accept = false // the next question is declined
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"message": "answer"}}
		}
		return &mcp.ElicitResult{Action: "decline"}
	})
	questions := func(answerNext bool) int {
		mu.Lock()
		defer mu.Unlock()
		accept = answerNext
		return len(asked)
	}
	id, _ := structured(t, c.call(t, "notify", map[string]any{"input": "Is my report ready?"}))["chat_id"].(string)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	args := map[string]any{"chat_id": id, "input": "Please check the weekly one.", "idempotency_key": "k-1"}
	questions(true) // the question the message leads to is answered, the next declined
	c.call(t, "notify", args)
	e.waitStatus(t, id, baton.ChatWaitingInput)
	before := questions(false)
	c.call(t, "notify", args)
	mu.Lock()
	again := slices.Clone(asked[before:])
	mu.Unlock()
	if len(again) != 1 || !strings.Contains(again[0], "The monthly one is ready too.") {
		t.Fatalf("the retry asked %q: want only the question still waiting", again)
	}
	if msgs := userTexts(t, e, id); !slices.Equal(msgs, []string{"Is my report ready?", "Please check the weekly one.", "answer"}) {
		t.Fatalf("the person's messages %q", msgs)
	}
}

func TestMCP_Auth(t *testing.T) {
	e := newEnv(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	hdr := []string{"Accept", "application/json, text/event-stream"}
	for _, key := range []string{"", "bk_wrong"} {
		r := e.do(t, "POST", "/mcp", key, body, hdr...)
		if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("key %q: %d %s: want 401 with WWW-Authenticate", key, r.status, r.body)
		}
	}
	// The SDK client is refused too.
	client := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	hc := &http.Client{Transport: bearerTransport{key: "bk_wrong", next: e.ts.Client().Transport}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.ts.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil); err == nil {
		s.Close()
		t.Error("a wrong key connected")
	}
	// A session belongs to the key that opened it.
	r := e.do(t, "POST", "/mcp", e.keys[scopeAda], body, hdr...)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s (session %q)", r.status, r.body, sid)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	r = e.do(t, "POST", "/mcp", e.keys[scopeBob], list, append(hdr, "Mcp-Session-Id", sid, "Mcp-Protocol-Version", "2025-11-25")...)
	if r.status != http.StatusForbidden {
		t.Errorf("bob in ada's session: %d %s: want 403", r.status, r.body)
	}
}

func TestMCPToolName(t *testing.T) {
	used := map[string]bool{}
	for _, c := range []struct{ in, want string }{
		{"hello", "hello"},
		{"my flow/v2", "my_flow_v2"},
		{"my_flow_v2", "my_flow_v2_2"},
		{"", "workflow"},
		{strings.Repeat("x", 200), strings.Repeat("x", 128)},
		{strings.Repeat("x", 130), strings.Repeat("x", 126) + "_2"},
	} {
		if got := mcpToolName(c.in, used); got != c.want {
			t.Errorf("mcpToolName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzMCPArgs: a tool call's arguments decode or fail with EINVALID and a
// message; what decodes was one JSON object (or nothing).
func FuzzMCPArgs(f *testing.F) {
	for _, s := range []string{`{"input":"hi"}`, `{"input":"hi","chat_id":"c","idempotency_key":"k"}`, `{"input":1}`,
		`{"message":"x"}`, `[]`, `null`, ``, `{} {}`, `{"input":"a"`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var args mcpArgs
		err := decodeMCPArgs(data, &args)
		if err != nil {
			if baton.ErrorCode(err) != baton.EINVALID || baton.ErrorMessage(err) == "" {
				t.Fatalf("error %v: code %q", err, baton.ErrorCode(err))
			}
			return
		}
		if len(data) > 0 && string(data) != "null" && !json.Valid(data) {
			t.Fatalf("accepted %q", data)
		}
	})
}

// FuzzMCPState: a requestState from the client decodes to a chat, a
// request and a sequence, or is refused with EINVALID.
func FuzzMCPState(f *testing.F) {
	f.Add("eyJjIjoiYyIsInIiOiJyIiwibCI6M30") // {"c":"c","r":"r","l":3}
	f.Add("")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := decodeMCPState(s)
		if err != nil {
			if baton.ErrorCode(err) != baton.EINVALID {
				t.Fatalf("error %v", err)
			}
			return
		}
		if st.ChatID == "" || st.Request == "" || st.Last < 0 {
			t.Fatalf("accepted %q as %+v", s, st)
		}
	})
}

// TestMCP_ElicitationHoldsNoStreamSlot: on 2025-11-25 a call asks with
// elicitation/create while it runs, and a person (or a client that went
// away) may take long or never answer. The waiting call holds none of its
// key's open streams — with MaxStreamsPerKey 1 another call of the key
// runs meanwhile — and it waits for mcpElicitTimeout at most, then ends
// with the chat waiting, as for a client without elicitation.
func TestMCP_ElicitationHoldsNoStreamSlot(t *testing.T) {
	t.Run("slot", func(t *testing.T) {
		e := newEnv(t, withConfig(func(c *Config) { c.MaxStreamsPerKey = 1 }))
		asked, answer := make(chan struct{}), make(chan struct{})
		c := e.mcpConnect(t, e.keys[scopeAda], "2025-11-25", func(*mcp.ElicitParams) *mcp.ElicitResult {
			close(asked)
			<-answer
			return &mcp.ElicitResult{Action: "decline"}
		})
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			p := &mcp.CallToolParams{Name: "generator"}
			res, err := c.CallTool(context.Background(), p)
			if err != nil {
				t.Errorf("generator: %v", err)
			}
			done <- res
		}()
		<-asked
		other := e.mcpConnect(t, e.keys[scopeAda], "", nil)
		res := other.call(t, "hello", map[string]any{"input": "hi"})
		if res.IsError {
			t.Errorf("a call while another waits for an elicitation: %q: want it to run (the waiting call holds no stream)", resultText(res))
		}
		close(answer)
		if res := <-done; res != nil && res.IsError {
			t.Errorf("declined elicitation: %q", resultText(res))
		}
	})
	t.Run("timeout", func(t *testing.T) {
		e := newEnv(t)
		e.srv.mcpElicitTimeout = 100 * time.Millisecond
		never := make(chan struct{})
		c := e.mcpConnect(t, e.keys[scopeAda], "2025-11-25", func(*mcp.ElicitParams) *mcp.ElicitResult {
			<-never
			return &mcp.ElicitResult{Action: "decline"}
		})
		t.Cleanup(func() { close(never) })
		res := c.call(t, "generator", nil)
		sc := structured(t, res)
		if id, _ := sc["chat_id"].(string); sc["status"] != "waiting_input" || id == "" || res.IsError {
			t.Fatalf("an unanswered elicitation: %v %q: want the call to end with the chat waiting", sc, resultText(res))
		}
	})
}

// TestMCP_SessionsPerKey: each initialize opens a session that lasts 30
// minutes idle, so a key has at most mcpMaxSessions open; the next
// initialize is refused with 429, another key is not, and a closed session
// (DELETE) frees its place.
func TestMCP_SessionsPerKey(t *testing.T) {
	e := newEnv(t)
	e.srv.mcpMaxSessions = 2
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	hdr := []string{"Accept", "application/json, text/event-stream"}
	first := e.mcpConnect(t, e.keys[scopeAda], "", nil)
	e.mcpConnect(t, e.keys[scopeAda], "", nil)
	r := e.do(t, "POST", "/mcp", e.keys[scopeAda], body, hdr...)
	if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "MCP sessions") {
		t.Fatalf("a third session: %d %s: want 429", r.status, r.body)
	}
	e.mcpConnect(t, e.keys[scopeBob], "", nil) // bob's own count
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a closed session frees its place", func() error {
		r := e.do(t, "POST", "/mcp", e.keys[scopeAda], body, hdr...)
		if r.status != http.StatusOK {
			return fmt.Errorf("initialize: %d %s", r.status, r.body)
		}
		return nil
	})
}
