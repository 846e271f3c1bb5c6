package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bus"
	"github.com/batonhq/baton/bus/natsbridge"
	"github.com/batonhq/baton/engine"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store/postgres"
)

// survivorChildEnv makes the test binary run as instance B or C of
// TestInstances_ThreeProcessesOwnerKilled: an engine with the NATS bridge
// on the shared store, taking over dead instances' chats until SIGTERM,
// when it writes how many it took over to TAKEOVERS_DIR/<instance>.
const survivorChildEnv = "BATON_ENGINE_SURVIVOR_CHILD"

// childBridge connects a child instance's bus to NATS with input routing,
// in the namespace the parent chose.
func childBridge(st baton.Store, b *bus.Bus, id string) (*natsbridge.Bridge, error) {
	return natsbridge.Start(natsbridge.Config{URL: os.Getenv("NATS_URL"), Bus: b, Instance: id, Logger: discardLogger(),
		Namespace: os.Getenv("NATS_NS"),
		Inputs:    &natsbridge.InputsConfig{Leases: st, IsInput: engine.IsInput, InactiveAfter: 3 * time.Second}})
}

func runSurvivorChild() int {
	id := os.Getenv("INSTANCE_ID")
	st, err := postgres.Open(context.Background(), os.Getenv("CRASH_STORE"), postgres.WithSchema(os.Getenv("CRASH_PG_SCHEMA")))
	if err != nil {
		fmt.Fprintln(os.Stderr, id+": open store:", err)
		return 1
	}
	eng, b, err := effectsEngine(st, id)
	if err != nil {
		fmt.Fprintln(os.Stderr, id+":", err)
		return 1
	}
	br, err := childBridge(st, b, id)
	if err != nil {
		fmt.Fprintln(os.Stderr, id+":", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("child: running")
	_ = eng.Run(ctx)
	br.StopInputs()
	closeCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = b.Close(closeCtx)
	_ = br.Close(closeCtx)
	_ = eng.Close()
	_ = st.Close()
	err = os.WriteFile(filepath.Join(os.Getenv("TAKEOVERS_DIR"), id), []byte(strconv.FormatInt(eng.Takeovers(), 10)), 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, id+":", err)
		return 1
	}
	return 0
}

// TestInstances_ThreeProcessesOwnerKilled: three baton instances, each its
// own process, on one PostgreSQL schema and the real NATS server with
// inputs routed through JetStream. Instance A starts 100 chats and is
// SIGKILLed mid-turn; B and C take them over as their leases expire (and
// drain A's undelivered inputs). Every chat completes, sequences have no
// gap or repeat, and every side effect is in the file exactly once.
func TestInstances_ThreeProcessesOwnerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("not in -short")
	}
	dsn, schema := pgSchema(t)
	natsURL := testenv.NATSURL(t)
	ns := fmt.Sprintf("enginekill%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteInputsStream(natsURL, ns) })
	const chats = 100
	effects := filepath.Join(t.TempDir(), "effects.txt")
	takeovers := t.TempDir()
	env := append(os.Environ(), "CRASH_STORE="+dsn, "CRASH_PG_SCHEMA="+schema, "EFFECTS_FILE="+effects,
		"NATS_URL="+natsURL, "NATS_NS="+ns, "TAKEOVERS_DIR="+takeovers)

	var survivors []*childProc
	for _, id := range []string{"B", "C"} {
		survivors = append(survivors, startInstanceChild(t, append(env, survivorChildEnv+"=1", "INSTANCE_ID="+id)))
	}
	owner := startInstanceChild(t, append(env, ownerChildEnv+"=1", fmt.Sprint("OWNER_CHATS=", chats)))
	time.Sleep(50*time.Millisecond + randomDuration(150*time.Millisecond)) // mid-turn for many chats, not a wait for something
	_ = owner.cmd.Process.Signal(syscall.SIGKILL)
	_ = owner.cmd.Wait()
	killedAt := time.Now()

	st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The chats A held when it died, and how soon another took one.
	heldByA := map[string]bool{}
	for i := 0; i < chats; i++ {
		id := fmt.Sprint("owned-", i)
		if l, err := st.GetLease(context.Background(), id); err == nil && l.Owner == "A" {
			heldByA[id] = true
		}
	}
	if len(heldByA) > 0 {
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("a chat of the %d A held to be taken over", len(heldByA)), func() error {
			for id := range heldByA {
				if l, err := st.GetLease(context.Background(), id); err == nil && (l.Owner == "B" || l.Owner == "C") {
					return nil
				}
			}
			return errors.New("every one still A's or free")
		})
		t.Logf("A held %d chats when killed; first taken over %s after the kill (lease TTL 500ms, sweeps every 167ms)",
			len(heldByA), time.Since(killedAt).Round(time.Millisecond))
	}
	for i := 0; i < chats; i++ {
		waitChat(t, st, fmt.Sprint("owned-", i), baton.ChatCompleted, 3*time.Minute)
	}
	t.Logf("all %d chats complete %s after the kill", chats, time.Since(killedAt).Round(time.Millisecond))
	total := int64(0)
	for i, s := range survivors {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		if err := s.cmd.Wait(); err != nil {
			t.Fatalf("survivor %d: %v", i, err)
		}
		id := []string{"B", "C"}[i]
		raw, err := os.ReadFile(filepath.Join(takeovers, id))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		t.Logf("instance %s took over %d chats", id, n)
		total += n
	}
	if total == 0 {
		t.Fatal("no chat was taken over: the kill came too late")
	}
	checkOwnedChats(t, st, chats, effects)
	checkRecoveryNotices(t, st, effects)
}

// checkRecoveryNotices: every tool call that ran more than once (its
// process was killed mid-call, another instance took the chat over) was
// recovered under the same effect key after a chat.notice tool_recovery
// naming it, not after the claim's age.
func checkRecoveryNotices(t *testing.T, st baton.Store, effects string) {
	t.Helper()
	raw, err := os.ReadFile(effects + ".exec")
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		key, _, _ := strings.Cut(l, " ")
		runs[key]++
	}
	recovered := 0
	for key, n := range runs {
		if n < 2 {
			continue
		}
		recovered++
		chatID, _, _ := strings.Cut(key, "/")
		callID := key[strings.LastIndex(key, "/")+1:]
		evs, err := st.Events(context.Background(), testScope, chatID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range evs {
			var p baton.NoticePayload
			if ev.Type == baton.TypeChatNotice && json.Unmarshal(ev.Payload, &p) == nil && p.Code == baton.NoticeToolRecovery && p.ToolCallID == callID {
				found = true
			}
		}
		if !found {
			t.Errorf("call %s ran %d times without a tool_recovery notice", key, n)
		}
	}
	t.Logf("%d interrupted tool calls recovered with a notice", recovered)
}

// childProc is a child test process running one instance.
type childProc struct{ cmd *exec.Cmd }

func startInstanceChild(t *testing.T, env []string) *childProc {
	t.Helper()
	cmd, out := startChild(t, env)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !waitLine(out, "child: running", 60*time.Second) {
		t.Fatal("an instance did not start")
	}
	return &childProc{cmd: cmd}
}

// deleteInputsStream removes a test namespace's inputs stream from NATS.
func deleteInputsStream(natsURL, ns string) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return
	}
	defer nc.Close()
	if js, err := jetstream.New(nc); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, natsbridge.InputStream(ns))
	}
}
