package baton

import (
	"context"
	"time"
)

// ChatStats is the rollup of one chat's activity, kept per app and workflow:
// the seeds' workflow_stats. Package metrics writes it asynchronously from
// what it observes on the bus; the usage rows (UsageStore) stay the truth
// for a chat's tokens and cost.
type ChatStats struct {
	App, Workflow, ChatID string
	// Turns counts agent turns (native chat.select_speaker); ToolCalls
	// counts recorded tool responses.
	Turns, ToolCalls int64
	// Calls counts model calls (chat.usage_summary).
	Calls int64
	Usage
	Cost float64
	// Agents holds the same counts per agent, by agent name.
	Agents []AgentStats
	// UpdatedAt is when the rollup was last written (set by the store).
	UpdatedAt time.Time
}

// Validate checks a rollup delta to add: an app, a workflow, a chat id,
// and a name for every agent. Every StatsStore calls it in AddChatStats.
func (d ChatStats) Validate() error {
	switch {
	case d.App == "":
		return Errorf(EINVALID, "stats app: required")
	case d.Workflow == "":
		return Errorf(EINVALID, "stats workflow: required")
	case d.ChatID == "":
		return Errorf(EINVALID, "stats chat_id: required")
	}
	for _, a := range d.Agents {
		if a.Agent == "" {
			return Errorf(EINVALID, "stats agent: name required")
		}
	}
	return nil
}

// AgentStats is one agent's part of a ChatStats.
type AgentStats struct {
	Agent                   string
	Turns, ToolCalls, Calls int64
	Usage
	Cost float64
}

// TotalTokens returns prompt plus completion tokens.
func (u Usage) TotalTokens() int64 { return u.PromptTokens + u.CompletionTokens }

// StatsStore keeps the rollups. Writes add: a rollup is the sum of every
// delta written for the chat, so a lost or late write never rewinds one.
type StatsStore interface {
	// AddChatStats adds the counts of d (and of each of d.Agents) to the
	// chat's rollup under d.App and d.Workflow, creating it when new.
	AddChatStats(ctx context.Context, d ChatStats) error
	// WorkflowStats returns the rollups of app's chats of workflow ("" for
	// every workflow), with their agents, most recently updated first, at
	// most limit (<= 0: 100).
	WorkflowStats(ctx context.Context, app, workflow string, limit int) ([]ChatStats, error)
	// AppStats returns the sum of every rollup of app (ChatID and Agents
	// empty).
	AppStats(ctx context.Context, app string) (ChatStats, error)
}
