package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/batonhq/baton"
)

// The OpenAI Chat Completions wire format, as much of it as baton serves:
// the request a client sends, the completion and the chunks it gets back,
// the models it lists, and the error shape. openai-go's types are made for
// clients (their decoders accept anything, their encoders fill defaults),
// so the server writes its own.

// oaiRequest is the body of POST /v1/chat/completions. Fields baton does
// not use (temperature, top_p, max_tokens, tool_choice,
// parallel_tool_calls, …) are accepted and ignored, as OpenAI-compatible
// servers do: a client's model settings mean nothing to a workflow whose
// agents set their own. The function tools the client offers go to the
// agents whose client_tools allow them.
type oaiRequest struct {
	Model         string            `json:"model"`
	Messages      []oaiInMessage    `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions *oaiStreamOptions `json:"stream_options"`
	N             *int              `json:"n"`
	Tools         []oaiTool         `json:"tools"`
	// Baton is baton's extension: the chat to continue and how to name
	// the agents. Headers say the same for clients that cannot add body
	// fields (X-Baton-Chat-Id, X-Baton-Agent-Prefix).
	Baton *oaiExtension `json:"baton"`
}

// oaiTool is a tool a request offers: {"type": "function", "function":
// {name, description, parameters}}.
type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type oaiStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// oaiExtension is the request's "baton" object.
type oaiExtension struct {
	ChatID      string `json:"chat_id"`
	AgentPrefix bool   `json:"agent_prefix"`
}

// oaiInMessage is one message of a request. Content is a string, an array
// of content parts, or null (an assistant message with tool calls).
type oaiInMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []oaiToolCall   `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// oaiToolCall is a function call of an assistant message (in a chunk's
// delta it has an index).
type oaiToolCall struct {
	Index    *int        `json:"index,omitempty"`
	ID       string      `json:"id"`
	Type     string      `json:"type"`
	Function oaiFunction `json:"function"`
	// Baton carries what a client needs to show the UI tool: its
	// component, its mode and its agent (the JSON Schema of its arguments
	// is Function.Parameters).
	Baton *oaiToolExtension `json:"baton,omitempty"`
}

// oaiFunction is a tool call's function. Parameters, baton's extension,
// is the UI tool's JSON Schema: the shape of Arguments.
type oaiFunction struct {
	Name        string          `json:"name"`
	Arguments   string          `json:"arguments"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type oaiToolExtension struct {
	Component string `json:"component,omitempty"`
	Mode      string `json:"mode,omitempty"`
	Agent     string `json:"agent,omitempty"`
}

// oaiItem is one message of a conversation as baton compares them: a
// request's (system and developer messages left out) or a chat's
// transcript (oaiTranscript).
type oaiItem struct {
	role      string // user, assistant or tool
	content   string // a user message's text, trimmed
	toolCalls []string
	callID    string // a tool message's tool_call_id
	// seq is, in a transcript, the sequence of the recorded input (a user
	// text, a UI tool response): a resent request's reply follows it.
	seq int64
}

// maxMessages bounds the messages of one request.
const maxMessages = 4096

// decodeChatRequest decodes and checks a request body: the errors name the
// field at fault (messages[2].role), which the OpenAI error's param repeats.
// It returns the conversation without system and developer messages.
func decodeChatRequest(body []byte) (oaiRequest, []oaiItem, error) {
	var req oaiRequest
	if err := decodeLenient(body, &req); err != nil {
		return req, nil, err
	}
	if strings.TrimSpace(req.Model) == "" {
		return req, nil, baton.Errorf(baton.EINVALID, "model: required (a workflow name; GET /v1/models lists them)")
	}
	if req.N != nil && *req.N != 1 {
		return req, nil, baton.Errorf(baton.EINVALID, "n: only 1 is supported (a workflow gives one answer)")
	}
	if len(req.Messages) == 0 {
		return req, nil, baton.Errorf(baton.EINVALID, "messages: required (at least one user message)")
	}
	if len(req.Messages) > maxMessages {
		return req, nil, baton.Errorf(baton.EINVALID, "messages: more than %d", maxMessages)
	}
	items := make([]oaiItem, 0, len(req.Messages))
	for i, m := range req.Messages {
		field := fmt.Sprintf("messages[%d]", i)
		text, err := messageText(field+".content", m.Content)
		if err != nil {
			return req, nil, err
		}
		switch m.Role {
		case "system", "developer":
			continue // the workflow's agents have their own
		case "user":
			text = strings.TrimSpace(text)
			if text == "" {
				return req, nil, baton.Errorf(baton.EINVALID, "%s.content: must not be empty", field)
			}
			if len(text) > maxContent {
				return req, nil, baton.Errorf(baton.EINVALID, "%s.content: longer than %d bytes", field, maxContent)
			}
			items = append(items, oaiItem{role: "user", content: text})
		case "assistant":
			it := oaiItem{role: "assistant"}
			for j, tc := range m.ToolCalls {
				if tc.ID == "" {
					return req, nil, baton.Errorf(baton.EINVALID, "%s.tool_calls[%d].id: required", field, j)
				}
				it.toolCalls = append(it.toolCalls, tc.ID)
			}
			items = append(items, it)
		case "tool":
			if m.ToolCallID == "" {
				return req, nil, baton.Errorf(baton.EINVALID, "%s.tool_call_id: required in a tool message", field)
			}
			if len(text) > maxContent {
				return req, nil, baton.Errorf(baton.EINVALID, "%s.content: longer than %d bytes", field, maxContent)
			}
			items = append(items, oaiItem{role: "tool", callID: m.ToolCallID, content: text})
		case "":
			return req, nil, baton.Errorf(baton.EINVALID, "%s.role: required", field)
		default:
			return req, nil, baton.Errorf(baton.EINVALID, "%s.role: %q is not system, developer, user, assistant or tool", field, truncate(m.Role, 32))
		}
	}
	if len(items) == 0 {
		return req, nil, baton.Errorf(baton.EINVALID, "messages: at least one user message is required")
	}
	if last := items[len(items)-1]; last.role != "user" && last.role != "tool" {
		return req, nil, baton.Errorf(baton.EINVALID, "messages[%d].role: the last message must be the person's (user) or a tool result (tool), not %s", len(req.Messages)-1, last.role)
	}
	return req, items, nil
}

// messageText returns a message's text: a string, or the text parts of an
// array of content parts joined; null is "".
func messageText(field string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", baton.Errorf(baton.EINVALID, "%s: not a valid string", field)
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", baton.Errorf(baton.EINVALID, "%s: must be a string or an array of content parts", field)
		}
		var b strings.Builder
		for i, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return "", baton.Errorf(baton.EINVALID, "%s[%d].type: only text parts are supported, not %q", field, i, truncate(p.Type, 32))
			}
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(*p.Text)
		}
		return b.String(), nil
	}
	return "", baton.Errorf(baton.EINVALID, "%s: must be a string or an array of content parts", field)
}

// decodeLenient decodes one JSON object into dst, as decodeStrict does but
// letting unknown fields pass: OpenAI clients send fields of their own.
func decodeLenient(data []byte, dst any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return baton.Errorf(baton.EINVALID, "body: required (a JSON object)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(dst); err != nil {
		return jsonError("body", data, err)
	}
	if dec.More() {
		return baton.Errorf(baton.EINVALID, "body: unexpected data after the JSON object")
	}
	return nil
}

// oaiCompletion is a non-streaming answer (object "chat.completion").
type oaiCompletion struct {
	ID                string      `json:"id"`
	Object            string      `json:"object"`
	Created           int64       `json:"created"`
	Model             string      `json:"model"`
	SystemFingerprint string      `json:"system_fingerprint"`
	Choices           []oaiChoice `json:"choices"`
	Usage             *oaiUsage   `json:"usage"`
	// ChatID is baton's: the chat this conversation is (X-Baton-Chat-Id).
	ChatID string `json:"chat_id"`
}

type oaiChoice struct {
	Index        int           `json:"index"`
	Message      oaiOutMessage `json:"message"`
	FinishReason string        `json:"finish_reason"`
	Logprobs     *struct{}     `json:"logprobs"`
}

// oaiOutMessage is the answer's assistant message. Name is the agent that
// spoke (the last one when several did).
type oaiOutMessage struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"`
	Name      string        `json:"name,omitempty"`
	Refusal   *string       `json:"refusal"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

// oaiChunk is one event of a streamed answer (object "chat.completion.chunk").
type oaiChunk struct {
	ID                string           `json:"id"`
	Object            string           `json:"object"`
	Created           int64            `json:"created"`
	Model             string           `json:"model"`
	SystemFingerprint string           `json:"system_fingerprint"`
	Choices           []oaiChunkChoice `json:"choices"`
	// Usage is null in every chunk but the last when the client asked for
	// it (stream_options.include_usage), and absent when it did not.
	Usage  *oaiUsage `json:"usage,omitempty"`
	ChatID string    `json:"chat_id"`
}

type oaiChunkChoice struct {
	Index        int       `json:"index"`
	Delta        oaiDelta  `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type oaiDelta struct {
	Role      string        `json:"role,omitempty"`
	Content   *string       `json:"content,omitempty"`
	Name      string        `json:"name,omitempty"`
	ToolCalls []oaiToolCall `json:"tool_calls,omitempty"`
}

type oaiUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// oaiModel is one workflow as a model.
type oaiModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Description and VisualAgents are baton's: what the workflow does and
	// the agents whose text is the answer.
	Description  string   `json:"description,omitempty"`
	VisualAgents []string `json:"visual_agents,omitempty"`
	// Baton lists the workflow's UI tools (oaiUITools).
	Baton *oaiModelExtension `json:"baton,omitempty"`
}

// oaiErrorBody is OpenAI's error shape.
type oaiErrorBody struct {
	Error oaiError `json:"error"`
}

type oaiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
