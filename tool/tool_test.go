package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/tool"
	"go.uber.org/goleak"
)

var _ tool.Publisher = (*bus.Bus)(nil)

func TestMain(m *testing.M) {
	if os.Getenv(mcpServerEnv) != "" {
		runMCPServer() // the test binary re-executed as a stdio MCP server
		return
	}
	// Every goroutine the registry starts (MCP session watchers, command
	// pipes) must have ended when the tests have.
	goleak.VerifyTestMain(m)
}

const wfDir = "testdata/wf"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is a Publisher that keeps the events.
type recorder struct {
	mu     sync.Mutex
	events []baton.Event
}

func (r *recorder) Publish(_ context.Context, ev baton.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) all() []baton.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]baton.Event(nil), r.events...)
}

func newRegistry(t *testing.T, specs []tool.Spec, opts ...tool.Option) *tool.Registry {
	t.Helper()
	r, err := tool.New(wfDir, specs, append([]tool.Option{tool.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func lookup(t *testing.T, r *tool.Registry, agent, name string) baton.Tool {
	t.Helper()
	tl, err := r.Tool(context.Background(), agent, name)
	if err != nil {
		t.Fatalf("Tool(%s, %s): %v", agent, name, err)
	}
	return tl
}

func callCtx(callID string) *baton.CallContext {
	return &baton.CallContext{
		ChatID: "chat-1", App: "app", User: "u", Workflow: "wf", Agent: "A",
		TurnKey: "turn-1", ToolCallID: callID,
	}
}

func mustCall(t *testing.T, tl baton.Tool, cc *baton.CallContext, args string) baton.ToolResult {
	t.Helper()
	res, err := tl.Call(context.Background(), cc, json.RawMessage(args))
	if err != nil {
		t.Fatalf("Call %s(%s): %v", tl.Name(), args, err)
	}
	return res
}

type addArgs struct {
	A int `json:"a" jsonschema:"the first number"`
	B int `json:"b" jsonschema:"the second number"`
}

var addTool = tool.MustFunc("add", "adds two numbers", func(_ context.Context, cc *baton.CallContext, in addArgs) (string, error) {
	if err := cc.Vars.Set("last_sum", in.A+in.B); err != nil {
		return "", err
	}
	return strconv.Itoa(in.A + in.B), nil
})

func TestGoToolSchemaIsDerived(t *testing.T) {
	var schema struct {
		Type       string                     `json:"type"`
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(addTool.Parameters(), &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || len(schema.Required) != 2 || !strings.Contains(string(schema.Properties["a"]), "the first number") {
		t.Fatalf("schema = %s", addTool.Parameters())
	}
	if _, err := tool.Func("bad", "", func(context.Context, *baton.CallContext, int) (string, error) { return "", nil }); err == nil {
		t.Fatal("Func with a non-struct argument type: want an error")
	}
}

func TestGoTool(t *testing.T) {
	rec := &recorder{}
	r := newRegistry(t, []tool.Spec{{Agent: "A", Function: "add", Kind: tool.KindGo}}, tool.WithFuncs(addTool), tool.WithPublisher(rec))
	add := lookup(t, r, "A", "add")

	res := mustCall(t, add, callCtx("c1"), `{"a": 2, "b": 3}`)
	if res.Status != baton.ToolStatusOK || res.Content != "5" || string(res.Updates["last_sum"]) != "5" {
		t.Fatalf("result = %+v", res)
	}

	tests := []struct{ args, want string }{
		{`{"a": 2}`, "missing property 'b'"},
		{`{"a": "two", "b": 3}`, "at /a"},
		{`{"a": 1, "b": 2, "c": 3}`, "additional properties 'c'"},
		{`[1, 2]`, "must be a JSON object"},
		{`{"a": 1,`, "not valid JSON"},
	}
	for _, tt := range tests {
		res := mustCall(t, add, callCtx("c2"), tt.args)
		if res.Status != baton.ToolStatusError || !strings.Contains(res.Content, tt.want) {
			t.Errorf("args %s: result = %+v, want an error containing %q", tt.args, res, tt.want)
		}
	}

	evs := rec.all()
	if len(evs) != 1+len(tests) {
		t.Fatalf("%d events, want %d", len(evs), 1+len(tests))
	}
	var p struct {
		ToolName   string   `json:"tool_name"`
		Status     string   `json:"status"`
		DurationMS *float64 `json:"duration_ms"`
	}
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != baton.TypeToolExecuted || evs[0].ChatID() != "chat-1" || p.ToolName != "add" || p.Status != "ok" || p.DurationMS == nil {
		t.Fatalf("first event = %s %s", evs[0].Type, evs[0].Payload)
	}
	if evs[1].Type != baton.TypeToolError || !strings.Contains(string(evs[1].Payload), "missing property") {
		t.Fatalf("second event = %s %s", evs[1].Type, evs[1].Payload)
	}
}

func TestGoToolPanicTimeoutAndError(t *testing.T) {
	type none struct{}
	panicky := tool.MustFunc("panicky", "", func(context.Context, *baton.CallContext, none) (string, error) {
		panic("tool exploded")
	})
	slow := tool.MustFunc("slow", "", func(ctx context.Context, _ *baton.CallContext, _ none) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	failing := tool.MustFunc("failing", "", func(context.Context, *baton.CallContext, none) (string, error) {
		return "", errors.New("no such customer")
	})
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Function: "panicky"},
		{Agent: "A", Function: "slow", TimeoutSeconds: 0.05},
		{Agent: "A", Function: "failing"},
	}, tool.WithFuncs(panicky, slow, failing))

	res := mustCall(t, lookup(t, r, "A", "panicky"), callCtx("p"), `{}`)
	if res.Status != baton.ToolStatusError || !strings.Contains(res.Content, "panic") {
		t.Fatalf("panic result = %+v", res)
	}
	res = mustCall(t, lookup(t, r, "A", "slow"), callCtx("s"), `{}`)
	if res.Status != baton.ToolStatusError || !strings.Contains(res.Content, "timed out after 50ms") {
		t.Fatalf("timeout result = %+v", res)
	}
	res = mustCall(t, lookup(t, r, "A", "failing"), callCtx("f"), ``)
	if res.Status != baton.ToolStatusError || res.Content != "no such customer" {
		t.Fatalf("error result = %+v", res)
	}

	// A cancelled caller is a Go error, not a result for the model.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lookup(t, r, "A", "slow").Call(ctx, callCtx("s2"), json.RawMessage(`{}`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: err = %v", err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	type none struct{}
	var running, maxRunning atomic.Int32
	release := make(chan struct{})
	gate := tool.MustFunc("gate", "", func(ctx context.Context, _ *baton.CallContext, _ none) (string, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	r := newRegistry(t, []tool.Spec{{Agent: "A", Function: "gate", MaxConcurrency: 2, TimeoutSeconds: 10}}, tool.WithFuncs(gate))
	g := lookup(t, r, "A", "gate")

	const calls = 6
	var wg sync.WaitGroup
	results := make(chan baton.ToolResult, calls)
	for i := range calls {
		wg.Go(func() {
			res, err := g.Call(context.Background(), callCtx(fmt.Sprint(i)), json.RawMessage(`{}`))
			if err != nil {
				t.Error(err)
			}
			results <- res
		})
	}
	testenv.Eventually(t, 5*time.Second, "two calls to run at once", func() error {
		if n := running.Load(); n < 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	close(release)
	wg.Wait()
	close(results)
	for res := range results {
		if res.Content != "done" {
			t.Errorf("result = %+v", res)
		}
	}
	if m := maxRunning.Load(); m != 2 {
		t.Fatalf("at most %d calls ran at once, want 2", m)
	}
}

func TestCommandTool(t *testing.T) {
	specs := []tool.Spec{
		{Agent: "A", Name: "echo", File: "echo.sh", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
		{Agent: "A", Name: "env", File: "env.sh", Function: "fn", Env: []string{"PASSED_VAR", "MY_SECRET"}},
		{Agent: "A", Name: "fail", File: "fail.sh"},
		{Agent: "A", Name: "huge", File: "huge.sh"},
	}
	r := newRegistry(t, specs, tool.WithMaxOutput(1000))

	res := mustCall(t, lookup(t, r, "A", "echo"), callCtx("e"), `{"text": "héllo"}`)
	if res.Status != "ok" || res.Content != `{"text": "héllo"}` || string(res.Updates["seen_chat"]) != `"chat-1"` {
		t.Fatalf("echo = %+v", res)
	}
	res = mustCall(t, lookup(t, r, "A", "echo"), callCtx("e"), `{"text": 1}`)
	if res.Status != "error" || !strings.Contains(res.Content, "at /text") {
		t.Fatalf("echo with bad args = %+v", res)
	}

	t.Setenv("PASSED_VAR", "yes")
	t.Setenv("NOT_PASSED", "leak")
	cc := callCtx("env-call")
	cc.Vars = baton.NewContextVars(map[string]json.RawMessage{"plan": json.RawMessage(`{"steps":2}`)})
	// A secret never replaces the process's variables or baton's.
	cc.Secrets = map[string]string{"MY_SECRET": "s3cret", "PATH": "/forged", "PASSED_VAR": "forged", "BATON_CHAT_ID": "forged"}
	res = mustCall(t, lookup(t, r, "A", "env"), cc, `{}`)
	if strings.Contains(res.Content, "forged") {
		t.Errorf("a secret replaced a variable of the process or of baton:\n%s", res.Content)
	}
	for _, want := range []string{
		"BATON_CHAT_ID=chat-1", "BATON_AGENT=A", "BATON_WORKFLOW=wf", "BATON_TOOL_CALL_ID=env-call",
		"BATON_FUNCTION=fn", "BATON_EFFECT_KEY=chat-1/turn-1/env-call", `BATON_CONTEXT={"plan":{"steps":2}}`,
		"MY_SECRET=[redacted]", "PASSED_VAR=yes",
	} {
		if !strings.Contains(res.Content, want) {
			t.Errorf("env output lacks %q:\n%s", want, res.Content)
		}
	}
	if strings.Contains(res.Content, "NOT_PASSED") {
		t.Errorf("an unlisted variable reached the command:\n%s", res.Content)
	}

	res = mustCall(t, lookup(t, r, "A", "fail"), callCtx("f"), `{}`)
	if res.Status != "error" || !strings.Contains(res.Content, "exited with status 3") ||
		!strings.Contains(res.Content, "fatal: the thing broke") || strings.Contains(res.Content, "stderr line 5\n") {
		t.Fatalf("fail = %+v", res)
	}

	res = mustCall(t, lookup(t, r, "A", "huge"), callCtx("h"), `{}`)
	if res.Status != "ok" || len(res.Content) > 1200 || !strings.Contains(res.Content, "[output truncated: 1000 of 8000000 bytes shown]") {
		t.Fatalf("huge: status %s, %d bytes, tail %q", res.Status, len(res.Content), res.Content[max(0, len(res.Content)-80):])
	}
}

func TestCommandToolTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	t.Setenv("PID_FILE", pidFile)
	r := newRegistry(t, []tool.Spec{{Agent: "A", Name: "sleepy", File: "sleepy.sh", Env: []string{"PID_FILE"}, TimeoutSeconds: 2}}) // time for the script to start its three children under load
	start := time.Now()
	res := mustCall(t, lookup(t, r, "A", "sleepy"), callCtx("s"), `{}`)
	if res.Status != "error" || !strings.Contains(res.Content, "timed out") {
		t.Fatalf("sleepy = %+v", res)
	}
	if d := time.Since(start); d > 20*time.Second { // a hang, not a measure: the call must not wait for the children
		t.Fatalf("the call took %s after a 2s timeout", d)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(raw))
	if len(pids) != 4 {
		t.Fatalf("pid file = %q, want 4 pids (script, child, subshell, grandchild)", raw)
	}
	testenv.Eventually(t, 5*time.Second, "every process of the timed-out call to end", func() error {
		for _, p := range pids {
			if alive(p) {
				return fmt.Errorf("process %s still runs", p)
			}
		}
		return nil
	})
}

// TestCommandToolExitKillsLeftovers checks that a command that exits and
// leaves a child behind gets its result, and the child does not outlive the
// call.
func TestCommandToolExitKillsLeftovers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	t.Setenv("PID_FILE", pidFile)
	r := newRegistry(t, []tool.Spec{{Agent: "A", Name: "daemon", File: "daemon.sh", Env: []string{"PID_FILE"}, TimeoutSeconds: 10}})
	res := mustCall(t, lookup(t, r, "A", "daemon"), callCtx("d"), `{}`)
	if res.Status != "ok" || res.Content != "started" {
		t.Fatalf("daemon = %+v", res)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(raw))
	testenv.Eventually(t, 5*time.Second, "the command's child to end with the call", func() error {
		if alive(pid) {
			return fmt.Errorf("child %s still runs", pid)
		}
		return nil
	})
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// state is the field after the ")" that ends the command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z") && !strings.HasPrefix(s[i+1:], " X")
}

func TestCommandSpecErrors(t *testing.T) {
	tests := []struct {
		spec tool.Spec
		want string
	}{
		{tool.Spec{Agent: "A", Name: "x", File: "plain.txt"}, "not an executable"},
		{tool.Spec{Agent: "A", Name: "x", File: "missing.sh"}, "missing.sh"},
		{tool.Spec{Agent: "A", Name: "x", File: "../wf/tools/echo.sh"}, "inside the tools folder"},
		{tool.Spec{Agent: "A", Name: "x", Kind: tool.KindGo, Function: "nope"}, `"nope" is not registered`},
		{tool.Spec{Agent: "A", Name: "x", Kind: tool.KindMCP, Server: "nope"}, "not declared"},
		{tool.Spec{Agent: "A", Name: "x", File: "echo.sh", Parameters: json.RawMessage(`{"type":"string"}`)}, `must be "object"`},
		{tool.Spec{Agent: "A", Name: "x", File: "echo.sh", Parameters: json.RawMessage(`{"$ref":"file:///etc/passwd"}`)}, "not allowed"},
		{tool.Spec{Agent: "A", Name: "x", File: "echo.sh", SideEffects: true}, "no effect ledger"},
		{tool.Spec{Agent: "A", Name: "x", ToolType: tool.TypeUI}, "ui.component"},
		{tool.Spec{Agent: "A", Name: "x", ToolType: "Magic_Tool"}, "tool_type"},
	}
	for _, tt := range tests {
		_, err := tool.New(wfDir, []tool.Spec{tt.spec}, tool.WithLogger(quiet))
		if err == nil || !strings.Contains(err.Error(), tt.want) || baton.ErrorCode(err) != baton.EINVALID {
			t.Errorf("spec %+v: err = %v, want EINVALID containing %q", tt.spec, err, tt.want)
		}
	}
}

func TestHTTPTool(t *testing.T) {
	var got struct {
		sync.Mutex
		header http.Header
		body   string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		got.Lock()
		got.header, got.body = req.Header.Clone(), string(b)
		got.Unlock()
		switch req.URL.Path {
		case "/ok":
			w.Header().Set("Content-Type", "application/json")
			content, _ := json.Marshal("received " + string(b))
			fmt.Fprintf(w, `{"content": %s, "context_updates": {"order": 7}}`, content)
		case "/plain":
			io.WriteString(w, "plain answer")
		case "/missing":
			http.Error(w, "no such order", http.StatusNotFound)
		case "/boom":
			http.Error(w, "database down", http.StatusInternalServerError)
		case "/huge":
			chunk := strings.Repeat("x", 1<<16)
			for range 200 { // 12.5 MiB
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
		case "/slow":
			<-req.Context().Done()
		default:
			if strings.HasPrefix(req.URL.Path, "/orders/") {
				content, _ := json.Marshal(req.URL.EscapedPath() + " " + req.URL.RawQuery)
				fmt.Fprintf(w, `{"content": %s}`, content)
			}
		}
	}))
	defer srv.Close()
	t.Setenv("ORDERS_TOKEN", "tok-123")

	spec := func(name, path string) tool.Spec {
		return tool.Spec{Agent: "A", Name: name, URL: srv.URL + path, Headers: map[string]string{"Authorization": "Bearer ${ORDERS_TOKEN}"},
			HeadersFromEnv: map[string]string{"X-Api-Key": "ORDERS_TOKEN"}, TimeoutSeconds: 5, AllowPrivateNetwork: true}
	}
	slow := spec("slow", "/slow")
	slow.TimeoutSeconds = 0.1
	unset := spec("unset", "/ok")
	unset.Headers = map[string]string{"X-Key": "${BATON_TEST_SURELY_UNSET}"}
	r := newRegistry(t, []tool.Spec{spec("ok", "/ok"), spec("plain", "/plain"), spec("missing", "/missing"), spec("boom", "/boom"), spec("huge", "/huge"), slow, unset},
		tool.WithMaxOutput(4096))

	res := mustCall(t, lookup(t, r, "A", "ok"), callCtx("call-9"), `{"id": 7}`)
	if res.Status != "ok" || res.Content != `received {"id": 7}` || string(res.Updates["order"]) != "7" {
		t.Fatalf("ok = %+v", res)
	}
	got.Lock()
	if got.header.Get("Authorization") != "Bearer tok-123" || got.header.Get("X-Api-Key") != "tok-123" || got.header.Get("Idempotency-Key") != "chat-1/turn-1/call-9" ||
		got.header.Get("Content-Type") != "application/json" || got.header.Get("X-Baton-Chat-Id") != "chat-1" || got.body != `{"id": 7}` {
		t.Errorf("request: headers %v, body %s", got.header, got.body)
	}
	got.Unlock()

	tests := []struct{ name, status, want string }{
		{"plain", "ok", "plain answer"},
		{"missing", "error", "HTTP 404 Not Found: no such order"},
		{"boom", "error", "HTTP 500 Internal Server Error: database down"},
		{"huge", "ok", "[output truncated: 4096 bytes shown, more not read]"},
		{"slow", "error", "timed out after 100ms"},
		{"unset", "error", "BATON_TEST_SURELY_UNSET is not set"},
	}
	for _, tt := range tests {
		res := mustCall(t, lookup(t, r, "A", tt.name), callCtx("c"), `{}`)
		if res.Status != tt.status || !strings.Contains(res.Content, tt.want) || len(res.Content) > 4200 {
			t.Errorf("%s: status %s, content %.200q, want %s containing %q", tt.name, res.Status, res.Content, tt.status, tt.want)
		}
	}

	// A secret the person typed goes into the URL escaped: it adds no path
	// segment, parameter or fragment. The operator's variables do not.
	t.Setenv("ORDERS_BASE", srv.URL)
	r = newRegistry(t, []tool.Spec{{Agent: "A", Name: "order", URL: "${ORDERS_BASE}/orders/${ACCOUNT}?key=${ACCOUNT}", TimeoutSeconds: 5, AllowPrivateNetwork: true}})
	cc := callCtx("c")
	cc.Secrets = map[string]string{"ACCOUNT": "a/../admin?x=1&role=root#f"}
	res = mustCall(t, lookup(t, r, "A", "order"), cc, `{}`)
	if want := `/orders/a%2F..%2Fadmin%3Fx%3D1%26role%3Droot%23f key=a%2F..%2Fadmin%3Fx%3D1%26role%3Droot%23f`; res.Status != "ok" || res.Content != want {
		t.Errorf("order: %+v, want the secret escaped: %s", res, want)
	}
}

func TestUITool(t *testing.T) {
	r := newRegistry(t, []tool.Spec{{
		Agent: "A", Function: "action_plan", ToolType: tool.TypeUI, UI: tool.UISpec{Component: "ActionPlan", Mode: "artifact"},
		Parameters: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`),
	}})
	ap := lookup(t, r, "A", "action_plan")
	res := mustCall(t, ap, callCtx("ui-1"), `{"title": "Plan"}`)
	if res.Status != baton.ToolStatusPending {
		t.Fatalf("status = %s", res.Status)
	}
	var req tool.UIRequest
	if err := json.Unmarshal(res.UI, &req); err != nil {
		t.Fatal(err)
	}
	if req.Component != "ActionPlan" || req.Mode != "artifact" || string(req.Payload) != `{"title":"Plan"}` || !strings.HasPrefix(req.UIEventID, "ui_") {
		t.Fatalf("ui request = %+v", req)
	}
	again := mustCall(t, ap, callCtx("ui-1"), `{"title": "Plan"}`)
	var req2 tool.UIRequest
	_ = json.Unmarshal(again.UI, &req2)
	if req2.UIEventID != req.UIEventID {
		t.Fatalf("a replayed call got ui_event_id %s, first %s", req2.UIEventID, req.UIEventID)
	}
	if res := mustCall(t, ap, callCtx("ui-2"), `{}`); res.Status != "error" {
		t.Fatalf("missing title: %+v", res)
	}

	done := tool.UIResult{Status: "success", UIEventID: req.UIEventID, Data: json.RawMessage(`{"approved":true}`)}.ToolResult()
	if done.Status != "ok" || !strings.Contains(done.Content, `"data":{"approved":true}`) {
		t.Fatalf("UIResult.ToolResult = %+v", done)
	}
	if (tool.UIResult{Status: "cancelled"}).ToolResult().Status != "error" {
		t.Fatal("a cancelled UI response should be a tool error")
	}
}

func TestToolsPerAgentAndLifecycle(t *testing.T) {
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Function: "add"},
		{Agent: "B", Name: "echo", File: "echo.sh"},
		{Agent: "", Name: "audit", File: "echo.sh", ToolType: tool.TypeLifecycle, Trigger: "after_chat"},
		{Agent: "B", Name: "greet", File: "echo.sh", ToolType: tool.TypeLifecycle, Trigger: "before_agent"},
	}, tool.WithFuncs(addTool))
	names := func(ts []baton.Tool, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, x := range ts {
			n = append(n, x.Name())
		}
		return strings.Join(n, ",")
	}
	ctx := context.Background()
	if got := names(r.Tools(ctx, "A")); got != "add" {
		t.Errorf("A's tools = %s", got)
	}
	if got := names(r.Tools(ctx, "B")); got != "echo" {
		t.Errorf("B's tools = %s", got)
	}
	if got := names(r.Lifecycle(ctx, "after_chat", "A")); got != "audit" {
		t.Errorf("after_chat = %s", got)
	}
	if got := names(r.Lifecycle(ctx, "before_agent", "B")); got != "greet" {
		t.Errorf("before_agent for B = %s", got)
	}
	if _, err := r.Tool(ctx, "A", "echo"); baton.ErrorCode(err) != baton.ENOTFOUND {
		t.Errorf("A's echo: err = %v", err)
	}
	if s, ok := tool.SpecOf(lookup(t, r, "B", "echo")); !ok || s.Kind != tool.KindCommand {
		t.Errorf("SpecOf = %+v, %v", s, ok)
	}
}
