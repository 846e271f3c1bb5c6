package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/batonhq/baton"
)

// a2aParams is the schema of an a2a tool's arguments: the message to the
// remote agent, and, to answer a remote task that waits for input, its id.
var a2aParams = json.RawMessage(`{"type":"object","properties":{` +
	`"message":{"type":"string","description":"the message to the remote agent"},` +
	`"task_id":{"type":"string","description":"the remote task to answer, when an earlier call said it needs input"}},` +
	`"required":["message"],"additionalProperties":false}`)

// a2aTool sends the model's message to a remote A2A agent (another baton
// workflow, an ADK agent…) and returns the remote task's outcome: the
// agent's messages and artifacts when it completed; an error result when
// it failed, was canceled or was rejected. When the remote task waits for
// input (input-required) the result is, by default,
// ToolStatusInputRequired with the remote question, labelled with the
// remote agent's name: the engine pauses the
// chat for the person and calls again with CallContext.Answer, which this
// tool sends to the same remote task (its message id derived from the
// answer's effect key). With on_input_required "model" it is an ok result
// naming the task id, for the model to answer with task_id. A task that
// waits for credentials (auth-required) is an error result either way: the
// credentials belong in token_from, not in a recorded message.
//
// The message id is derived from the call's effect key, so a call run
// again after a restart (the effect ledger's recovery) sends the same
// message: the remote agent takes it as a retry of the same message (a
// baton agent starts no second chat) and baton follows the same task. The
// agent card is resolved at the first call, not at load: an unreachable
// card is that call's error, naming the URL.
type a2aTool struct {
	reg        *Registry
	name, desc string
	cardURL    string // the agent's base URL (the card is under /.well-known/agent-card.json) or the card's own URL
	skill      string
	tokenFrom  string // a declared secret or environment variable holding the bearer token
	client     *http.Client
	// modelAnswers: a remote task that asks for input is the model's to
	// answer (on_input_required "model"), not the person's.
	modelAnswers bool

	mu    sync.Mutex
	cards map[string]*a2a.AgentCard // by expanded card url: a chat's secret may fill its path
}

// maxA2ACards bounds an a2a tool's card cache; past it the cache starts
// over (a card is one GET away).
const maxA2ACards = 64

func newA2ATool(r *Registry, s *Spec) (*a2aTool, error) {
	if s.A2A.CardURL == "" {
		return nil, baton.Errorf(baton.EINVALID, "a2a tool needs a2a.card_url")
	}
	desc := s.Description
	if desc == "" {
		desc = "Ask the remote agent at " + s.A2A.CardURL + "."
	}
	return &a2aTool{
		reg: r, name: s.toolName(), desc: desc, cardURL: s.A2A.CardURL, skill: s.A2A.Skill, tokenFrom: s.A2A.TokenFrom, modelAnswers: s.A2A.ModelAnswers,
		client: guardedClient(r.opts.httpClient, !s.AllowPrivateNetwork, []string{"Authorization"}),
	}, nil
}

func (t *a2aTool) Name() string                { return t.name }
func (t *a2aTool) Description() string         { return t.desc }
func (t *a2aTool) Parameters() json.RawMessage { return a2aParams }

// a2aAuth adds the bearer token to each request of the A2A client that
// goes to the configured card url's origin: the card names the endpoint,
// and a card (anyone's, once fetched) must not steer the token elsewhere.
type a2aAuth struct {
	next   http.RoundTripper
	token  string
	scheme string // the card url's
	host   string
}

func (a a2aAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	if a.token != "" && r.URL.Scheme == a.scheme && strings.EqualFold(r.URL.Host, a.host) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+a.token)
	}
	return a.next.RoundTrip(r)
}

// resolve returns the agent card of the expanded url, fetching it at the
// first call that names that url.
func (t *a2aTool) resolve(ctx context.Context, hc *http.Client, url, base, path string) (*a2a.AgentCard, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if card := t.cards[url]; card != nil {
		return card, nil
	}
	var opts []agentcard.ResolveOption
	if path != "" {
		opts = append(opts, agentcard.WithPath(path))
	}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base, opts...)
	if err != nil {
		return nil, err
	}
	if t.skill != "" && !hasSkill(card, t.skill) {
		return nil, fmt.Errorf("the agent card has no skill %q", t.skill)
	}
	if t.cards == nil || len(t.cards) >= maxA2ACards {
		t.cards = make(map[string]*a2a.AgentCard)
	}
	t.cards[url] = card
	return card, nil
}

func hasSkill(card *a2a.AgentCard, id string) bool {
	for _, s := range card.Skills {
		if s.ID == id {
			return true
		}
	}
	return false
}

// splitCardURL splits the configured URL into the base the resolver joins
// the card's path to, and that path: an URL ending in .json is the card's
// own; any other is the agent's base, whose card is at the well-known path.
func splitCardURL(u string) (base, path string) {
	if strings.HasSuffix(u, ".json") {
		if i := strings.LastIndex(u, "/.well-known/"); i > 0 {
			return u[:i], u[i:]
		}
		if i := strings.LastIndexByte(u, '/'); i > 0 {
			return u[:i], u[i:]
		}
	}
	return u, ""
}

func (t *a2aTool) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	var in struct {
		Message string `json:"message"`
		TaskID  string `json:"task_id"`
	}
	if err := json.Unmarshal(args, &in); err != nil || strings.TrimSpace(in.Message) == "" {
		return errorResult("tool %s: message: required (the text for the remote agent)", t.name), nil
	}
	client, card, url, problem, err := t.dial(ctx, cc)
	if err != nil {
		return baton.ToolResult{}, err
	}
	if problem != "" {
		return errorResult("%s", problem), nil
	}
	defer func() { _ = client.Destroy() }()

	key := cc.EffectKey
	if key == "" {
		key = baton.EffectKey(cc.ChatID, cc.TurnKey, cc.ToolCallID)
	}
	msg := &a2a.Message{ID: "baton-" + key, Role: a2a.MessageRoleUser, TaskID: a2a.TaskID(in.TaskID),
		Parts: a2a.ContentParts{a2a.TextPart{Text: in.Message}}}
	if a := cc.Answer; a != nil {
		// The person's answer to the remote task's question: to the same
		// task, its id from the answer's own effect key (a retry after a
		// crash is the same message, which the remote side takes once).
		var rs a2aResume
		if err := json.Unmarshal(a.Resume, &rs); err != nil || rs.TaskID == "" {
			return errorResult("tool %s: the answer cannot go on: no remote task recorded with the question", t.name), nil
		}
		msg.TaskID, msg.ContextID = a2a.TaskID(rs.TaskID), rs.ContextID
		msg.Parts = a2a.ContentParts{a2a.TextPart{Text: a.Text}}
	}
	if t.skill != "" {
		msg.Metadata = map[string]any{"skill": t.skill}
	}
	var taskID a2a.TaskID
	var last *a2a.Message // a direct answer (a message, not a task)
	// Streaming where the card says so (SendStreamingMessage falls back to
	// message/send otherwise): the remote run is followed to its end or its
	// pause.
	for ev, err := range client.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: msg}) {
		if err != nil {
			if ctx.Err() != nil {
				return baton.ToolResult{}, ctx.Err()
			}
			return errorResult("tool %s: the agent at %s: %v", t.name, url, err), nil
		}
		switch ev := ev.(type) {
		case *a2a.Message:
			last = ev
		default:
			if id := ev.TaskInfo().TaskID; id != "" {
				taskID = id
			}
		}
	}
	if taskID == "" {
		if last == nil {
			return errorResult("tool %s: the agent at %s answered nothing", t.name, url), nil
		}
		return baton.ToolResult{Status: baton.ToolStatusOK, Content: messageText(last)}, nil
	}
	// The task as it stands is the result: a stream replayed from its
	// start (a retried message) may end at an earlier pause.
	task, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: taskID})
	if err != nil {
		if ctx.Err() != nil {
			return baton.ToolResult{}, ctx.Err()
		}
		return errorResult("tool %s: the agent at %s: task %s: %v", t.name, url, taskID, err), nil
	}
	switch {
	case task.Status.State == a2a.TaskStateAuthRequired:
		// Not a question for the person: whatever they typed would be a
		// recorded, unsealed message. Credentials are the tool's token_from.
		return authResult(t.name, remoteName(card, t.name), task), nil
	case !t.modelAnswers && task.Status.State == a2a.TaskStateInputRequired:
		return askResult(remoteName(card, t.name), task), nil
	}
	return taskResult(t.name, task), nil
}

// dial resolves the remote agent's card for a call and returns a client
// for it (the caller destroys it), the card and the URL it was reached at. What is
// wrong with the tool's configuration or the card is problem, a message
// for the model; err is only ctx's.
func (t *a2aTool) dial(ctx context.Context, cc *baton.CallContext) (client *a2aclient.Client, card *a2a.AgentCard, url, problem string, err error) {
	// requestURL: a person's secret may fill the path, never choose the
	// host the operator's token goes to.
	url, err = requestURL(t.cardURL, cc.Secrets)
	if err != nil {
		return nil, nil, "", fmt.Sprintf("tool %s: a2a.card_url: %s", t.name, baton.ErrorMessage(err)), nil
	}
	token := ""
	if t.tokenFrom != "" {
		if token, err = lookupSecret(t.tokenFrom, cc.Secrets); err != nil {
			return nil, nil, "", fmt.Sprintf("tool %s: a2a.token_from: %s", t.name, baton.ErrorMessage(err)), nil
		}
	}
	base := t.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return nil, nil, "", fmt.Sprintf("tool %s: a2a.card_url: %v", t.name, err), nil
	}
	hc := *t.client
	hc.Transport = a2aAuth{next: base, token: token, scheme: u.Scheme, host: u.Host}
	cardBase, cardPath := splitCardURL(url)
	card, err = t.resolve(ctx, &hc, url, cardBase, cardPath)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, "", "", ctx.Err()
		}
		return nil, nil, "", fmt.Sprintf("tool %s: agent card at %s: %v", t.name, url, redact(err, url)), nil
	}
	client, err = a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(&hc))
	if err != nil {
		return nil, nil, "", fmt.Sprintf("tool %s: agent card at %s: %v", t.name, url, err), nil
	}
	return client, card, url, "", nil
}

// a2aCancelTimeout bounds Abandon's tasks/cancel: it is best effort, on
// the chat's run.
const a2aCancelTimeout = 5 * time.Second

// Abandon is told that the engine gave up on a call whose remote task
// asks for input (it asked engine.MaxToolInputRounds times): resume is the
// tool's state from the last question. The remote task is sent
// tasks/cancel, best effort, so that it does not wait for an answer that
// never comes; a failure is logged, not returned to the chat.
func (t *a2aTool) Abandon(ctx context.Context, cc *baton.CallContext, resume json.RawMessage) {
	var rs a2aResume
	if json.Unmarshal(resume, &rs) != nil || rs.TaskID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a2aCancelTimeout)
	defer cancel()
	client, _, _, problem, err := t.dial(ctx, cc)
	if err != nil || problem != "" {
		t.reg.log.Warn("tool: a2a: the abandoned remote task was not cancelled", "tool", t.name, "task", rs.TaskID, "err", err, "problem", problem)
		return
	}
	defer func() { _ = client.Destroy() }()
	if _, err := client.CancelTask(ctx, &a2a.TaskIDParams{ID: a2a.TaskID(rs.TaskID)}); err != nil {
		t.reg.log.Warn("tool: a2a: the abandoned remote task was not cancelled", "tool", t.name, "task", rs.TaskID, "err", err)
	}
}

// a2aResume is an a2a tool's ToolResult.Resume when the remote task asks
// for input: the task the person's answer goes to.
type a2aResume struct {
	TaskID    string `json:"task_id"`
	ContextID string `json:"context_id,omitempty"`
}

// maxRemoteNameRunes bounds the remote agent's name in "X asks:".
const maxRemoteNameRunes = 64

// remoteName is how the person is told who asks: the remote agent's name
// from its card, or the tool's name when the card has none. The card is
// the remote's to write, so the name is made one line (whitespace runs
// become one space), stripped of control and format characters and cut at
// maxRemoteNameRunes runes: it cannot fake a line of the chat or hide
// what follows.
func remoteName(card *a2a.AgentCard, tool string) string {
	if card == nil {
		return tool
	}
	var b strings.Builder
	n, space := 0, false
	for _, r := range card.Name {
		switch {
		case unicode.IsSpace(r):
			space = true
			continue
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError:
			continue
		}
		if n >= maxRemoteNameRunes {
			break
		}
		if space && n > 0 {
			if n+1 >= maxRemoteNameRunes {
				break
			}
			b.WriteByte(' ')
			n++
		}
		space = false
		b.WriteRune(r)
		n++
	}
	if b.Len() == 0 {
		return tool
	}
	return b.String()
}

// authResult is the result of a remote task that waits for credentials
// (auth-required): an error for the model. The person is not asked — what
// they would type is recorded as a plain message — so the credentials
// belong in the tool's a2a.token_from.
func authResult(tool, who string, task *a2a.Task) baton.ToolResult {
	said := messageText(task.Status.Message)
	if said != "" {
		said = " It said: " + said
	}
	return errorResult("tool %s: the remote agent %s needs credentials (its task %s is auth-required).%s "+
		"They cannot be given in the chat: configure them in the tool's a2a.token_from.", tool, who, task.ID, said)
}

// askResult is the result of a remote task that waits for input, for the
// person to answer (on_input_required "person"): the question is what the
// remote agent said since the last message it was sent, and the status
// message of its pause, if it adds anything. It is labelled with who asks
// ("<who> asks: …"), so that every client shows it as the remote agent's
// question, not as the calling agent's own words.
func askResult(who string, task *a2a.Task) baton.ToolResult {
	var said []string
	for _, m := range task.History {
		switch m.Role {
		case a2a.MessageRoleUser:
			said = said[:0]
		case a2a.MessageRoleAgent:
			if s := messageText(m); s != "" {
				said = append(said, s)
			}
		}
	}
	if s := messageText(task.Status.Message); s != "" && (len(said) == 0 || said[len(said)-1] != s) {
		said = append(said, s)
	}
	prompt := who + " asks: " + strings.TrimSpace(strings.Join(said, "\n\n"))
	if len(said) == 0 {
		prompt = who + " needs your input."
	}
	resume, _ := json.Marshal(a2aResume{TaskID: string(task.ID), ContextID: task.ContextID})
	return baton.ToolResult{Status: baton.ToolStatusInputRequired, Content: prompt, Resume: resume}
}

// taskResult is the tool result of a remote task.
func taskResult(name string, task *a2a.Task) baton.ToolResult {
	var b strings.Builder
	for i, m := range task.History {
		s := messageText(m)
		switch {
		case s == "":
		case m.Role == a2a.MessageRoleAgent:
			b.WriteString(s)
			b.WriteString("\n")
		case i > 0:
			// A later message to the task: an answer to its question (the
			// person's, or the model's with task_id).
			fmt.Fprintf(&b, "[answered] %s\n", s)
		}
	}
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			switch p := p.(type) {
			case a2a.DataPart:
				raw, _ := json.Marshal(p.Data)
				fmt.Fprintf(&b, "[artifact %s] %s\n", a.Name, raw)
			case a2a.TextPart:
				fmt.Fprintf(&b, "[artifact %s] %s\n", a.Name, p.Text)
			}
		}
	}
	said := strings.TrimSpace(b.String())
	status := messageText(task.Status.Message)
	switch task.Status.State {
	case a2a.TaskStateCompleted:
		return baton.ToolResult{Status: baton.ToolStatusOK, Content: said}
	case a2a.TaskStateInputRequired:
		return baton.ToolResult{Status: baton.ToolStatusOK, Content: fmt.Sprintf(
			"%s\n\nThe remote agent needs input (task_id %s): %s\nCall %s again with task_id %q and the answer as message.",
			said, task.ID, status, name, task.ID)}
	}
	return errorResult("tool %s: the remote task %s ended %s: %s", name, task.ID, task.Status.State, strings.TrimSpace(status+"\n"+said))
}

// messageText joins a message's text parts.
func messageText(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var parts []string
	for _, p := range m.Parts {
		if tp, ok := p.(a2a.TextPart); ok && tp.Text != "" {
			parts = append(parts, tp.Text)
		}
	}
	return strings.Join(parts, "\n")
}
