package workflow

import (
	"encoding/json"
	"fmt"
	"strconv"
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
// variable at its default (or its from_env value when lookup finds one,
// converted to the variable's type), text and tool derived variables at
// false, agent_text_prefix variables at "" and structured_output_field
// variables at nil. lookup is usually
// os.LookupEnv. A from_env value that does not convert is an EINVALID error.
func (w *Workflow) InitialContext(lookup func(string) (string, bool)) (map[string]any, error) {
	vars := make(map[string]any, len(w.Variables)+len(w.DerivedVariables))
	for _, v := range w.Variables {
		vars[v.Name] = v.Default
		if v.FromEnv == "" || lookup == nil {
			continue
		}
		s, ok := lookup(v.FromEnv)
		if !ok {
			continue
		}
		val, err := convertEnv(s, v.Type)
		if err != nil {
			return nil, baton.Errorf(baton.EINVALID, "context variable %s: environment variable %s: %v", v.Name, v.FromEnv, err)
		}
		vars[v.Name] = val
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
	return vars, nil
}

func convertEnv(s, typ string) (any, error) {
	switch typ {
	case TypeStr:
		return s, nil
	case TypeBool:
		return strconv.ParseBool(strings.TrimSpace(s))
	case TypeInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return float64(n), err
	case TypeFloat:
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if !valueHasType(v, typ) {
		return nil, fmt.Errorf("not a %s", typ)
	}
	return v, nil
}
