package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/batonhq/baton"
)

// oaiEvent is the part of an envelope's data a reply is made of.
type oaiEvent struct {
	Type             string          `json:"-"`
	Agent            string          `json:"agent"`
	Content          string          `json:"content"`
	Delta            string          `json:"delta"`
	MessageID        string          `json:"message_id"`
	AgentMessageID   string          `json:"agent_message_id"`
	UIHidden         bool            `json:"ui_hidden"`
	ToolOnly         bool            `json:"tool_only"`
	InputID          string          `json:"input_id"`
	ToolName         string          `json:"tool_name"`
	UIEventID        string          `json:"ui_event_id"`
	PendingKind      string          `json:"pending_kind"`
	ComponentType    string          `json:"component_type"`
	Mode             string          `json:"mode"`
	Arguments        json.RawMessage `json:"arguments"`
	Payload          json.RawMessage `json:"payload"`
	PromptTokens     int64           `json:"prompt_tokens"`
	CompletionTokens int64           `json:"completion_tokens"`
	Message          string          `json:"message"`
	Status           string          `json:"status"`
	Prompt           string          `json:"prompt"`
	RequestID        string          `json:"request_id"`
	ToolCallID       string          `json:"tool_call_id"`

	sub int // Followed.Subscription
}

func (e *oaiEvent) decode(typ string, data json.RawMessage) error {
	*e = oaiEvent{}
	e.Type = typ
	return json.Unmarshal(data, e)
}

// decodeEnvelope is decode from the whole envelope (followEnvelopes), in
// one pass: the envelope's data straight into e.
func (e *oaiEvent) decodeEnvelope(typ string, envelope []byte) error {
	if typ == baton.TypeStreamText {
		// Most of a streamed reply: read without reflection when the
		// envelope has the hub's shape (decodeStreamText).
		if d, ok := decodeStreamText(envelope); ok {
			*e = oaiEvent{Type: typ, Agent: d.Agent, MessageID: d.MessageID, Delta: d.Delta}
			return nil
		}
	}
	*e = oaiEvent{}
	v := struct {
		Data *oaiEvent `json:"data"`
	}{e}
	if err := json.Unmarshal(envelope, &v); err != nil {
		return err
	}
	e.Type = typ
	return nil
}

// oaiReply assembles one answer from the events that follow the input:
// the visual agents' text (their deltas, or the recorded text of a message
// that did not stream), the UI tool call that pauses the chat, the usage
// of the model calls a client may see, and why it ended. emit, when set,
// receives each piece as it comes (streaming).
type oaiReply struct {
	id, model, chatID string
	created           int64
	prefix            bool
	secretNotice      func(agent string) string
	// schema is the JSON Schema of the workflow's UI tool of that name
	// (oaiToolSchema), its tool call's function.parameters; nil: none.
	schema func(tool string) json.RawMessage

	content   strings.Builder
	agent     string                  // the agent of the latest text
	lastMsg   string                  // the message id of the latest text
	streamed  map[string]*oaiStreamed // message id → what its deltas sent
	toolCalls []oaiToolCall
	usage     oaiUsage
	finish    string
	errMsg    string

	// emit receives each text piece (with its agent) and the tool call.
	emitText func(agent, text string) error
	emitTool func(tc oaiToolCall) error
	// batch, when set, coalesces the writes of emitText and emitTool
	// (followBatched).
	batch batcher
}

// oaiStreamed is what a message's deltas sent, and in which of follow's
// subscriptions they came.
type oaiStreamed struct {
	text []byte
	sub  int
	gap  bool // a delta came in a later subscription: some were lost
}

// text adds a piece of agent's message msgID: a separator (and, with the
// prefix option, the agent's name) before a new message.
func (o *oaiReply) text(agent, msgID, piece string) error {
	if piece == "" {
		return nil
	}
	var b strings.Builder
	if msgID != o.lastMsg {
		if o.content.Len() > 0 {
			b.WriteString("\n\n")
		}
		if o.prefix && agent != "" {
			b.WriteString("**" + agent + ":** ")
		}
		o.lastMsg = msgID
	}
	b.WriteString(piece)
	o.content.WriteString(b.String())
	if agent != "" {
		o.agent = agent
	}
	if o.emitText != nil {
		return o.emitText(agent, b.String())
	}
	return nil
}

// parameters is the schema of the UI tool called name, or nil.
func (o *oaiReply) parameters(name string) json.RawMessage {
	if o.schema == nil {
		return nil
	}
	return o.schema(name)
}

// add takes one followed event; done is true when the reply is complete.
func (o *oaiReply) add(ev *oaiEvent) (done bool, err error) {
	switch ev.Type {
	case baton.TypeStreamText:
		if o.streamed == nil {
			o.streamed = map[string]*oaiStreamed{}
		}
		st := o.streamed[ev.MessageID]
		if st == nil {
			st = &oaiStreamed{sub: ev.sub}
			o.streamed[ev.MessageID] = st
		}
		if st.gap = st.gap || ev.sub != st.sub; st.gap {
			// follow fell behind and subscribed again: the deltas in
			// between are lost, and the recorded text sends the rest.
			return false, nil
		}
		st.text = append(st.text, ev.Delta...)
		return false, o.text(ev.Agent, ev.MessageID, ev.Delta)
	case baton.TypeChatText:
		if ev.Agent == agentUser || ev.Agent == agentSystem || ev.UIHidden || ev.ToolOnly {
			return false, nil
		}
		content := ev.Content
		if st := o.streamed[ev.AgentMessageID]; st != nil {
			// Streamed: the rest its deltas did not send (none, unless
			// follow lost some), when they sent a prefix of it.
			if len(content) < len(st.text) || content[:len(st.text)] != string(st.text) {
				return false, nil
			}
			content = content[len(st.text):]
		}
		return false, o.text(ev.Agent, ev.AgentMessageID, content)
	case baton.TypeChatUsageSummary:
		o.usage.PromptTokens += ev.PromptTokens
		o.usage.CompletionTokens += ev.CompletionTokens
		o.usage.TotalTokens = o.usage.PromptTokens + o.usage.CompletionTokens
	case baton.TypeChatToolCall:
		switch ev.PendingKind {
		case baton.PendingSecret:
			// The chat waits for the web UI's form; the reply says so and
			// goes on when it is answered.
			return false, o.text("", "secret:"+ev.UIEventID, o.secretNotice(ev.Agent))
		case baton.PendingUITool:
			args := ev.Payload
			if len(args) == 0 || string(args) == "null" {
				args = ev.Arguments
			}
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			i := len(o.toolCalls)
			tc := oaiToolCall{
				Index: &i, ID: ev.UIEventID, Type: "function",
				Function: oaiFunction{Name: ev.ToolName, Arguments: string(args), Parameters: o.parameters(ev.ToolName)},
				Baton:    &oaiToolExtension{Component: ev.ComponentType, Mode: ev.Mode, Agent: ev.Agent},
			}
			o.toolCalls = append(o.toolCalls, tc)
			o.finish = "tool_calls"
			if o.emitTool != nil {
				return true, o.emitTool(tc)
			}
			return true, nil
		case baton.PendingClientTool:
			return o.clientToolCall(ev)
		}
	case baton.TypeChatInputRequest:
		o.finish = "stop"
		if ev.ToolCallID != "" && ev.Prompt != "" {
			// A tool's question (a remote agent's, through an a2a tool): no
			// agent said it, so the reply says it; the client's next
			// message answers it.
			return true, o.text(ev.Agent, "input:"+ev.RequestID, ev.Prompt)
		}
		return true, nil
	case baton.TypeChatRunComplete:
		o.finish = "stop"
		if ev.Status == "max_turns" || ev.Status == "budget_exceeded" {
			o.finish = "length"
		}
		return true, nil
	case baton.TypeChatError:
		o.finish, o.errMsg = "stop", ev.Message
		if o.errMsg == "" {
			o.errMsg = "the run failed"
		}
		return true, nil
	}
	return false, nil
}

// oaiFollow follows the chat after turn.last, through the gate, into out
// until the reply is complete.
func (s *Server) oaiFollow(ctx context.Context, scope baton.Scope, turn oaiTurn, out *oaiReply) error {
	open := turn.gate == nil
	var ev oaiEvent
	return s.followBatched(ctx, scope, turn.chat, turn.last, out.batch, func(_ int64, typ string, envelope []byte, subscription int) error {
		if err := ev.decodeEnvelope(typ, envelope); err != nil {
			return fmt.Errorf("chat completion of chat %s: decode envelope: %w", turn.chat.ID, err)
		}
		ev.sub = subscription
		if !open {
			open = turn.gate(&ev)
			return nil
		}
		done, err := out.add(&ev)
		if err != nil {
			return err
		}
		if done {
			return errStopFollow
		}
		return nil
	})
}

// oaiCollect reads the whole reply (a non-streaming request).
func (s *Server) oaiCollect(ctx context.Context, scope baton.Scope, turn oaiTurn, out *oaiReply) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	return s.oaiFollow(ctx, scope, turn, out)
}

// oaiStream answers with Server-Sent Events of chat.completion.chunk
// objects, as OpenAI's API streams: a first chunk with the role, a chunk
// per piece of text, the tool call, a last chunk with finish_reason, the
// usage chunk (empty choices) when asked for, then "data: [DONE]". A
// comment line every Config.Heartbeat keeps proxies from closing a reply
// that waits (for a slow model, or for a secret form).
func (s *Server) oaiStream(w http.ResponseWriter, r *http.Request, scope baton.Scope, turn oaiTurn, out *oaiReply, includeUsage bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	es := &lockedEventStream{es: newEventStream(w, s.cfg.WriteTimeout)} // the heartbeat writes too
	write := es.write
	out.batch = es
	var nullUsage *oaiUsage
	if includeUsage {
		nullUsage = &oaiUsage{} // replaced by null below: see chunk
	}
	buf := make([]byte, 0, 512)
	encode := func(d oaiDelta, finish *string) ([]byte, error) {
		c := oaiChunk{ID: out.id, Object: "chat.completion.chunk", Created: out.created, Model: out.model,
			SystemFingerprint: oaiFingerprint, ChatID: out.chatID,
			Choices: []oaiChunkChoice{{Delta: d, FinishReason: finish}}}
		b, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		if nullUsage != nil {
			// OpenAI sends "usage": null in every chunk but the last.
			b = append(b[:len(b)-1], `,"usage":null}`...)
		}
		return b, nil
	}
	chunk := func(d oaiDelta, finish *string) error {
		b, err := encode(d, finish)
		if err != nil {
			return err
		}
		buf = append(append(append(buf[:0], "data: "...), b...), "\n\n"...)
		return write(buf)
	}
	// A content chunk is the same bytes around its text: encoded once, so
	// that a delta costs the encoding of its text only (the WebSocket
	// sends the hub's frame as it is; this keeps the stream's CPU near it).
	empty := ""
	template, err := encode(oaiDelta{Content: &empty}, nil)
	if err != nil {
		return
	}
	at := bytes.Index(template, []byte(`"content":""`)) + len(`"content":`)
	head, tail := template[:at], template[at+len(`""`):]
	content := func(text string) error {
		q, err := json.Marshal(text)
		if err != nil {
			return err
		}
		buf = append(append(append(append(append(buf[:0], "data: "...), head...), q...), tail...), "\n\n"...)
		return write(buf)
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	var hb sync.WaitGroup
	hb.Go(func() {
		if es.heartbeats(hbCtx, s.cfg.Heartbeat, ": keep-alive\n\n") != nil {
			cancel() // the client is gone
		}
	})
	defer func() { stopHB(); hb.Wait() }()

	if chunk(oaiDelta{Role: "assistant", Content: &empty}, nil) != nil {
		return
	}
	lastAgent := ""
	out.emitText = func(agent, text string) error {
		if agent == "" || agent == lastAgent {
			return content(text)
		}
		lastAgent = agent
		return chunk(oaiDelta{Content: &text, Name: agent}, nil)
	}
	out.emitTool = func(tc oaiToolCall) error {
		return chunk(oaiDelta{ToolCalls: []oaiToolCall{tc}}, nil)
	}
	if err := s.oaiFollow(ctx, scope, turn, out); err != nil {
		if ctx.Err() == nil {
			_, msg := publicError(err)
			s.oaiStreamError(write, msg, "server_error", baton.ErrorCode(err))
		}
		return
	}
	if out.errMsg != "" {
		s.oaiStreamError(write, "the workflow stopped with an error: "+out.errMsg, "server_error", "chat_error")
		return
	}
	finish := out.finish
	if chunk(oaiDelta{}, &finish) != nil {
		return
	}
	if includeUsage {
		c := oaiChunk{ID: out.id, Object: "chat.completion.chunk", Created: out.created, Model: out.model,
			SystemFingerprint: oaiFingerprint, ChatID: out.chatID, Choices: []oaiChunkChoice{}, Usage: &out.usage}
		b, err := json.Marshal(c)
		if err != nil || write(append(append([]byte("data: "), b...), "\n\n"...)) != nil {
			return
		}
	}
	_ = write([]byte("data: [DONE]\n\n"))
}

// oaiStreamError ends a stream whose status line is sent with OpenAI's
// error object in a data event (the SDKs raise it), then [DONE].
func (s *Server) oaiStreamError(write func([]byte) error, msg, typ, code string) {
	b, _ := json.Marshal(oaiErrorBody{Error: oaiError{Message: msg, Type: typ, Code: &code}})
	if write(append(append([]byte("data: "), b...), "\n\n"...)) == nil {
		_ = write([]byte("data: [DONE]\n\n"))
	}
}

// clientToolCall is the reply's call of a tool the client offered: an
// assistant tool call, its id the call's ui_event_id (what the client's
// tool message answers), finish_reason tool_calls.
func (o *oaiReply) clientToolCall(ev *oaiEvent) (bool, error) {
	args := ev.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	i := len(o.toolCalls)
	tc := oaiToolCall{
		Index: &i, ID: ev.UIEventID, Type: "function",
		Function: oaiFunction{Name: ev.ToolName, Arguments: string(args)},
		Baton:    &oaiToolExtension{Agent: ev.Agent},
	}
	o.toolCalls = append(o.toolCalls, tc)
	o.finish = "tool_calls"
	if o.emitTool != nil {
		return true, o.emitTool(tc)
	}
	return true, nil
}
