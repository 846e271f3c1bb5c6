//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair with the standard library:
// /dev/ptmx, unlocked, and the /dev/pts/N it names.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := master.Fd()
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		master.Close()
		t.Fatalf("unlock pty: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		master.Close()
		t.Fatalf("pty number: %v", errno)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("open pty: %v", err)
	}
	return master, tty
}

// terminal is a baton command running on a pseudo-terminal: what it prints
// (as the terminal shows it, "\r\n" made "\n") and a way to type.
type terminal struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	grew   chan struct{} // signalled when out grows
	read   chan struct{} // closed when the reader stops
	exited chan error
}

// startTerminal runs `baton ARGS...` (this test binary as baton) with a
// pseudo-terminal as its standard input, output and error, as in a shell.
func startTerminal(t *testing.T, args ...string) *terminal {
	t.Helper()
	master, tty := openPTY(t)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunMain+"=1", "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		tty.Close()
		t.Fatal(err)
	}
	tty.Close() // the child holds it; the master reads EIO once the child is gone
	term := &terminal{t: t, master: master, cmd: cmd, grew: make(chan struct{}, 1), read: make(chan struct{}), exited: make(chan error, 1)}
	go func() { // ends when the child closes the terminal (EIO) or the master is closed
		defer close(term.read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				term.mu.Lock()
				term.out.Write(bytes.ReplaceAll(buf[:n], []byte("\r\n"), []byte("\n")))
				term.mu.Unlock()
				select {
				case term.grew <- struct{}{}:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { term.exited <- cmd.Wait() }() // ends with the child
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a no-op once it exited
		<-term.read
		master.Close()
	})
	return term
}

func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// waitFor waits until the output holds want n times; a timeout only
// catches a hang.
func (term *terminal) waitFor(want string, n int) {
	term.t.Helper()
	deadline := time.After(60 * time.Second)
	for strings.Count(term.output(), want) < n {
		select {
		case <-term.grew:
		case <-deadline:
			term.t.Fatalf("no %d× %q in:\n%s", n, want, term.output())
		}
	}
}

// typeLine types line and Enter.
func (term *terminal) typeLine(line string) {
	term.t.Helper()
	if _, err := io.WriteString(term.master, line+"\r"); err != nil {
		term.t.Fatal(err)
	}
}

// wait waits for the command to exit and returns its exit code.
func (term *terminal) wait() int {
	term.t.Helper()
	select {
	case err := <-term.exited:
		<-term.read // everything it printed
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			term.t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		term.t.Fatalf("baton did not exit:\n%s", term.output())
		return -1
	}
}

// TestChat_Terminal drives `baton chat generator` on a pseudo-terminal as a
// person would: Enter on an empty line asks again (the engine would drop
// an empty message and the chat would hang), no log line reaches the
// terminal, the internal agent's CONCEPT_OVERVIEW: text and the hidden NEXT
// are not printed, the secret is not echoed, and the action plan (a
// structured output) prints as fields, not as JSON.
func TestChat_Terminal(t *testing.T) {
	term := startTerminal(t, "chat", "--data-dir", t.TempDir(), "generator")
	term.waitFor("you: ", 1)
	term.typeLine("")
	term.waitFor("you: ", 2)
	term.typeLine("   ")
	term.waitFor("you: ", 3)
	term.typeLine("A newsletter from our team notes.")
	term.waitFor("NEWSLETTER_API_KEY: ", 1)
	const secret = "sk-pty-3f9a"
	term.typeLine(secret)
	term.waitFor(`"approve" or "cancel": `, 1)
	term.typeLine("approve")
	term.waitFor("✓ chat complete", 1)
	if code := term.wait(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, term.output())
	}
	out := term.output()
	t.Logf("terminal:\n%s", out)
	for _, want := range []string{
		"InterviewAgent: What would you like to automate?",
		"ActionPlanAgent (action_plan):\n",
		"\n  workflow:\n",
		"\n    name: Weekly Newsletter\n",
		"\n    integrations: Notion, Mailchimp\n",
		"\n      - agents: CollectorAgent\n        approval: none\n",
		"DeliveryAgent: Your Weekly Newsletter workflow is approved",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{
		"level=", "WARN", "ERROR", // log lines
		"CONCEPT_OVERVIEW", "ContextVariablesAgent:", "\nNEXT", // hidden and internal messages
		`{"ActionPlan"`, `"workflow":{`, // a structured output as JSON
		secret,
	} {
		if strings.Contains(out, never) {
			t.Errorf("the terminal shows %q:\n%s", never, out)
		}
	}
}

// TestChat_TerminalInterruptAndEndOfInput: Ctrl-C at a prompt ends `baton
// chat` at once (the read no longer holds it until Enter) and Ctrl-D too,
// each with exit 0, the chat left waiting, and a word on how to resume it.
func TestChat_TerminalInterruptAndEndOfInput(t *testing.T) {
	for _, key := range []struct{ name, keys, says string }{
		{"ctrl-c", "\x03", "(interrupted; the chat waits: baton chat --resume "},
		{"ctrl-d", "\x04", "(input closed; the chat waits: baton chat --resume "},
	} {
		t.Run(key.name, func(t *testing.T) {
			term := startTerminal(t, "chat", "--data-dir", t.TempDir(), "generator")
			term.waitFor("you: ", 1)
			if _, err := io.WriteString(term.master, key.keys); err != nil {
				t.Fatal(err)
			}
			if code := term.wait(); code != 0 {
				t.Fatalf("exit %d:\n%s", code, term.output())
			}
			if out := term.output(); !strings.Contains(out, key.says) {
				t.Errorf("the terminal lacks %q:\n%s", key.says, out)
			}
		})
	}
}
