package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store"
)

// mcpProcess runs `baton mcp` on dataDir with the workflows of wfDir and
// connects to it; the command is returned to kill it.
func mcpProcess(t *testing.T, dataDir, wfDir string) (*exec.Cmd, *mcp.ClientSession, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "mcp", "--data-dir", dataDir, "--workflows", wfDir, "--app", "acme", "--user", "ada", "--log-level", "debug")
	cmd.Env = append(os.Environ(), envRunMain+"=1", "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "baton-test", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to baton mcp: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() { _ = sess.Close() })
	return cmd, sess, stderr
}

// setHelloDelay sets the delay of each streamed delta of hello's script.
func setHelloDelay(t *testing.T, wfDir string, ms int) {
	t.Helper()
	p := filepath.Join(wfDir, "hello", "scripted.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(raw), `"delay_ms":`)
	j := strings.IndexByte(string(raw[i:]), ',')
	if i < 0 || j < 0 {
		t.Fatalf("%s: no delay_ms", p)
	}
	out := string(raw[:i]) + fmt.Sprintf(`"delay_ms": %d`, ms) + string(raw[i+j:])
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMCP_ResumesChatsLeftRunning: a chat whose `baton mcp` was killed
// mid-run stays running while another baton process runs chats on the
// store (that process may be running it: nothing says otherwise without
// leases), and is finished by the next `baton mcp` that starts alone.
func TestMCP_ResumesChatsLeftRunning(t *testing.T) {
	dir, wfDir := t.TempDir(), t.TempDir()
	if err := os.CopyFS(wfDir, os.DirFS("../../workflows")); err != nil {
		t.Fatal(err)
	}
	setHelloDelay(t, wfDir, 600_000) // the run stalls at its first delta
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A live process first, then the one that is killed, next to it.
	_, live, _ := mcpProcess(t, dir, wfDir)
	killed, sess, _ := mcpProcess(t, dir, wfDir)
	called := make(chan struct{})
	go func() { // ends with the killed process's session
		defer close(called)
		_, _ = sess.CallTool(ctx, &mcp.CallToolParams{Name: "hello", Arguments: map[string]any{"input": "What time is it?"}})
	}()

	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "baton.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scope := baton.Scope{App: "acme", User: "ada"}
	var chatID string
	testenv.Eventually(t, 30*time.Second, "the hello chat runs", func() error {
		chats, err := st.ListChats(ctx, scope, baton.ListOptions{Workflow: "hello"})
		if err != nil || len(chats) != 1 || chats[0].Status != baton.ChatRunning {
			return fmt.Errorf("chats %v, %v", chats, err)
		}
		evs, err := st.Events(ctx, scope, chats[0].ID, 0, 0)
		for _, ev := range evs {
			if ev.Type == baton.TypeChatText { // the person's message: the run is on, its model call stalled
				chatID = chats[0].ID
				return nil
			}
		}
		return fmt.Errorf("%d events, %v", len(evs), err)
	})
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sess.Close()
	<-called
	setHelloDelay(t, wfDir, 0)

	// Next to the live process, a new one resumes nothing.
	_, next, stderr := mcpProcess(t, dir, wfDir)
	testenv.Eventually(t, 30*time.Second, "the warning that another process runs chats", func() error {
		if !strings.Contains(stderr.String(), "another baton process runs chats on this store") {
			return fmt.Errorf("stderr:\n%s", stderr.String())
		}
		return nil
	})
	if c, err := st.GetChat(ctx, scope, chatID); err != nil || c.Status != baton.ChatRunning {
		t.Fatalf("next to a live process: chat %+v, %v; want it left running", c, err)
	}
	_ = next.Close()
	_ = live.Close()

	// Alone, a process resumes it; the chat completes.
	_, _, stderr = mcpProcess(t, dir, wfDir)
	testenv.Eventually(t, 60*time.Second, "the chat left running completes", func() error {
		c, err := st.GetChat(ctx, scope, chatID)
		if err != nil || c.Status != baton.ChatCompleted {
			return fmt.Errorf("chat %s: %s, %v\nstderr:\n%s", chatID, c.Status, err, stderr.String())
		}
		return nil
	})
}

// `baton mcp` and `baton chat` pointed at a store no lock file can guard (a
// PostgreSQL store without --instance-id) resume nothing at start: the
// store's server may be running those chats now. A nil runtime makes any
// Recover call panic, which the first call must not do and the server's
// must.
func TestRecoverAtStart_OnlyTheServerWhereNoLockCanTell(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc := runtimeConfig{storeURL: "postgres://baton@db/baton"}
	release, err := recoverAtStart(context.Background(), nil, rc, log, false)
	if err != nil {
		t.Fatalf("recoverAtStart: %v", err)
	}
	release()
	defer func() {
		if recover() == nil {
			t.Errorf("the server did not resume the store's chats")
		}
	}()
	_, _ = recoverAtStart(context.Background(), nil, rc, log, true) // the server resumes: Recover on the nil runtime
}
