package tool

import (
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Kinds of tool, the values of Spec.Kind.
const (
	KindGo      = "go"      // a Go function registered with WithFuncs
	KindCommand = "command" // an executable under the workflow's tools/ folder
	KindHTTP    = "http"    // an HTTP endpoint the arguments are POSTed to
	KindMCP     = "mcp"     // the tools of an MCP server
	KindUI      = "ui"      // a component shown to the person (a UI_Tool)
	KindA2A     = "a2a"     // a remote A2A agent the model's message is sent to
)

// Tool types of tools.json, the values of Spec.ToolType.
const (
	TypeAgent     = "Agent_Tool"     // offered to the agent's model
	TypeUI        = "UI_Tool"        // offered to the model; its result comes from the person
	TypeLifecycle = "Lifecycle_Tool" // run by the engine at a lifecycle point, never offered to the model
)

// Spec is one entry of a workflow's tools.json, in the form the registry
// needs. The engine converts the workflow package's entries to Specs, which
// keeps this package free of the workflow loader.
type Spec struct {
	// Agent owns the tool: only this agent's model is offered it. For a
	// lifecycle tool with an empty Agent, the tool applies to every agent.
	Agent string
	// Name is the name the model calls the tool by; empty means Function.
	// For an mcp entry it is unused (the server names its tools).
	Name string
	// File is the executable of a command tool, relative to the workflow's
	// tools/ folder (it may not leave that folder).
	File string
	// Function names the Go function of a go tool (as registered with
	// WithFuncs); for a command tool it is passed as BATON_FUNCTION so one
	// script can serve several tools.
	Function string
	// Description is shown to the model; a go tool's registered description
	// and an MCP server's own description are used when it is empty.
	Description string
	// ToolType is TypeAgent (default), TypeUI or TypeLifecycle.
	ToolType string
	// Kind is KindGo, KindCommand, KindHTTP, KindMCP or KindUI. When empty it
	// is inferred: UI_Tool → ui; a Function registered as a Go function → go;
	// a File → command; a URL → http; a Server → mcp.
	Kind string
	// Parameters is the JSON Schema of the arguments for command, http and ui
	// tools; empty means any object. A go tool's schema is derived from its
	// argument type and an mcp tool's comes from its server, so Parameters is
	// ignored for them.
	Parameters json.RawMessage
	// UI is the component a UI tool shows.
	UI UISpec
	// TimeoutSeconds bounds every call; 0 means the registry's default.
	TimeoutSeconds float64
	// SideEffects marks a tool whose call changes the world: it runs through
	// the effect ledger at most once per (chat, turn key, tool-call id).
	SideEffects bool
	// MaxConcurrency bounds the calls of this tool running at once; 0 means
	// the registry's default.
	MaxConcurrency int
	// Trigger is a lifecycle tool's lifecycle point (for example
	// "before_chat", "after_chat", "before_agent").
	Trigger string
	// Arguments are the fixed arguments the engine calls a lifecycle tool
	// with; the registry keeps them for it (see Spec on a registry tool).
	Arguments json.RawMessage
	// URL is an http tool's endpoint. ${VAR} is replaced by the secret or
	// environment variable VAR, so secrets never live in tools.json.
	URL string
	// Headers are sent with every request of an http tool, with ${VAR}
	// expanded as in URL.
	Headers map[string]string
	// HeadersFromEnv maps a header of an http tool to the secret or
	// environment variable holding its value (tools.json's
	// headers_from_env); an unset variable fails the call.
	HeadersFromEnv map[string]string
	// AllowPrivateNetwork lets an http tool connect to loopback,
	// link-local, private and other non-public addresses (refused by
	// default, at connect time and on every redirect).
	AllowPrivateNetwork bool
	// Env lists environment variables of the baton process passed through to
	// a command tool (which otherwise gets only PATH, HOME, TMPDIR, LANG,
	// the BATON_* variables and the call's secrets).
	Env []string
	// Server names an mcp tool's server in the workflow's mcp_servers.
	Server string
	// Tools restricts an mcp entry to these tools of the server; empty means
	// all of them.
	Tools []string
	// Prefix is put before the names of an mcp entry's tools, to keep them
	// apart from other tools of the same name.
	Prefix string
	// A2A is an a2a tool's remote agent.
	A2A A2ASpec
}

// A2ASpec is an a2a tool's remote agent: tools.json's "a2a" block.
type A2ASpec struct {
	// CardURL is the agent's URL (its card at the well-known path under
	// it) or its card's URL (ending in .json); ${VAR} is expanded.
	CardURL string
	// Skill, if set, must be a skill of the card.
	Skill string
	// TokenFrom names the secret or environment variable holding the
	// bearer token.
	TokenFrom string
	// ModelAnswers is set for on_input_required "model": a remote task that
	// asks for input is an ok result for the model, naming the task id,
	// instead of a ToolStatusInputRequired result the person answers.
	ModelAnswers bool
}

// UISpec is the component a UI tool shows: tools.json's "ui" object.
type UISpec struct {
	Component string `json:"component"` // the UI component's name, e.g. "ActionPlan"
	Mode      string `json:"mode"`      // how it is shown, e.g. "artifact" or "inline"
}

// MCPServer is one entry of workflow.json's mcp_servers: a command that
// speaks MCP over stdio, or the URL of a streamable HTTP endpoint.
type MCPServer struct {
	// Command and Args start a stdio server. A Command with a slash is
	// relative to the workflow folder; otherwise it is looked up in PATH.
	Command string
	Args    []string
	// Env is added to the server's environment, with ${VAR} expanded from
	// the baton process's environment.
	Env map[string]string
	// URL is a streamable HTTP endpoint, used when Command is empty.
	URL string
	// Headers are sent with every HTTP request, with ${VAR} expanded.
	Headers map[string]string
	// HeadersFromEnv maps a header to the environment variable holding its
	// value (workflow.json's headers_from_env).
	HeadersFromEnv map[string]string
	// AllowPrivateNetwork lets a URL server be on a loopback, link-local
	// or private address (refused by default, as for http tools).
	AllowPrivateNetwork bool
	// Transport, when set, connects to a server in the same program (for
	// example over mcp.NewInMemoryTransports) instead of Command or URL. It
	// is called for every new session.
	Transport func() mcp.Transport `json:"-"`
}

func (s *Spec) toolName() string {
	if s.Name != "" {
		return s.Name
	}
	return s.Function
}

func (s *Spec) timeout(def time.Duration) time.Duration {
	if s.TimeoutSeconds > 0 {
		return time.Duration(s.TimeoutSeconds * float64(time.Second))
	}
	return def
}
