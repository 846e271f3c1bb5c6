// Package workflow reads baton workflows: a folder of six JSON files
// (workflow.json, agents.json, handoffs.json, tools.json,
// context_variables.json, structured_outputs.json), decoded strictly and
// validated as a whole.
//
// Load reads one folder and LoadAll every folder of a file system that holds
// a workflow.json; both take an fs.FS, so the example workflows embedded in
// the binary and folders on disk load the same way. Validation collects
// every mistake, not only the first: the error is a ValidationErrors with one
// FieldError (file, JSON path, line, column, message) per mistake, and it
// matches baton.ErrInvalid.
//
// At load time, handoff conditions are compiled with expr-lang/expr,
// system-message templates are parsed, tool parameter schemas are compiled,
// and every structured-output model is compiled to a strict JSON Schema
// (draft 2020-12); the models agents answer with (the registry) are also
// compiled to validators (santhosh-tekuri/jsonschema), the others on first
// use. A loaded *Workflow is immutable and safe for concurrent use.
//
// The format is documented in docs/workflow-format.md.
package workflow

import (
	"encoding/json"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The six file names of a workflow folder.
const (
	FileWorkflow          = "workflow.json"
	FileAgents            = "agents.json"
	FileHandoffs          = "handoffs.json"
	FileTools             = "tools.json"
	FileContextVariables  = "context_variables.json"
	FileStructuredOutputs = "structured_outputs.json"
)

// UserAgent is the name a handoff rule uses for the person as source_agent.
const UserAgent = "user"

// Startup modes (orchestration.startup_mode).
const (
	AgentDriven = "AgentDriven" // the initial agent speaks first
	UserDriven  = "UserDriven"  // the chat waits for the person's first message
)

// Handoff types (handoff_rules[].handoff_type).
const (
	HandoffAfterWork = "after_work" // fires when no llm or condition rule fired
	HandoffCondition = "condition"  // fires when its condition is true
	HandoffLLM       = "llm"        // a transfer tool the model may call
)

// Transition targets (handoff_rules[].transition_target).
const (
	AgentTarget        = "AgentTarget"
	TerminateTarget    = "TerminateTarget"
	RevertToUserTarget = "RevertToUserTarget"
)

// Tool types (tools[].tool_type).
const (
	AgentTool     = "Agent_Tool"     // called by the model
	UITool        = "UI_Tool"        // shows a component; the person's response is the result
	LifecycleTool = "Lifecycle_Tool" // run by the runtime at a lifecycle trigger
)

// Tool kinds (tools[].kind): how a tool runs.
const (
	KindGo      = "go"      // a Go function registered by name (function)
	KindCommand = "command" // an executable under the workflow's tools/ folder (file)
	KindHTTP    = "http"    // a POST to url
	KindMCP     = "mcp"     // the tools of an MCP server from workflow.json mcp_servers
	KindUI      = "ui"      // a component shown to the person (ui)
	KindA2A     = "a2a"     // a remote A2A agent (a2a)
)

// UI modes (tools[].ui.mode).
const (
	UIInline   = "inline"
	UIArtifact = "artifact"
)

// Lifecycle triggers (tools[].trigger).
const (
	BeforeChat  = "before_chat"
	BeforeAgent = "before_agent"
	AfterAgent  = "after_agent"
	AfterChat   = "after_chat"
)

// Derived variable trigger types (derived_variables[].trigger_type).
const (
	AgentTextEquals       = "agent_text_equals"       // the agent's whole text, trimmed, equals trigger_value
	AgentTextContains     = "agent_text_contains"     // the agent's text contains trigger_value
	AgentTextPrefix       = "agent_text_prefix"       // a line of the agent's text starts with trigger_value: the rest of it, trimmed (a string)
	ToolCalled            = "tool_called"             // the agent called the tool named trigger_value and it succeeded
	StructuredOutputField = "structured_output_field" // the value at trigger_value in the agent's structured output
)

// Context variable types (variables.NAME.type).
const (
	TypeBool  = "bool"
	TypeInt   = "int"
	TypeFloat = "float"
	TypeStr   = "str"
	TypeList  = "list"
	TypeDict  = "dict"
	TypeAny   = "any" // only derived structured_output_field variables whose field type is not simple
)

// Workflow is one loaded and validated workflow folder.
type Workflow struct {
	// Name is the workflow's name: its folder's name.
	Name string
	// Dir is the folder within FS ("." or "generator").
	Dir string
	// FS is the file system the workflow was loaded from; command tools
	// live at path.Join(Dir, "tools", tool.File) in it.
	FS fs.FS

	Config           Config             // workflow.json
	Agents           []*Agent           // agents.json, in file order
	Handoffs         []*HandoffRule     // handoffs.json, in file order
	Tools            []*Tool            // tools.json, in file order
	Variables        []*Variable        // context_variables.json variables, in file order
	DerivedVariables []*DerivedVariable // context_variables.json derived_variables, in file order
	Models           []*Model           // structured_outputs.json models, in file order
	// Registry maps an agent name to the name of its structured-output model.
	Registry map[string]string

	agents   map[string]*Agent
	tools    map[string]*Tool
	models   map[string]*Model
	rules    map[string][]*HandoffRule
	varTypes map[string]string
}

// Config is workflow.json.
type Config struct {
	Name          string               `json:"name,omitempty"`
	Description   string               `json:"description,omitempty"`
	Version       string               `json:"version,omitempty"`
	VisualAgents  []string             `json:"visual_agents,omitempty"`
	Orchestration Orchestration        `json:"orchestration,omitzero"`
	LLM           LLMConfig            `json:"llm,omitzero"`
	Pricing       map[string]Price     `json:"pricing,omitempty"`
	MCPServers    map[string]MCPServer `json:"mcp_servers,omitempty"`
	// Budget limits what one chat may spend; zero fields mean no limit.
	Budget Budget `json:"budget,omitzero"`
	// DoubleTexting is what a chat does with a person's message that
	// arrives while a run goes: DoubleTextingEnqueue (the default),
	// DoubleTextingReject or DoubleTextingInterrupt.
	DoubleTexting string `json:"double_texting,omitempty"`
}

// Double-texting policies (workflow.json double_texting): what a chat does
// with a person's message that arrives while a run goes.
const (
	// DoubleTextingEnqueue keeps the message (it is acknowledged and
	// durable) and the run takes it at its next input point; if the run
	// ends first (completed, budget reached, failed), the message starts the
	// next run.
	DoubleTextingEnqueue = "enqueue"
	// DoubleTextingReject refuses the message (409) while the chat is
	// running; nothing is recorded.
	DoubleTextingReject = "reject"
	// DoubleTextingInterrupt keeps the message as enqueue does and stops
	// the model call in progress at once: the text streamed so far is
	// recorded once, and the run takes the message.
	DoubleTextingInterrupt = "interrupt"
)

// DoubleTexting returns the workflow's double_texting policy (enqueue when
// it sets none).
func (w *Workflow) DoubleTexting() string {
	if w.Config.DoubleTexting == "" {
		return DoubleTextingEnqueue
	}
	return w.Config.DoubleTexting
}

// Budget is workflow.json's budget block: per-chat limits on the tokens
// (prompt + completion, over every model call) and the cost in US dollars
// (from pricing). A chat that reaches one ends before its next model call
// with chat.run_complete {status: "budget_exceeded"}. Zero means no limit.
type Budget struct {
	MaxTokens  int64   `json:"max_tokens,omitempty"`
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// Orchestration is workflow.json's orchestration block.
type Orchestration struct {
	InitialAgent   string `json:"initial_agent,omitempty"`
	InitialMessage string `json:"initial_message,omitempty"`
	// StartupMode is AgentDriven (the default) or UserDriven.
	StartupMode string `json:"startup_mode,omitempty"`
	// MaxTurns bounds the agent turns of one chat; 0 means DefaultMaxTurns.
	MaxTurns       int  `json:"max_turns,omitempty"`
	HumanInTheLoop bool `json:"human_in_the_loop,omitempty"`
}

// DefaultMaxTurns is the turn limit of a workflow that sets none.
const DefaultMaxTurns = 50

// LLMConfig is the model configuration of workflow.json's llm block and of
// an agent's llm override. Pointers distinguish "not set" from zero.
type LLMConfig struct {
	Model          string   `json:"model,omitempty"`
	Temperature    *float64 `json:"temperature,omitempty"`
	MaxTokens      int      `json:"max_tokens,omitempty"`
	TimeoutSeconds float64  `json:"timeout_seconds,omitempty"`
	// FirstTokenTimeoutSeconds bounds the wait for a reply's first delta,
	// IdleTimeoutSeconds the wait between two chunks of it; an attempt that
	// stalls longer is retried. 0 means the provider's default.
	FirstTokenTimeoutSeconds float64 `json:"first_token_timeout_seconds,omitempty"`
	IdleTimeoutSeconds       float64 `json:"idle_timeout_seconds,omitempty"`
	// CacheSeed is the default seed; a chat keeps one seed for its life.
	CacheSeed *int64 `json:"cache_seed,omitempty"`
	// BaseURLEnv and APIKeyEnv name the environment variables holding the
	// endpoint and the key (defaults OPENAI_BASE_URL and OPENAI_API_KEY).
	BaseURLEnv string `json:"base_url_env,omitempty"`
	APIKeyEnv  string `json:"api_key_env,omitempty"`
}

// Timeout returns timeout_seconds as a duration (0 when unset).
func (c LLMConfig) Timeout() time.Duration {
	return time.Duration(c.TimeoutSeconds * float64(time.Second))
}

// FirstTokenTimeout returns first_token_timeout_seconds as a duration (0
// when unset).
func (c LLMConfig) FirstTokenTimeout() time.Duration {
	return time.Duration(c.FirstTokenTimeoutSeconds * float64(time.Second))
}

// IdleTimeout returns idle_timeout_seconds as a duration (0 when unset).
func (c LLMConfig) IdleTimeout() time.Duration {
	return time.Duration(c.IdleTimeoutSeconds * float64(time.Second))
}

// merge returns c with the fields o sets replacing c's.
func (c LLMConfig) merge(o *LLMConfig) LLMConfig {
	if o == nil {
		return c
	}
	if o.Model != "" {
		c.Model = o.Model
	}
	if o.Temperature != nil {
		c.Temperature = o.Temperature
	}
	if o.MaxTokens != 0 {
		c.MaxTokens = o.MaxTokens
	}
	if o.TimeoutSeconds != 0 {
		c.TimeoutSeconds = o.TimeoutSeconds
	}
	if o.FirstTokenTimeoutSeconds != 0 {
		c.FirstTokenTimeoutSeconds = o.FirstTokenTimeoutSeconds
	}
	if o.IdleTimeoutSeconds != 0 {
		c.IdleTimeoutSeconds = o.IdleTimeoutSeconds
	}
	if o.CacheSeed != nil {
		c.CacheSeed = o.CacheSeed
	}
	if o.BaseURLEnv != "" {
		c.BaseURLEnv = o.BaseURLEnv
	}
	if o.APIKeyEnv != "" {
		c.APIKeyEnv = o.APIKeyEnv
	}
	return c
}

// Price is the price of a model in US dollars per million tokens.
type Price struct {
	Input       float64 `json:"input,omitempty"`
	Output      float64 `json:"output,omitempty"`
	CachedInput float64 `json:"cached_input,omitempty"`
}

// MCPServer is an MCP server a workflow's mcp tools come from: either a
// command started over stdio or the URL of a streamable HTTP endpoint.
type MCPServer struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	// Headers are sent with every request to a url server; ${VAR} in a
	// value is expanded from the environment.
	Headers map[string]string `json:"headers,omitempty"`
	// HeadersFromEnv maps an HTTP header to the environment variable that
	// holds its value (for url servers).
	HeadersFromEnv map[string]string `json:"headers_from_env,omitempty"`
	// AllowPrivateNetwork lets a url server be on a loopback, link-local
	// or private address, refused by default as for http tools.
	AllowPrivateNetwork bool `json:"allow_private_network,omitempty"`
}

// Agent is one entry of agents.json.
type Agent struct {
	// Name is the agent's key in agents.json.
	Name                      string     `json:"-"`
	Description               string     `json:"description,omitempty"`
	SystemMessage             string     `json:"system_message,omitempty"`
	MaxConsecutiveAutoReply   int        `json:"max_consecutive_auto_reply,omitempty"`
	AutoToolMode              bool       `json:"auto_tool_mode,omitempty"`
	StructuredOutputsRequired bool       `json:"structured_outputs_required,omitempty"`
	LLM                       *LLMConfig `json:"llm,omitempty"`
	// Tools names tools of tools.json that this agent may call besides the
	// ones whose agent is this agent (a way to share a tool).
	Tools []string `json:"tools,omitempty"`
	// ClientTools names the tools a client application may offer this
	// agent (AG-UI RunAgentInput.tools, a Chat Completions request's
	// tools), or is ["*"] for any it offers. Empty: the agent never sees
	// a client's tools.
	ClientTools []string `json:"client_tools,omitempty"`

	template []segment
	visual   bool
	toolAg   bool
	model    *Model
	tools    []*Tool
	autoTool *Tool
}

// IsVisual reports whether people see the agent's messages (it is listed in
// visual_agents).
func (a *Agent) IsVisual() bool { return a.visual }

// IsStructuredCapable reports whether the agent answers with structured
// output (structured_outputs_required).
func (a *Agent) IsStructuredCapable() bool { return a.StructuredOutputsRequired }

// IsToolAgent reports whether the agent owns a UI_Tool.
func (a *Agent) IsToolAgent() bool { return a.toolAg }

// Model returns the agent's structured-output model, or nil.
func (a *Agent) Model() *Model { return a.model }

// AutoTool returns the UI_Tool the runtime invokes with the agent's valid
// structured output when AutoToolMode is set, or nil.
func (a *Agent) AutoTool() *Tool { return a.autoTool }

// AllowsClientTool reports whether the agent may call the client's tool
// name (client_tools lists it, or is ["*"]).
func (a *Agent) AllowsClientTool(name string) bool {
	for _, n := range a.ClientTools {
		if n == AnyClientTool || n == name {
			return true
		}
	}
	return false
}

// AnyClientTool, as the one entry of an agent's client_tools, lets it
// call any tool the client offers.
const AnyClientTool = "*"

// ToolNameTaken reports whether name is the workflow's: one of its tools,
// or a name reserved for llm handoffs (transfer_to_…, terminate_chat). A
// client's tool may not take such a name, so that it never shadows the
// workflow's.
func (w *Workflow) ToolNameTaken(name string) bool {
	return w.Tool(name) != nil || strings.HasPrefix(name, "transfer_to_") || name == "terminate_chat"
}

// ToolList returns the tools the model of this agent may call (Agent_Tool
// and UI_Tool entries whose agent it is, then the ones named in its tools
// list), in file order. Lifecycle tools are not among them.
func (a *Agent) ToolList() []*Tool { return a.tools }

// HandoffRule is one entry of handoffs.json.
type HandoffRule struct {
	// SourceAgent is an agent name or UserAgent.
	SourceAgent string `json:"source_agent,omitempty"`
	TargetAgent string `json:"target_agent,omitempty"`
	HandoffType string `json:"handoff_type,omitempty"`
	// Condition is an expression over context variables; see Condition.
	Condition        string `json:"condition,omitempty"`
	TransitionTarget string `json:"transition_target,omitempty"`
	// Description explains the rule; for llm rules it is the transfer
	// tool's description the model reads.
	Description string `json:"description,omitempty"`

	// Index is the rule's position in handoff_rules.
	Index int `json:"-"`
	// Compiled is the compiled Condition, nil when there is none.
	Compiled *Condition `json:"-"`
}

// Applies reports whether the rule's condition holds for vars (true when the
// rule has no condition).
func (r *HandoffRule) Applies(vars map[string]any) (bool, error) {
	if r.Compiled == nil {
		return true, nil
	}
	return r.Compiled.Eval(vars)
}

// TransferToolName is the name of the tool an llm rule offers the model:
// transfer_to_<TargetAgent> for an AgentTarget, transfer_to_user for
// RevertToUserTarget and terminate_chat for TerminateTarget.
func (r *HandoffRule) TransferToolName() string {
	switch r.TransitionTarget {
	case TerminateTarget:
		return "terminate_chat"
	case RevertToUserTarget:
		return "transfer_to_user"
	}
	return "transfer_to_" + r.TargetAgent
}

// A2AConfig is an a2a tool's "a2a" block: the remote Agent2Agent agent the
// model's message goes to.
type A2AConfig struct {
	// CardURL is the agent's URL (its card at the well-known path
	// /.well-known/agent-card.json under it) or the card's own URL (ending
	// in .json). ${VAR} is expanded from a secret or the environment. The
	// card is fetched at the tool's first call, not at load.
	CardURL string `json:"card_url"`
	// Skill, if set, must be one of the card's skills; it is sent in the
	// message's metadata.
	Skill string `json:"skill,omitempty"`
	// TokenFrom names the secret (declared by a secret form) or the
	// environment variable holding the bearer token sent to the agent.
	TokenFrom string `json:"token_from,omitempty"`
	// OnInputRequired says who answers when the remote task asks for input
	// (input-required; auth-required is an error result either way, the
	// credentials belonging in TokenFrom): A2AAskPerson ("person", the
	// default) pauses the chat with the remote question for the person,
	// whose next message goes back to the same remote task; A2AAskModel
	// ("model") gives the question and the task id to the calling agent's
	// model as the tool's result.
	OnInputRequired string `json:"on_input_required,omitempty"`
}

// Values of A2AConfig.OnInputRequired.
const (
	A2AAskPerson = "person"
	A2AAskModel  = "model"
)

// Tool is one entry of tools.json.
type Tool struct {
	// Agent owns the tool; for lifecycle tools it is the agent whose turn
	// the trigger refers to (empty: every agent's turn for before_agent
	// and after_agent).
	Agent string `json:"agent,omitempty"`
	// Name is the tool's name as the model sees it; it defaults to Function.
	Name string `json:"name,omitempty"`
	// File is the executable of a command tool, relative to tools/.
	File string `json:"file,omitempty"`
	// Function is the registered Go function of a go tool (and the default
	// name of any tool).
	Function    string `json:"function,omitempty"`
	Description string `json:"description,omitempty"`
	ToolType    string `json:"tool_type,omitempty"`
	Kind        string `json:"kind,omitempty"`
	// Parameters is the JSON Schema of the arguments (an object schema).
	Parameters json.RawMessage `json:"parameters,omitempty"`
	UI         *UIConfig       `json:"ui,omitempty"`
	// TimeoutSeconds bounds one call; 0 means the registry's default.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// SideEffects makes the call go through the effect ledger (at most
	// once per turn key and tool-call id).
	SideEffects bool `json:"side_effects,omitempty"`
	// MaxConcurrency limits concurrent calls of this tool; 0 means the
	// registry's default.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Trigger is when a Lifecycle_Tool runs.
	Trigger string `json:"trigger,omitempty"`
	// Arguments are the fixed arguments a Lifecycle_Tool is called with
	// (checked against Parameters at load).
	Arguments json.RawMessage `json:"arguments,omitempty"`

	// URL is where an http tool POSTs its arguments.
	URL string `json:"url,omitempty"`
	// Headers are sent with every request of an http tool; ${VAR} in a
	// value is expanded from the environment by the registry.
	Headers map[string]string `json:"headers,omitempty"`
	// HeadersFromEnv maps an HTTP header to the environment variable that
	// holds its value; secrets never appear in the file.
	HeadersFromEnv map[string]string `json:"headers_from_env,omitempty"`
	// AllowPrivateNetwork lets an http tool reach loopback, link-local
	// and private addresses, which are refused by default (at connect
	// time and on every redirect): a tool aimed at 169.254.169.254 or an
	// internal service must say so.
	AllowPrivateNetwork bool `json:"allow_private_network,omitempty"`
	// Env lists environment variables of the baton process passed through
	// to a command tool (which otherwise gets a minimal environment), and
	// the secrets a command or go tool may read.
	Env []string `json:"env,omitempty"`
	// Server names the workflow.json mcp_servers entry of an mcp tool.
	Server string `json:"server,omitempty"`
	// Tools lists the MCP tools to expose (all of the server's when empty).
	Tools []string `json:"tools,omitempty"`
	// Prefix is prepended to the names of the MCP tools.
	Prefix string `json:"prefix,omitempty"`
	// A2A is an a2a tool's remote agent.
	A2A *A2AConfig `json:"a2a,omitempty"`

	// SecretNames are, for a masked form (a Lifecycle_Tool of kind ui whose
	// arguments say "masked": true), the names of the secrets it asks for
	// (arguments.keys[].name), checked at load; nil for any other tool.
	SecretNames []string `json:"-"`
	// Index is the tool's position in tools.
	Index int `json:"-"`
	// Schema is the compiled Parameters, nil when there are none.
	Schema *jsonschema.Schema `json:"-"`
}

// IsSecretForm reports whether the tool is a masked form that collects
// secrets (SecretNames).
func (t *Tool) IsSecretForm() bool { return len(t.SecretNames) > 0 }

// Timeout returns timeout_seconds as a duration (0 when unset).
func (t *Tool) Timeout() time.Duration {
	return time.Duration(t.TimeoutSeconds * float64(time.Second))
}

// UIConfig is a UI tool's component and how it is shown.
type UIConfig struct {
	Component string `json:"component,omitempty"`
	// Mode is UIInline (in the message list, the default) or UIArtifact
	// (in the side panel).
	Mode string `json:"mode,omitempty"`
}

// Variable is one initial context variable of context_variables.json.
type Variable struct {
	// Name is the variable's key in variables.
	Name string `json:"-"`
	// Type is one of bool, int, float, str, list, dict.
	Type    string `json:"type,omitempty"`
	Default any    `json:"default,omitempty"`
	// FromEnv is refused at load: a variable's value is shown to the
	// chat's model and client, so it may not be read from baton's
	// environment. The field is kept to say so by name.
	FromEnv     string `json:"from_env,omitempty"`
	Description string `json:"description,omitempty"`
	// ClientSettable lets a client set the variable when it starts a chat
	// (the start endpoint's context). Variables are not client-settable
	// unless they say so, and derived variables never are: they record
	// what happened in the chat, and a client presetting them would skip
	// the step they guard.
	ClientSettable bool `json:"client_settable,omitempty"`
}

// DerivedVariable is a context variable the runtime sets when its trigger
// fires after a turn of SourceAgent.
type DerivedVariable struct {
	Name         string `json:"name,omitempty"`
	TriggerType  string `json:"trigger_type,omitempty"`
	SourceAgent  string `json:"source_agent,omitempty"`
	TriggerValue string `json:"trigger_value,omitempty"`
	Description  string `json:"description,omitempty"`
	// UIHidden flags the message that triggered the variable (text
	// triggers only) as ui_hidden: the model sees it, people don't.
	UIHidden bool `json:"ui_hidden,omitempty"`
}

// Agent returns the agent called name, or nil.
func (w *Workflow) Agent(name string) *Agent { return w.agents[name] }

// InitialAgent returns the agent that starts the chat.
func (w *Workflow) InitialAgent() *Agent { return w.agents[w.Config.Orchestration.InitialAgent] }

// Tool returns the tools.json entry called name, or nil.
func (w *Workflow) Tool(name string) *Tool { return w.tools[name] }

// Model returns the structured-output model called name, or nil.
func (w *Workflow) Model(name string) *Model { return w.models[name] }

// OutputModel returns the structured-output model registered for agent, or nil.
func (w *Workflow) OutputModel(agent string) *Model {
	if a := w.agents[agent]; a != nil {
		return a.model
	}
	return nil
}

// HandoffRules returns the rules whose source is source (an agent or
// UserAgent), in file order.
func (w *Workflow) HandoffRules(source string) []*HandoffRule { return w.rules[source] }

// TransferRules returns the llm rules of agent, in file order: each offers
// the model a transfer tool named TransferToolName, described by Description
// and taking no arguments (offered only while the rule Applies).
func (w *Workflow) TransferRules(agent string) []*HandoffRule {
	var out []*HandoffRule
	for _, r := range w.rules[agent] {
		if r.HandoffType == HandoffLLM {
			out = append(out, r)
		}
	}
	return out
}

// ToolsOf returns the tools the model of agent may call; see Agent.ToolList.
func (w *Workflow) ToolsOf(agent string) []*Tool {
	if a := w.agents[agent]; a != nil {
		return a.tools
	}
	return nil
}

// LifecycleTools returns the lifecycle tools of trigger, in file order. For
// before_agent and after_agent, pass the agent whose turn it is: the result
// holds that agent's tools and the ones with no agent (which apply to every
// agent). With agent "" it returns every tool of the trigger.
func (w *Workflow) LifecycleTools(trigger, agent string) []*Tool {
	var out []*Tool
	for _, t := range w.Tools {
		if t.ToolType == LifecycleTool && t.Trigger == trigger && (agent == "" || t.Agent == "" || t.Agent == agent) {
			out = append(out, t)
		}
	}
	return out
}

// DeclaresSecret reports whether one of the workflow's masked forms asks
// for a secret called name.
func (w *Workflow) DeclaresSecret(name string) bool {
	for _, t := range w.Tools {
		if slices.Contains(t.SecretNames, name) {
			return true
		}
	}
	return false
}

// DerivedFor returns the derived variables whose source is agent, in file order.
func (w *Workflow) DerivedFor(agent string) []*DerivedVariable {
	var out []*DerivedVariable
	for _, d := range w.DerivedVariables {
		if d.SourceAgent == agent {
			out = append(out, d)
		}
	}
	return out
}

// IsVisual reports whether agent is one of visual_agents.
func (w *Workflow) IsVisual(agent string) bool {
	return slices.Contains(w.Config.VisualAgents, agent)
}

// VisualAgents returns the agents people see, in visual_agents order.
func (w *Workflow) VisualAgents() []*Agent {
	out := make([]*Agent, 0, len(w.Config.VisualAgents))
	for _, n := range w.Config.VisualAgents {
		if a := w.agents[n]; a != nil {
			out = append(out, a)
		}
	}
	return out
}

// LLMFor returns the model configuration of agent: workflow.json's llm
// block with the agent's override applied.
func (w *Workflow) LLMFor(agent string) LLMConfig {
	c := w.Config.LLM
	if a := w.agents[agent]; a != nil {
		c = c.merge(a.LLM)
	}
	return c
}

// MaxTurns returns orchestration.max_turns, or DefaultMaxTurns when unset.
func (w *Workflow) MaxTurns() int {
	if n := w.Config.Orchestration.MaxTurns; n > 0 {
		return n
	}
	return DefaultMaxTurns
}

// VariableType returns the type of a declared or derived context variable
// (TypeBool for text and tool triggers, the field's type for
// structured_output_field) and whether it exists.
func (w *Workflow) VariableType(name string) (string, bool) {
	t, ok := w.varTypes[name]
	return t, ok
}
