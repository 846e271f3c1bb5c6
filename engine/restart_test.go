package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
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

// restartChildEnv makes the test binary run as instance A of
// TestInstances_RestartedInstanceTakesBackItsChat: an engine with a long
// lease on the shared PostgreSQL schema, its inputs routed through
// JetStream (AckWait RESTART_ACKWAIT). With RESTART_FIRST set it starts the
// chat with a message (with RESTART_QUEUED: starts it, sends a message and
// a second one while the first is answered, slowly); then it runs until it
// is killed.
const (
	restartChildEnv = "BATON_ENGINE_RESTART_CHILD"
	restartChatID   = "restart-chat"
	restartLease    = 20 * time.Second
)

func runRestartChild() int {
	ctx := context.Background()
	st, err := postgres.Open(ctx, os.Getenv("CRASH_STORE"), postgres.WithSchema(os.Getenv("CRASH_PG_SCHEMA")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "A: open store:", err)
		return 1
	}
	wfs, err := workflow.LoadAll(os.DirFS(inboxDir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "A: workflows:", err)
		return 1
	}
	ackWait, _ := time.ParseDuration(os.Getenv("RESTART_ACKWAIT"))
	b := bus.New(bus.WithLogger(discardLogger()))
	eng, err := engine.New(engine.Config{
		Store: st, Recorder: recorder.New(st, engine.ObserverPublisher{Bus: b}), Bus: b, Workflows: wfs, WorkflowRoot: inboxDir,
		Providers: func(wf *workflow.Workflow) (baton.Provider, error) {
			return scripted.Load(wf.FS, path.Join(wf.Dir, "scripted.json"))
		},
		Logger: discardLogger(), InstanceID: "A", LeaseTTL: restartLease, StateCache: -1,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "A: engine:", err)
		return 1
	}
	if _, err := natsbridge.Start(natsbridge.Config{URL: os.Getenv("NATS_URL"), Bus: b, Instance: "A", Logger: discardLogger(),
		Namespace: os.Getenv("NATS_NS"),
		Inputs:    &natsbridge.InputsConfig{Leases: st, IsInput: engine.IsInput, AckWait: ackWait, InactiveAfter: 3 * time.Second}}); err != nil {
		fmt.Fprintln(os.Stderr, "A: bridge:", err)
		return 1
	}
	go func() { _ = eng.Run(ctx) }() // runs until the process is killed
	if _, err := eng.RecoverInputs(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "A: recover inputs:", err)
		return 1
	}
	switch {
	case os.Getenv("RESTART_FIRST") != "" && os.Getenv("RESTART_QUEUED") == "":
		if _, err := eng.Start(ctx, testScope, "slow", baton.StartOptions{ChatID: restartChatID, Message: "m0"}); err != nil {
			fmt.Fprintln(os.Stderr, "A: start:", err)
			return 1
		}
	case os.Getenv("RESTART_FIRST") != "":
		// The turn is the answer to a message (its user_query is being
		// handled, unacknowledged, when A dies), and a second message waits
		// behind it.
		if _, err := eng.Start(ctx, testScope, "slow", baton.StartOptions{ChatID: restartChatID}); err != nil {
			fmt.Fprintln(os.Stderr, "A: start:", err)
			return 1
		}
		for _, m := range []string{"m0", "m1"} {
			if err := eng.SubmitOnce(ctx, testScope, restartChatID, "id-"+m, m, "http"); err != nil {
				fmt.Fprintln(os.Stderr, "A: submit:", err)
				return 1
			}
		}
	}
	fmt.Println("child: running")
	select {} // runs until killed
}

// TestInstances_RestartedInstanceTakesBackItsChat: instance A (PostgreSQL,
// NATS JetStream routing its inputs, a 20 s lease) is killed with SIGKILL
// while it answers the person's first message. Restarted with the same id,
// A takes the chat back at once — not after its old lease expires — and
// finishes the turn ("own lease"). With a second message accepted and
// queued when A died ("queued message"), that message, kept in the inbox
// and redelivered by JetStream while the turn was cut short, is taken once,
// not dropped as "input ignored". Either way the chat ends up waiting for
// the person with every message answered, well within the old lease.
func TestInstances_RestartedInstanceTakesBackItsChat(t *testing.T) {
	if testing.Short() {
		t.Skip("not in -short")
	}
	// JetStream's default AckWait (30 s): nothing is delivered again
	// before the old lease expires; only taking it back moves the chat.
	t.Run("own lease", func(t *testing.T) { restartTest(t, []string{"m0"}, natsbridge.DefaultInputAckWait) })
	// A short AckWait: both messages are delivered again at once, the first
	// (recorded) and the second (queued) while the turn is cut short.
	t.Run("queued message", func(t *testing.T) { restartTest(t, []string{"m0", "m1"}, 2*time.Second) })
}

func restartTest(t *testing.T, messages []string, ackWait time.Duration) {
	dsn, schema := pgSchema(t)
	natsURL := testenv.NATSURL(t)
	ns := fmt.Sprintf("enginerestart%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteInputsStream(natsURL, ns) })
	env := append(os.Environ(), restartChildEnv+"=1", "CRASH_STORE="+dsn, "CRASH_PG_SCHEMA="+schema, "NATS_URL="+natsURL, "NATS_NS="+ns,
		"RESTART_ACKWAIT="+ackWait.String())

	st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	firstEnv := append(env, "RESTART_FIRST=1")
	if len(messages) > 1 {
		firstEnv = append(firstEnv, "RESTART_QUEUED=1")
	}
	first := startInstanceChild(t, firstEnv)
	// Kill A once Echo's turn has begun (its select_speaker recorded, the
	// answer streaming: it takes seconds) and the lease is A's.
	testenv.Eventually(t, 30*time.Second, "Echo's turn to begin on A", func() error {
		evs, err := st.Events(context.Background(), testScope, restartChatID, 0, 0)
		if err != nil {
			return err
		}
		l, _ := st.GetLease(context.Background(), restartChatID)
		if countType(evs, baton.TypeChatSelectSpeaker) == 0 || evs[len(evs)-1].Type != baton.TypeChatSelectSpeaker || l.Owner != "A" {
			return fmt.Errorf("%d events, lease owner %q", len(evs), l.Owner)
		}
		return nil
	})
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()
	killed := time.Now()
	if c, _ := st.GetChat(context.Background(), testScope, restartChatID); c.Status != baton.ChatRunning {
		t.Fatalf("killed with the chat %s, want running mid-turn", c.Status)
	}

	startInstanceChild(t, env) // A again, same id
	waitChat(t, st, restartChatID, baton.ChatWaitingInput, restartLease/2)
	took := time.Since(killed)
	evs, err := st.Events(context.Background(), testScope, restartChatID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs)
	var users []string
	answers := 0
	for _, ev := range evs {
		var p struct{ Agent, Content string }
		_ = json.Unmarshal(ev.Payload, &p)
		if ev.Type == baton.TypeChatText && p.Agent == "user" {
			users = append(users, p.Content)
		} else if ev.Type == baton.TypeChatText {
			answers++
		}
	}
	if strings.Join(users, " ") != strings.Join(messages, " ") || answers != len(messages) {
		t.Fatalf("person's messages %q with %d answers, want %q each answered once", users, answers, messages)
	}
	t.Logf("restarted A took its chat back and answered every message %s after the kill (lease TTL %s)", took.Round(time.Millisecond), restartLease)
}
