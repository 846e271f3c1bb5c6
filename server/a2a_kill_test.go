package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/runtime"
	"github.com/batonhq/baton/store/sqlite"
	"github.com/batonhq/baton/workflow"
)

const (
	a2aKillChildEnv = "BATON_A2A_KILL_CHILD"
	a2aKillChatID   = "a2a-kill-chat"
)

// runA2AKillChild is the calling baton of TestA2AToolKill and
// TestA2AToolInputKill: it opens the SQLite file A2A_KILL_STORE, starts the
// caller chat (or, after a kill, recovers it as baton serve does at start),
// answers a remote question with A2A_KILL_ANSWER when the chat pauses for
// one, and exits 0 when the chat has completed, 3 when it failed.
func runA2AKillChild() int {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := sqlite.Open(ctx, os.Getenv("A2A_KILL_STORE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 1
	}
	rt, err := runtime.Open(ctx, runtime.Config{
		Store: st, WorkflowsDir: os.Getenv("A2A_KILL_WORKFLOWS"), Logger: log,
		SecretKey: []byte("0123456789abcdef0123456789abcdef"),
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: runtime:", err)
		return 1
	}
	if _, err := st.GetChat(ctx, scopeAda, a2aKillChatID); err != nil {
		if _, err := rt.Engine().Start(ctx, scopeAda, "caller", baton.StartOptions{ChatID: a2aKillChatID}); err != nil {
			fmt.Fprintln(os.Stderr, "child: start:", err)
			return 1
		}
	} else if err := rt.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child: recover:", err)
		return 1
	}
	fmt.Println("child: running") // the parent kills only after this line
	answer, answered := os.Getenv("A2A_KILL_ANSWER"), false
	for {
		c, err := st.GetChat(ctx, scopeAda, a2aKillChatID)
		if err == nil && answer != "" && !answered && c.Status == baton.ChatWaitingInput && len(c.Pending) == 1 && c.Pending[0].Kind == baton.PendingToolInput {
			// The person answers the remote agent's question (once: after
			// a restart the answer is recorded and nothing is pending).
			if err := rt.Engine().Submit(ctx, scopeAda, a2aKillChatID, answer, "test"); err != nil {
				fmt.Fprintln(os.Stderr, "child: answer:", err)
				return 1
			}
			answered = true
		}
		if err == nil && c.Status == baton.ChatCompleted && rt.Engine().Active() == 0 {
			return 0
		}
		if err == nil && c.Status == baton.ChatFailed {
			fmt.Fprintln(os.Stderr, "child: chat failed")
			return 3
		}
		time.Sleep(5 * time.Millisecond) // polling the store for the chat's end
	}
}

// callerStore opens the store of the killed (and restarted) calling baton
// in dir; it is closed at the test's end.
func callerStore(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "caller.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// startA2AKillChild starts the calling baton (runA2AKillChild) with env
// and returns once it says it runs.
func startA2AKillChild(t *testing.T, env []string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(line, "child: running") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not start: %q %v", line, err)
	}
	return cmd, rd
}

// waitA2AKillChild waits for the calling baton to exit after completing
// its chat (two minutes at most).
func waitA2AKillChild(t *testing.T, cmd *exec.Cmd, rd *bufio.Reader) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _ = io.Copy(io.Discard, rd)
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("restarted caller: %v", err)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("the restarted caller did not complete its chat")
	}
}

// TestA2AToolKill kills the calling baton (SIGKILL) while its a2a tool
// follows the remote task, and restarts it: the call is recovered under the
// same effect key, so the remote baton received the message once (one chat,
// the message in it once) and the caller's tool result is the remote
// agent's answer.
func TestA2AToolKill(t *testing.T) {
	remote := newEnv(t, withWorkflows(benchDir))
	dir := t.TempDir()
	childEnv := append(os.Environ(), a2aKillChildEnv+"=1",
		"A2A_KILL_STORE="+filepath.Join(dir, "caller.db"),
		"A2A_KILL_WORKFLOWS="+writeCallerWorkflow(t, "benchpaced", "Tell me a story."),
		"A2A_REMOTE_URL="+remote.ts.URL, "A2A_REMOTE_TOKEN="+remote.keys[scopeAda])
	cmd, _ := startA2AKillChild(t, childEnv)
	// The remote run is under way: the caller's tool is following it.
	testenv.Eventually(t, 30*time.Second, "the remote chat is running", func() error {
		chats := remoteChats(t, remote)
		if len(chats) == 0 {
			return fmt.Errorf("no remote chat yet")
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	remoteID := remoteChats(t, remote)[0].(map[string]any)["chat_id"].(string)
	if c, err := remote.store.GetChat(context.Background(), scopeAda, remoteID); err != nil || c.Status != baton.ChatRunning {
		t.Logf("the remote chat was %s when the caller was killed (%v)", c.Status, err) // still a valid run: the caller had not recorded the result
	}
	cmd, rd := startA2AKillChild(t, childEnv)
	waitA2AKillChild(t, cmd, rd)
	if n := len(remoteChats(t, remote)); n != 1 {
		t.Fatalf("the remote side has %d chats, want 1", n)
	}
	if n := strings.Count(strings.Join(historyContents(t, remote, remoteID), "\n"), "Tell me a story."); n != 1 {
		t.Errorf("the remote chat has the message %d times", n)
	}
	st := callerStore(t, dir)
	res := toolResponses(t, &env{store: st}, scopeAda, a2aKillChatID, "ask_remote")
	last := res[len(res)-1]
	if !last.Success || !strings.Contains(last.Content, "Once upon a time") {
		t.Errorf("tool responses %+v", res)
	}
}
