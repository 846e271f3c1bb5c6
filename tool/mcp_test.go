package tool_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/tool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const mcpServerEnv = "BATON_TOOL_TEST_MCP_SERVER"

type greetArgs struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type pidArgs struct{}

// newMCPServer is the Go MCP server of the tests: greet, pid (the server's
// process id), env (its environment) and crash (the process exits).
func newMCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "says hi"}, func(_ context.Context, _ *mcp.CallToolRequest, in greetArgs) (*mcp.CallToolResult, any, error) {
		if in.Name == "nobody" {
			return nil, nil, fmt.Errorf("cannot greet %s", in.Name)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Hi " + in.Name}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "the server's process id"}, func(context.Context, *mcp.CallToolRequest, pidArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "the server's environment"}, func(context.Context, *mcp.CallToolRequest, pidArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(os.Environ(), "\n")}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "exits the server"}, func(context.Context, *mcp.CallToolRequest, pidArgs) (*mcp.CallToolResult, any, error) {
		os.Exit(2)
		return nil, nil, nil
	})
	return s
}

func runMCPServer() {
	if err := newMCPServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func toolNames(t *testing.T, r *tool.Registry, agent string) []string {
	t.Helper()
	ts, err := r.Tools(context.Background(), agent)
	if err != nil {
		t.Fatalf("Tools(%s): %v", agent, err)
	}
	var n []string
	for _, x := range ts {
		n = append(n, x.Name())
	}
	return n
}

// checkGreet calls the test server's greet through a registry.
func checkGreet(t *testing.T, r *tool.Registry, name string) {
	t.Helper()
	g := lookup(t, r, "A", name)
	if !strings.Contains(string(g.Parameters()), "who to greet") || g.Description() != "says hi" {
		t.Errorf("greet keeps its schema and description: %s %q", g.Parameters(), g.Description())
	}
	if res := mustCall(t, g, callCtx("g1"), `{"name": "Ada"}`); res.Status != "ok" || res.Content != "Hi Ada" {
		t.Fatalf("greet = %+v", res)
	}
	if res := mustCall(t, g, callCtx("g2"), `{"name": 3}`); res.Status != "error" || !strings.Contains(res.Content, "at /name") {
		t.Fatalf("greet with bad args = %+v", res)
	}
	if res := mustCall(t, g, callCtx("g3"), `{"name": "nobody"}`); res.Status != "error" || !strings.Contains(res.Content, "cannot greet nobody") {
		t.Fatalf("greet's own error = %+v", res)
	}
}

func TestMCPInMemory(t *testing.T) {
	srv := newMCPServer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	servers := map[string]tool.MCPServer{"test": {Transport: func() mcp.Transport {
		st, ct := mcp.NewInMemoryTransports()
		go func() { _ = srv.Run(ctx, st) }() // ends with the session (ct closed) or the test (cancel)
		return ct
	}}}
	r := newRegistry(t, []tool.Spec{
		{Agent: "A", Kind: tool.KindMCP, Server: "test", Tools: []string{"greet"}, Prefix: "t_"},
		{Agent: "B", Kind: tool.KindMCP, Server: "test"},
	}, tool.WithMCPServers(servers))
	if got := toolNames(t, r, "A"); !slices.Equal(got, []string{"t_greet"}) {
		t.Fatalf("A's tools = %v", got)
	}
	if got := toolNames(t, r, "B"); !slices.Equal(got, []string{"crash", "env", "greet", "pid"}) {
		t.Fatalf("B's tools = %v", got)
	}
	checkGreet(t, r, "t_greet")
}

func TestMCPStreamableHTTP(t *testing.T) {
	srv := newMCPServer()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close) // after the registry's Close (cleanups run last-first), which ends the session
	r := newRegistry(t, []tool.Spec{{Agent: "A", Kind: tool.KindMCP, Server: "web", Tools: []string{"greet"}}},
		tool.WithMCPServers(map[string]tool.MCPServer{"web": {URL: hs.URL, AllowPrivateNetwork: true}}))
	checkGreet(t, r, "greet")
	// Without the opt-in the same server, on loopback, is refused.
	closed := newRegistry(t, []tool.Spec{{Agent: "A", Kind: tool.KindMCP, Server: "web", Tools: []string{"greet"}}},
		tool.WithMCPServers(map[string]tool.MCPServer{"web": {URL: hs.URL}}))
	if _, err := closed.Tools(context.Background(), "A"); err == nil || !strings.Contains(err.Error(), "allow_private_network") {
		t.Fatalf("an MCP server on loopback without allow_private_network: %v, want refused", err)
	}
}

// TestMCPStdioRestart runs the test binary as a stdio MCP server, crashes
// it, and checks that the crash is a tool error and the next call gets a new
// server.
func TestMCPStdioRestart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, []tool.Spec{{Agent: "A", Kind: tool.KindMCP, Server: "self"}},
		tool.WithMCPServers(map[string]tool.MCPServer{"self": {Command: exe, Env: map[string]string{mcpServerEnv: "1"}}}))
	checkGreet(t, r, "greet")
	pid := lookup(t, r, "A", "pid")
	first := mustCall(t, pid, callCtx("p1"), `{}`)
	if first.Status != "ok" || first.Content == strconv.Itoa(os.Getpid()) {
		t.Fatalf("pid = %+v", first)
	}
	if res := mustCall(t, pid, callCtx("p1b"), `{}`); res.Content != first.Content {
		t.Fatalf("the session is not shared: pid %s then %s", first.Content, res.Content)
	}
	if res := mustCall(t, lookup(t, r, "A", "crash"), callCtx("c"), `{}`); res.Status != "error" {
		t.Fatalf("crash = %+v, want a tool error", res)
	}
	second := mustCall(t, pid, callCtx("p2"), `{}`)
	if second.Status != "ok" || second.Content == first.Content {
		t.Fatalf("after the crash: pid = %+v (first server %s)", second, first.Content)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pid.Call(context.Background(), callCtx("p3"), nil); baton.ErrorCode(err) != baton.EUNAVAILABLE {
		t.Fatalf("call after Close: err = %v", err)
	}
}

// TestMCPServerEverything runs the reference server from npm over stdio:
// the mcp-server-everything command when it is installed (npm install -g
// @modelcontextprotocol/server-everything, as .ci/run does), or else
// npx -y @modelcontextprotocol/server-everything. Outside CI the test skips
// when neither is available; in CI it fails.
func TestMCPServerEverything(t *testing.T) {
	srv := tool.MCPServer{Command: "mcp-server-everything", Args: []string{"stdio"}}
	if _, err := exec.LookPath(srv.Command); err != nil {
		_, err := exec.LookPath("npx")
		testenv.Require(t, err == nil, "neither mcp-server-everything nor npx is installed")
		srv = tool.MCPServer{Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-everything", "stdio"}}
	}
	t.Logf("server: %s %v", srv.Command, srv.Args)
	r := newRegistry(t, []tool.Spec{{Agent: "A", Kind: tool.KindMCP, Server: "everything", Prefix: "ev_", TimeoutSeconds: 60}},
		tool.WithMCPServers(map[string]tool.MCPServer{"everything": srv}))
	names := toolNames(t, r, "A")
	t.Logf("server-everything tools: %v", names)
	if !slices.Contains(names, "ev_echo") {
		t.Fatalf("tools = %v, want ev_echo", names)
	}
	sum := "ev_get-sum"
	if !slices.Contains(names, sum) {
		sum = "ev_add" // older versions
	}
	if res := mustCall(t, lookup(t, r, "A", "ev_echo"), callCtx("e"), `{"message": "hello baton"}`); res.Status != "ok" || !strings.Contains(res.Content, "hello baton") {
		t.Fatalf("echo = %+v", res)
	}
	res := mustCall(t, lookup(t, r, "A", sum), callCtx("s"), `{"a": 2, "b": 40}`)
	if res.Status != "ok" || !strings.Contains(res.Content, "42") {
		t.Fatalf("%s = %+v", sum, res)
	}
	t.Logf("%s: %s", sum, res.Content)
	if res := mustCall(t, lookup(t, r, "A", "ev_echo"), callCtx("e2"), `{}`); res.Status != "error" {
		t.Fatalf("echo without message = %+v, want a tool error", res)
	}
}

// TestMCPStdioEnvironment: a stdio MCP server gets the allowlisted part of
// baton's environment and what the workflow declares for it, never the
// rest — not the key that seals every tenant's secrets, not the metrics
// token.
func TestMCPStdioEnvironment(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BATON_SECRET_KEY", "c2VhbGluZy1rZXktb2YtZXZlcnktdGVuYW50LTAwMDA=")
	t.Setenv("BATON_METRICS_TOKEN", "metrics-token-4242")
	t.Setenv("SOME_OPERATOR_VAR", "operator-only")
	t.Setenv("PASSED_VAR", "passed")
	r := newRegistry(t, []tool.Spec{{Agent: "A", Kind: tool.KindMCP, Server: "self"}},
		tool.WithMCPServers(map[string]tool.MCPServer{"self": {Command: exe, Env: map[string]string{mcpServerEnv: "1", "DECLARED": "${PASSED_VAR}"}}}))
	res := mustCall(t, lookup(t, r, "A", "env"), callCtx("e1"), `{}`)
	env := strings.Split(res.Content, "\n")
	for _, want := range []string{"DECLARED=passed", "PATH=" + os.Getenv("PATH")} {
		if !slices.Contains(env, want) {
			t.Errorf("the server's environment lacks %s:\n%s", want, res.Content)
		}
	}
	for _, leak := range []string{"BATON_SECRET_KEY", "BATON_METRICS_TOKEN", "SOME_OPERATOR_VAR", "PASSED_VAR="} {
		if strings.Contains(res.Content, leak) {
			t.Errorf("%s reached the MCP server:\n%s", leak, res.Content)
		}
	}
	// The workflow cannot declare its way to baton's credentials either.
	r2 := newRegistry(t, []tool.Spec{{Agent: "A", Kind: tool.KindMCP, Server: "self"}},
		tool.WithMCPServers(map[string]tool.MCPServer{"self": {Command: exe, Env: map[string]string{mcpServerEnv: "1", "K": "${BATON_SECRET_KEY}"}}}))
	if _, err := r2.Tools(context.Background(), "A"); err == nil || !strings.Contains(err.Error(), "BATON_SECRET_KEY") {
		t.Fatalf("an env naming BATON_SECRET_KEY: %v, want refused", err)
	}
}
