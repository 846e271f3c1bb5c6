package baton

import "encoding/json"

// ClientTool is a tool a client application offers a chat's agents (AG-UI
// RunAgentInput.tools, a Chat Completions request's function tools): the
// client runs it. An agent sees it only when its workflow lets it
// (agents.json client_tools); a call of it pauses the chat until the client
// answers with the result (a PendingClientTool request).
type ClientTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Limits of the tools a client offers a chat: they are kept with the chat
// and sent to the model with every call of an agent that may use them.
const (
	MaxClientTools      = 64
	MaxClientToolBytes  = 16 << 10 // one tool's description and parameters
	MaxClientToolsBytes = 64 << 10 // all of them
)
