package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/server"
	"github.com/batonhq/baton/workflow"
)

func init() {
	register(command{
		name:    "chat",
		summary: "chat with a workflow in the terminal (runs in-process)",
		usage:   "chat [flags] WORKFLOW\n       baton chat [flags] --resume CHAT_ID\n       baton chat [flags] --fork CHAT_ID[@SEQ]",
		about: "Runs one chat of WORKFLOW in this process, against the store `baton serve` uses, and shows it\n" +
			"as the web UI does: the agents' streamed text, tool calls, handoffs, structured outputs as fields;\n" +
			"internal agents' text and hidden messages are not printed. It asks you for messages (an empty line\n" +
			"asks again), UI tool responses (JSON, \"approve\" or \"cancel\") and secrets (without echo).\n" +
			"Logs go to <data-dir>/" + chatLogName + ". Ctrl-D leaves the chat waiting, to resume later.\n" +
			"--fork CHAT_ID@SEQ branches a chat: a new chat whose history is CHAT_ID's events 1 … SEQ (the\n" +
			"whole chat without @SEQ), with its variables, requests and speaker as they were there; it goes on\n" +
			"from that point and the original is not changed.",
		example: "baton chat hello                      # runs to the end with no input\nbaton chat generator\nbaton chat --resume 01a2149e-5f09-7eae-b7e9-6026f28fd384\nbaton chat --fork 01a2149e-5f09-7eae-b7e9-6026f28fd384@7   # answer the interview again",
		args:    argWorkflows,
		flags:   chatFlags,
	})
}

// chatFlags defines the flags of `baton chat`.
func chatFlags(fs *flag.FlagSet) runner {
	var o chatOptions
	o.rc.flags(fs)
	fs.StringVar(&o.app, "app", envOr("BATON_APP", server.DefaultApp), "the chat's app (tenant); the web UI and the examples use the same (env BATON_APP)")
	fs.StringVar(&o.user, "user", envOr("BATON_USER", server.DevUser), "the chat's user; the default is --dev mode's, so the web UI in --dev mode shows the chat (env BATON_USER)")
	fs.StringVar(&o.resume, "resume", "", "resume this chat id instead of starting a new chat")
	fs.StringVar(&o.fork, "fork", "", "fork CHAT_ID[@SEQ]: a new chat with CHAT_ID's history up to event SEQ (all of it without @SEQ), going on from there")
	return func(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) error {
		if o.resume != "" && o.fork != "" {
			return fmt.Errorf("--resume and --fork: give one")
		}
		joined := o.resume != "" || o.fork != ""
		if fs.NArg() != 1 && !joined || fs.NArg() > 1 || joined && fs.NArg() > 0 {
			fs.Usage()
			return errUsage
		}
		return runChat(ctx, o, fs.Arg(0), stdout)
	}
}

// chatOptions are the flags of `baton chat`.
type chatOptions struct {
	rc                      runtimeConfig
	app, user, resume, fork string
}

// parseForkArg reads --fork's CHAT_ID[@SEQ]; seq is 0 without @SEQ.
func parseForkArg(v string) (chatID string, seq int64, err error) {
	chatID, s, hasSeq := strings.Cut(v, "@")
	if chatID == "" {
		return "", 0, fmt.Errorf("--fork %q: want CHAT_ID or CHAT_ID@SEQ", v)
	}
	if !hasSeq {
		return chatID, 0, nil
	}
	seq, err = strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 1 {
		return "", 0, fmt.Errorf("--fork %q: SEQ must be a sequence number (an integer >= 1)", v)
	}
	return chatID, seq, nil
}

// runChat runs one chat of a workflow in this process, against the same
// store `baton serve` uses, and streams it to the terminal: the workflow
// author's quickest loop. It answers the chat's requests from standard
// input: a message when the chat waits for the person, JSON (or "approve")
// for a UI tool, and secrets without echo.
func runChat(ctx context.Context, o chatOptions, workflowName string, stdout io.Writer) error {
	rc, app, user, resume := o.rc, o.app, o.user, o.resume
	// The runtime's log goes to a file, never to the terminal: a log line
	// in the middle of the conversation (or of a prompt) garbles both.
	logFile, err := openChatLog(rc.dataDir)
	if err != nil {
		return err
	}
	defer logFile.Close()
	rc.log = slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// A part given no logger of its own logs to the default one: the file too.
	defaultLog := slog.Default()
	slog.SetDefault(rc.log)
	defer slog.SetDefault(defaultLog)
	rt, err := openRuntime(ctx, rc)
	if err != nil {
		return err
	}
	release := func() {}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
		release() // once the runs have stopped
	}()
	// Chats a killed process left running go on here, unless another
	// process runs chats on the store now (recoverAtStart).
	if release, err = recoverAtStart(ctx, rt, rc, rc.log, false); err != nil {
		return err
	}
	scope := baton.Scope{App: app, User: user}
	if o.fork != "" {
		from, at, err := parseForkArg(o.fork)
		if err != nil {
			return err
		}
		if at == 0 {
			src, err := rt.Store().GetChat(ctx, scope, from)
			if err != nil {
				return fmt.Errorf("fork %s: %w", from, err)
			}
			at = src.LastSequence
		}
		forked, err := rt.Engine().Fork(ctx, scope, from, at)
		if err != nil {
			return fmt.Errorf("fork %s: %w", from, err)
		}
		fmt.Fprintf(stdout, "chat %s forked from %s at event %d (resume with: baton chat --resume %s)\n", forked.ID, from, forked.LastSequence, forked.ID)
		resume = forked.ID
	}
	chatID := resume
	if chatID == "" {
		chatID = baton.NewID()
	}
	sub, err := rt.Bus().Subscribe([]string{"chat.*", "stream.*"}, bus.ForChat(chatID), bus.Buffer(4096))
	if err != nil {
		return err
	}
	defer sub.Close()
	c := &chatUI{rt: rt, scope: scope, chatID: chatID, out: stdout, in: bufio.NewReader(os.Stdin)}
	if resume != "" {
		chat, err := rt.Store().GetChat(ctx, scope, resume)
		if err != nil {
			return fmt.Errorf("resume %s: %w", resume, err)
		}
		c.wf = chat.Workflow
		c.def = rt.Engine().Workflow(c.wf)
		if err := c.replay(ctx); err != nil {
			return err
		}
		// The chat as it is after the replay: a run going on (a fork's)
		// may have paused meanwhile, and its pause was replayed, not
		// shown live (show skips what was printed).
		if chat, err = rt.Store().GetChat(ctx, scope, resume); err != nil {
			return fmt.Errorf("resume %s: %w", resume, err)
		}
		if err := c.prompt(ctx, chat); err != nil {
			return c.end(err)
		}
	} else {
		c.wf = workflowName
		c.def = rt.Engine().Workflow(c.wf)
		if _, err := rt.Engine().Start(ctx, scope, c.wf, baton.StartOptions{ChatID: chatID}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "chat %s of %s (resume with: baton chat --resume %s; log: %s)\n", chatID, c.wf, chatID, logFile.Name())
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-sub.C():
			if !ok {
				return fmt.Errorf("event stream ended: %w", sub.Err())
			}
			done, err := c.show(ctx, ev)
			if err != nil || done {
				return c.end(err)
			}
		}
	}
}

// errInputClosed ends a chat whose person closed standard input (Ctrl-D):
// the chat stays paused in the store, to be resumed.
var errInputClosed = errors.New("input closed")

// end maps the end of the person's input (Ctrl-D) or an interrupt at a
// prompt (Ctrl-C) to a clean exit with a word on how to come back.
func (c *chatUI) end(err error) error {
	switch {
	case errors.Is(err, errInputClosed):
		fmt.Fprintf(c.out, "\n(input closed; the chat waits: baton chat --resume %s)\n", c.chatID)
		return nil
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(c.out, "\n(interrupted; the chat waits: baton chat --resume %s)\n", c.chatID)
		return nil
	}
	return err
}

// chatLogName is the file under the data dir `baton chat` logs to.
const chatLogName = "chat.log"

// openChatLog opens (appending) the log file of `baton chat` under dataDir.
func openChatLog(dataDir string) (*os.File, error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dataDir, chatLogName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("chat log: %w", err)
	}
	return f, nil
}

// chatUI prints a chat's events and answers its requests.
type chatUI struct {
	rt        *runtime.Runtime
	scope     baton.Scope
	chatID    string
	wf        string
	def       *workflow.Workflow // the chat's workflow as loaded here; nil hides every agent's text (as the server's filter does)
	out       io.Writer
	in        *bufio.Reader
	streaming string // the message being streamed
	shown     int64  // the sequence of the last recorded event printed (replayed or live)
}

// replay prints what the chat recorded before this process joined it.
func (c *chatUI) replay(ctx context.Context) error {
	evs, err := c.rt.Store().Events(ctx, c.scope, c.chatID, 0, 0)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if _, err := c.showRecorded(ev); err != nil {
			return err
		}
	}
	return nil
}

// show prints one event; after a recorded event that pauses the chat it
// asks the person. It reports true when the chat ended.
func (c *chatUI) show(ctx context.Context, ev baton.Event) (bool, error) {
	if ev.Type == baton.TypeStreamText {
		if !server.Visible(c.def, &ev) {
			return false, nil // an internal agent's text, as the streams withhold it
		}
		var p struct {
			MessageID string `json:"message_id"`
			Agent     string `json:"agent"`
			Delta     string `json:"delta"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		if c.structured(p.Agent) {
			return false, nil // its JSON is printed as fields once complete
		}
		if c.streaming != p.MessageID {
			c.streaming = p.MessageID
			fmt.Fprintf(c.out, "\n%s: ", p.Agent)
		}
		fmt.Fprint(c.out, p.Delta)
		return false, nil
	}
	if ev.Type == baton.TypeStreamError {
		var p struct {
			MessageID string `json:"message_id"`
			Code      string `json:"code"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		if c.streaming == p.MessageID && p.MessageID != "" {
			// The text printed for it is void: nothing of it was recorded
			// (a retry prints its reply afresh).
			c.streaming = ""
			fmt.Fprintf(c.out, " ✗ (broke off: %s; discarded)\n", p.Code)
		}
		return false, nil
	}
	if !baton.IsChatType(ev.Type) {
		return false, nil
	}
	if ev.Sequence <= c.shown {
		return false, nil // replayed already
	}
	done, err := c.showRecorded(ev)
	if done || err != nil {
		return done, err
	}
	switch ev.Type {
	case baton.TypeChatInputRequest, baton.TypeChatToolCall, baton.TypeChatError:
		chat, err := c.rt.Store().GetChat(ctx, c.scope, c.chatID)
		if err != nil {
			return false, err
		}
		if chat.LastSequence == ev.Sequence { // the chat stopped here
			return false, c.prompt(ctx, chat)
		}
	}
	return false, nil
}

// structured reports whether agent answers with a structured output, whose
// JSON is printed as fields rather than streamed.
func (c *chatUI) structured(agent string) bool {
	if c.def == nil {
		return false
	}
	a := c.def.Agent(agent)
	return a != nil && (a.IsStructuredCapable() || a.AutoToolMode)
}

// showRecorded prints a recorded event the person may see (the server's
// envelope filter decides, so an internal agent's text, tool calls and
// handoffs stay out, as in the web UI); true means the chat ended. A
// payload of another shape prints with empty fields.
func (c *chatUI) showRecorded(ev baton.Event) (bool, error) {
	c.shown = max(c.shown, ev.Sequence)
	if !server.Visible(c.def, &ev) {
		if ev.Type == baton.TypeChatText {
			if p, _ := baton.DecodePayload[baton.TextPayload](&ev); c.streaming == p.AgentMessageID {
				c.streaming = ""
			}
		}
		return false, nil
	}
	switch ev.Type {
	case baton.TypeChatText:
		p, _ := baton.DecodePayload[baton.TextPayload](&ev)
		streamed := c.streaming == p.AgentMessageID && c.streaming != ""
		c.streaming = ""
		if p.UIHidden || p.ToolOnly || p.Agent == "user" {
			if streamed {
				fmt.Fprintln(c.out)
			}
			return false, nil
		}
		switch {
		case streamed:
			fmt.Fprintln(c.out)
		case c.structured(p.Agent) && isJSONObject(p.Content):
			fmt.Fprintf(c.out, "\n%s:\n", p.Agent)
			writeFields(c.out, json.RawMessage(p.Content), "  ")
		default:
			fmt.Fprintf(c.out, "\n%s: %s\n", p.Agent, p.Content)
		}
	case baton.TypeChatToolCall:
		p, _ := baton.DecodePayload[baton.ToolCallPayload](&ev)
		if p.InteractionType == "auto_tool" {
			// An auto-tool's arguments are the agent's structured output
			// (raw, so they keep the model's field order).
			fmt.Fprintf(c.out, "\n%s (%s):\n", p.Agent, p.ToolName)
			writeFields(c.out, p.Arguments, "  ")
			return false, nil
		}
		fmt.Fprintf(c.out, "  → %s %s\n", p.ToolName, compactJSON(p.Arguments))
	case baton.TypeChatToolResponse:
		p, _ := baton.DecodePayload[baton.ToolResponsePayload](&ev)
		fmt.Fprintf(c.out, "  ← %s: %s\n", p.Status, oneLine(p.Content, 200))
	case baton.TypeChatHandoff:
		p, _ := baton.DecodePayload[baton.HandoffPayload](&ev)
		if p.To != "" && p.From != "user" {
			fmt.Fprintf(c.out, "  (%s hands over to %s)\n", p.From, p.To)
		}
	case baton.TypeChatError:
		p, _ := baton.DecodePayload[baton.ErrorPayload](&ev)
		fmt.Fprintf(c.out, "\n! error: %s\n", p.Message)
	case baton.TypeChatNotice:
		p, _ := baton.DecodePayload[baton.NoticePayload](&ev)
		fmt.Fprintf(c.out, "  … %s\n", p.Message)
	case baton.TypeChatRunComplete:
		p, _ := baton.DecodePayload[baton.RunCompletePayload](&ev)
		fmt.Fprintf(c.out, "\n✓ chat complete (%s: %s)\n", p.Status, p.Reason)
		c.printUsage()
		return true, nil
	}
	return false, nil
}

// compactJSON prints a tool call's arguments on one line ("null" when
// there are none).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "null"
	}
	return b.String()
}

// prompt asks the person for what the chat waits for.
func (c *chatUI) prompt(ctx context.Context, chat baton.Chat) error {
	switch chat.Status {
	case baton.ChatCompleted:
		fmt.Fprintln(c.out, "\n✓ this chat is complete")
		return nil
	case baton.ChatFailed:
		if _, err := c.ask(ctx, "press Enter to retry, or write a message: "); err != nil {
			return err
		}
		return c.rt.Engine().Resume(ctx, c.scope, c.chatID)
	case baton.ChatWaitingInput:
		// An empty message is no message: the engine would drop it and the
		// chat would wait on, so ask again.
		line, err := c.ask(ctx, "\nyou: ")
		for err == nil && line == "" {
			line, err = c.ask(ctx, "you: ")
		}
		if err != nil {
			return err
		}
		return c.rt.Engine().Submit(ctx, c.scope, c.chatID, line, "api")
	}
	for _, p := range chat.Pending {
		switch p.Kind {
		case baton.PendingClientTool:
			// The terminal offers no tools: the application that offered
			// this one (over AG-UI or Chat Completions) answers it.
			return fmt.Errorf("%s waits for the result of %s, a tool the client application offered over AG-UI or Chat Completions: only that client answers it", p.Agent, p.ToolName)
		case baton.PendingSecret:
			names := c.secretNames(p.ToolName)
			if len(names) == 0 {
				return fmt.Errorf("%s asks for secrets, but workflow %q as loaded here has no such masked form: its answer cannot be checked", p.ToolName, c.wf)
			}
			fmt.Fprintf(c.out, "\n%s asks for secrets (typed without echo).\n", p.ToolName)
			form := make(map[string]string, len(names))
			for _, name := range names {
				for form[name] == "" { // an empty secret would hide the server's variable of that name
					value, err := c.askSecret(ctx, name+": ")
					if err != nil {
						return err
					}
					form[name] = value
				}
			}
			data, _ := json.Marshal(form)
			return c.rt.Engine().RespondUI(ctx, c.scope, c.chatID, p.UIEventID, "success", data)
		case baton.PendingUITool:
			line, err := c.ask(ctx, fmt.Sprintf("\n%s waits for you: type JSON for its data, \"approve\" or \"cancel\": ", p.ToolName))
			if err != nil {
				return err
			}
			status, data := "success", json.RawMessage(nil)
			switch line {
			case "approve":
				data = json.RawMessage(`{"action":"approve"}`)
			case "cancel":
				status = "cancelled"
			default:
				if !json.Valid([]byte(line)) {
					data, _ = json.Marshal(map[string]string{"text": line})
				} else {
					data = json.RawMessage(line)
				}
			}
			return c.rt.Engine().RespondUI(ctx, c.scope, c.chatID, p.UIEventID, status, data)
		}
	}
	return nil
}

// secretNames are the names the chat's workflow's masked form tool asks
// for, or nil when the workflow or the tool is not loaded here.
func (c *chatUI) secretNames(tool string) []string {
	for _, wf := range c.rt.Workflows() {
		if wf.Name == c.wf {
			if t := wf.Tool(tool); t != nil {
				return t.SecretNames
			}
		}
	}
	return nil
}

// ask prints prompt and reads a line; errInputClosed when input ended
// with nothing typed, the context's error when it ends first (Ctrl-C).
func (c *chatUI) ask(ctx context.Context, prompt string) (string, error) {
	fmt.Fprint(c.out, prompt)
	line, err := interruptible(ctx, func() (string, error) { return c.in.ReadString('\n') })
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.Is(err, io.EOF) && line == "":
		return "", errInputClosed
	case err != nil && !errors.Is(err, io.EOF):
		return "", fmt.Errorf("read input: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// askSecret reads a line without echo when standard input is a terminal.
func (c *chatUI) askSecret(ctx context.Context, prompt string) (string, error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return c.ask(ctx, prompt)
	}
	// Echo goes off before the prompt shows (a line typed ahead is not
	// shown) and comes back after the read, or when Ctrl-C ends the chat
	// first.
	state, err := term.GetState(fd)
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	if err := echoOff(fd); err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	fmt.Fprint(c.out, prompt)
	line, err := interruptible(ctx, func() (string, error) {
		b, err := term.ReadPassword(fd)
		return string(b), err
	})
	fmt.Fprintln(c.out)
	// ReadPassword restores the echo-off state it found; give the terminal
	// its own back.
	_ = term.Restore(fd, state)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// interruptible runs a blocking read of standard input and returns what it
// read, or returns when ctx ends first (Ctrl-C at a prompt). A read cannot
// be cancelled: the goroutine ends with it — at the next line, at the end
// of input, or with the process, which ends once the chat stops. Only one
// read is ever pending, since the chat stops when ctx ends.
func interruptible(ctx context.Context, read func() (string, error)) (string, error) {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		line, err := read()
		done <- result{line, err}
	}()
	select {
	case r := <-done:
		return r.line, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (c *chatUI) printUsage() {
	total, perAgent, err := c.rt.Store().ChatUsage(context.Background(), c.scope, c.chatID)
	if err != nil {
		return
	}
	fmt.Fprintf(c.out, "  tokens: %d in, %d out; cost $%.6f\n", total.PromptTokens, total.CompletionTokens, total.Cost)
	for _, a := range perAgent {
		fmt.Fprintf(c.out, "    %-24s %9s  %8d tokens  $%.6f\n", a.Agent, plural(int(a.Calls), "call"), a.PromptTokens+a.CompletionTokens, a.Cost)
	}
}

func oneLine(s string, max int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
