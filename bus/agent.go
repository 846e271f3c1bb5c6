package bus

import (
	"context"

	"github.com/batonhq/baton"
)

// EventAgent handles one event on behalf of an agent rule. An agent handler
// creates a fresh EventAgent for every event, so no state leaks from one
// event to the next (spec/environment-events.md §3.2: the EventHandlerAgent
// is stateless).
type EventAgent interface {
	Handle(ctx context.Context, ev baton.Event) error
}

// AgentHandler returns a Handler that, for every event, creates a fresh agent
// with newAgent(prompt, systemPrompt) and lets it handle the event: the
// AgentHandler of spec/environment-events.md §3.1. The engine supplies
// newAgent (the event-handler agent); the bus only guarantees one fresh agent
// per event on the chat's lane.
func AgentHandler(prompt, systemPrompt string, newAgent func(prompt, systemPrompt string) EventAgent) Handler {
	return func(ctx context.Context, ev baton.Event) error {
		return newAgent(prompt, systemPrompt).Handle(ctx, ev)
	}
}
