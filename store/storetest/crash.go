package storetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// Environment variables that turn a test binary into the crash test's child.
const (
	envCrashChild = "BATON_STORETEST_CRASH_CHILD"
	envCrashApp   = "BATON_STORETEST_CRASH_APP"
	envCrashUser  = "BATON_STORETEST_CRASH_USER"
	envCrashChat  = "BATON_STORETEST_CRASH_CHAT"
)

// IsCrashChild reports whether this process is a crash test's child. A store
// package's TestMain calls CrashChildMain when it is.
func IsCrashChild() bool { return os.Getenv(envCrashChild) != "" }

// CrashChildMain is the child of RunCrash: it opens the store and appends to
// the chat in a loop until it is killed. Each append carries 1 to 3 events
// whose payload "n" is the sequence they must get, and sets the context key
// "last" to the last of them. After each append returns it prints
// "acked N", N the last sequence it got, straight to its standard output
// (os.Stdout is not buffered), so the parent knows every append that was
// acknowledged before the kill; "ready" follows the first. It never returns
// normally.
func CrashChildMain(open func(ctx context.Context) (baton.Store, error)) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	s, err := open(ctx)
	if err != nil {
		fail(err)
	}
	scope := baton.Scope{App: os.Getenv(envCrashApp), User: os.Getenv(envCrashUser)}
	chatID := os.Getenv(envCrashChat)
	c, err := s.GetChat(ctx, scope, chatID)
	if err != nil {
		fail(err)
	}
	next := c.LastSequence + 1
	for i := 0; ; i++ {
		k := 1 + i%3
		evs := make([]baton.Event, k)
		for j := range evs {
			p, _ := json.Marshal(map[string]any{"kind": "text", "agent": "crash", "content": "event " + strconv.FormatInt(next+int64(j), 10), "n": next + int64(j)})
			evs[j] = baton.NewEvent(baton.TypeChatText, baton.Metadata{}, p)
		}
		last := next + int64(k) - 1
		u := &baton.ChatUpdate{Context: map[string]json.RawMessage{"last": json.RawMessage(strconv.FormatInt(last, 10))}}
		got, err := s.Append(ctx, scope, chatID, evs, u)
		if err != nil {
			fail(err)
		}
		if got[k-1].Sequence != last {
			fail(fmt.Errorf("append got sequence %d, want %d", got[k-1].Sequence, last))
		}
		if _, err := fmt.Fprintf(os.Stdout, "%s%d\n", ackedPrefix, last); err != nil {
			fail(err)
		}
		if i == 0 {
			fmt.Println("ready")
		}
		next = last + 1
	}
}

// ackedPrefix starts the line the crash child prints for each acknowledged
// append.
const ackedPrefix = "acked "

// RunCrash is the crash test: a child process (this test binary, whose
// TestMain calls CrashChildMain) appends to one chat in a loop; it is killed
// with SIGKILL at a random moment, 20 times; after each kill the store is
// reopened with open and must hold events 1..N with no gap, no repeat and no
// half-written event, a snapshot that equals what the last event says, and
// every append the child was told had succeeded (N at least the last
// sequence it acknowledged).
// env is added to the child's environment (for example the database's
// address).
func RunCrash(t *testing.T, open func(t *testing.T) baton.Store, env []string) {
	ctx := ctxT(t)
	scope := NewScope()
	s := open(t)
	c, err := s.CreateChat(ctx, scope, baton.Chat{Workflow: "crash"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var last int64
	for round := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env, envCrashChild+"=1", envCrashApp+"="+scope.App, envCrashUser+"="+scope.User, envCrashChat+"="+c.ID)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan bool, 1)
		var acked atomic.Int64 // the last sequence the child acknowledged
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			sc := bufio.NewScanner(out)
			ok := false
			for sc.Scan() {
				line := sc.Text()
				if n, found := strings.CutPrefix(line, ackedPrefix); found {
					v, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						t.Errorf("round %d: child printed %q", round, line)
						continue
					}
					acked.Store(v)
				}
				if line == "ready" && !ok {
					ok = true
					ready <- true
				}
			}
			if !ok {
				ready <- false
			}
		}()
		select {
		case ok := <-ready:
			if !ok {
				<-readerDone
				cmd.Wait()
				t.Fatalf("round %d: child exited before its first append", round)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-readerDone
			cmd.Wait()
			t.Fatalf("round %d: child not ready after 30s", round)
		}
		// A random moment while the child appends.
		<-time.After(time.Duration(rand.IntN(40_000)) * time.Microsecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		// Every line the child wrote before it died is read before Wait,
		// which closes the pipe.
		<-readerDone
		cmd.Wait()
		s := open(t)
		n := VerifyAfterCrash(t, s, scope, c.ID, acked.Load())
		s.Close()
		if n <= last {
			t.Fatalf("round %d: %d events after the kill, %d before: the child made no progress", round, n, last)
		}
		last = n
	}
	t.Logf("20 kills survived; %d events", last)
}

// VerifyAfterCrash checks the chat the crash child wrote and returns its
// number of events. acked is the last sequence the child acknowledged
// before it was killed: the store must hold at least that many events, or
// it lost a write it had reported durable.
func VerifyAfterCrash(t *testing.T, s baton.Store, scope baton.Scope, chatID string, acked int64) int64 {
	t.Helper()
	ctx := ctxT(t)
	// A database server may still commit the killed child's last statement
	// after the kill (PostgreSQL finishes a statement whose client is gone),
	// so read until two reads of the chat agree around one read of events.
	var c baton.Chat
	var evs []baton.Event
	for deadline := time.Now().Add(10 * time.Second); ; {
		before, err := s.GetChat(ctx, scope, chatID)
		if err != nil {
			t.Fatal(err)
		}
		if evs, err = s.Events(ctx, scope, chatID, 0, 0); err != nil {
			t.Fatal(err)
		}
		if c, err = s.GetChat(ctx, scope, chatID); err != nil {
			t.Fatal(err)
		}
		if before.LastSequence == c.LastSequence && int64(len(evs)) == c.LastSequence || time.Now().After(deadline) {
			break
		}
	}
	if c.LastSequence < acked {
		t.Fatalf("the store holds %d events, but the child was told event %d was written: an acknowledged append was lost", c.LastSequence, acked)
	}
	checkSequences(t, evs, int(c.LastSequence))
	ids := map[string]bool{}
	for _, e := range evs {
		var p struct {
			N       int64  `json:"n"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatalf("event %d: half-written payload %q: %v", e.Sequence, e.Payload, err)
		}
		if p.N != e.Sequence || p.Content != "event "+strconv.FormatInt(e.Sequence, 10) {
			t.Fatalf("event %d carries n=%d %q", e.Sequence, p.N, p.Content)
		}
		if ids[e.ID] {
			t.Fatalf("event id %s repeated", e.ID)
		}
		ids[e.ID] = true
	}
	var ctxVars struct {
		Last *int64 `json:"last"`
	}
	if err := json.Unmarshal(c.Context, &ctxVars); err != nil {
		t.Fatalf("snapshot %s: %v", c.Context, err)
	}
	switch {
	case c.LastSequence == 0 && ctxVars.Last != nil:
		t.Fatalf("no events but snapshot says last=%d", *ctxVars.Last)
	case c.LastSequence > 0 && (ctxVars.Last == nil || *ctxVars.Last != c.LastSequence):
		t.Fatalf("snapshot %s does not match the last event %d", c.Context, c.LastSequence)
	}
	return c.LastSequence
}
