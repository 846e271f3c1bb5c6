package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/batonhq/baton"
)

// RenderSystemMessage returns the agent's system message with every
// ${name} replaced by the context variable's value: a string as it is,
// nil or a missing variable as the empty string, anything else as JSON.
// "$${" renders as a literal "${".
func (a *Agent) RenderSystemMessage(vars map[string]any) string {
	if len(a.template) == 1 && a.template[0].name == "" {
		return a.template[0].text
	}
	var b strings.Builder
	b.Grow(len(a.SystemMessage))
	for _, s := range a.template {
		if s.name == "" {
			b.WriteString(s.text)
			continue
		}
		switch v := vars[s.name].(type) {
		case nil:
		case string:
			b.WriteString(v)
		default:
			data, err := json.Marshal(v)
			if err != nil {
				fmt.Fprint(&b, v)
			} else {
				b.Write(data)
			}
		}
	}
	return b.String()
}

// Matches reports whether an agent's text fires a text trigger
// (agent_text_equals: the trimmed text equals trigger_value exactly, case
// included; agent_text_contains: the text contains it; agent_text_prefix: a
// line starts with it, see Captured). It is false for the other trigger
// types.
func (d *DerivedVariable) Matches(text string) bool {
	switch d.TriggerType {
	case AgentTextPrefix:
		_, ok := d.Captured(text)
		return ok
	case AgentTextEquals:
		return strings.TrimSpace(text) == d.TriggerValue
	case AgentTextContains:
		return strings.Contains(text, d.TriggerValue)
	}
	return false
}

// Captured returns, for an agent_text_prefix variable, the rest of the
// first line of text that starts with trigger_value (leading spaces of the
// line ignored), trimmed: "CONCEPT_OVERVIEW: a newsletter" with trigger
// "CONCEPT_OVERVIEW:" captures "a newsletter". ok is false when no line
// starts with it, or for the other trigger types.
func (d *DerivedVariable) Captured(text string) (value string, ok bool) {
	if d.TriggerType != AgentTextPrefix {
		return "", false
	}
	for line := range strings.SplitSeq(text, "\n") {
		if rest, found := strings.CutPrefix(strings.TrimSpace(line), d.TriggerValue); found {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// FieldValue returns the value at trigger_value (a dotted path) in a
// structured output decoded as JSON, for structured_output_field variables.
func (d *DerivedVariable) FieldValue(output any) (any, bool) {
	cur := output
	for part := range strings.SplitSeq(d.TriggerValue, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// InitialContext returns a new chat's context variables: every declared
// variable at its default, text and tool derived variables at false,
// agent_text_prefix variables at "" and structured_output_field variables
// at nil.
func (w *Workflow) InitialContext() map[string]any {
	vars := make(map[string]any, len(w.Variables)+len(w.DerivedVariables))
	for _, v := range w.Variables {
		vars[v.Name] = v.Default
	}
	for _, d := range w.DerivedVariables {
		switch d.TriggerType {
		case StructuredOutputField:
			vars[d.Name] = nil
		case AgentTextPrefix:
			vars[d.Name] = ""
		default:
			vars[d.Name] = false
		}
	}
	return vars
}

// CheckStartContext checks the context variables a client asks to set when
// it starts a chat. Only variables marked client_settable may be set, each
// with a value of its declared type (or null); anything else is an EINVALID
// error naming the first offending variable in name order. Derived
// variables are never client-settable.
func (w *Workflow) CheckStartContext(vars map[string]json.RawMessage) error {
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if err := w.checkStartVar(k, vars[k]); err != nil {
			return err
		}
	}
	return nil
}

// CheckToolUpdate checks one context update a tool returns (its
// context_updates, or CallContext.Vars.Set): only a declared, non-derived
// variable whose name does not start with "__" may be set, with a value of
// its declared type (or null). A tool's output is steerable by whoever talks
// to the model, so it must not pass a derived gate (interview_complete) or
// touch the engine's internal variables (__secrets). client_settable does
// not matter here. The error is EINVALID and names the variable.
func (w *Workflow) CheckToolUpdate(name string, raw json.RawMessage) error {
	if strings.HasPrefix(name, "__") {
		return baton.Errorf(baton.EINVALID, "context_updates.%s: an internal variable; no tool sets it", shortName(name))
	}
	return w.checkVar("context_updates", name, raw, false)
}

func shortName(name string) string {
	if len(name) > 64 {
		return name[:64] + "…"
	}
	return name
}

func (w *Workflow) checkStartVar(name string, raw json.RawMessage) error {
	return w.checkVar("context", name, raw, true)
}

// checkVar checks a value for a declared variable; field names where it
// came from in the error ("context" at start, "context_updates" from a
// tool), atStart whether client_settable is required.
func (w *Workflow) checkVar(field, name string, raw json.RawMessage, atStart bool) error {
	shown := shortName(name)
	var decl *Variable
	for _, v := range w.Variables {
		if v.Name == name {
			decl = v
			break
		}
	}
	if decl == nil {
		if _, derived := w.varTypes[name]; derived {
			return baton.Errorf(baton.EINVALID, "%s.%s: a derived variable of workflow %s; only the chat sets it", field, shown, w.Name)
		}
		return baton.Errorf(baton.EINVALID, "%s.%s: not a variable of workflow %s", field, shown, w.Name)
	}
	if atStart && !decl.ClientSettable {
		return baton.Errorf(baton.EINVALID, "%s.%s: not client-settable in workflow %s (context_variables.json client_settable)", field, shown, w.Name)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return baton.Errorf(baton.EINVALID, "%s.%s: not valid JSON", field, shown)
	}
	if v != nil && !valueHasType(v, decl.Type) {
		return baton.Errorf(baton.EINVALID, "%s.%s: must be %s %s (or null)", field, shown, article(decl.Type), decl.Type)
	}
	return nil
}
