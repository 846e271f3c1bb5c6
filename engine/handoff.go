package engine

import (
	"context"
	"encoding/json"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// afterUser decides who answers the person: the first matching rule whose
// source is "user", else the agent that handed over to them, else the
// initial agent.
func (r *run) afterUser() baton.HandoffPayload {
	if rule := r.pickRule(workflow.UserAgent); rule != nil &&
		(rule.TransitionTarget == workflow.AgentTarget || rule.TransitionTarget == workflow.TerminateTarget) {
		return baton.HandoffPayload{Kind: "handoff", From: workflow.UserAgent, To: rule.TargetAgent, HandoffType: rule.HandoffType,
			TransitionTarget: rule.TransitionTarget, Condition: rule.Condition}
	}
	to := r.st.revertedFrom
	if to == "" {
		to = r.wf.Config.Orchestration.InitialAgent
	}
	return baton.HandoffPayload{Kind: "handoff", From: workflow.UserAgent, To: to, HandoffType: "user_input", TransitionTarget: workflow.AgentTarget}
}

// pickRule returns the rule that fires for source after its turn
// (docs/workflow-format.md, "When rules fire"): the first condition rule, in
// file order, whose condition is true; else the first after_work rule whose
// condition, if any, is true; else nil. llm rules fire only through their
// transfer tool.
func (r *run) pickRule(source string) *workflow.HandoffRule {
	rules := r.wf.HandoffRules(source)
	for _, kind := range []string{workflow.HandoffCondition, workflow.HandoffAfterWork} {
		for _, rule := range rules {
			if rule.HandoffType == kind && r.ruleApplies(rule) {
				return rule
			}
		}
	}
	return nil
}

// transferRule returns the llm rule of agent whose transfer tool is name.
// Whether it may fire is decided once, when the model's call is recorded
// (offeredTransfer): the call is then a transfer (baton.ToolCallPayload.Transfer)
// whatever the tools of its turn change afterwards.
func (r *run) transferRule(agent, name string) *workflow.HandoffRule {
	for _, rule := range r.wf.HandoffRules(agent) {
		if rule.HandoffType == workflow.HandoffLLM && rule.TransferToolName() == name {
			return rule
		}
	}
	return nil
}

// offeredTransfer returns the llm rule of agent whose transfer tool is name
// if it applies now: a rule with a condition is offered, and honoured, only
// while the condition is true (docs/workflow-format.md). A call of a
// transfer tool whose rule does not apply is answered like an unknown tool.
func (r *run) offeredTransfer(agent, name string) *workflow.HandoffRule {
	if rule := r.transferRule(agent, name); rule != nil && r.ruleApplies(rule) {
		return rule
	}
	return nil
}

// ruleApplies reports whether rule's condition, if any, holds for the
// chat's variables now; a condition that fails to evaluate does not hold.
func (r *run) ruleApplies(rule *workflow.HandoffRule) bool {
	if rule.Condition == "" {
		return true
	}
	ok, err := rule.Applies(r.st.varsForEval())
	if err != nil {
		r.logger().Warn("engine: handoff condition failed", "condition", rule.Condition, "err", err)
		return false
	}
	return ok
}

func transferTarget(rule *workflow.HandoffRule) string {
	switch rule.TransitionTarget {
	case workflow.TerminateTarget:
		return "the end of the chat"
	case workflow.RevertToUserTarget:
		return "the person"
	}
	return rule.TargetAgent
}

// textHidden reports whether a ui_hidden derived variable's trigger matches
// an agent's text, setting nothing: for a text that sets no variables (an
// interrupted one), hidden by the same rules as a final one.
func (r *run) textHidden(agent, text string) bool {
	for _, d := range r.wf.DerivedFor(agent) {
		if d.UIHidden && d.Matches(text) {
			return true
		}
	}
	return false
}

// textDerived evaluates the derived variables an agent's final text sets.
// A match of a ui_hidden variable hides the text from people (the model
// still sees it).
func (r *run) textDerived(agent, text string) (hidden bool, patch map[string]json.RawMessage, ev *baton.Event) {
	var trigger string
	for _, d := range r.wf.DerivedFor(agent) {
		if !d.Matches(text) {
			continue
		}
		hidden = hidden || d.UIHidden
		value := json.RawMessage("true")
		if d.TriggerType == workflow.AgentTextPrefix {
			// The variable holds the captured text, and follows the agent's
			// latest line: a later summary replaces an earlier one.
			captured, _ := d.Captured(text)
			value, _ = json.Marshal(captured)
		}
		if string(r.st.vars[d.Name]) != string(value) {
			if patch == nil {
				patch = map[string]json.RawMessage{}
			}
			patch[d.Name] = value
			trigger = d.TriggerType
		}
	}
	if patch != nil {
		e := baton.NewChatEvent(baton.TypeChatContextUpdated, r.st.chat.ID, agent, baton.ContextUpdatedPayload{Kind: "context_updated", Agent: agent, Variables: patch, Trigger: trigger})
		ev = &e
	}
	return hidden, patch, ev
}

// toolDerived merges a tool's own variable updates with the tool_called
// derived variables it sets.
func (r *run) toolDerived(agent, name string, ok bool, updates map[string]json.RawMessage) (map[string]json.RawMessage, *baton.Event) {
	patch := map[string]json.RawMessage{}
	for k, v := range updates {
		if string(r.st.vars[k]) != string(v) {
			patch[k] = v
		}
	}
	trigger := "tool"
	if ok {
		for _, d := range r.wf.DerivedFor(agent) {
			if d.TriggerType == workflow.ToolCalled && d.TriggerValue == name && string(r.st.vars[d.Name]) != "true" {
				patch[d.Name] = json.RawMessage("true")
				trigger = workflow.ToolCalled
			}
		}
	}
	if len(patch) == 0 {
		return nil, nil
	}
	ev := baton.NewChatEvent(baton.TypeChatContextUpdated, r.st.chat.ID, agent, baton.ContextUpdatedPayload{Kind: "context_updated", Agent: agent, Variables: patch, Trigger: trigger})
	return patch, &ev
}

// handoff ends the current turn: an llm rule whose transfer tool the model
// called, else the rule pickRule finds, picks the next speaker, the person,
// or the end. With no rule the chat reverts to the person.
func (r *run) handoff(ctx context.Context) error {
	st, t := r.st, r.st.turn
	var chosen *workflow.HandoffRule
	if t.transfer != "" {
		chosen = r.transferRule(t.agent, t.transfer)
	}
	if chosen == nil {
		chosen = r.pickRule(t.agent)
	}
	h := baton.HandoffPayload{Kind: "handoff", From: t.agent, HandoffType: "default", TransitionTarget: workflow.RevertToUserTarget}
	if chosen != nil {
		h.To, h.HandoffType, h.TransitionTarget, h.Condition = chosen.TargetAgent, chosen.HandoffType, chosen.TransitionTarget, chosen.Condition
	}
	events := []baton.Event{baton.NewChatEvent(baton.TypeChatHandoff, st.chat.ID, t.agent, h)}
	u := &baton.ChatUpdate{}
	switch h.TransitionTarget {
	case workflow.RevertToUserTarget:
		events = append(events, baton.NewChatEvent(baton.TypeChatInputRequest, st.chat.ID, t.agent, baton.InputRequestPayload{
			Kind: "input_request", Agent: t.agent, RequestID: "input_" + t.key,
		}))
		waiting := baton.ChatWaitingInput
		u.Status = &waiting
	}
	// A TerminateTarget handoff is followed by the after_chat lifecycle
	// tools and then chat.run_complete (see drive); a pause ends the drive,
	// which records what is staged.
	r.stage(events, u)
	return nil
}
