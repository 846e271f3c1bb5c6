// Package scripted is a deterministic model provider for offline demos and
// tests. It answers from a script, scripted.json beside a workflow, and
// streams each answer as word-sized deltas, the same on every run:
//
//	{
//	  "delay_ms": 0,
//	  "agents": {
//	    "AgentName": [
//	      {"text": "Hello!", "usage": {"prompt_tokens": 50, "completion_tokens": 3, "cached_tokens": 0}},
//	      {"tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}]},
//	      {"match": "(?i)approve", "text": "Great, approved."},
//	      {"when": {"input_contains": "weekly"}, "text": "Weekly it is."},
//	      {"when": {"ui_response": {"status": "success", "data": {"action": "revise"}}}, "text": "Revising."},
//	      {"json": {"agent_message": "Review the plan"}},
//	      {"reasoning": "thinking…", "text": "…"},
//	      {"error": {"status": 429, "message": "rate limited"}}
//	    ]
//	  }
//	}
//
// The answer is chosen from the request alone, so a chat resumed after a
// restart gets the same answers: see Provider.Stream. docs/models.md
// describes the format in full.
package scripted

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/llm"
)

// Provider answers model calls from a script. It is safe for concurrent use.
type Provider struct {
	path   string
	delay  time.Duration
	agents map[string]*agentScript
}

type agentScript struct {
	matched   []*entry // entries with "match" or "when", in script order
	unmatched []*entry // the others, used in order
}

type entry struct {
	pos       int // position in the agent's list, for messages
	match     *regexp.Regexp
	when      *whenJSON
	text      string
	reasoning string
	json      string // compact
	calls     []baton.ToolCall
	err       *scriptError
	usage     baton.Usage
}

// The JSON form of the script. Decoding is strict: unknown fields are errors.
type fileJSON struct {
	DelayMS int                          `json:"delay_ms"`
	Agents  map[string][]json.RawMessage `json:"agents"`
	// Inputs are the person's inputs of the chat a script was exported
	// from (baton export --scripted): the provider ignores them; baton
	// eval --from-export and docs/replay.md read them.
	Inputs []json.RawMessage `json:"inputs"`
}

type entryJSON struct {
	Match     string          `json:"match"`
	When      json.RawMessage `json:"when"`
	Text      *string         `json:"text"`
	Reasoning string          `json:"reasoning"`
	ToolCalls []toolCallJSON  `json:"tool_calls"`
	JSON      json.RawMessage `json:"json"`
	Error     *scriptError    `json:"error"`
	Usage     *usageJSON      `json:"usage"`
}

// whenJSON is an entry's condition on the conversation: exactly one of
// its fields is set.
type whenJSON struct {
	// InputContains holds when the person's last message contains the
	// text (case-insensitively).
	InputContains *string `json:"input_contains"`
	// UIResponse holds when the last UI tool or form response matches.
	UIResponse *uiResponseJSON `json:"ui_response"`
}

// uiResponseJSON matches a UI response: each field given must match; data
// matches when every key it names has that value in the response's data
// (objects compared the same way, key by key; other values equal as JSON).
type uiResponseJSON struct {
	Tool   string          `json:"tool"`
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data"`
	data   map[string]any
}

type toolCallJSON struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
}

type scriptError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Load reads and checks the script at path in fsys. Every problem is an
// EINVALID *baton.Error naming the file and the field, e.g.
// `scripted.json: agents.Planner[2]: unknown field "txt"`.
func Load(fsys fs.FS, path string) (*Provider, error) {
	data, err := fs.ReadFile(fsys, path)
	if err != nil {
		return nil, fmt.Errorf("scripted provider: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a script from data; name is used in messages.
func Parse(name string, data []byte) (*Provider, error) {
	var f fileJSON
	if err := strictDecode(data, &f); err != nil {
		return nil, baton.Errorf(baton.EINVALID, "%s: %s", name, err)
	}
	if f.DelayMS < 0 {
		return nil, baton.Errorf(baton.EINVALID, "%s: delay_ms: must not be negative", name)
	}
	if len(f.Agents) == 0 {
		return nil, baton.Errorf(baton.EINVALID, "%s: agents: required, a map of agent name to a list of responses", name)
	}
	p := &Provider{path: name, delay: time.Duration(f.DelayMS) * time.Millisecond, agents: make(map[string]*agentScript, len(f.Agents))}
	for agent, raws := range f.Agents {
		s := &agentScript{}
		for i, raw := range raws {
			e, err := parseEntry(raw)
			if err != nil {
				return nil, baton.Errorf(baton.EINVALID, "%s: agents.%s[%d]: %s", name, agent, i, err)
			}
			e.pos = i
			if e.match != nil || e.when != nil {
				s.matched = append(s.matched, e)
			} else {
				s.unmatched = append(s.unmatched, e)
			}
		}
		p.agents[agent] = s
	}
	return p, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errors.New("invalid JSON: unexpected end of input")
		case errors.As(err, &te):
			return fmt.Errorf("%s: must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

func parseEntry(raw json.RawMessage) (*entry, error) {
	var j entryJSON
	if err := strictDecode(raw, &j); err != nil {
		return nil, err
	}
	e := &entry{reasoning: j.Reasoning}
	if len(j.When) > 0 {
		if j.Match != "" {
			return nil, errors.New(`"match" and "when" cannot both be set`)
		}
		w, err := parseWhen(j.When)
		if err != nil {
			return nil, err
		}
		e.when = w
	}
	if j.Match != "" {
		re, err := regexp.Compile(j.Match)
		if err != nil {
			return nil, fmt.Errorf("match: %v", err)
		}
		e.match = re
	}
	if j.Text != nil {
		e.text = *j.Text
	}
	if len(j.JSON) > 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, j.JSON); err != nil {
			return nil, fmt.Errorf("json: %v", err)
		}
		e.json = b.String()
		if j.Text != nil {
			return nil, errors.New(`"json" and "text" cannot both be set: the JSON is the reply's text`)
		}
	}
	for k, c := range j.ToolCalls {
		if c.Name == "" {
			return nil, fmt.Errorf("tool_calls[%d].name: required", k)
		}
		args := "{}"
		if len(c.Arguments) > 0 {
			var b bytes.Buffer
			if err := json.Compact(&b, c.Arguments); err != nil {
				return nil, fmt.Errorf("tool_calls[%d].arguments: %v", k, err)
			}
			args = b.String()
		}
		e.calls = append(e.calls, baton.ToolCall{Name: c.Name, Arguments: args})
	}
	if j.Error != nil {
		if j.Error.Status < 400 || j.Error.Status > 599 {
			return nil, fmt.Errorf("error.status: %d is not an HTTP error status (400–599)", j.Error.Status)
		}
		if j.Text != nil || len(j.JSON) > 0 || len(j.ToolCalls) > 0 || j.Reasoning != "" {
			return nil, errors.New(`"error" cannot be combined with a reply`)
		}
		e.err = j.Error
	} else if j.Text == nil && len(j.JSON) == 0 && len(j.ToolCalls) == 0 {
		return nil, errors.New(`needs one of "text", "json", "tool_calls" or "error"`)
	}
	if j.Usage != nil {
		if j.Usage.PromptTokens < 0 || j.Usage.CompletionTokens < 0 || j.Usage.CachedTokens < 0 || j.Usage.ReasoningTokens < 0 {
			return nil, errors.New("usage: token counts must not be negative")
		}
		e.usage = baton.Usage(*j.Usage)
	}
	return e, nil
}

// parseWhen checks an entry's "when": one condition, its fields of the
// right types, errors naming the field.
func parseWhen(raw json.RawMessage) (*whenJSON, error) {
	var w whenJSON
	if err := strictDecode(raw, &w); err != nil {
		return nil, fmt.Errorf("when: %v", err)
	}
	switch {
	case w.InputContains != nil && w.UIResponse != nil:
		return nil, errors.New(`when: give one of "input_contains" and "ui_response"`)
	case w.InputContains != nil:
		if *w.InputContains == "" {
			return nil, errors.New("when.input_contains: must not be empty")
		}
	case w.UIResponse != nil:
		if d := bytes.TrimSpace(w.UIResponse.Data); len(d) > 0 {
			if d[0] != '{' {
				return nil, errors.New("when.ui_response.data: must be an object (the fields the response's data must have)")
			}
			if err := json.Unmarshal(d, &w.UIResponse.data); err != nil {
				return nil, fmt.Errorf("when.ui_response.data: %v", err)
			}
		}
	default:
		return nil, errors.New(`when: needs "input_contains" or "ui_response"`)
	}
	return &w, nil
}

// holds reports whether w holds for messages, whose last message of the
// agent is at lastSelf (-1 for none): the input it looks at must be newer.
func (w *whenJSON) holds(msgs []baton.Message, lastSelf int) bool {
	if w.InputContains != nil {
		for i := len(msgs) - 1; i > lastSelf; i-- {
			if m := &msgs[i]; m.Role == baton.RoleUser && m.Name == "user" {
				return strings.Contains(strings.ToLower(m.Content), strings.ToLower(*w.InputContains))
			}
		}
		return false
	}
	for i := len(msgs) - 1; i > lastSelf; i-- {
		tool, res, ok := uiResponseIn(&msgs[i])
		if !ok {
			continue
		}
		u := w.UIResponse
		return (u.Tool == "" || u.Tool == tool) && (u.Status == "" || u.Status == res.Status) && subset(u.data, res.Data)
	}
	return false
}

// uiResult is the JSON a UI response is shown to the model as (tool.UIResult).
type uiResult struct {
	Status string         `json:"status"`
	Data   map[string]any `json:"data"`
}

// uiResponsePrefix starts the message a UI response of an auto-tool (or a
// lifecycle form) is shown as: "The person responded to TOOL: {json}".
const uiResponsePrefix = "The person responded to "

// uiResponseIn reads a UI response from a message: a tool result holding
// a UI result, or the engine's note of one.
func uiResponseIn(m *baton.Message) (tool string, res uiResult, ok bool) {
	content := m.Content
	switch {
	case m.Role == baton.RoleTool:
		tool = m.Name
	case m.Role == baton.RoleUser && strings.HasPrefix(content, uiResponsePrefix):
		rest := content[len(uiResponsePrefix):]
		name, js, found := strings.Cut(rest, ": ")
		if !found {
			return "", res, false
		}
		tool, content = name, js
	default:
		return "", res, false
	}
	var probe struct {
		Status    *string        `json:"status"`
		UIEventID string         `json:"ui_event_id"`
		Data      map[string]any `json:"data"`
	}
	// A tool result is a UI result only with its ui_event_id; the engine's
	// note is one by its prefix (it shows the model no ui_event_id).
	if json.Unmarshal([]byte(content), &probe) != nil || probe.Status == nil || (m.Role == baton.RoleTool && probe.UIEventID == "") {
		return "", res, false
	}
	return tool, uiResult{Status: *probe.Status, Data: probe.Data}, true
}

// subset reports whether every key of want has its value in got (objects
// compared the same way).
func subset(want, got map[string]any) bool {
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			return false
		}
		wm, wObj := w.(map[string]any)
		gm, gObj := g.(map[string]any)
		switch {
		case wObj && gObj:
			if !subset(wm, gm) {
				return false
			}
		case wObj || gObj:
			return false
		default:
			a, _ := json.Marshal(w)
			b, _ := json.Marshal(g)
			if !bytes.Equal(a, b) {
				return false
			}
		}
	}
	return true
}

// ModelName is the name the provider's calls are reported and priced
// under (baton.ModelNamer), "scripted" whatever model the workflow names:
// a scripted reply costs nothing, and is not billed as the model it stands
// in for. A workflow's pricing may still price "scripted".
func (p *Provider) ModelName(string) string { return Model }

// Model is the scripted provider's model name.
const Model = "scripted"

// ProviderName is the provider's name in traces (gen_ai.provider.name).
func (p *Provider) ProviderName() string { return "baton.scripted" }

// Agents returns the names of the agents the script answers for.
func (p *Provider) Agents() []string {
	names := make([]string, 0, len(p.agents))
	for n := range p.agents {
		names = append(names, n)
	}
	return names
}

// Stream answers req from the script. The answer is chosen from the request
// alone:
//
//   - an entry with "match" answers when its regular expression matches the
//     content of the last user-role message and the agent has not spoken
//     since that message (so a tool-call answer is not repeated after its
//     result comes back); an entry with "when" answers when its condition
//     holds for an input newer than the agent's last message — the person's
//     last message contains "input_contains", or the last UI tool or form
//     response matches "ui_response" (its tool, status, and the fields
//     given of its data); the first such entry in script order wins;
//   - otherwise the N-th entry without "match" answers, where N is the
//     number of assistant messages named req.Agent already in req.Messages
//     (an assistant message with tool calls counts as one).
//
// An unknown agent or running past the end of its list is an EINVALID
// error naming the agent and N. The answer is streamed as: reasoning and
// text (or the compact "json") in word-sized deltas, each tool call as its
// id and name then argument fragments, the finish reason, and the usage.
// An "error" entry fails the call with the same *baton.ProviderError the
// OpenAI provider returns for that status.
func (p *Provider) Stream(ctx context.Context, req *baton.Request) iter.Seq2[baton.Delta, error] {
	return func(yield func(baton.Delta, error) bool) {
		e, n, err := p.choose(req)
		if err != nil {
			yield(baton.Delta{}, err)
			return
		}
		if e.err != nil {
			model := req.Params.Model
			if model == "" {
				model = "scripted"
			}
			yield(baton.Delta{}, llm.ErrorForStatus(e.err.Status, e.err.Code, e.err.Message, "scripted:"+p.path, model, 0))
			return
		}
		s := streamer{ctx: ctx, delay: p.delay, yield: yield}
		if !s.words(baton.DeltaReasoning, e.reasoning) {
			return
		}
		if e.json != "" {
			if !s.fragments(e.json, func(f string) baton.Delta { return baton.Delta{Kind: baton.DeltaText, Text: f} }) {
				return
			}
		} else if !s.words(baton.DeltaText, e.text) {
			return
		}
		for i, c := range e.calls {
			id := callID(req.ChatID, req.Agent, n, i)
			if !s.send(baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{Index: i, ID: id, Name: c.Name}}) {
				return
			}
			if !s.fragments(c.Arguments, func(f string) baton.Delta {
				return baton.Delta{Kind: baton.DeltaToolCall, ToolCall: baton.ToolCallDelta{Index: i, Arguments: f}}
			}) {
				return
			}
		}
		finish := "stop"
		if len(e.calls) > 0 {
			finish = "tool_calls"
		}
		if !s.send(baton.Delta{Kind: baton.DeltaFinish, FinishReason: finish, ResponseID: req.MessageID}) {
			return
		}
		s.send(baton.Delta{Kind: baton.DeltaUsage, Usage: e.usage})
	}
}

// choose returns the entry that answers req and N, the agent's count of
// earlier assistant messages.
func (p *Provider) choose(req *baton.Request) (*entry, int, error) {
	s, ok := p.agents[req.Agent]
	if !ok {
		return nil, 0, baton.Errorf(baton.EINVALID, "scripted provider (%s): no responses for agent %q", p.path, req.Agent)
	}
	n := 0
	lastUser := -1
	lastSelf := -1
	for i := range req.Messages {
		m := &req.Messages[i]
		switch {
		case m.Role == baton.RoleAssistant && m.Name == req.Agent:
			n++
			lastSelf = i
		case m.Role == baton.RoleUser:
			lastUser = i
		}
	}
	for _, e := range s.matched {
		switch {
		case e.when != nil:
			if e.when.holds(req.Messages, lastSelf) {
				return e, n, nil
			}
		case lastUser > lastSelf && e.match.MatchString(req.Messages[lastUser].Content):
			return e, n, nil
		}
	}
	if n >= len(s.unmatched) {
		return nil, n, baton.Errorf(baton.EINVALID,
			"scripted provider (%s): agent %q has no response for N=%d (its %d earlier messages used up the %d responses without \"match\")",
			p.path, req.Agent, n, n, len(s.unmatched))
	}
	return s.unmatched[n], n, nil
}

// callID is a tool call's deterministic id.
func callID(chatID, agent string, n, index int) string {
	h := sha256.Sum256([]byte(chatID + "\x00" + agent + "\x00" + strconv.Itoa(n) + "\x00" + strconv.Itoa(index)))
	return "call_" + hex.EncodeToString(h[:12])
}

// streamer yields deltas, waiting the script's delay before each.
type streamer struct {
	ctx   context.Context
	delay time.Duration
	yield func(baton.Delta, error) bool
	timer *time.Timer
}

func (s *streamer) send(d baton.Delta) bool {
	if err := s.wait(); err != nil {
		s.yield(baton.Delta{}, err)
		return false
	}
	return s.yield(d, nil)
}

func (s *streamer) wait() error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if s.delay <= 0 {
		return nil
	}
	if s.timer == nil {
		s.timer = time.NewTimer(s.delay)
	} else {
		s.timer.Reset(s.delay)
	}
	select {
	case <-s.ctx.Done():
		s.timer.Stop()
		return s.ctx.Err()
	case <-s.timer.C:
		return nil
	}
}

// words streams text as word-sized deltas: a word and the whitespace after
// it (leading whitespace goes with the first word). The deltas concatenate
// to text exactly.
func (s *streamer) words(kind baton.DeltaKind, text string) bool {
	for text != "" {
		i := 0
		for i < len(text) && isSpace(text[i]) {
			i++
		}
		for i < len(text) && !isSpace(text[i]) {
			i++
		}
		for i < len(text) && isSpace(text[i]) {
			i++
		}
		if !s.send(baton.Delta{Kind: kind, Text: text[:i]}) {
			return false
		}
		text = text[i:]
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// fragmentSize is the size of the pieces JSON text is streamed in, about
// what a model's tokens give.
const fragmentSize = 16

// fragments streams s in pieces of about fragmentSize bytes, never splitting
// a UTF-8 sequence.
func (s *streamer) fragments(text string, delta func(string) baton.Delta) bool {
	for text != "" {
		i := min(fragmentSize, len(text))
		for i < len(text) && !utf8.RuneStart(text[i]) {
			i++
		}
		if !s.send(delta(text[:i])) {
			return false
		}
		text = text[i:]
	}
	return true
}
