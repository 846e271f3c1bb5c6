package engine_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/workflow"
)

// The crash test re-runs this test binary as a child that drives one chat
// of the effects workflow; see runChild.
const (
	childEnv    = "BATON_ENGINE_CRASH_CHILD"
	killChatID  = "crash-chat"
	killRounds  = 20
	childFinish = 3 * time.Minute
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	if os.Getenv(duoChildEnv) != "" {
		os.Exit(runDuoChild())
	}
	if os.Getenv(restartChildEnv) != "" {
		os.Exit(runRestartChild())
	}
	if os.Getenv(inboxChildEnv) != "" {
		os.Exit(runInboxChild())
	}
	if os.Getenv(startChildEnv) != "" {
		os.Exit(runStartChild())
	}
	if os.Getenv(ownerChildEnv) != "" {
		os.Exit(runOwnerChild())
	}
	if os.Getenv(survivorChildEnv) != "" {
		os.Exit(runSurvivorChild())
	}
	os.Exit(m.Run())
}

// openCrashStore opens the store a crash test's child is given in its
// environment: CRASH_STORE, in schema CRASH_PG_SCHEMA when it is
// PostgreSQL.
func openCrashStore(ctx context.Context) (baton.Store, error) {
	if schema := os.Getenv("CRASH_PG_SCHEMA"); schema != "" {
		return postgres.Open(ctx, os.Getenv("CRASH_STORE"), postgres.WithSchema(schema))
	}
	return store.Open(ctx, os.Getenv("CRASH_STORE"))
}

// runChild opens the store named by the environment, starts the crash chat
// (or, after a kill, resumes it like `baton serve` does at start) and waits
// until it completes. Exit 0: completed; 3: failed; 1: error.
func runChild() int {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := openCrashStore(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 1
	}
	wfs, err := workflow.LoadAll(os.DirFS(loopDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: workflows:", err)
		return 1
	}
	b := bus.New(bus.WithLogger(log))
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b, Workflows: wfs, WorkflowRoot: loopDir, Logger: log,
		ToolOptions: stubFuncs(wfs),
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: engine:", err)
		return 1
	}
	if _, err := st.GetChat(ctx, testScope, killChatID); err != nil {
		wf := os.Getenv("CRASH_WORKFLOW")
		if wf == "" {
			wf = "effects"
		}
		if _, err := eng.Start(ctx, testScope, wf, baton.StartOptions{ChatID: killChatID}); err != nil {
			fmt.Fprintln(os.Stderr, "child: start:", err)
			return 1
		}
	} else {
		running, err := st.ChatsByStatus(ctx, baton.ChatRunning, 100)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child: recover:", err)
			return 1
		}
		if _, err := eng.Recover(ctx, running); err != nil {
			fmt.Fprintln(os.Stderr, "child: recover:", err)
			return 1
		}
	}
	fmt.Println("child: running") // the parent kills only after this line
	for {
		c, err := st.GetChat(ctx, testScope, killChatID)
		if err == nil && c.Status == baton.ChatCompleted && eng.Active() == 0 {
			return 0
		}
		if err == nil && c.Status == baton.ChatFailed {
			fmt.Fprintln(os.Stderr, "child: chat failed")
			return 3
		}
		time.Sleep(5 * time.Millisecond) // polling the store for the chat's end
	}
}

// TestCrash_SQLite and TestCrash_PostgreSQL kill the child with SIGKILL at
// random moments 20 times, restart it each time, then let it finish. Every
// side effect is in the file exactly once, the chat's sequences have no gap
// or repeat, no model reply is recorded twice, and the chat completes.
func TestCrash_SQLite(t *testing.T) {
	dir := t.TempDir()
	crashTest(t, dir, []string{"CRASH_STORE=sqlite:" + filepath.Join(dir, "baton.db")}, func(ctx context.Context) (baton.Store, error) {
		return store.Open(ctx, "sqlite:"+filepath.Join(dir, "baton.db"))
	})
}

func TestCrash_PostgreSQL(t *testing.T) {
	dsn, schema := pgSchema(t)
	crashTest(t, t.TempDir(), []string{"CRASH_STORE=" + dsn, "CRASH_PG_SCHEMA=" + schema}, func(ctx context.Context) (baton.Store, error) {
		return postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	})
}

func crashTest(t *testing.T, dir string, env []string, open func(context.Context) (baton.Store, error)) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	effects := filepath.Join(dir, "effects.txt")
	env = append(append(os.Environ(), childEnv+"=1", "EFFECTS_FILE="+effects), env...)
	kills := 0
	for round := 0; round < killRounds; round++ {
		cmd, out := startChild(t, env)
		if !waitLine(out, "child: running", 30*time.Second) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child did not start", round)
		}
		time.Sleep(randomDuration(60 * time.Millisecond)) // a random moment, not a wait for something
		if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
			kills++
		}
		err := cmd.Wait()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && !st.Signaled() && err != nil {
			t.Fatalf("round %d: child failed before the kill: %v", round, err)
		}
		if cmd.ProcessState.ExitCode() == 0 {
			break // it finished before the kill
		}
	}
	// The last run goes to the end.
	cmd, _ := startChild(t, env)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("final child: %v", err)
		}
	case <-time.After(childFinish):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("final child did not finish the chat")
	}
	t.Logf("killed the child %d times", kills)

	ctx := context.Background()
	st, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Events(ctx, testScope, killChatID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs)
	calls := map[string]string{} // tool_call_id → line
	texts := map[string]int{}
	for _, ev := range evs {
		var p map[string]any
		_ = json.Unmarshal(ev.Payload, &p)
		switch ev.Type {
		case baton.TypeChatToolCall:
			var args struct{ Line string }
			raw, _ := json.Marshal(p["arguments"])
			_ = json.Unmarshal(raw, &args)
			if _, dup := calls[p["tool_call_id"].(string)]; dup {
				t.Fatalf("tool call %v recorded twice", p["tool_call_id"])
			}
			calls[p["tool_call_id"].(string)] = args.Line
		case baton.TypeChatText:
			if id, _ := p["agent_message_id"].(string); id != "" {
				texts[id]++
				if texts[id] > 1 {
					t.Fatalf("model reply %s recorded twice", id)
				}
			}
		}
	}
	if last := evs[len(evs)-1]; last.Type != baton.TypeChatRunComplete {
		t.Fatalf("chat did not complete: last event %s", last.Type)
	}
	if len(calls) != 4 {
		t.Fatalf("%d append_line calls recorded, want 4", len(calls))
	}
	data, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		key, _, _ := strings.Cut(l, " ")
		if seen[key] {
			t.Fatalf("effect %s is in the file twice:\n%s", key, data)
		}
		seen[key] = true
	}
	if len(lines) != len(calls) {
		t.Fatalf("%d effects in the file, %d calls recorded:\n%s", len(lines), len(calls), data)
	}
	for id, line := range calls {
		found := false
		for _, l := range lines {
			key, text, _ := strings.Cut(l, " ")
			found = found || (strings.HasSuffix(key, "/"+id) && text == line)
		}
		if !found {
			t.Fatalf("call %s (%s) has no effect in the file:\n%s", id, line, data)
		}
	}
	if exec, err := os.ReadFile(effects + ".exec"); err == nil {
		t.Logf("executions: %d (re-runs after a crash between the call and its record: %d)", strings.Count(string(exec), "\n"), strings.Count(string(exec), "\n")-len(lines))
	}
}

func startChild(t *testing.T, env []string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewReader(stdout)
}

// waitLine reads the child's output until it prints want.
func waitLine(r *bufio.Reader, want string, d time.Duration) bool {
	found := make(chan bool, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if strings.Contains(line, want) {
				found <- true
				_, _ = io.Copy(io.Discard, r)
				return
			}
			if err != nil {
				found <- false
				return
			}
		}
	}()
	select {
	case ok := <-found:
		return ok
	case <-time.After(d):
		return false
	}
}

func randomDuration(max time.Duration) time.Duration {
	n, _ := rand.Int(rand.Reader, big.NewInt(int64(max)))
	return time.Duration(n.Int64())
}
