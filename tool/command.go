package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// Limits of a command tool's stderr.
const (
	stderrTail    = 4 << 10  // bytes of stderr kept for the error message
	stderrLogMax  = 32 << 10 // bytes of stderr logged per call
	stderrLines   = 10       // lines of stderr in a failed call's error
	stderrLineMax = 1024     // bytes of one stderr line logged
	waitDelay     = time.Second
)

// commandTool runs an executable under the workflow's tools/ folder:
//
//   - stdin: the arguments JSON;
//   - environment: PATH, HOME, TMPDIR, LANG, LC_ALL and TZ of baton, the
//     variables the spec's Env names, the call's secrets, and
//     BATON_CHAT_ID, BATON_APP, BATON_USER, BATON_WORKFLOW, BATON_AGENT,
//     BATON_TURN_KEY, BATON_TOOL_CALL_ID, BATON_TOOL_NAME, BATON_FUNCTION,
//     BATON_EFFECT_KEY and BATON_CONTEXT (the context variables as a JSON
//     object);
//   - working directory: the tools/ folder;
//   - stdout: the result (see output.go), capped at the registry's limit;
//   - stderr: logged line by line (capped), its last lines kept;
//   - exit status: non-zero is a tool error carrying the last stderr lines.
//
// The command runs in its own process group. At the timeout, and after it
// exits, the whole group is killed, so no child outlives the call.
type commandTool struct {
	reg        *Registry
	name, desc string
	function   string
	path, dir  string
	params     json.RawMessage
	env        []string
}

func newCommandTool(r *Registry, s *Spec) (*commandTool, error) {
	if s.File == "" {
		return nil, baton.Errorf(baton.EINVALID, "command tool needs a file")
	}
	dir := filepath.Join(r.dir, "tools")
	path, err := localPath(dir, s.File)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, baton.Errorf(baton.EINVALID, "command tool file %s: %w", s.File, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, baton.Errorf(baton.EINVALID, "command tool file %s is not an executable file", s.File)
	}
	abs, err := insideDir(r.dir, path)
	if err != nil {
		return nil, baton.Errorf(baton.EINVALID, "command tool file %s: %w", s.File, err)
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("command tool dir: %w", err)
	}
	return &commandTool{
		reg: r, name: s.toolName(), desc: s.Description, function: s.Function,
		path: abs, dir: absDir, params: paramsOrAny(s.Parameters), env: s.Env,
	}, nil
}

func paramsOrAny(p json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(p)) == 0 {
		return json.RawMessage(`{"type":"object"}`)
	}
	return p
}

func (t *commandTool) Name() string                { return t.name }
func (t *commandTool) Description() string         { return t.desc }
func (t *commandTool) Parameters() json.RawMessage { return t.params }

func (t *commandTool) environ(cc *baton.CallContext) []string {
	// Secrets come first: of duplicate names the last wins, so neither a
	// secret nor the person who typed it can replace the process's own
	// variables or baton's (workflow load also refuses such secret names).
	env := make([]string, 0, len(cc.Secrets)+len(t.env)+20)
	for k, v := range cc.Secrets {
		env = append(env, k+"="+v)
	}
	env = append(env, baseEnv(t.env)...)
	// Runtime-reserved variables (the sealed __secrets) are no tool's
	// business: the tool gets its own secrets opened, above.
	snap := cc.Vars.Snapshot()
	for k := range snap {
		if strings.HasPrefix(k, "__") {
			delete(snap, k)
		}
	}
	vars, _ := json.Marshal(snap) // raw JSON values always marshal
	if cc.Recovery {
		env = append(env, "BATON_EFFECT_RECOVERY=1")
	}
	return append(env,
		"BATON_CHAT_ID="+cc.ChatID,
		"BATON_APP="+cc.App,
		"BATON_USER="+cc.User,
		"BATON_WORKFLOW="+cc.Workflow,
		"BATON_AGENT="+cc.Agent,
		"BATON_TURN_KEY="+cc.TurnKey,
		"BATON_TOOL_CALL_ID="+cc.ToolCallID,
		"BATON_TOOL_NAME="+t.name,
		"BATON_FUNCTION="+t.function,
		"BATON_EFFECT_KEY="+cc.EffectKey,
		"BATON_CONTEXT="+string(vars),
	)
}

func (t *commandTool) Call(ctx context.Context, cc *baton.CallContext, args json.RawMessage) (baton.ToolResult, error) {
	cmd := exec.CommandContext(ctx, t.path)
	cmd.Dir = t.dir
	cmd.Env = t.environ(cc)
	cmd.Stdin = bytes.NewReader(args)
	stdout := &capWriter{max: t.reg.opts.maxOutput}
	stderr := &stderrLog{log: t.reg.log.With(slog.String("tool", t.name), slog.String("chat_id", cc.ChatID)), redact: newRedactor(cc.Secrets)}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	startOwnGroup(cmd)
	// At the timeout kill the whole group, not just the leader; WaitDelay
	// stops Wait from waiting on a grandchild that still holds stdout.
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	stderr.flush()
	// Whatever the outcome, the call's processes end with it.
	if kerr := killGroup(cmd); kerr != nil {
		t.reg.log.Warn("kill command tool's process group", slog.String("tool", t.name), slog.Any("err", kerr))
	}
	if ctx.Err() != nil {
		return baton.ToolResult{}, ctx.Err()
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return errorResult("tool %s exited with status %d%s", t.name, exit.ExitCode(), stderr.lastLines()), nil
	case errors.Is(err, exec.ErrWaitDelay):
		// The command exited but a child kept its output open; the group is
		// killed and what it wrote so far is the result.
	case err != nil:
		return baton.ToolResult{}, fmt.Errorf("run %s: %w", t.path, err)
	}
	return parseOutput(stdout.buf, stdout.total), nil
}

// baseEnv is the environment every process the registry starts gets from
// baton's own (command tools and stdio MCP servers): PATH, HOME, TMPDIR,
// LANG, LC_ALL and TZ, and the variables the workflow passes through —
// never one of baton's credentials (baton.ServerOnlyEnv), which the
// workflow loader refuses too.
func baseEnv(pass []string) []string {
	var env []string
	for _, k := range append([]string{"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ"}, pass...) {
		if baton.ServerOnlyEnv(k) {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// stderrLog logs a command's stderr line by line, up to stderrLogMax bytes,
// and keeps its last stderrTail bytes for the error message.
type stderrLog struct {
	log    *slog.Logger
	redact redactor // the call's secrets, never logged
	// tailCut: tail lost its front, so its first line may start inside
	// a secret.
	tailCut bool
	line    []byte
	logged  int
	tail    []byte
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.tail = append(w.tail, p...)
	if len(w.tail) > stderrTail {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-stderrTail:]...)
		w.tailCut = true
	}
	for _, c := range p {
		if c == '\n' {
			w.emit()
			continue
		}
		if len(w.line) < stderrLineMax {
			w.line = append(w.line, c)
		}
	}
	return len(p), nil
}

func (w *stderrLog) emit() {
	if w.logged < stderrLogMax {
		line := w.redact.string(string(w.line))
		if len(w.line) == stderrLineMax { // cut: a secret may straddle the cut
			line = w.redact.cutEnd(line)
		}
		w.log.Info("tool stderr", slog.String("line", line))
		w.logged += len(w.line) + 1
		if w.logged >= stderrLogMax {
			w.log.Info("tool stderr: further output not logged")
		}
	}
	w.line = w.line[:0]
}

func (w *stderrLog) flush() {
	if len(w.line) > 0 {
		w.emit()
	}
}

// lastLines returns ": " and the last stderrLines lines of stderr, or "".
func (w *stderrLog) lastLines() string {
	s := strings.TrimRight(string(bytes.ToValidUTF8(w.tail, []byte("\uFFFD"))), "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	cutFront := w.tailCut
	if len(lines) > stderrLines {
		lines = lines[len(lines)-stderrLines:]
		cutFront = false // the first line shown is whole
	}
	out := w.redact.string(strings.Join(lines, "\n"))
	if cutFront {
		out = w.redact.cutStart(out)
	}
	return ": " + out
}
