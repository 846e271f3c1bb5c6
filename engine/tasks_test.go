package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/testenv"
)

// runEngine runs h's engine background loop until the returned stop is called.
func runEngine(h *harness) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.eng.Run(ctx) }()
	return func() { cancel(); <-done }
}

// TestBackgroundTask_DeadInstanceReported: with two instances on one store,
// a task belongs to the instance that started it. While that instance lives
// it renews the task and the other leaves it alone; once it dies, the other
// reports the task failed to its chat, once.
func TestBackgroundTask_DeadInstanceReported(t *testing.T) {
	// A renews every ttl/3 on a SQLite file shared with b: a ttl well above
	// a loaded machine's stalls, so that b never sees a live task expire.
	const ttl = time.Second
	a := newEnvHarness(t, withInstance("a", ttl))
	stopA := runEngine(a.harness)
	id := start(t, a.harness, "assistant")
	a.waitStatus(id, baton.ChatWaitingInput)
	if err := a.eng.Submit(context.Background(), testScope, id, "make me a report", "ws"); err != nil {
		t.Fatal(err)
	}
	a.waitStatus(id, baton.ChatWaitingInput)
	running, _ := a.store.TasksByStatus(context.Background(), baton.TaskRunning, 10)
	if len(running) != 1 || running[0].Owner != "a" || running[0].Expires.IsZero() {
		t.Fatalf("running tasks: %+v; want one owned by a with an expiry", running)
	}

	b := newEnvHarness(t, withDB(a.dbPath), withInstance("b", ttl))
	stopB := runEngine(b.harness)
	defer stopB()
	// Several TTLs pass: a renews its task, so b must not report it.
	time.Sleep(5 * ttl)
	if running, _ := b.store.TasksByStatus(context.Background(), baton.TaskRunning, 10); len(running) != 1 {
		t.Fatalf("a live instance's task was taken: running %+v", running)
	}

	// a dies: its engine stops renewing, its task is cut off unrecorded.
	stopA()
	a.close()
	var failed []baton.Task
	testenv.Eventually(t, 10*time.Second, "the dead instance's task to be reported failed", func() error {
		var err error
		if failed, err = b.store.TasksByStatus(context.Background(), baton.TaskFailed, 10); err != nil {
			return err
		}
		if len(failed) == 0 {
			return errors.New("no failed task")
		}
		return nil
	})
	if len(failed) != 1 || !strings.Contains(failed[0].Error, "its instance stopped") {
		t.Fatalf("failed tasks: %+v", failed)
	}
	b.waitStatus(id, baton.ChatWaitingInput)
	testenv.Eventually(t, 10*time.Second, "the chat to be told once that the task failed", func() error {
		told := 0
		for _, ev := range b.events(id) {
			if p := payloadOf(t, ev); ev.Type == baton.TypeChatText && strings.Contains(fmt.Sprint(p["content"]), "Observed event: background_task.failed") {
				told++
			}
		}
		if told > 1 {
			t.Fatalf("the chat was told %d times that the task failed, want once", told)
		}
		if told == 0 {
			return errors.New("not told")
		}
		return nil
	})
}
