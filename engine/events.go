package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/tool"
	"github.com/batonhq/baton/workflow"
)

// Environment events (spec/environment-events.md): an event that is not a
// person's input — a background task finishing, a webhook, a failed tool —
// reaches a chat through an agent rule. The event-handler agent, created
// fresh for each event, records three messages in the chat's history — the
// person-side "Observed event: …", the assistant's get_event_info call with
// id call_{event.id}, and the call's result, the event as JSON — and then
// runs the chat's current agent with the rule's prompt, which decides to
// answer the person, go on with the workflow, or ask for confirmation. The
// messages are recorded (persisted, replayable) before the agent runs, and
// hidden from people unless the engine is configured to show them.

// Prompts of the default rules (seed 004 §3.3).
const (
	BackgroundTaskPrompt = "You are a background task expert. Analyze task results and decide how to handle."
	FallbackEventPrompt  = "You are an event handling expert. Analyze event content and decide: 1) respond to user; 2) continue execution; 3) interact with user for confirmation."
)

// Names of the built-in tools the engine offers to workflows that list them
// in tools.json (kind go, function of the same name).
const (
	ToolGetEventInfo        = "get_event_info"
	ToolStartBackgroundTask = "start_background_task"
)

// eventAgent handles one environment event for a chat.
type eventAgent struct {
	e              *Engine
	prompt, system string
	coalesce       time.Duration
}

// NewEventAgent returns the event-handler agent for one event, for
// bus.AgentHandler: every event gets a fresh one.
func (e *Engine) NewEventAgent(prompt, systemPrompt string) bus.EventAgent {
	return &eventAgent{e: e, prompt: prompt, system: systemPrompt}
}

// AgentRule returns a bus rule whose handler is the event-handler agent with
// prompt. With coalesce > 0, a burst of events for one chat within the
// window wakes the agent once, after all of them are recorded.
func (e *Engine) AgentRule(name string, types []string, priority int, prompt, systemPrompt string, coalesce time.Duration) bus.Rule {
	e.agentRulesMu.Lock()
	if e.agentRules == nil {
		e.agentRules = map[string]bool{}
	}
	e.agentRules[name] = true
	e.agentRulesMu.Unlock()
	return bus.Rule{Name: name, Types: types, Priority: priority, Handler: bus.AgentHandler(prompt, systemPrompt,
		func(p, s string) bus.EventAgent { return &eventAgent{e: e, prompt: p, system: s, coalesce: coalesce} })}
}

// Handle records the event in its chat and runs the chat's agent. Like the
// engine's inputs (handleLeased), a handling that lost the chat's lease
// midway is done again under a new one.
func (a *eventAgent) Handle(ctx context.Context, ev baton.Event) error {
	e := a.e
	e.active.Add(1) // from the first line, so that Active never misses a handler
	defer e.active.Add(-1)
	defer e.countActive(ev.Metadata.Scope())()
	return e.againOnLeaseLoss(ctx, ev, a.handle)
}

func (a *eventAgent) handle(ctx context.Context, ev baton.Event) (err error) {
	e := a.e
	chatID := ev.ChatID()
	if chatID == "" {
		e.log.Warn("event-handler agent: no trigger_session_id in event metadata", "event_id", ev.ID, "event_type", ev.Type)
		return nil
	}
	ctx, lease, end, err := e.leased(ctx, chatID)
	if err != nil {
		return err
	}
	defer end(&err)
	r, err := e.load(ctx, ev.Metadata.Scope(), chatID, true)
	if err != nil {
		if errors.Is(err, baton.ErrNotFound) {
			e.log.Warn("event-handler agent: chat not found", "event_id", ev.ID, "event_type", ev.Type, "chat_id", chatID)
			return nil
		}
		return err
	}
	if lease != nil {
		r.fence = lease.token
	}
	r.quiet = strings.HasPrefix(ev.Type, "session.")
	clean := false
	defer func() {
		if clean {
			e.cache.put(r.st)
		}
	}()
	if r.st.inputs[ev.ID] {
		// Recorded before: the event is delivered again (its first
		// handling failed after recording it, or its instance died) or
		// was published twice. It is observed once; a wake it recorded
		// that did not finish goes on from the state, like any
		// interrupted run.
		e.log.Info("event-handler agent: event already recorded; not observed again", "event_id", ev.ID, "event_type", ev.Type, "chat_id", chatID)
		if r.st.chat.Status != baton.ChatRunning {
			clean = true
			return nil
		}
		err = r.driveOrStop(ctx)
		clean = err == nil
		return err
	}
	events := r.observedEvents(ev)
	var u *baton.ChatUpdate
	wake := r.eventWake(a.prompt, a.system)
	if wake != nil && a.coalesce <= 0 {
		events = append(events, *wake)
		u = &baton.ChatUpdate{}
	} else if r.st.chat.Status == baton.ChatWaitingInput {
		waiting := baton.ChatWaitingInput // recorded only: the chat keeps waiting
		u = &baton.ChatUpdate{Status: &waiting}
	} else if r.st.chat.Status == baton.ChatCompleted || r.st.chat.Status == baton.ChatWaitingUITool || r.st.chat.Status == baton.ChatWaitingSecret || r.st.chat.Status == baton.ChatFailed || r.st.chat.Status == baton.ChatCancelled {
		status := r.st.chat.Status
		u = &baton.ChatUpdate{Status: &status}
	}
	if _, kept := ev.Metadata.Extra[baton.InboxKey]; kept {
		// Kept in the chat's inbox when it was accepted (PublishEvent):
		// taken in the append that records it.
		if u == nil {
			status := r.st.chat.Status
			u = &baton.ChatUpdate{Status: &status}
		}
		u.ConsumeInputs = []string{ev.ID}
	}
	if err := r.record(ctx, events, u); err != nil {
		return err
	}
	if wake != nil && a.coalesce > 0 {
		e.scheduleWake(ev.Metadata.Scope(), chatID, a.prompt, a.system, a.coalesce)
		clean = true
		return nil
	}
	err = r.driveOrStop(ctx)
	clean = err == nil
	return err
}

// PublishEvent publishes an environment event (an app's webhook, an outside
// job's outcome: POST /api/events). An event of a chat in scope whose type
// the bus routes to an event-handler agent of this engine is kept in the
// chat's inbox first, like a person's message: durable when PublishEvent
// returns nil, observed once, and published again by RecoverInputs after a
// restart. Any other event (no chat, a chat not in scope, a type a log or
// ignore rule takes, or no rule) is published as it is: no agent would
// take it from the inbox.
func (e *Engine) PublishEvent(ctx context.Context, scope baton.Scope, ev baton.Event) error {
	if ev.ChatID() != "" && e.observes(ev.Type) {
		kept, err := e.keep(ctx, scope, ev)
		switch {
		case err == nil:
			ev = kept
		case !errors.Is(err, baton.ErrNotFound):
			return err
		}
	}
	return e.publishEvent(ctx, ev)
}

// observes reports whether the bus routes events of typ to an
// event-handler agent rule of this engine (AgentRule).
func (e *Engine) observes(typ string) bool {
	rule, ok := e.bus.Match(typ)
	if !ok {
		return false
	}
	e.agentRulesMu.Lock()
	defer e.agentRulesMu.Unlock()
	return e.agentRules[rule.Name]
}

// observedEvents are the three messages of spec §3.2 for ev, preceded by a
// synthetic select_speaker for "system" when the speaker changes.
func (r *run) observedEvents(ev baton.Event) []baton.Event {
	st := r.st
	agent := r.currentAgent()
	callID := "call_" + ev.ID
	msg := fmt.Sprintf("Observed event: %s\nEvent ID: %s\nTime: %s", ev.Type, ev.ID, time.UnixMilli(ev.Timestamp).UTC().Format(time.RFC3339Nano))
	info, _ := json.Marshal(map[string]any{
		"event_id": ev.ID, "event_type": ev.Type, "timestamp": ev.Timestamp, "metadata": publicMetadata(ev.Metadata), "payload": ev.Payload,
	})
	args, _ := json.Marshal(map[string]any{"event_ids": []string{ev.ID}})
	hidden := !r.e.showEvents
	out := r.synthetic(systemAgent, msg)
	out = append(out,
		baton.NewChatEvent(baton.TypeChatText, st.chat.ID, systemAgent, baton.TextPayload{Kind: "text", Agent: systemAgent, Content: msg, Index: st.texts, UIHidden: hidden, EventID: ev.ID}),
		baton.NewChatEvent(baton.TypeChatToolCall, st.chat.ID, agent, baton.ToolCallPayload{Kind: "tool_call", Agent: agent, ToolName: ToolGetEventInfo,
			ToolCallID: callID, Corr: ev.ID, Arguments: args, AgentMessageID: "event_" + ev.ID, EventID: ev.ID, UIHidden: hidden}),
		baton.NewChatEvent(baton.TypeChatToolResponse, st.chat.ID, agent, baton.ToolResponsePayload{Kind: "tool_response", Agent: agent, ToolName: ToolGetEventInfo,
			ToolCallID: callID, CallID: callID, Corr: ev.ID, Status: baton.ToolStatusOK, Success: true, Content: string(info), EventID: ev.ID, UIHidden: hidden}),
	)
	return out
}

// publicMetadata drops the runtime's own keys (the scope, the inbox mark)
// from an event's metadata before the model sees it.
func publicMetadata(md baton.Metadata) baton.Metadata {
	out := md
	out.App, out.User = "", ""
	out.Extra = nil
	for k, v := range md.Extra {
		if k == baton.InboxKey {
			continue
		}
		if out.Extra == nil {
			out.Extra = map[string]json.RawMessage{}
		}
		out.Extra[k] = v
	}
	return out
}

// currentAgent is the agent an event is for: the one speaking or due to
// speak, else the one that handed over to the person, else the initial one.
func (r *run) currentAgent() string {
	st := r.st
	switch {
	case st.turn != nil:
		return st.turn.agent
	case st.next != "" && st.next != workflow.UserAgent:
		return st.next
	case st.revertedFrom != "":
		return st.revertedFrom
	}
	return r.wf.Config.Orchestration.InitialAgent
}

// eventWake returns the handoff that runs the current agent on an event, or
// nil when the chat cannot run now: it ended, or a turn is in progress
// (waiting for a UI tool or failed), in which case the event is recorded
// and the agent sees it on its next call.
func (r *run) eventWake(prompt, system string) *baton.Event {
	st := r.st
	if st.done || st.terminating || st.turn != nil {
		return nil
	}
	p := prompt
	if system != "" {
		p = system + "\n\n" + prompt
	}
	ev := baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, systemAgent, baton.HandoffPayload{
		Kind: "handoff", From: "event", To: r.currentAgent(), HandoffType: "event", TransitionTarget: workflow.AgentTarget, Prompt: p,
	})
	return &ev
}

// scheduleWake publishes one run.wake for a chat after the coalescing
// window; more events in the window join the same wake (its event id names
// the chat and the window's deadline, and the bus drops repeats).
func (e *Engine) scheduleWake(scope baton.Scope, chatID, prompt, system string, window time.Duration) {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	if e.wakes == nil {
		e.wakes = map[string]*time.Timer{}
	}
	if _, pending := e.wakes[chatID]; pending {
		return
	}
	payload, _ := json.Marshal(baton.RunWakePayload{Prompt: prompt, System: system})
	e.wakes[chatID] = time.AfterFunc(window, func() {
		e.wakeMu.Lock()
		delete(e.wakes, chatID)
		e.wakeMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.publish(ctx, scope, baton.TypeRunWake, chatID, payload); err != nil {
			e.log.Warn("engine: coalesced wake", "chat_id", chatID, "err", err)
		}
	})
}

// wake runs the current agent after a coalescing window.
func (r *run) wake(ctx context.Context, ev baton.Event) error {
	var p baton.RunWakePayload
	_ = json.Unmarshal(ev.Payload, &p)
	w := r.eventWake(p.Prompt, p.System)
	if w == nil {
		return nil
	}
	return r.record(ctx, []baton.Event{*w}, nil)
}

// getEventInfo answers the built-in get_event_info tool from the chat's
// recorded history: the event JSON of each id it observed.
func (e *Engine) getEventInfoTool() baton.Tool {
	type args struct {
		EventIDs []string `json:"event_ids" jsonschema:"ids of events observed in this chat"`
	}
	return tool.MustFunc(ToolGetEventInfo, "Return the full JSON of events observed in this chat, by event id.",
		func(ctx context.Context, cc *baton.CallContext, in args) (map[string]json.RawMessage, error) {
			out := map[string]json.RawMessage{}
			want := map[string]bool{}
			for _, id := range in.EventIDs {
				want["call_"+id] = true
			}
			evs, err := e.store.Events(ctx, baton.Scope{App: cc.App, User: cc.User}, cc.ChatID, 0, 0)
			if err != nil {
				return nil, err
			}
			for _, ev := range evs {
				if ev.Type != baton.TypeChatToolResponse {
					continue
				}
				var p baton.ToolResponsePayload
				if json.Unmarshal(ev.Payload, &p) == nil && p.ToolName == ToolGetEventInfo && want[p.ToolCallID] {
					out[strings.TrimPrefix(p.ToolCallID, "call_")] = json.RawMessage(p.Content)
				}
			}
			for _, id := range in.EventIDs {
				if _, ok := out[id]; !ok {
					out[id] = json.RawMessage(`{"error":"no such event in this chat"}`)
				}
			}
			return out, nil
		})
}

// ---- rules ----------------------------------------------------------------------------

// DefaultRules are seed 004 §3.3's rules besides the engine's own user_query
// rule (priority 100): session.* logged (50), background_task.completed and
// .failed to the event-handler agent (80), and every other event to it (10).
func (e *Engine) DefaultRules() []bus.Rule {
	return []bus.Rule{
		{Name: "sessions", Types: []string{"session.*"}, Priority: 50, Handler: e.logEvent},
		e.AgentRule("background-tasks", []string{baton.TypeBackgroundTaskCompleted, baton.TypeBackgroundTaskFailed}, 80, BackgroundTaskPrompt, "", 0),
		e.AgentRule("fallback", []string{"*"}, 10, FallbackEventPrompt, "", 0),
	}
}

func (e *Engine) logEvent(_ context.Context, ev baton.Event) error {
	e.log.Info("event", "event_type", ev.Type, "event_id", ev.ID, "chat_id", ev.ChatID())
	return nil
}

// RuleSpec is one rule of a rules file (`baton serve --rules FILE`):
//
//	{"rules": [
//	  {"name": "webhooks", "types": ["webhook.*"], "priority": 60,
//	   "handler": {"agent": {"prompt": "A webhook arrived; tell the person what changed."}},
//	   "coalesce_ms": 2000},
//	  {"name": "quiet", "types": ["metrics.*"], "priority": 60, "handler": {"builtin": "ignore"}}
//	]}
type RuleSpec struct {
	Name       string      `json:"name"`
	Types      []string    `json:"types"`
	Priority   int         `json:"priority"`
	Enabled    *bool       `json:"enabled"`
	Handler    HandlerSpec `json:"handler"`
	CoalesceMS int         `json:"coalesce_ms"`
}

// HandlerSpec is a rule's handler: an event-handler agent with a prompt, or
// a built-in: "log" (log the event) or "ignore" (drop it silently).
type HandlerSpec struct {
	Agent *struct {
		Prompt       string `json:"prompt"`
		SystemPrompt string `json:"system_prompt"`
	} `json:"agent"`
	Builtin string `json:"builtin"`
}

// LoadRules reads and checks a rules file; every mistake is reported, each
// naming the file and the rule's place.
func LoadRules(path string) ([]RuleSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	var f struct {
		Rules []RuleSpec `json:"rules"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := baton.LineCol(data, max(se.Offset-1, 0))
			return nil, baton.Errorf(baton.EINVALID, "%s:%d:%d: malformed JSON: %v", path, line, col, err)
		}
		return nil, baton.Errorf(baton.EINVALID, "%s: %v", path, err)
	}
	var errs []string
	names := map[string]bool{}
	for i, r := range f.Rules {
		at := fmt.Sprintf("%s: rules[%d]", path, i)
		if r.Name == "" {
			errs = append(errs, at+".name: required")
		} else if names[r.Name] {
			errs = append(errs, fmt.Sprintf("%s.name: %q is used twice", at, r.Name))
		}
		names[r.Name] = true
		if len(r.Types) == 0 {
			errs = append(errs, at+".types: at least one event type pattern is required")
		}
		for j, t := range r.Types {
			if err := bus.CheckPattern(t); err != nil {
				errs = append(errs, fmt.Sprintf("%s.types[%d]: %s", at, j, baton.ErrorMessage(err)))
			}
		}
		switch {
		case r.Handler.Agent != nil && r.Handler.Builtin != "":
			errs = append(errs, at+".handler: give either agent or builtin, not both")
		case r.Handler.Agent != nil && strings.TrimSpace(r.Handler.Agent.Prompt) == "":
			errs = append(errs, at+".handler.agent.prompt: required")
		case r.Handler.Agent == nil && r.Handler.Builtin == "":
			errs = append(errs, at+".handler: give agent {prompt} or builtin (log, ignore)")
		case r.Handler.Builtin != "" && r.Handler.Builtin != "log" && r.Handler.Builtin != "ignore":
			errs = append(errs, fmt.Sprintf("%s.handler.builtin: %q is not log or ignore", at, r.Handler.Builtin))
		}
		if r.CoalesceMS < 0 {
			errs = append(errs, at+".coalesce_ms: must not be negative")
		}
	}
	if len(errs) > 0 {
		return nil, baton.Errorf(baton.EINVALID, "%s", strings.Join(errs, "\n"))
	}
	return f.Rules, nil
}

// Rules turns rule specs into bus rules.
func (e *Engine) Rules(specs []RuleSpec) []bus.Rule {
	out := make([]bus.Rule, 0, len(specs))
	for _, s := range specs {
		var r bus.Rule
		switch {
		case s.Handler.Agent != nil:
			r = e.AgentRule(s.Name, s.Types, s.Priority, s.Handler.Agent.Prompt, s.Handler.Agent.SystemPrompt, time.Duration(s.CoalesceMS)*time.Millisecond)
		case s.Handler.Builtin == "ignore":
			r = bus.Rule{Name: s.Name, Types: s.Types, Priority: s.Priority, Handler: func(context.Context, baton.Event) error { return nil }}
		default:
			r = bus.Rule{Name: s.Name, Types: s.Types, Priority: s.Priority, Handler: e.logEvent}
		}
		r.Disabled = s.Enabled != nil && !*s.Enabled
		out = append(out, r)
	}
	return out
}
