package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/postgres"
)

// recoveryFinish bounds the restarted child's run: far below the claim age
// of the slow tool (its 60 s timeout + 10 s grace), after which a claim
// would be re-run without knowing its holder is gone. Only a hang catch.
const recoveryFinish = 40 * time.Second

// TestToolRecovery_SQLite and TestToolRecovery_PostgreSQL kill the process
// with SIGKILL while a side-effecting command tool runs, then restart it:
// the restarted process sees the claim's holder is gone (same instance,
// another boot), records a chat.notice tool_recovery naming the tool and
// call, and re-runs the call at once with the same effect key; the chat
// completes and the effect is in the file once.
func TestToolRecovery_SQLite(t *testing.T) {
	dir := t.TempDir()
	recoveryTest(t, dir, []string{"CRASH_STORE=sqlite:" + filepath.Join(dir, "baton.db")}, func(ctx context.Context) (baton.Store, error) {
		return store.Open(ctx, "sqlite:"+filepath.Join(dir, "baton.db"))
	})
}

func TestToolRecovery_PostgreSQL(t *testing.T) {
	dsn, schema := pgSchema(t)
	recoveryTest(t, t.TempDir(), []string{"CRASH_STORE=" + dsn, "CRASH_PG_SCHEMA=" + schema}, func(ctx context.Context) (baton.Store, error) {
		return postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	})
}

func recoveryTest(t *testing.T, dir string, env []string, open func(context.Context) (baton.Store, error)) {
	effects := filepath.Join(dir, "effects.txt")
	env = append(append(os.Environ(), childEnv+"=1", "CRASH_WORKFLOW=slowfx", "EFFECTS_FILE="+effects), env...)

	cmd, out := startChild(t, env)
	if !waitLine(out, "child: running", 30*time.Second) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("child did not start")
	}
	// The tool writes its pid once it runs: that is the moment to kill.
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := waitToolPID(t, effects)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	_ = syscall.Kill(pid, syscall.SIGKILL) // the dead process's orphaned tool

	cmd, _ = startChild(t, env)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("restarted child: %v", err)
		}
	case <-time.After(recoveryFinish):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the restarted child did not finish the chat within %s: the interrupted call waited for its claim's age", recoveryFinish)
	}

	ctx := context.Background()
	st, err := open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkRecovered(t, st, killChatID, effects)
}

// waitToolPID waits until the slow tool runs and returns its pid.
func waitToolPID(t *testing.T, effects string) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, 30*time.Second, "the tool to start (its pid file)", func() error {
		raw, err := os.ReadFile(effects + ".pid")
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err
	})
	return pid
}

// checkRecovered checks a chat of slowfx whose process was killed while
// its tool ran: one tool_recovery notice for the call, before its response;
// the tool ran twice with the same effect key, the second time as a
// recovery; its effect is in the file once; the chat completed.
func checkRecovered(t *testing.T, st baton.Store, chatID, effects string) {
	t.Helper()
	evs, err := st.Events(context.Background(), testScope, chatID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	checkSequences(t, evs)
	var callID string
	notices := 0
	for _, ev := range evs {
		switch ev.Type {
		case baton.TypeChatToolCall:
			var p struct {
				ToolCallID string `json:"tool_call_id"`
			}
			_ = json.Unmarshal(ev.Payload, &p)
			callID = p.ToolCallID
		case baton.TypeChatNotice:
			var p baton.NoticePayload
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.Code != baton.NoticeToolRecovery || p.Tool != "slow_append" || p.ToolCallID == "" || p.ToolCallID != callID {
				t.Fatalf("notice %s, want tool_recovery of slow_append, call %s", ev.Payload, callID)
			}
			notices++
		case baton.TypeChatToolResponse:
			if notices == 0 {
				t.Fatal("the tool's response was recorded before the recovery notice")
			}
		}
	}
	if notices != 1 {
		t.Fatalf("%d tool_recovery notices, want 1", notices)
	}
	if last := evs[len(evs)-1]; last.Type != baton.TypeChatRunComplete {
		t.Fatalf("chat did not complete: last event %s", last.Type)
	}
	exec, _ := os.ReadFile(effects + ".exec")
	runs := strings.Split(strings.TrimSpace(string(exec)), "\n")
	if len(runs) != 2 {
		t.Fatalf("the tool ran %d times, want 2 (killed, recovered):\n%s", len(runs), exec)
	}
	key0, rec0, _ := strings.Cut(runs[0], " ")
	key1, rec1, _ := strings.Cut(runs[1], " ")
	if key0 != key1 || !strings.HasSuffix(key0, "/"+callID) || rec0 != "0" || rec1 != "1" {
		t.Fatalf("runs %q: want the same effect key for call %s, the second with BATON_EFFECT_RECOVERY=1", runs, callID)
	}
	data, _ := os.ReadFile(effects)
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], key0+" ") {
		t.Fatalf("effects file:\n%s\nwant the key %s once", data, key0)
	}
}

// TestInstances_ToolRecoveredOnTakeover: two instances, each its own
// process, on one PostgreSQL schema with inputs routed through NATS
// JetStream. Instance A is SIGKILLed while a side-effecting command tool
// of its chat runs; B takes the chat over when A's lease expires, sees the
// claim's holder (instance A) is gone, and recovers the call at once —
// notice, same effect key — instead of after the claim's age (70 s).
func TestInstances_ToolRecoveredOnTakeover(t *testing.T) {
	dsn, schema := pgSchema(t)
	natsURL := testenv.NATSURL(t)
	ns := fmt.Sprintf("enginerecover%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteInputsStream(natsURL, ns) })
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.txt")
	env := append(os.Environ(), "CRASH_STORE="+dsn, "CRASH_PG_SCHEMA="+schema, "EFFECTS_FILE="+effects,
		"NATS_URL="+natsURL, "NATS_NS="+ns, "TAKEOVERS_DIR="+dir, "CRASH_WORKFLOW=slowfx")
	survivor := startInstanceChild(t, append(env, survivorChildEnv+"=1", "INSTANCE_ID=B"))
	owner := startInstanceChild(t, append(env, ownerChildEnv+"=1", "OWNER_CHATS=1"))
	pid := waitToolPID(t, effects)
	_ = owner.cmd.Process.Signal(syscall.SIGKILL)
	_ = owner.cmd.Wait()
	_ = syscall.Kill(pid, syscall.SIGKILL) // the dead instance's orphaned tool
	killedAt := time.Now()

	st, err := postgres.Open(context.Background(), dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitChat(t, st, "owned-0", baton.ChatCompleted, recoveryFinish) // a hang catch, below the claim's age
	t.Logf("chat complete %s after the kill (lease TTL 500ms)", time.Since(killedAt).Round(time.Millisecond))
	_ = survivor.cmd.Process.Signal(syscall.SIGTERM)
	if err := survivor.cmd.Wait(); err != nil {
		t.Fatalf("survivor: %v", err)
	}
	checkRecovered(t, st, "owned-0", effects)
}
