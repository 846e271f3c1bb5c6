package chatlog

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// Store is what Export reads: the chat and its recorded events, in the
// caller's scope (another tenant's chat is not found).
type Store interface {
	baton.EventStore
	GetChat(ctx context.Context, scope baton.Scope, id string) (baton.Chat, error)
}

// ExportOptions say what an export holds.
type ExportOptions struct {
	// View is ViewFull (the default) or ViewClient.
	View string
	// Workflow is the chat's workflow as loaded here, for the agent flags
	// of each envelope; nil sets them all false.
	Workflow *workflow.Workflow
	// Keep, for ViewClient, says whether the chat's person may see an
	// event (the server's envelope filter); nil keeps every event.
	Keep func(ev *baton.Event) bool
	// Now is the export's time; nil means time.Now.
	Now func() time.Time
}

// exportPage is how many events Export reads from the store at a time.
const exportPage = 500

// Export writes chat chatID of scope to w: a header line, then each
// recorded event as its envelope (baton.Event.AppendEnvelope), one per
// line, in sequence order.
//
// Secrets never reach the file: a secret form's answer is recorded only
// redacted (its sealed values live in the context snapshot's reserved
// __secrets, which no event carries), AppendEnvelope drops the reserved
// variables from chat.context_updated, and the header's start context
// leaves them out too. A full export holds hidden messages and internal
// agents' texts (the model saw them, so a replay needs them); the server
// serves it only where its operator allows (docs/replay.md).
func Export(ctx context.Context, st Store, scope baton.Scope, chatID string, w io.Writer, o ExportOptions) error {
	if o.View == "" {
		o.View = ViewFull
	}
	if o.View != ViewFull && o.View != ViewClient {
		return baton.Errorf(baton.EINVALID, "view: %q, want %q or %q", o.View, ViewFull, ViewClient)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	chat, err := st.GetChat(ctx, scope, chatID)
	if err != nil {
		return err
	}
	// The start context needs every event's variables before the header is
	// written: one pass over the events for it, a second to write them, so
	// that a long chat is never held in memory.
	changed := map[string]bool{}
	for ev, err := range baton.EventsAfter(ctx, st, scope, chat.ID, 0, exportPage) {
		if err != nil {
			return fmt.Errorf("export chat %s: %w", chat.ID, err)
		}
		if ev.Type == baton.TypeChatContextUpdated {
			p, _ := baton.DecodePayload[baton.ContextUpdatedPayload](&ev)
			for k := range p.Variables {
				changed[k] = true
			}
		}
	}
	var snapshot map[string]json.RawMessage
	_ = json.Unmarshal(chat.Context, &snapshot)
	start := map[string]json.RawMessage{}
	for k, v := range snapshot {
		if !baton.IsReservedVariable(k) && !changed[k] {
			start[k] = v
		}
	}
	h := Header{
		Format: formatName, Version: FormatVersion, View: o.View, App: chat.App, Workflow: chat.Workflow, ChatID: chat.ID,
		Status: string(chat.Status), CreatedAt: chat.CreatedAt.UTC().Format(time.RFC3339), ExportedAt: now().UTC().Format(time.RFC3339),
		LastSequence: chat.LastSequence, StartContext: start,
	}
	bw := bufio.NewWriter(w)
	hb, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("export chat %s: header: %w", chat.ID, err)
	}
	bw.Write(hb)
	bw.WriteByte('\n')
	var buf []byte
	for ev, err := range baton.EventsAfter(ctx, st, scope, chat.ID, 0, exportPage) {
		if err != nil {
			return fmt.Errorf("export chat %s: %w", chat.ID, err)
		}
		if ev.Sequence > chat.LastSequence {
			break // appended after the header was made: the next export has it
		}
		if o.View == ViewClient && o.Keep != nil && !o.Keep(&ev) {
			continue
		}
		var ok bool
		buf, ok = ev.AppendEnvelope(buf[:0], flagsOf(o.Workflow, &ev))
		if !ok {
			continue // a malformed recorded payload: never written half-formed
		}
		bw.Write(buf)
		if err := bw.WriteByte('\n'); err != nil {
			return fmt.Errorf("export chat %s: write: %w", chat.ID, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export chat %s: write: %w", chat.ID, err)
	}
	return nil
}

// flagsOf returns the agent flags of a recorded event, as the server's
// envelopes carry them.
func flagsOf(wf *workflow.Workflow, ev *baton.Event) baton.AgentFlags {
	if wf == nil {
		return baton.AgentFlags{}
	}
	v := ev.View()
	agent := v.Agent
	if agent == "" {
		agent = ev.Metadata.TriggerAgentName
	}
	a := wf.Agent(agent)
	return baton.AgentFlags{
		Visual:            wf.IsVisual(agent),
		StructuredCapable: a != nil && a.IsStructuredCapable(),
		ToolAgent:         a != nil && a.IsToolAgent(),
	}
}
