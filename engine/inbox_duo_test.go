package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/llm/scripted"
	"github.com/batonhq/baton/recorder"
	"github.com/batonhq/baton/store/postgres"
	"github.com/batonhq/baton/workflow"
)

// duoChildEnv makes the test binary run as instance A or B of
// TestInboxKill_TwoInstances: an engine with a short lease on the shared
// PostgreSQL schema, inputs routed through NATS JetStream. A starts
// duo-0 and duo-1, B duo-2 and duo-3 (each workflow of the inbox tests);
// B (DUO_SENDER) also sends messages MSG_FROM…MSG_TO to all four, printing
// "accepted N" once each is acknowledged, then "child: idle" when every
// chat has taken every message.
const duoChildEnv = "BATON_ENGINE_DUO_CHILD"

var duoChats = [4]struct{ id, workflow, owner string }{
	{"duo-0", "queue", "A"}, {"duo-1", "short", "A"}, {"duo-2", "queue", "B"}, {"duo-3", "short", "B"},
}

const duoMessages = 60

func runDuoChild() int {
	ctx := context.Background()
	id := os.Getenv("INSTANCE_ID")
	st, err := postgres.Open(ctx, os.Getenv("CRASH_STORE"), postgres.WithSchema(os.Getenv("CRASH_PG_SCHEMA")))
	if err != nil {
		fmt.Fprintln(os.Stderr, id+": open store:", err)
		return 1
	}
	wfs, err := workflow.LoadAll(os.DirFS(inboxDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, id+": workflows:", err)
		return 1
	}
	b := bus.New(bus.WithLogger(discardLogger()))
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b, Workflows: wfs, WorkflowRoot: inboxDir,
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
		Logger: discardLogger(), InstanceID: id, LeaseTTL: time.Second, StartGrace: 5 * time.Second, StateCache: -1,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, id+": engine:", err)
		return 1
	}
	if _, err := natsbridge.Start(natsbridge.Config{URL: os.Getenv("NATS_URL"), Bus: b, Instance: id, Logger: discardLogger(),
		Namespace: os.Getenv("NATS_NS"),
		Inputs:    &natsbridge.InputsConfig{Leases: st, IsInput: engine.IsInput, AckWait: 2 * time.Second, InactiveAfter: 3 * time.Second}}); err != nil {
		fmt.Fprintln(os.Stderr, id+": bridge:", err)
		return 1
	}
	go func() { _ = eng.Run(ctx) }() // runs until the process is killed
	if _, err := eng.RecoverInputs(ctx); err != nil {
		fmt.Fprintln(os.Stderr, id+": recover inputs:", err)
		return 1
	}
	for _, c := range duoChats {
		if c.owner != id {
			continue
		}
		if _, err := st.GetChat(ctx, testScope, c.id); err != nil {
			if _, err := eng.Start(ctx, testScope, c.workflow, baton.StartOptions{ChatID: c.id}); err != nil {
				fmt.Fprintln(os.Stderr, id+": start:", err)
				return 1
			}
		}
	}
	fmt.Println("child: running")
	if os.Getenv("DUO_SENDER") == "" {
		select {} // runs until killed
	}
	from, _ := strconv.Atoi(os.Getenv("MSG_FROM"))
	for n := from; n <= duoMessages; n++ {
		c := duoChats[n%len(duoChats)]
		if err := eng.SubmitOnce(ctx, testScope, c.id, fmt.Sprintf("msg-%d", n), fmt.Sprintf("message %d", n), "http"); err != nil {
			fmt.Fprintln(os.Stderr, id+": submit:", err)
			return 1
		}
		fmt.Printf("accepted %d\n", n)
		time.Sleep(randomDuration(40 * time.Millisecond)) // a person typing, not a wait for something
	}
	for {
		idle := true
		for _, c := range duoChats {
			ins, err := st.Inputs(ctx, testScope, c.id)
			chat, gerr := st.GetChat(ctx, testScope, c.id)
			idle = idle && err == nil && gerr == nil && len(ins) == 0 && chat.Status != baton.ChatRunning
		}
		if idle {
			fmt.Println("child: idle")
			select {} // the parent kills it
		}
		time.Sleep(10 * time.Millisecond) // polling the store for the chats to take everything
	}
}

// TestInboxKill_TwoInstances: two instances on one PostgreSQL schema and
// NATS JetStream, each running two chats; B accepts messages for all four
// (those of A's chats reach A through JetStream). At random moments A or B
// is killed with SIGKILL and restarted with its id; B then sends again
// every message it had not acknowledged, with the same idempotency id.
// Every message acknowledged is in its chat's history exactly once, in the
// order sent, and answered; sequences have no gap.
func TestInboxKill_TwoInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	dsn, schema := pgSchema(t)
	natsURL := testenv.NATSURL(t)
	ns := fmt.Sprintf("engineduo%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteInputsStream(natsURL, ns) })
	env := append(os.Environ(), duoChildEnv+"=1", "CRASH_STORE="+dsn, "CRASH_PG_SCHEMA="+schema, "NATS_URL="+natsURL, "NATS_NS="+ns)

	type proc struct {
		cmd   *exec.Cmd
		lines <-chan string
	}
	start := func(id string, extra ...string) proc {
		cmd, out := startChild(t, append(append(env, "INSTANCE_ID="+id), extra...))
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := readLines(out)
		if !waitFor(lines, "child: running", 60*time.Second, nil) {
			t.Fatalf("instance %s did not start", id)
		}
		return proc{cmd, lines}
	}
	next := 1
	sender := func() proc { return start("B", "DUO_SENDER=1", fmt.Sprintf("MSG_FROM=%d", next)) }
	a := start("A")
	b := sender()
	kills := map[string]int{}
	for round := 0; round < 8; round++ {
		time.Sleep(200*time.Millisecond + randomDuration(400*time.Millisecond)) // a random moment, not a wait for something
		if randomDuration(2) == 0 {
			_ = a.cmd.Process.Signal(syscall.SIGKILL)
			_ = a.cmd.Wait()
			kills["A"]++
			a = start("A")
			continue
		}
		_ = b.cmd.Process.Signal(syscall.SIGKILL)
		_ = b.cmd.Wait()
		kills["B"]++
		last := next - 1
		waitFor(b.lines, "", 0, func(n int) { last = max(last, n) })
		next = last + 1
		b = sender()
	}
	idle := waitFor(b.lines, "child: idle", 3*time.Minute, func(n int) { next = max(next, n+1) })
	if !idle {
		t.Fatal("the chats did not take every message")
	}
	t.Logf("killed A %d times and B %d times", kills["A"], kills["B"])

	st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, c := range duoChats {
		evs, err := st.Events(context.Background(), testScope, c.id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSequences(t, evs)
		var want, got []string
		for n := 1; n <= duoMessages; n++ {
			if n%len(duoChats) == i {
				want = append(want, fmt.Sprintf("msg-%d", n))
			}
		}
		answers := 0
		for _, ev := range evs {
			var p struct {
				Agent   string `json:"agent"`
				InputID string `json:"input_id"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			switch {
			case ev.Type != baton.TypeChatText:
			case p.Agent == "user":
				got = append(got, p.InputID)
			default:
				answers++
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("chat %s: the person's messages in history\n got %v\nwant %v (each once, in the order sent)", c.id, got, want)
		}
		if answers != len(want) {
			t.Errorf("chat %s: %d answers to %d messages", c.id, answers, len(want))
		}
	}
}
