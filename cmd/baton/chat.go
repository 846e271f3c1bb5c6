package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
)

func init() {
	register(command{name: "chat", summary: "chat with a workflow in the terminal (runs in-process)", run: runChat})
}

// runChat runs one chat of a workflow in this process, against the same
// store `baton serve` uses, and streams it to the terminal: the workflow
// author's quickest loop. It answers the chat's requests from standard
// input: a message when the chat waits for the person, JSON (or "approve")
// for a UI tool, and secrets without echo.
func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var rc runtimeConfig
	var app, user, resume string
	fs := newFlagSet("chat", stderr)
	rc.flags(fs)
	fs.StringVar(&app, "app", envOr("BATON_APP", "default"), "the chat's app (tenant); the web UI and the examples use default too")
	fs.StringVar(&user, "user", envOr("USER", "me"), "the chat's user")
	fs.StringVar(&resume, "resume", "", "resume this chat id instead of starting a new chat")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: baton chat [flags] WORKFLOW\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 && resume == "" {
		fs.Usage()
		return errUsage
	}
	rc.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := openRuntime(ctx, rc)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	}()
	scope := baton.Scope{App: app, User: user}
	chatID := resume
	if chatID == "" {
		chatID = baton.NewID()
	}
	sub, err := rt.bus.Subscribe([]string{"chat.*", "stream.*"}, bus.ForChat(chatID), bus.Buffer(4096))
	if err != nil {
		return err
	}
	defer sub.Close()
	c := &chatUI{rt: rt, scope: scope, chatID: chatID, out: stdout, in: bufio.NewReader(os.Stdin)}
	if resume != "" {
		chat, err := rt.store.GetChat(ctx, scope, resume)
		if err != nil {
			return fmt.Errorf("resume %s: %w", resume, err)
		}
		c.wf = chat.Workflow
		if err := c.replay(ctx); err != nil {
			return err
		}
		if err := c.prompt(ctx, chat); err != nil {
			return err
		}
	} else {
		c.wf = fs.Arg(0)
		if _, err := rt.engine.Start(ctx, scope, c.wf, baton.StartOptions{ChatID: chatID}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "chat %s of %s (resume with: baton chat --resume %s)\n", chatID, c.wf, chatID)
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
				return err
			}
		}
	}
}

// chatUI prints a chat's events and answers its requests.
type chatUI struct {
	rt        *runtime
	scope     baton.Scope
	chatID    string
	wf        string
	out       io.Writer
	in        *bufio.Reader
	streaming string // the message being streamed
}

// replay prints what the chat recorded before this process joined it.
func (c *chatUI) replay(ctx context.Context) error {
	evs, err := c.rt.store.Events(ctx, c.scope, c.chatID, 0, 0)
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
		var p struct {
			MessageID string `json:"message_id"`
			Agent     string `json:"agent"`
			Delta     string `json:"delta"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		if a := c.rt.engine.Workflow(c.wf).Agent(p.Agent); a != nil && a.AutoToolMode {
			return false, nil // its JSON is shown as the component, not as text
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
	done, err := c.showRecorded(ev)
	if done || err != nil {
		return done, err
	}
	switch ev.Type {
	case baton.TypeChatInputRequest, baton.TypeChatToolCall, baton.TypeChatError:
		chat, err := c.rt.store.GetChat(ctx, c.scope, c.chatID)
		if err != nil {
			return false, err
		}
		if chat.LastSequence == ev.Sequence { // the chat stopped here
			return false, c.prompt(ctx, chat)
		}
	}
	return false, nil
}

// showRecorded prints a recorded event; true means the chat ended. A
// payload of another shape prints with empty fields.
func (c *chatUI) showRecorded(ev baton.Event) (bool, error) {
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
		if streamed {
			fmt.Fprintln(c.out)
		} else {
			fmt.Fprintf(c.out, "\n%s: %s\n", p.Agent, p.Content)
		}
	case baton.TypeChatToolCall:
		p, _ := baton.DecodePayload[baton.ToolCallPayload](&ev)
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
		if _, err := c.ask("press Enter to retry, or write a message: "); err != nil {
			return err
		}
		return c.rt.engine.Resume(ctx, c.scope, c.chatID)
	case baton.ChatWaitingInput:
		line, err := c.ask("\nyou: ")
		if err != nil {
			return err
		}
		return c.rt.engine.Submit(ctx, c.scope, c.chatID, line, "api")
	}
	for _, p := range chat.Pending {
		switch p.Kind {
		case baton.PendingSecret:
			names := c.secretNames(p.ToolName)
			if len(names) == 0 {
				return fmt.Errorf("%s asks for secrets, but workflow %q as loaded here has no such masked form: its answer cannot be checked", p.ToolName, c.wf)
			}
			fmt.Fprintf(c.out, "\n%s asks for secrets (typed without echo).\n", p.ToolName)
			form := make(map[string]string, len(names))
			for _, name := range names {
				for form[name] == "" { // an empty secret would hide the server's variable of that name
					value, err := c.askSecret(name + ": ")
					if err != nil {
						return err
					}
					form[name] = value
				}
			}
			data, _ := json.Marshal(form)
			return c.rt.engine.RespondUI(ctx, c.scope, c.chatID, p.UIEventID, "success", data)
		case baton.PendingUITool:
			line, err := c.ask(fmt.Sprintf("\n%s waits for you: type JSON for its data, \"approve\" or \"cancel\": ", p.ToolName))
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
			return c.rt.engine.RespondUI(ctx, c.scope, c.chatID, p.UIEventID, status, data)
		}
	}
	return nil
}

// secretNames are the names the chat's workflow's masked form tool asks
// for, or nil when the workflow or the tool is not loaded here.
func (c *chatUI) secretNames(tool string) []string {
	for _, wf := range c.rt.workflows {
		if wf.Name == c.wf {
			if t := wf.Tool(tool); t != nil {
				return t.SecretNames
			}
		}
	}
	return nil
}

func (c *chatUI) ask(prompt string) (string, error) {
	fmt.Fprint(c.out, prompt)
	line, err := c.in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", fmt.Errorf("read input: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// askSecret reads a line without echo when standard input is a terminal.
func (c *chatUI) askSecret(prompt string) (string, error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return c.ask(prompt)
	}
	fmt.Fprint(c.out, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(c.out)
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (c *chatUI) printUsage() {
	total, perAgent, err := c.rt.store.ChatUsage(context.Background(), c.scope, c.chatID)
	if err != nil {
		return
	}
	fmt.Fprintf(c.out, "  tokens: %d in, %d out; cost $%.6f\n", total.PromptTokens, total.CompletionTokens, total.Cost)
	for _, a := range perAgent {
		fmt.Fprintf(c.out, "    %-24s %6d calls  %8d tokens  $%.6f\n", a.Agent, a.Calls, a.PromptTokens+a.CompletionTokens, a.Cost)
	}
}

func oneLine(s string, max int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
