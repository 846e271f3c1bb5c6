package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// DefaultTimeoutSweep is how often Run looks for UI tool requests whose
// tool's timeout_seconds has passed.
const DefaultTimeoutSweep = time.Second

// Run does the engine's background work until ctx is done: it answers the
// UI tool requests that waited longer than their tool's timeout_seconds with
// a "timeout" response, which the model gets as a tool error, and the run
// goes on; and, with an instance id, every lease TTL/3 it renews this
// instance's background tasks, reports dead instances' tasks as failed
// (tasks.go) and takes over the running chats of instances whose leases
// expired (lease.go). A paused chat holds no
// goroutine, so this one sweeper, owned by the caller of Run, watches them
// all through the store; it looks for timeouts only when some workflow has
// a UI tool with a timeout. Run returns nil when ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	var timeouts, takeovers <-chan time.Time
	if e.hasUITimeouts() {
		t := time.NewTicker(e.sweep)
		defer t.Stop()
		timeouts = t.C
	}
	if e.instance != "" {
		// Every TTL/3, as a lease is renewed: the instance's tasks must be
		// renewed before they expire, and takeovers follow soon after one.
		t := time.NewTicker(e.leaseTTL / 3)
		defer t.Stop()
		takeovers = t.C
		// At once too: a restarted instance takes back the chats its
		// previous life held (sweepTakeovers) without waiting a tick.
		if err := e.sweepTakeovers(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("engine: takeover sweep", "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-timeouts:
			if err := e.sweepUITimeouts(ctx, now); err != nil && ctx.Err() == nil {
				e.log.Warn("engine: UI tool timeout sweep", "err", err)
			}
		case now := <-takeovers:
			if err := e.renewTasks(ctx, now); err != nil && ctx.Err() == nil {
				e.log.Warn("engine: background task sweep", "err", err)
			}
			if err := e.sweepTakeovers(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("engine: takeover sweep", "err", err)
			}
		}
	}
}

func (e *Engine) hasUITimeouts() bool {
	for _, wf := range e.workflows {
		for _, t := range wf.Tools {
			if t.ToolType == workflow.UITool && t.TimeoutSeconds > 0 {
				return true
			}
		}
	}
	return false
}

// sweepUITimeouts publishes a timeout response for every expired request.
// The event id is derived from the ui_event_id, so a request found again
// before its timeout was handled is dropped by the bus as a duplicate.
func (e *Engine) sweepUITimeouts(ctx context.Context, now time.Time) error {
	chats, err := e.store.ChatsByStatus(ctx, baton.ChatWaitingUITool, 10000)
	if err != nil {
		return err
	}
	for _, c := range chats {
		wf := e.workflows[c.Workflow]
		if wf == nil {
			continue
		}
		// Listing returns chat rows; the pending requests come with GetChat.
		if c, err = e.store.GetChat(ctx, baton.Scope{App: c.App, User: c.User}, c.ID); err != nil {
			continue // deleted meanwhile
		}
		for _, p := range c.Pending {
			t := wf.Tool(p.ToolName)
			if p.Kind != baton.PendingUITool || t == nil || t.TimeoutSeconds <= 0 || now.Before(p.CreatedAt.Add(t.Timeout())) {
				continue
			}
			payload, _ := json.Marshal(baton.UIToolResponsePayload{UIEventID: p.UIEventID, Status: uiStatusTimeout})
			ev := baton.NewInput(baton.Scope{App: c.App, User: c.User}, baton.TypeUIToolResponse, c.ID, payload)
			ev.ID = "timeout_" + p.UIEventID
			ev.Metadata.Source = baton.SourceSystem
			if err := e.bus.Publish(ctx, ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// uiStatusTimeout is the status of the runtime's response to a UI request
// nobody answered in time.
const uiStatusTimeout = "timeout"
