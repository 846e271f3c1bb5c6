package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
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

// The inbox kill test re-runs this test binary as a child that sends
// messages to three chats — one that waits for the next message after each
// answer (queue), one whose run ends after each answer (short), one whose
// budget stops the run at random before a model call (queue, budget) — and
// is killed with SIGKILL at random moments; see runInboxChild.
const (
	inboxChildEnv = "BATON_ENGINE_INBOX_CHILD"
	inboxMessages = 60
	inboxRounds   = 15
)

// inboxChats are the chats of the kill test; message n goes to
// inboxChats[n%3], so that a message sent again after a kill goes to the
// same chat.
var inboxChats = [3]struct{ id, workflow string }{{"inbox-queue", "queue"}, {"inbox-short", "short"}, {"inbox-budget", "queue"}}

// budgetChat is the kill test's chat whose budget is reached before about
// a third of its model calls (when its last sequence is a multiple of 3:
// the same answer for a turn run again after a kill).
const budgetChat = "inbox-budget"

// runInboxChild opens the store named by the environment, creates the
// test's chats (or, after a kill, recovers like `baton serve` does at
// start: running chats resumed, inputs not taken published again), sends
// messages MSG_FROM…MSG_TO, printing "accepted N" once SubmitOnce has
// returned for message N (the moment a client gets its 202), then waits
// until both chats have taken every message. Exit 0: done; 1: error.
func runInboxChild() int {
	ctx := context.Background()
	st, eng, err := inboxChildEngine(ctx, func(_ context.Context, _ baton.Scope, chat baton.Chat, _ *workflow.Workflow) (bool, string, error) {
		return chat.ID == budgetChat && chat.LastSequence%3 == 0, "the test's budget", nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	for _, c := range inboxChats {
		if _, err := st.GetChat(ctx, testScope, c.id); err != nil {
			if _, err := eng.Start(ctx, testScope, c.workflow, baton.StartOptions{ChatID: c.id}); err != nil {
				fmt.Fprintln(os.Stderr, "child: start:", err)
				return 1
			}
		}
	}
	running, err := st.ChatsByStatus(ctx, baton.ChatRunning, 100)
	if err == nil {
		_, err = eng.Recover(ctx, running)
	}
	if err == nil {
		_, err = eng.RecoverInputs(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: recover:", err)
		return 1
	}
	fmt.Println("child: running") // the parent kills only after this line
	from, _ := strconv.Atoi(os.Getenv("MSG_FROM"))
	to, _ := strconv.Atoi(os.Getenv("MSG_TO"))
	for n := from; n <= to; n++ {
		c := inboxChats[n%3]
		if err := eng.SubmitOnce(ctx, testScope, c.id, fmt.Sprintf("msg-%d", n), fmt.Sprintf("message %d", n), "http"); err != nil {
			fmt.Fprintln(os.Stderr, "child: submit:", err)
			return 1
		}
		fmt.Printf("accepted %d\n", n)
		time.Sleep(randomDuration(25 * time.Millisecond)) // a person typing, not a wait for something
	}
	for {
		idle := eng.Active() == 0
		for _, c := range inboxChats {
			ins, err := st.Inputs(ctx, testScope, c.id)
			chat, gerr := st.GetChat(ctx, testScope, c.id)
			idle = idle && err == nil && gerr == nil && len(ins) == 0 && chat.Status != baton.ChatRunning
		}
		if idle {
			fmt.Println("child: idle")
			return 0
		}
		time.Sleep(5 * time.Millisecond) // polling the store for the chats to take everything
	}
}

// TestInboxKill_SQLite and TestInboxKill_PostgreSQL kill the child with
// SIGKILL at random moments while it sends messages (each kill lands
// between some 202 and the run taking that message, or inside a turn, or
// between two appends), restart it, and have it send again every message
// it had not acknowledged, with the same idempotency id. In the end every
// message is in its chat's history exactly once, in the order sent, and
// answered; sequences have no gap.
func TestInboxKill_SQLite(t *testing.T) {
	dir := t.TempDir()
	inboxKillTest(t, []string{"CRASH_STORE=sqlite:" + filepath.Join(dir, "baton.db")}, func(ctx context.Context) (baton.Store, error) {
		return store.Open(ctx, "sqlite:"+filepath.Join(dir, "baton.db"))
	})
}

func TestInboxKill_PostgreSQL(t *testing.T) {
	dsn, schema := pgSchema(t)
	inboxKillTest(t, []string{"CRASH_STORE=" + dsn, "CRASH_PG_SCHEMA=" + schema}, func(ctx context.Context) (baton.Store, error) {
		return postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	})
}

func inboxKillTest(t *testing.T, env []string, open func(context.Context) (baton.Store, error)) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	env = append(append(os.Environ(), inboxChildEnv+"=1", fmt.Sprintf("MSG_TO=%d", inboxMessages)), env...)
	next, kills, acked := 1, 0, 0
	for round := 0; round < inboxRounds; round++ {
		cmd, out := startChild(t, append(env, fmt.Sprintf("MSG_FROM=%d", next)))
		lines := readLines(out)
		if !waitFor(lines, "child: running", 30*time.Second, nil) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child did not start", round)
		}
		time.Sleep(randomDuration(250 * time.Millisecond)) // a random moment, not a wait for something
		if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
			kills++
		}
		_ = cmd.Wait()
		last := next - 1
		waitFor(lines, "", 0, func(n int) { last = max(last, n) }) // what the child acknowledged before it died
		acked += last - next + 1
		next = last + 1
		if cmd.ProcessState.ExitCode() == 0 && next > inboxMessages {
			break // it finished before the kill
		}
	}
	// The last child sends the rest and runs until both chats are idle.
	cmd, out := startChild(t, append(env, fmt.Sprintf("MSG_FROM=%d", next)))
	lines := readLines(out)
	if !waitFor(lines, "child: idle", 2*time.Minute, nil) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("final child did not take every message")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("final child: %v", err)
	}
	t.Logf("killed the child %d times; %d of %d messages were acknowledged by a child that was killed afterwards", kills, acked, inboxMessages)

	ctx := context.Background()
	st, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, c := range inboxChats {
		evs, err := st.Events(ctx, testScope, c.id, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs)
		var want, got []string
		for n := 1; n <= inboxMessages; n++ {
			if n%3 == i {
				want = append(want, fmt.Sprintf("msg-%d", n))
			}
		}
		answers := 0
		for _, ev := range evs {
			var p struct {
				Agent   string `json:"agent"`
				Content string `json:"content"`
				InputID string `json:"input_id"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			if ev.Type != baton.TypeChatText {
				continue
			}
			if p.Agent == "user" {
				got = append(got, p.InputID)
				if want := "message " + strings.TrimPrefix(p.InputID, "msg-"); p.Content != want {
					t.Errorf("chat %s: %s records %q, want %q", c.id, p.InputID, p.Content, want)
				}
			} else {
				answers++
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("chat %s: the person's messages in history\n got %v\nwant %v (each once, in the order sent)", c.id, got, want)
		}
		budgetStops := countRunComplete(evs, "budget_exceeded")
		if c.id == budgetChat {
			t.Logf("chat %s: %d messages, %d answers, %d runs stopped by the budget", c.id, len(want), answers, budgetStops)
		}
		switch {
		case c.id == budgetChat && answers+budgetStops < len(want):
			t.Errorf("chat %s: %d answers and %d budget stops for %d messages", c.id, answers, budgetStops, len(want))
		case c.id != budgetChat && answers != len(want):
			t.Errorf("chat %s: %d answers to %d messages", c.id, answers, len(want))
		}
	}
}

// countRunComplete counts the chat.run_complete events with status.
func countRunComplete(evs []baton.Event, status string) int {
	n := 0
	for _, ev := range evs {
		var p struct{ Status string }
		if ev.Type == baton.TypeChatRunComplete && json.Unmarshal(ev.Payload, &p) == nil && p.Status == status {
			n++
		}
	}
	return n
}

// readLines sends the child's output lines on a channel, closed at EOF.
// inboxChildEngine opens, in a kill test's child process, the store named
// by the environment and an engine on the inbox workflows with the
// scripted model (and budget, when not nil).
func inboxChildEngine(ctx context.Context, budget engine.BudgetFunc) (baton.Store, *engine.Engine, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := openCrashStore(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("open store: %w", err)
	}
	wfs, err := workflow.LoadAll(os.DirFS(inboxDir))
	if err != nil {
		return nil, nil, fmt.Errorf("workflows: %w", err)
	}
	b := bus.New(bus.WithLogger(log))
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b, Workflows: wfs, WorkflowRoot: inboxDir, Logger: log,
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
		Budget: budget,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("engine: %w", err)
	}
	return st, eng, nil
}

func readLines(r *bufio.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				ch <- strings.TrimSpace(line)
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// waitFor reads lines until one equals want (true), the output ends or d
// passes (d 0: no limit, read to the end); each "accepted N" line read is
// given to accepted.
func waitFor(lines <-chan string, want string, d time.Duration, accepted func(int)) bool {
	var timeout <-chan time.Time
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		timeout = timer.C
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return false
			}
			if n, found := strings.CutPrefix(line, "accepted "); found && accepted != nil {
				if v, err := strconv.Atoi(n); err == nil {
					accepted(v)
				}
			}
			if want != "" && line == want {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
