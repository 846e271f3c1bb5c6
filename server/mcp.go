package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// The MCP server: each workflow is a tool an MCP client (Claude Desktop, an
// IDE, another agent) calls with a message; the call starts a chat, or goes
// on with one (chat_id), and follows it through follow, the path every
// client's events take, until the chat waits for the person or its run
// ends. A pause for the person travels as MCP elicitation where the client
// can take it, else the result says what is needed and the chat id to
// continue with. One implementation serves both transports: /mcp on
// `baton serve` (streamable HTTP, API keys) and `baton mcp` (stdio).
// docs/mcp.md is the user's side of it.

// mcpProtocolMRTR is the first MCP protocol version in which a server asks
// the client for input by returning inputRequests from the call (SEP-2322,
// multi round-trip requests) instead of sending elicitation/create while
// the call runs.
const mcpProtocolMRTR = "2026-07-28"

// mcpSessionTimeout closes an HTTP session with no request for this long:
// a client that went away without DELETE does not hold one for ever.
const mcpSessionTimeout = 30 * time.Minute

// mcpElicitTimeout bounds how long a call on a protocol before 2026-07-28
// waits for an elicitation's answer (Server.mcpElicitTimeout; tests shorten
// it).
const mcpElicitTimeout = 10 * time.Minute

// mcpMaxShown bounds the UI tool arguments an elicitation or a result
// quotes: an action plan reads well; a megabyte does not.
const mcpMaxShown = 8 << 10

// mcpCaller is who a tool call acts as, and how to link to the chat in
// the web UI.
type mcpCaller struct {
	scope baton.Scope
	// p is the HTTP principal, whose stream count a call holds while it
	// follows a chat; nil over stdio (one local person).
	p *principal
	// web is the web UI's base URL ("" when unknown: the result then
	// names the chat id only).
	web string
}

// mcpCallerKey is the auth.TokenInfo.Extra key of an HTTP call's mcpCaller.
const mcpCallerKey = "baton.caller"

// mcpEndpoint is the /mcp HTTP handler, built on first use.
type mcpEndpoint struct {
	once sync.Once
	h    http.Handler
	srv  *mcp.Server

	mu       sync.Mutex
	sessions map[string]int // principal bucket (principal.limit) → open HTTP sessions
}

// MCPServer returns an MCP server whose tools are the engine's workflows,
// acting as scope: `baton mcp` serves it over stdio. webURL, when set, is
// the web UI's base URL (say http://127.0.0.1:8080), which a result links
// to when the chat waits for something only the web UI takes (secrets).
func (s *Server) MCPServer(scope baton.Scope, webURL string) *mcp.Server {
	c := mcpCaller{scope: scope, web: strings.TrimRight(webURL, "/")}
	return s.newMCPServer(func(*mcp.CallToolRequest) (mcpCaller, error) { return c, nil })
}

// newMCPServer builds the MCP server; caller tells each call who it acts as.
func (s *Server) newMCPServer(caller func(*mcp.CallToolRequest) (mcpCaller, error)) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "baton", Title: "baton workflows", Version: versionOf()}, &mcp.ServerOptions{
		Logger: s.log,
		Instructions: "Each tool runs a baton workflow: pass the message as input. A workflow may pause for the person " +
			"(a question, an approval): answer it when asked, or call the tool again with the chat_id from the result " +
			"and the answer as input.",
	})
	if s.cfg.Engine == nil {
		return srv
	}
	wfs := s.cfg.Engine.Workflows()
	slices.SortFunc(wfs, func(a, b *workflow.Workflow) int { return strings.Compare(a.Name, b.Name) })
	used := map[string]bool{}
	yes, no := true, false // a workflow calls models and tools; it changes nothing of the caller's
	for _, wf := range wfs {
		name := mcpToolName(wf.Name, used)
		t := &mcp.Tool{
			Name:         name,
			Title:        wf.Name,
			Description:  mcpDescription(wf),
			InputSchema:  mcpInputSchema,
			OutputSchema: mcpOutputSchema(wf),
			Annotations:  &mcp.ToolAnnotations{OpenWorldHint: &yes, DestructiveHint: &no},
		}
		wfName := wf.Name
		srv.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			c, err := caller(req)
			if err != nil {
				return nil, err
			}
			return s.mcpCall(ctx, c, wfName, req), nil
		})
	}
	return srv
}

// versionOf is the server's version as MCP's serverInfo reports it.
func versionOf() string { return "1" }

// mcpToolName makes a workflow's name a valid MCP tool name (1 to 128 of
// A-Z, a-z, 0-9, '_', '-', '.'), unique among used.
func mcpToolName(wf string, used map[string]bool) string {
	b := []byte(wf)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			b[i] = '_'
		}
	}
	name := string(b)
	if name == "" {
		name = "workflow"
	}
	if len(name) > 128 {
		name = name[:128]
	}
	base := name
	for n := 2; used[name]; n++ {
		suffix := "_" + strconv.Itoa(n)
		name = base[:min(len(base), 128-len(suffix))] + suffix
	}
	used[name] = true
	return name
}

// mcpDescription is a tool's description: the workflow's, and how to use it.
func mcpDescription(wf *workflow.Workflow) string {
	d := strings.TrimSpace(wf.Config.Description)
	if d == "" {
		d = "Runs the baton workflow " + wf.Name + "."
	}
	return d + " The result is the agents' answer; when the workflow waits for the person, " +
		"the result says what it needs and the chat_id: call again with that chat_id and the answer as input."
}

// mcpInputSchema is every workflow tool's input.
var mcpInputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "input": {"type": "string", "description": "Your message to the workflow (the first message of a new chat, or the answer to what the chat waits for)."},
    "chat_id": {"type": "string", "description": "Continue this chat (from an earlier result) instead of starting a new one."},
    "idempotency_key": {"type": "string", "description": "Optional: a key (1-128 of A-Z a-z 0-9 _ . : -) that makes a retried call one input."}
  },
  "additionalProperties": false
}`)

// mcpOutputSchema is a workflow tool's output schema: the chat id and its
// status always, and "output", the structured output of the workflow's
// result agent. The result agent is the one visual agent with a model in
// structured_outputs.json; its model is output's schema. With several such
// agents output is whichever answered last (any object); with none there is
// no output.
func mcpOutputSchema(wf *workflow.Workflow) json.RawMessage {
	props := map[string]any{
		"chat_id": map[string]any{"type": "string", "description": "The chat: pass it as chat_id to continue."},
		"status": map[string]any{"type": "string", "description": "Where the chat is",
			"enum": []string{"completed", "waiting_input", "waiting_ui_tool", "waiting_secret", "failed", "cancelled"}},
		"waiting_for": map[string]any{"type": "object", "description": "What the chat waits for, when it waits."},
	}
	schema := map[string]any{"type": "object", "properties": props, "required": []string{"chat_id", "status"}}
	var models []*workflow.Model
	for _, a := range wf.VisualAgents() {
		if m := wf.OutputModel(a.Name); m != nil {
			models = append(models, m)
		}
	}
	switch len(models) {
	case 0:
	case 1:
		var ms map[string]any
		if json.Unmarshal(models[0].Schema(), &ms) == nil {
			// A model's nested models are $defs its $refs name from the
			// schema's root: they move to the output schema's root.
			if defs, ok := ms["$defs"]; ok {
				schema["$defs"] = defs
				delete(ms, "$defs")
			}
			delete(ms, "$schema")
			props["output"] = ms
		}
	default:
		props["output"] = map[string]any{"type": "object"}
	}
	b, _ := json.Marshal(schema)
	return b
}

// mcpArgs are a workflow tool's arguments.
type mcpArgs struct {
	Input          string `json:"input"`
	ChatID         string `json:"chat_id"`
	IdempotencyKey string `json:"idempotency_key"`
}

// mcpState is what a call that asked for input (inputRequests) carries to
// its retry (requestState): the chat, the request answered, and the
// sequence of the event that paused the chat, after which the answer's
// events are. The retry checks all of it against the store in the caller's
// scope, so a forged state names nothing the caller may not see.
type mcpState struct {
	ChatID  string `json:"c"`
	Request string `json:"r"`
	Last    int64  `json:"l"`
}

// mcpPause is what a chat waits for, from the event that paused it.
type mcpPause struct {
	kind   string // baton.PendingInput, PendingUITool or PendingSecret
	id     string // the ui_event_id (the input request's request_id)
	agent  string
	tool   string
	prompt string
	args   json.RawMessage // a UI tool's arguments (or payload)
	seq    int64           // the pausing event's sequence
}

// mcpSegment is what a chat did from a cursor until it paused or its run
// ended.
type mcpSegment struct {
	texts  []mcpText
	output json.RawMessage // the last structured output of a visual agent
	pause  *mcpPause
	status string // completed, failed, cancelled, or the waiting_* status
	detail string // why it ended, for a failed or cut-short run
	last   int64
}

type mcpText struct{ agent, content string }

// mcpCall runs one tool call: start or continue a chat, follow it, and
// answer what it asks where the client can. Every failure is a tool error
// result (isError) with a client-safe message: the model reads it.
func (s *Server) mcpCall(ctx context.Context, c mcpCaller, wfName string, req *mcp.CallToolRequest) *mcp.CallToolResult {
	res, err := s.mcpRun(ctx, c, wfName, req)
	if err != nil {
		if ctx.Err() != nil {
			err = baton.Errorf(baton.EUNAVAILABLE, "the call was cancelled; the chat goes on")
		}
		code, msg := publicError(err)
		switch code {
		case baton.EINTERNAL:
			s.log.Error("mcp: internal error", "workflow", wfName, "err", err)
		case baton.EUNAVAILABLE:
			s.log.Warn("mcp: unavailable", "workflow", wfName, "err", err)
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
	}
	return res
}

func (s *Server) mcpRun(ctx context.Context, c mcpCaller, wfName string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := s.needEngine(); err != nil {
		return nil, err
	}
	var slot *streamSlot
	if c.p != nil {
		ctx = withFollower(ctx, *c.p) // follow re-checks its key
		var err error
		if slot, err = s.acquireStream(*c.p); err != nil {
			return nil, err
		}
		defer func() { slot.release() }()
	}
	var args mcpArgs
	if err := decodeMCPArgs(req.Params.Arguments, &args); err != nil {
		return nil, err
	}
	if args.IdempotencyKey != "" {
		if err := checkIdempotencyKey("idempotency_key", args.IdempotencyKey); err != nil {
			return nil, err
		}
	}
	if len(args.Input) > maxContent {
		return nil, baton.Errorf(baton.EINVALID, "input: longer than %d bytes", maxContent)
	}
	scope := c.scope
	mrtr := req.ProtocolVersion() >= mcpProtocolMRTR
	caps := req.ClientCapabilities()
	// An elicitation capability without form (URL only) cannot take a form.
	canElicit := caps != nil && caps.Elicitation != nil && (caps.Elicitation.Form != nil || caps.Elicitation.URL == nil)

	var chat baton.Chat
	var from int64
	var err error
	switch {
	case req.Params.RequestState != "":
		// The retry of a call that asked for input: answer it, then follow
		// what the answer set going.
		st, err := decodeMCPState(req.Params.RequestState)
		if err != nil {
			return nil, err
		}
		if chat, err = s.chatIn(ctx, scope, st.ChatID); err != nil {
			return nil, err
		}
		if chat.Workflow != wfName {
			return nil, baton.Errorf(baton.ENOTFOUND, "chat %q not found", truncate(st.ChatID, baton.MaxEventIDLen))
		}
		pause, _, err := s.mcpLastPause(ctx, scope, chat.ID)
		if err != nil {
			return nil, err
		}
		if pause == nil || pause.id != st.Request {
			// Answered already (this is a retry of the retry) or never asked:
			// follow from the pause, whose answer's events are the result.
			pause = &mcpPause{id: st.Request, seq: st.Last}
		} else {
			resp, _ := req.Params.InputResponses[st.Request].(*mcp.ElicitResult)
			if resp == nil {
				return nil, baton.Errorf(baton.EINVALID, "inputResponses: no response to %q", truncate(st.Request, baton.MaxEventIDLen))
			}
			if res, err := s.mcpAnswer(ctx, c, chat, pause, resp); res != nil || err != nil {
				return res, err
			}
		}
		from = st.Last
	case args.ChatID != "":
		if chat, err = s.chatIn(ctx, scope, args.ChatID); err != nil {
			return nil, err
		}
		if chat.Workflow != wfName {
			return nil, baton.Errorf(baton.EINVALID, "chat_id: chat %s is a chat of workflow %q: call that tool", chat.ID, chat.Workflow)
		}
		pause, start, err := s.mcpLastPause(ctx, scope, chat.ID)
		if err != nil {
			return nil, err
		}
		from = start
		if strings.TrimSpace(args.Input) != "" {
			from = chat.LastSequence
			send := true
			if key := args.IdempotencyKey; key != "" {
				// A call retried with its key: the chat may hold its message
				// already. Then it is not sent again (the engine would drop
				// it, and the call wait for a pause after the chat's last
				// event). Recorded, the call goes on as one with the chat id
				// and no input: from the chat's latest segment, so that a
				// question the person answered since is not asked again;
				// still waiting, from now.
				seq, waiting, err := s.messageHeld(ctx, scope, chat, inputEventID(scope, chat.ID, key))
				if err != nil {
					return nil, err
				}
				if seq > 0 {
					from = start
				}
				send = seq == 0 && !waiting
			}
			if send {
				if err := s.mcpSubmit(ctx, c, chat, pause, args); err != nil {
					return nil, err
				}
			}
		}
	default:
		opts := baton.StartOptions{Message: args.Input}
		if args.IdempotencyKey == "" {
			chat, err = s.cfg.Engine.Start(ctx, scope, wfName, opts)
			err = startError(chat, err)
		} else {
			opts.ChatID = inputEventID(scope, "mcp:start:"+wfName, args.IdempotencyKey)
			chat, _, err = s.cfg.Engine.StartOnce(ctx, scope, wfName, "mcp:"+args.IdempotencyKey, opts)
		}
		if err != nil {
			return nil, err
		}
	}

	progress := s.mcpProgress(req)
	for {
		seg, err := s.mcpFollow(ctx, scope, chat, from, progress)
		if err != nil {
			return nil, err
		}
		p := seg.pause
		if p == nil || p.kind == baton.PendingSecret || p.kind == baton.PendingClientTool || !canElicit {
			if len(seg.output) == 0 {
				// The output came before an answer this call or an earlier
				// one gave: it is the chat's result all the same.
				sc, err := s.mcpScan(ctx, scope, chat.ID, s.workflowOf(chat.Workflow))
				if err != nil {
					return nil, err
				}
				seg.output = sc.output
			}
			return s.mcpResult(c, chat, seg), nil
		}
		params := mcpElicitation(s.workflowOf(chat.Workflow), p)
		if mrtr {
			// The client fulfils the request and calls again with its answer
			// and this state (the SDK's client middleware does it for Go
			// clients).
			st, _ := json.Marshal(mcpState{ChatID: chat.ID, Request: p.id, Last: p.seq})
			res := s.mcpResult(c, chat, seg)
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{p.id: params},
				RequestState:  base64.RawURLEncoding.EncodeToString(st),
				Meta:          res.Meta,
			}, nil
		}
		// A person answers at their own pace, and a client may never
		// answer: the call holds no stream slot while it asks, and asks for
		// mcpElicitTimeout at most (then it ends as for a client without
		// elicitation; a call with the chat id goes on).
		slot.release()
		ectx, cancel := context.WithTimeout(ctx, s.mcpElicitTimeout)
		resp, err := req.Session.Elicit(ectx, params)
		cancel()
		if c.p != nil {
			var aerr error
			if slot, aerr = s.acquireStream(*c.p); aerr != nil {
				return nil, aerr
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// The client could not ask (or failed to): the result says what
			// is needed, as for a client without elicitation.
			s.log.Debug("mcp: elicitation failed", "chat_id", chat.ID, "err", err)
			return s.mcpResult(c, chat, seg), nil
		}
		if res, err := s.mcpAnswer(ctx, c, chat, p, resp); res != nil || err != nil {
			return res, err
		}
		from = p.seq
	}
}

// decodeMCPArgs decodes a call's arguments, naming an unknown or mistyped
// field.
func decodeMCPArgs(raw json.RawMessage, args *mcpArgs) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(args); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return baton.Errorf(baton.EINVALID, "%s: must be a string", te.Field)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return baton.Errorf(baton.EINVALID, "%s: unknown argument (the arguments are input, chat_id and idempotency_key)", strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`))
		}
		return baton.Errorf(baton.EINVALID, "arguments: not a JSON object of input, chat_id and idempotency_key")
	}
	if dec.More() {
		return baton.Errorf(baton.EINVALID, "arguments: one JSON object, nothing after it")
	}
	return nil
}

// decodeMCPState decodes a retry's requestState.
func decodeMCPState(s string) (mcpState, error) {
	var st mcpState
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(raw, &st) != nil || st.ChatID == "" || st.Request == "" || st.Last < 0 {
		return mcpState{}, baton.Errorf(baton.EINVALID, "requestState: not one this server made")
	}
	return st, nil
}

// mcpSubmit sends a continuing call's input to the chat through the
// engine's durable path: a message, or the answer to a pending UI tool.
// Without an idempotency key the input's id derives from the request it
// answers, so a retried call answers it once.
func (s *Server) mcpSubmit(ctx context.Context, c mcpCaller, chat baton.Chat, pause *mcpPause, args mcpArgs) error {
	input := strings.TrimSpace(args.Input)
	key := args.IdempotencyKey
	if p := pendingClientTool(chat); p != nil {
		return errClientToolPending(chat.ID, p)
	}
	switch chat.Status {
	case baton.ChatWaitingSecret:
		return baton.Errorf(baton.ECONFLICT, "chat %s waits for secrets, which MCP must not carry: %s", chat.ID, webHint(c, chat))
	case baton.ChatWaitingUITool:
		var p *baton.PendingRequest
		for i := range chat.Pending {
			if chat.Pending[i].Kind == baton.PendingUITool {
				p = &chat.Pending[i]
				break
			}
		}
		if p == nil {
			return baton.Errorf(baton.ECONFLICT, "chat %s waits for a UI tool that is not pending any more: call again with chat_id and no input to see where it is", chat.ID)
		}
		if key == "" {
			key = "mcp-ui"
		}
		status, data := uiAnswer(input)
		return s.input(ctx, c.scope, chat.ID, clientMessage{Type: msgUIResponse, ID: key, UIEventID: p.UIEventID, Status: status, Data: data}, "mcp")
	}
	if key == "" && chat.Status == baton.ChatWaitingInput && pause != nil && pause.kind == baton.PendingInput {
		key = "mcp-input-" + pause.id
	}
	return s.input(ctx, c.scope, chat.ID, clientMessage{Type: msgSubmit, ID: key, Content: &input}, "mcp")
}

// uiAnswer reads a UI tool's answer typed as text, as `baton chat` does:
// JSON is the data; "approve" and "cancel" are the usual decisions; any
// other text is {"text": …}.
func uiAnswer(input string) (status string, data json.RawMessage) {
	switch strings.ToLower(input) {
	case "approve", "approved", "yes":
		return "success", json.RawMessage(`{"action":"approve"}`)
	case "cancel", "decline", "reject", "no":
		return "cancelled", json.RawMessage(`{"action":"cancel"}`)
	}
	if json.Valid([]byte(input)) && (strings.HasPrefix(input, "{") || strings.HasPrefix(input, "[")) {
		return "success", json.RawMessage(input)
	}
	b, _ := json.Marshal(map[string]string{"text": input})
	return "success", b
}

// mcpAnswer answers the pause with the person's elicitation response. It
// returns a result when the call ends here (the person declined to answer
// a question), else nil and the chat goes on.
func (s *Server) mcpAnswer(ctx context.Context, c mcpCaller, chat baton.Chat, p *mcpPause, resp *mcp.ElicitResult) (*mcp.CallToolResult, error) {
	switch p.kind {
	case baton.PendingInput:
		msg, _ := resp.Content["message"].(string)
		if resp.Action != "accept" || strings.TrimSpace(msg) == "" {
			return s.mcpResult(c, chat, &mcpSegment{pause: p, status: string(baton.ChatWaitingInput), last: p.seq}), nil
		}
		return nil, s.input(ctx, c.scope, chat.ID, clientMessage{Type: msgSubmit, ID: "mcp-input-" + p.id, Content: &msg}, "mcp")
	case baton.PendingUITool:
		status, data := "cancelled", json.RawMessage(`{"action":"cancel"}`)
		if resp.Action == "accept" {
			if text, ok := resp.Content[mcpTextField].(string); ok && len(resp.Content) == 1 {
				status, data = uiAnswer(strings.TrimSpace(text))
			} else {
				status = "success"
				data, _ = json.Marshal(resp.Content)
			}
		}
		return nil, s.input(ctx, c.scope, chat.ID, clientMessage{Type: msgUIResponse, ID: "mcp-ui", UIEventID: p.id, Status: status, Data: data}, "mcp")
	}
	return s.mcpResult(c, chat, &mcpSegment{pause: p, status: string(baton.ChatWaitingSecret), last: p.seq}), nil
}

// mcpTextField is the one field of an elicitation form for a UI tool whose
// schema does not fit MCP's flat forms.
const mcpTextField = "response"

// mcpElicitation is the form that asks the person for what the chat waits
// for: a message for an input request; for a UI tool, its parameters'
// schema when it is a flat object of strings, numbers, booleans and enums
// (what MCP's forms take), else one text field (JSON, "approve" or
// "cancel").
func mcpElicitation(wf *workflow.Workflow, p *mcpPause) *mcp.ElicitParams {
	if p.kind == baton.PendingInput {
		msg := p.prompt
		if msg == "" {
			msg = p.agent + " waits for your answer."
		}
		return &mcp.ElicitParams{Mode: "form", Message: msg, RequestedSchema: json.RawMessage(
			`{"type":"object","properties":{"message":{"type":"string","title":"Your answer"}},"required":["message"]}`)}
	}
	msg := fmt.Sprintf("%s asks you to respond to %s.", p.agent, p.tool)
	if len(p.args) > 0 && string(p.args) != "null" && string(p.args) != "{}" {
		msg += "\n\n" + shown(p.args)
	}
	var t *workflow.Tool
	if wf != nil {
		t = wf.Tool(p.tool)
	}
	if t != nil && flatSchema(t.Parameters) {
		return &mcp.ElicitParams{Mode: "form", Message: msg, RequestedSchema: t.Parameters}
	}
	return &mcp.ElicitParams{Mode: "form", Message: msg, RequestedSchema: json.RawMessage(
		`{"type":"object","properties":{"` + mcpTextField + `":{"type":"string","title":"Your response",` +
			`"description":"approve, cancel, or JSON for the tool's data"}},"required":["` + mcpTextField + `"]}`)}
}

// flatSchema reports whether a JSON Schema is one MCP elicitation takes:
// an object whose properties are strings, numbers, integers or booleans
// (with an optional enum), nothing nested.
func flatSchema(raw json.RawMessage) bool {
	var s struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil || s.Type != "object" || len(s.Properties) == 0 {
		return false
	}
	for _, p := range s.Properties {
		var f struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(p, &f) != nil {
			return false
		}
		switch f.Type {
		case "string", "number", "integer", "boolean":
		default:
			return false
		}
	}
	return true
}

// shown is a UI tool's arguments as an elicitation or a result quotes
// them: indented JSON, cut at mcpMaxShown.
func shown(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	if len(b) > mcpMaxShown {
		return string(b[:mcpMaxShown]) + "\n…"
	}
	return string(b)
}

// mcpProgress returns what reports a call's progress, nil when the client
// sent no progress token.
func (s *Server) mcpProgress(req *mcp.CallToolRequest) func(ctx context.Context, msg string) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	n := 0.0
	return func(ctx context.Context, msg string) {
		n++
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg}); err != nil {
			s.log.Debug("mcp: progress notification", "err", err)
		}
	}
}

// mcpFollow follows chat after sequence from until it pauses for the
// person or its run ends, collecting the visible agents' text and
// structured output, and reporting progress.
func (s *Server) mcpFollow(ctx context.Context, scope baton.Scope, chat baton.Chat, from int64, progress func(context.Context, string)) (*mcpSegment, error) {
	seg := &mcpSegment{last: from}
	wf := s.workflowOf(chat.Workflow)
	err := s.follow(ctx, scope, chat, from, func(f *Followed) error {
		if f.Sequence == 0 {
			return nil // deltas: the recorded text carries them in full
		}
		seg.last = f.Sequence
		msg := mcpObserve(wf, seg, f)
		if progress != nil && msg != "" {
			progress(ctx, msg)
		}
		if seg.status != "" {
			return errStopFollow
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if seg.status == "" {
		return nil, baton.Errorf(baton.EUNAVAILABLE, "the chat's events ended before it paused or completed")
	}
	return seg, nil
}

// mcpObserve adds one followed event to seg, sets seg.status when the
// segment ends, and returns the progress message it is worth ("" none).
func mcpObserve(wf *workflow.Workflow, seg *mcpSegment, f *Followed) string {
	switch f.Type {
	case baton.TypeChatSelectSpeaker:
		var p baton.SelectSpeakerPayload
		if json.Unmarshal(f.Data, &p) == nil && p.Agent != "" && p.Agent != agentUser {
			return p.Agent + " is working"
		}
	case baton.TypeChatText:
		var p baton.TextPayload
		if json.Unmarshal(f.Data, &p) != nil || p.UIHidden || p.ToolOnly || p.Feedback ||
			p.Agent == agentUser || p.Agent == agentSystem || strings.TrimSpace(p.Content) == "" {
			return ""
		}
		if a := wfAgent(wf, p.Agent); a != nil && a.IsStructuredCapable() && json.Valid([]byte(p.Content)) {
			return p.Agent + " answered" // its output is the structured content
		}
		seg.texts = append(seg.texts, mcpText{agent: p.Agent, content: p.Content})
		return p.Agent + ": " + oneLine(p.Content, 200)
	case baton.TypeChatStructuredOutputReady:
		var p baton.StructuredOutputPayload
		if json.Unmarshal(f.Data, &p) == nil && len(p.Data) > 0 && wf != nil && wf.IsVisual(p.Agent) {
			seg.output = append(json.RawMessage(nil), p.Data...)
		}
	case baton.TypeChatToolCall:
		var p baton.ToolCallPayload
		if json.Unmarshal(f.Data, &p) != nil {
			return ""
		}
		if p.PendingKind != "" {
			args := p.Arguments
			if len(p.Payload) > 0 && string(p.Payload) != "null" {
				args = p.Payload
			}
			seg.pause = &mcpPause{kind: p.PendingKind, id: p.UIEventID, agent: p.Agent, tool: p.ToolName, args: args, seq: f.Sequence}
			seg.status = "waiting_" + p.PendingKind
			if p.PendingKind == baton.PendingClientTool {
				// The chat's status: it waits as for a UI tool, for
				// another client (waiting_for says which tool).
				seg.status = string(baton.ChatWaitingUITool)
				return p.Agent + " waits for the client application (" + p.ToolName + ")"
			}
			return p.Agent + " waits for you (" + p.ToolName + ")"
		}
		return p.Agent + " calls " + p.ToolName
	case baton.TypeChatInputRequest:
		var p baton.InputRequestPayload
		_ = json.Unmarshal(f.Data, &p)
		seg.pause = &mcpPause{kind: baton.PendingInput, id: p.RequestID, agent: p.Agent, prompt: p.Prompt, seq: f.Sequence}
		if seg.pause.prompt == "" && len(seg.texts) > 0 {
			seg.pause.prompt = seg.texts[len(seg.texts)-1].content
		}
		seg.status = string(baton.ChatWaitingInput)
		return "waiting for your answer"
	case baton.TypeChatRunComplete:
		var p baton.RunCompletePayload
		_ = json.Unmarshal(f.Data, &p)
		seg.status = "completed"
		if p.Status == "cancelled" {
			seg.status = "cancelled"
		}
		if p.Status != "" && p.Status != "success" {
			seg.detail = strings.TrimSpace(p.Status + ": " + p.Reason)
		}
		return "done"
	case baton.TypeChatError:
		var p baton.ErrorPayload
		_ = json.Unmarshal(f.Data, &p)
		seg.status = string(baton.ChatFailed)
		seg.detail = p.Message
		return "failed"
	}
	return ""
}

func wfAgent(wf *workflow.Workflow, name string) *workflow.Agent {
	if wf == nil {
		return nil
	}
	return wf.Agent(name)
}

// mcpLastPause reads the chat's events for the last one that paused it.
// It returns that pause while it is unanswered (nil when the chat never
// paused or its last pause was answered), and the sequence the chat's
// latest segment follows: for a pause still waiting, the pause before it
// (the segment that led to the question), else the last pause (the
// segment its answer set going), or 0.
func (s *Server) mcpLastPause(ctx context.Context, scope baton.Scope, chatID string) (*mcpPause, int64, error) {
	sc, err := s.mcpScan(ctx, scope, chatID, nil)
	return sc.pause, sc.start, err
}

// mcpScanned is what mcpScan found in a chat's events.
type mcpScanned struct {
	pause  *mcpPause
	start  int64
	output json.RawMessage
}

// mcpScan reads the chat's events for mcpLastPause, and for the last
// structured output of a visual agent of wf (none when wf is nil).
func (s *Server) mcpScan(ctx context.Context, scope baton.Scope, chatID string, wf *workflow.Workflow) (mcpScanned, error) {
	var out json.RawMessage
	var pause *mcpPause // the last pause
	var prev int64      // the sequence of the pause before it
	answered := false
	after := int64(0)
	for {
		evs, err := s.cfg.Store.Events(ctx, scope, chatID, after, 1000)
		if err != nil {
			return mcpScanned{}, err
		}
		for i := range evs {
			ev := &evs[i]
			after = ev.Sequence
			switch ev.Type {
			case baton.TypeChatStructuredOutputReady:
				if p, err := baton.DecodePayload[baton.StructuredOutputPayload](ev); err == nil && len(p.Data) > 0 && wf != nil && wf.IsVisual(p.Agent) {
					out = p.Data
				}
			case baton.TypeChatInputRequest, baton.TypeChatToolCall:
				seg := &mcpSegment{}
				mcpObserve(nil, seg, &Followed{Sequence: ev.Sequence, Envelope: baton.Envelope{Type: ev.Type, Data: ev.Payload}})
				if seg.pause != nil {
					if pause != nil {
						prev = pause.seq
					}
					pause, answered = seg.pause, false
				}
			case baton.TypeChatText:
				// A person's message after a question answers it.
				if p, err := baton.DecodePayload[baton.TextPayload](ev); err == nil && p.Agent == agentUser && pause != nil && pause.kind == baton.PendingInput {
					answered = true
				}
			case baton.TypeChatToolResponse:
				if p, err := baton.DecodePayload[baton.ToolResponsePayload](ev); err == nil && pause != nil && p.UIEventID == pause.id {
					answered = true
				}
			}
		}
		if len(evs) < 1000 {
			break
		}
	}
	switch {
	case pause == nil:
		return mcpScanned{output: out}, nil
	case answered:
		return mcpScanned{start: pause.seq, output: out}, nil
	}
	return mcpScanned{pause: pause, start: prev, output: out}, nil
}

// mcpResult is a call's result: the visible agents' text, what the chat
// waits for and how to continue, and the structured content (chat_id,
// status, waiting_for, output).
func (s *Server) mcpResult(c mcpCaller, chat baton.Chat, seg *mcpSegment) *mcp.CallToolResult {
	var b strings.Builder
	multi := false
	for _, t := range seg.texts {
		multi = multi || t.agent != seg.texts[0].agent
	}
	for i, t := range seg.texts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		if multi {
			b.WriteString(t.agent + ": ")
		}
		b.WriteString(t.content)
	}
	sc := map[string]any{"chat_id": chat.ID, "status": seg.status}
	if len(seg.output) > 0 {
		sc["output"] = seg.output
	}
	var next string
	if p := seg.pause; p != nil {
		w := map[string]any{"kind": p.kind, "agent": p.agent}
		switch p.kind {
		case baton.PendingInput:
			if p.prompt != "" {
				w["prompt"] = p.prompt
			}
			next = fmt.Sprintf("The chat waits for your answer. To answer, call this tool again with chat_id %q and your answer as input.", chat.ID)
		case baton.PendingUITool:
			w["tool"], w["ui_event_id"] = p.tool, p.id
			next = fmt.Sprintf("The chat waits for a response to %s", p.tool)
			if sh := shown(p.args); sh != "" && len(p.args) > 0 && string(p.args) != "null" && string(p.args) != "{}" {
				w["arguments"] = p.args
				next += ":\n" + sh + "\n"
			} else {
				next += ". "
			}
			next += fmt.Sprintf("To respond, call this tool again with chat_id %q and as input \"approve\", \"cancel\", or JSON for the tool's data.", chat.ID)
		case baton.PendingSecret:
			w["tool"], w["ui_event_id"] = p.tool, p.id
			if wf := s.workflowOf(chat.Workflow); wf != nil {
				if t := wf.Tool(p.tool); t != nil && len(t.SecretNames) > 0 {
					w["secrets"] = t.SecretNames
				}
			}
			next = fmt.Sprintf("The chat waits for secrets (%s), which MCP does not carry: %s", p.tool, webHint(c, chat))
		case baton.PendingClientTool:
			w["tool"] = p.tool
			next = fmt.Sprintf("The chat waits for the result of %s, a tool the client application offered over AG-UI or Chat Completions: only that client answers it, not MCP.", p.tool)
		}
		sc["waiting_for"] = w
	}
	switch seg.status {
	case string(baton.ChatFailed):
		next = fmt.Sprintf("The run failed: %s. To retry, call this tool again with chat_id %q and a message as input.", oneLine(seg.detail, 500), chat.ID)
	case "cancelled":
		next = "The run was cancelled."
	case "completed":
		if seg.detail != "" {
			next = "The run ended (" + oneLine(seg.detail, 500) + ")."
		}
	}
	content := []mcp.Content{}
	if b.Len() > 0 {
		content = append(content, &mcp.TextContent{Text: b.String()})
	}
	if next != "" {
		content = append(content, &mcp.TextContent{Text: next})
	}
	if len(content) == 0 {
		content = append(content, &mcp.TextContent{Text: "The workflow finished without a message."})
	}
	return &mcp.CallToolResult{
		Content:           content,
		StructuredContent: sc,
		IsError:           seg.status == string(baton.ChatFailed),
		Meta:              mcp.Meta{"baton/chat_id": chat.ID},
	}
}

// webHint says where a person answers what MCP cannot carry: the chat in
// the web UI.
func webHint(c mcpCaller, chat baton.Chat) string {
	if c.web == "" {
		return fmt.Sprintf("enter them in baton's web UI (chat %s of app %s), then call this tool again with chat_id %q.", chat.ID, chat.App, chat.ID)
	}
	return fmt.Sprintf("enter them in baton's web UI at %s/?app=%s#chat=%s, then call this tool again with chat_id %q.",
		c.web, url.QueryEscape(chat.App), chat.ID, chat.ID)
}

// oneLine flattens s to one line of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// handleMCP serves /mcp: MCP's streamable HTTP transport, behind the same
// API keys as every route (dev mode: the dev user of ?app=, default
// "default"). The principal rides in the request's auth.TokenInfo, whose
// UserID binds an MCP session to the key that opened it (the SDK refuses
// the session to another), and each tool call acts as the principal of
// its own request.
func (s *Server) handleMCP(w http.ResponseWriter, r *http.Request) {
	app := ""
	if bearer(r) == "" && s.cfg.Dev {
		if app = r.URL.Query().Get("app"); app == "" {
			app = DefaultApp
		}
	}
	p, err := s.principal(r, app)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.needEngine(); err != nil {
		s.writeError(w, r, err)
		return
	}
	user := p.keyHash
	if user == "" {
		user = "dev:" + p.scope.App
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	info := &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour),
		Extra: map[string]any{mcpCallerKey: mcpCaller{scope: p.scope, p: &p, web: scheme + "://" + r.Host}}}
	if bearer(r) == "" {
		// auth.RequireBearerToken is the SDK's one way to hand a request its
		// TokenInfo; a dev-mode request has no bearer of its own.
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer dev")
	}
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return info, nil }
	h := auth.RequireBearerToken(verify, nil)(s.mcpHTTPHandler())
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || r.Header.Get("Mcp-Protocol-Version") >= mcpProtocolMRTR {
		// From 2026-07-28 a request opens no session that outlives it.
		h.ServeHTTP(w, r)
		return
	}
	// A POST without a session may open one (an initialize) that lasts
	// mcpSessionTimeout idle: each key (in dev mode, each client address)
	// has at most mcpMaxSessions open.
	if err := s.mcpCountSession(p.limit); err != nil {
		s.writeError(w, r, err)
		return
	}
	h.ServeHTTP(w, r)
	sid := w.Header().Get("Mcp-Session-Id")
	for ss := range s.mcpHTTP.srv.Sessions() {
		// The SDK closes a session its first request did not initialize
		// before ServeHTTP returns.
		if sid != "" && ss.ID() == sid && ss.InitializeParams() != nil {
			// Wait returns once the session is closed: by DELETE, by
			// mcpSessionTimeout, or by Close.
			s.wg.Go(func() {
				_ = ss.Wait()
				s.mcpUncountSession(p.limit)
			})
			return
		}
	}
	s.mcpUncountSession(p.limit) // no session was opened, or it is closed already
}

// mcpMaxSessions is the default Server.mcpMaxSessions.
const mcpMaxSessions = 64

func (s *Server) mcpCountSession(bucket string) error {
	s.mcpHTTP.mu.Lock()
	defer s.mcpHTTP.mu.Unlock()
	if s.mcpHTTP.sessions[bucket] >= s.mcpMaxSessions {
		return baton.Errorf(codeRateLimited, "too many open MCP sessions for this key (at most %d): close some first (DELETE /mcp)", s.mcpMaxSessions)
	}
	if s.mcpHTTP.sessions == nil {
		s.mcpHTTP.sessions = map[string]int{}
	}
	s.mcpHTTP.sessions[bucket]++
	return nil
}

func (s *Server) mcpUncountSession(bucket string) {
	s.mcpHTTP.mu.Lock()
	defer s.mcpHTTP.mu.Unlock()
	if s.mcpHTTP.sessions[bucket]--; s.mcpHTTP.sessions[bucket] <= 0 {
		delete(s.mcpHTTP.sessions, bucket)
	}
}

// mcpHTTPHandler returns the /mcp transport handler, one for the server:
// its sessions outlive requests.
func (s *Server) mcpHTTPHandler() http.Handler {
	s.mcpHTTP.once.Do(func() {
		srv := s.newMCPServer(func(req *mcp.CallToolRequest) (mcpCaller, error) {
			if req.Extra != nil && req.Extra.TokenInfo != nil {
				if c, ok := req.Extra.TokenInfo.Extra[mcpCallerKey].(mcpCaller); ok {
					return c, nil
				}
			}
			return mcpCaller{}, errors.New("mcp: a call without its caller")
		})
		s.mcpHTTP.srv = srv
		s.mcpHTTP.h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
			Logger:         s.log,
			SessionTimeout: mcpSessionTimeout,
			// The SDK's DNS-rebinding check refuses a loopback connection
			// whose Host is not loopback: that is every request a reverse
			// proxy on the same machine forwards. Handler checks the Host in
			// dev mode, the one mode without a key, and keys are bearer
			// tokens a rebinding page does not have.
			DisableLocalhostProtection: true,
			MaxRequestBodyBytes:        s.cfg.MaxBody,
			// A call ends with its POST (protocol 2026-07-28 and later,
			// where the POST is the whole call): a client that went away
			// holds no stream slot.
			PropagateRequestCancellation: true,
		})
		// Sessions outlive their requests: Close ends them, with the calls
		// they run (each follow ends with s.ctx too).
		s.wg.Go(func() {
			<-s.ctx.Done()
			for _, ss := range slices.Collect(srv.Sessions()) {
				_ = ss.Close()
			}
		})
	})
	return s.mcpHTTP.h
}
