package chatlog

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton"
)

// Input is one thing the person gave a chat: exactly one of its fields is
// set. It is the shape of an eval case's inputs and of the inputs an
// exported scripted.json carries.
type Input struct {
	// Message is the person's message, sent when the chat waits for one.
	Message *string `json:"message,omitempty"`
	// UI answers the UI tool the chat waits for.
	UI *UIInput `json:"ui,omitempty"`
	// Secrets answers the masked secret form the chat waits for, name to
	// value. A replay of an export fills them with placeholders: the
	// recorded values were never recorded.
	Secrets map[string]string `json:"secrets,omitempty"`
}

// UIInput is the person's answer to a UI tool.
type UIInput struct {
	// Status is "success" (the default) or "cancelled".
	Status string          `json:"status,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// SecretPlaceholder is the value a replay gives every secret the recorded
// person typed: the export holds their names only.
const SecretPlaceholder = "replayed-secret"

// Kind names what the input answers, for messages.
func (in Input) Kind() string {
	switch {
	case in.Message != nil:
		return "a message"
	case in.UI != nil:
		return "a UI tool response"
	case in.Secrets != nil:
		return "a secret form"
	}
	return "nothing"
}

// Validate checks that exactly one field is set.
func (in Input) Validate() error {
	n := 0
	if in.Message != nil {
		n++
	}
	if in.UI != nil {
		n++
		if s := in.UI.Status; s != "" && s != "success" && s != "cancelled" {
			return fmt.Errorf("ui.status: %q, want success or cancelled", s)
		}
		if len(in.UI.Data) > 0 && !json.Valid(in.UI.Data) {
			return fmt.Errorf("ui.data: not JSON")
		}
	}
	if in.Secrets != nil {
		n++
	}
	if n != 1 {
		return fmt.Errorf(`needs exactly one of "message", "ui" or "secrets"`)
	}
	return nil
}

// Inputs returns what the recorded person gave the chat: the message it
// started with (or ""), and each later message, UI tool response and
// secret form answer, in order.
func (f *File) Inputs() (start string, inputs []Input) {
	secretCalls := map[string]bool{}
	for i := range f.Records {
		r := &f.Records[i]
		switch r.Type {
		case baton.TypeChatText:
			var p baton.TextPayload
			if json.Unmarshal(r.Payload, &p) != nil || p.Agent != "user" {
				continue
			}
			switch {
			case p.InputID != "":
				msg := p.Content
				inputs = append(inputs, Input{Message: &msg})
			case p.Source != "initial_message" && p.Source != "" && start == "" && len(inputs) == 0:
				start = p.Content
			}
		case baton.TypeChatToolCall:
			var p baton.ToolCallPayload
			if json.Unmarshal(r.Payload, &p) == nil && p.PendingKind == baton.PendingSecret {
				secretCalls[p.ToolCallID] = true
			}
		case baton.TypeChatToolResponse:
			var p baton.ToolResponsePayload
			if json.Unmarshal(r.Payload, &p) != nil || p.InputID == "" {
				continue
			}
			var res struct {
				Status string          `json:"status"`
				Data   json.RawMessage `json:"data"`
			}
			_ = json.Unmarshal(p.Payload, &res)
			if secretCalls[p.ToolCallID] {
				var names map[string]json.RawMessage
				_ = json.Unmarshal(res.Data, &names)
				secrets := make(map[string]string, len(names))
				for k := range names {
					secrets[k] = SecretPlaceholder
				}
				inputs = append(inputs, Input{Secrets: secrets})
				continue
			}
			if bytes.Equal(bytes.TrimSpace(res.Data), []byte("null")) {
				res.Data = nil
			}
			inputs = append(inputs, Input{UI: &UIInput{Status: res.Status, Data: res.Data}})
		}
	}
	return start, inputs
}

// scriptedFile is the scripted.json an export becomes (llm/scripted).
type scriptedFile struct {
	DelayMS int                        `json:"delay_ms"`
	Agents  map[string][]scriptedEntry `json:"agents"`
	// Inputs are the recorded person's inputs, in order: the provider
	// ignores them; an eval case made from the export uses them.
	Inputs []Input `json:"inputs,omitempty"`
}

type scriptedEntry struct {
	Text      *string          `json:"text,omitempty"`
	JSON      json.RawMessage  `json:"json,omitempty"`
	ToolCalls []scriptedCall   `json:"tool_calls,omitempty"`
	Usage     map[string]int64 `json:"usage,omitempty"`
}

type scriptedCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Scripted returns the scripted.json (the format llm/scripted reads) that
// replays the recorded chat's model replies: each agent's replies in the
// order it gave them (the scripted provider answers an agent's N-th call
// with its N-th entry), text, structured outputs as "json", tool calls
// with their arguments, and the token counts. The person's inputs go
// under "inputs", which the provider ignores.
func (f *File) Scripted() ([]byte, error) {
	out := scriptedFile{Agents: map[string][]scriptedEntry{}}
	for _, c := range f.Calls() {
		var e scriptedEntry
		switch {
		case c.Structured:
			e.JSON = json.RawMessage(c.Text)
		case c.Text != "" || len(c.ToolCalls) == 0:
			text := c.Text
			e.Text = &text
		}
		for _, tc := range c.ToolCalls {
			args := json.RawMessage(tc.Arguments)
			if !json.Valid(args) {
				// The model produced invalid JSON; the script holds JSON only.
				args, _ = json.Marshal(map[string]string{"_invalid_arguments": tc.Arguments})
			}
			e.ToolCalls = append(e.ToolCalls, scriptedCall{Name: tc.Name, Arguments: args})
		}
		if c.Usage != (baton.Usage{}) {
			e.Usage = map[string]int64{"prompt_tokens": c.Usage.PromptTokens, "completion_tokens": c.Usage.CompletionTokens}
			if c.Usage.CachedTokens > 0 {
				e.Usage["cached_tokens"] = c.Usage.CachedTokens
			}
			if c.Usage.ReasoningTokens > 0 {
				e.Usage["reasoning_tokens"] = c.Usage.ReasoningTokens
			}
		}
		out.Agents[c.Agent] = append(out.Agents[c.Agent], e)
	}
	if len(out.Agents) == 0 {
		return nil, baton.Errorf(baton.EINVALID, "chat %s has no model replies to script", f.Header.ChatID)
	}
	_, out.Inputs = f.Inputs()
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("scripted.json: %w", err)
	}
	return append(b, '\n'), nil
}
