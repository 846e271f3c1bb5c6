package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/postgres"
)

// The start kill test re-runs this test binary as a child that starts new
// chats with a first message, one after the other, and is killed with
// SIGKILL at random moments; see runStartChild.
const (
	startChildEnv = "BATON_ENGINE_START_CHILD"
	startRounds   = 10
	startMax      = 100000 // starts a child makes at most: a bound, never reached in a round
)

// startChatID is the id of the kill test's chat n, and startMessage its
// first message.
func startChatID(n int) string  { return "start-" + strconv.Itoa(n) }
func startMessage(n int) string { return "first message " + strconv.Itoa(n) }

// runStartChild opens the store named by the environment and starts chats
// START_FROM, START_FROM+1, … of the queue workflow, each with its first
// message, printing "accepted N" once Start has returned for chat N (the
// moment a client gets its 201). It does not run the chats: their first
// messages wait in their inboxes. Exit 1: error.
func runStartChild() int {
	ctx := context.Background()
	_, eng, err := inboxChildEngine(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println("child: running") // the parent kills only after this line
	from, _ := strconv.Atoi(os.Getenv("START_FROM"))
	for n := from; n < from+startMax; n++ {
		if _, err := eng.Start(ctx, testScope, "queue", baton.StartOptions{ChatID: startChatID(n), Message: startMessage(n)}); err != nil {
			fmt.Fprintln(os.Stderr, "child: start:", err)
			return 1
		}
		fmt.Printf("accepted %d\n", n)
	}
	return 0
}

// TestStartKill_SQLite and TestStartKill_PostgreSQL kill a process that
// starts chats with a first message, at random moments: every chat the
// store holds has its first message waiting in its inbox (the chat and its
// message are one commit: never a chat without it), and every chat whose
// start returned is there.
func TestStartKill_SQLite(t *testing.T) {
	dir := t.TempDir()
	startKillTest(t, []string{"CRASH_STORE=sqlite:" + filepath.Join(dir, "baton.db")}, func(ctx context.Context) (baton.Store, error) {
		return store.Open(ctx, "sqlite:"+filepath.Join(dir, "baton.db"))
	})
}

func TestStartKill_PostgreSQL(t *testing.T) {
	dsn, schema := pgSchema(t)
	startKillTest(t, []string{"CRASH_STORE=" + dsn, "CRASH_PG_SCHEMA=" + schema}, func(ctx context.Context) (baton.Store, error) {
		return postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	})
}

func startKillTest(t *testing.T, env []string, open func(context.Context) (baton.Store, error)) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	env = append(append(os.Environ(), startChildEnv+"=1"), env...)
	type round struct{ from, last int } // last: the last chat accepted
	var rounds []round
	for r := range startRounds {
		from := r * startMax
		cmd, out := startChild(t, append(env, fmt.Sprintf("START_FROM=%d", from)))
		lines := readLines(out)
		if !waitFor(lines, "child: running", 30*time.Second, nil) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child did not start", r)
		}
		time.Sleep(randomDuration(300 * time.Millisecond)) // a random moment, not a wait for something
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		last := from - 1
		waitFor(lines, "", 0, func(n int) { last = max(last, n) }) // what the child acknowledged before it died
		rounds = append(rounds, round{from, last})
	}

	ctx := context.Background()
	st, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	accepted, inFlight := 0, 0
	for _, r := range rounds {
		// The child starts one chat at a time: the one after the last it
		// acknowledged is the only one a kill can have caught in its start.
		for n := r.from; n <= r.last+1; n++ {
			id := startChatID(n)
			_, err := st.GetChat(ctx, testScope, id)
			switch {
			case errors.Is(err, baton.ErrNotFound) && n > r.last:
				continue // killed before its commit
			case err != nil:
				t.Fatalf("chat %s, accepted before the kill: %v", id, err)
			}
			if n > r.last {
				inFlight++
			} else {
				accepted++
			}
			ins, err := st.Inputs(ctx, testScope, id)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := st.Events(ctx, testScope, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n := messageCopies(ins, evs, startMessage(n)); n != 1 {
				t.Errorf("chat %s (accepted: %v): its first message %q is %d times in its inbox (%d inputs) and history (%d events), want once: a chat without its message",
					id, n <= r.last, startMessage(n), n, len(ins), len(evs))
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no start was accepted before a kill")
	}
	t.Logf("%d kills, %d chats accepted, %d created by a start the kill cut short", len(rounds), accepted, inFlight)
}

// messageCopies counts msg among the waiting inputs (their run.start's
// message) and the recorded person's messages: the engine's runs (its bus
// rules) may have taken a chat's first message before the kill.
func messageCopies(ins []baton.Input, evs []baton.Event, msg string) int {
	n := 0
	for _, in := range ins {
		var p struct{ Message string }
		if json.Unmarshal(in.Event.Payload, &p) == nil && p.Message == msg {
			n++
		}
	}
	for _, ev := range evs {
		if m := baton.MessageOf(ev); m.Role == "user" && m.Content == msg {
			n++
		}
	}
	return n
}
