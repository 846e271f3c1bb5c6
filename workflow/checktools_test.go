package workflow_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/workflow"
)

// TestToolMistakesKeepTheirOrder pins the order of the tool messages
// within one tool. The golden files under testdata/invalid order messages
// by line and column, so they cannot see the order of two mistakes at one
// position; a Go definition has no positions, so its error lists the
// messages in the order the checks make them.
func TestToolMistakesKeepTheirOrder(t *testing.T) {
	def := helloDefinition()
	def.Tools = append(def.Tools,
		// An agent tool carrying the fields of every other kind.
		&workflow.Tool{
			Name: "transfer_to_x", ToolType: workflow.AgentTool, Kind: workflow.KindHTTP,
			URL: "ftp://example.com", Trigger: workflow.BeforeChat,
			Arguments: json.RawMessage(`{}`), UI: &workflow.UIConfig{Component: "C", Mode: "popup"},
			Server: "s", File: "f", Env: []string{"1BAD"},
			HeadersFromEnv: map[string]string{"X-Key": "bad name"},
			TimeoutSeconds: -1, MaxConcurrency: -1,
		},
		// A lifecycle tool of kind mcp with no server.
		&workflow.Tool{
			Name: "bad name", ToolType: workflow.LifecycleTool, Kind: workflow.KindMCP,
			Agent: "Nobody", Tools: []string{""}, URL: "https://example.com",
			Headers: map[string]string{"A": "b"}, AllowPrivateNetwork: true,
			Parameters: json.RawMessage(`{"type":"object"}`),
		},
		// No kind, no tool type, a go function with no name.
		&workflow.Tool{Agent: "Greeter", Kind: "rust"},
		&workflow.Tool{Agent: "Greeter", Name: "g", ToolType: workflow.AgentTool, Kind: workflow.KindGo},
		&workflow.Tool{Agent: "Greeter", Name: "u", ToolType: workflow.UITool, Kind: workflow.KindCommand},
	)
	_, err := workflow.Build(def)
	if err == nil {
		t.Fatal("Build accepted tools full of mistakes")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.Contains(line, "tools.json") {
			got = append(got, strings.TrimSpace(line))
		}
	}
	want := strings.Split(strings.TrimSpace(wantToolMistakes), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("tool messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// wantToolMistakes was produced by the checks before they were split per
// kind.
const wantToolMistakes = `
hello/tools.json: tools[1].name: "transfer_to_x" is reserved for llm handoffs
hello/tools.json: tools[1].agent: required
hello/tools.json: tools[1].trigger: only a Lifecycle_Tool has a trigger
hello/tools.json: tools[1].arguments: only a Lifecycle_Tool has fixed arguments
hello/tools.json: tools[1].ui: only a tool of kind ui has a ui block
hello/tools.json: tools[1].ui.mode: "popup" is not one of inline, artifact
hello/tools.json: tools[1].url: "ftp://example.com" is not an http or https URL
hello/tools.json: tools[1]: server, tools and prefix are for mcp tools
hello/tools.json: tools[1].file: only a command tool has a file
hello/tools.json: tools[1].headers_from_env.X-Key: "bad name" is not an environment variable name
hello/tools.json: tools[1].env[0]: "1BAD" is not an environment variable name
hello/tools.json: tools[1].env: only a command or go tool has env
hello/tools.json: tools[1].timeout_seconds: must not be negative
hello/tools.json: tools[1].max_concurrency: must not be negative
hello/tools.json: tools[2].name: "bad name" must be 1 to 64 letters, digits, '_' or '-'
hello/tools.json: tools[2].agent: unknown agent "Nobody"
hello/tools.json: tools[2].trigger: required for a Lifecycle_Tool (one of before_chat, before_agent, after_agent, after_chat)
hello/tools.json: tools[2].kind: a Lifecycle_Tool cannot be of kind mcp
hello/tools.json: tools[2].server: required for an mcp tool (a name from workflow.json mcp_servers)
hello/tools.json: tools[2].tools[0]: must not be empty
hello/tools.json: tools[2].url: only an http tool has a url
hello/tools.json: tools[2]: headers and headers_from_env are for http tools
hello/tools.json: tools[2].allow_private_network: only an http or a2a tool has allow_private_network
hello/tools.json: tools[2].parameters: an mcp tool takes its parameters from the server
hello/tools.json: tools[3].name: required (or function)
hello/tools.json: tools[3].tool_type: required (one of Agent_Tool, UI_Tool, Lifecycle_Tool)
hello/tools.json: tools[3].kind: "rust" is not one of go, command, http, mcp, ui, a2a
hello/tools.json: tools[4].function: required for a go tool (the name it is registered under)
hello/tools.json: tools[5].kind: a UI_Tool must be of kind ui
hello/tools.json: tools[5].file: required for a command tool (an executable in tools/)
`

// TestA2AToolChecks: an a2a tool's block is checked at load, each mistake
// naming the file and the field; its card is not fetched (a good block
// loads whatever its URL).
func TestA2AToolChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		tool *workflow.Tool
		want []string
	}{
		{"good", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A,
			A2A: &workflow.A2AConfig{CardURL: "${REMOTE}/a2a/acme/hello", TokenFrom: "REMOTE_TOKEN"}, AllowPrivateNetwork: true}, nil},
		{"no block", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A},
			[]string{"tools[1].a2a: required for an a2a tool"}},
		{"no url", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A, A2A: &workflow.A2AConfig{}},
			[]string{"tools[1].a2a.card_url: required for an a2a tool"}},
		{"bad url and token", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A,
			A2A: &workflow.A2AConfig{CardURL: "ftp://x", TokenFrom: "bad name"}},
			[]string{`tools[1].a2a.card_url: "ftp://x" is not an http or https URL`, `tools[1].a2a.token_from: "bad name" is not a secret or environment variable name`}},
		{"baton's own token", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A,
			A2A: &workflow.A2AConfig{CardURL: "https://x", TokenFrom: "BATON_SECRET_KEY"}},
			[]string{"tools[1].a2a.token_from: BATON_SECRET_KEY is baton's own credential"}},
		{"model answers", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A,
			A2A: &workflow.A2AConfig{CardURL: "https://x", OnInputRequired: workflow.A2AAskModel}}, nil},
		{"bad on_input_required", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindA2A,
			A2A: &workflow.A2AConfig{CardURL: "https://x", OnInputRequired: "agent"}},
			[]string{`tools[1].a2a.on_input_required: "agent" is not "person" or "model"`}},
		{"block on another kind", &workflow.Tool{Agent: "Greeter", Name: "ask", ToolType: workflow.AgentTool, Kind: workflow.KindHTTP,
			URL: "https://x", A2A: &workflow.A2AConfig{CardURL: "https://x"}},
			[]string{"tools[1].a2a: only an a2a tool has an a2a block"}},
	} {
		def := helloDefinition()
		def.Tools = append(def.Tools, c.tool)
		_, err := workflow.Build(def)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), "tools.json: "+w) {
				t.Errorf("%s: %v\nwant %q", c.name, err, w)
			}
		}
	}
}
