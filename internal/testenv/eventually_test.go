package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of ending the test, so that Eventually's
// failure can be looked at.
type fakeTB struct {
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}

// TestEventuallyFailsAtTheDeadline: a condition that never holds fails the
// test once the timeout has passed, not before, with a message naming what
// was awaited and the last state the condition saw.
func TestEventuallyFailsAtTheDeadline(t *testing.T) {
	var f fakeTB
	calls := 0
	start := time.Now()
	Eventually(&f, 50*time.Millisecond, "the chat to complete", func() error {
		calls++
		return fmt.Errorf("status running (call %d)", calls)
	})
	elapsed := time.Since(start)
	if !f.failed {
		t.Fatal("Eventually returned without failing for a condition that never held")
	}
	if elapsed < 50*time.Millisecond {
		t.Errorf("failed after %v, before the 50ms timeout", elapsed)
	}
	if elapsed > 10*time.Second { // a hang-catcher: only a poll loop that ignores the deadline gets here
		t.Errorf("failed after %v, long after the 50ms timeout", elapsed)
	}
	want := fmt.Sprintf("waiting for the chat to complete: status running (call %d)", calls)
	if !strings.Contains(f.msg, want) {
		t.Errorf("message %q does not contain %q", f.msg, want)
	}
	if calls < 3 {
		t.Errorf("the condition was called %d times in 50ms; want it polled", calls)
	}
}

// TestEventuallyReturnsWhenTheConditionHolds: the wait ends at the first
// nil, without failing, and calls the condition no more.
func TestEventuallyReturnsWhenTheConditionHolds(t *testing.T) {
	var f fakeTB
	calls := 0
	Eventually(&f, time.Minute, "three calls", func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("%d calls", calls)
		}
		return nil
	})
	if f.failed {
		t.Fatalf("failed: %s", f.msg)
	}
	if calls != 3 {
		t.Errorf("condition called %d times, want 3", calls)
	}
}

// TestEventuallyChecksOnceMoreAtTheDeadline: a condition that holds by the
// time the deadline passes is not reported as a timeout.
func TestEventuallyChecksOnceMoreAtTheDeadline(t *testing.T) {
	var f fakeTB
	timeout := 30 * time.Millisecond
	start := time.Now()
	Eventually(&f, timeout, "the deadline", func() error {
		if time.Since(start) < timeout {
			return fmt.Errorf("early")
		}
		return nil
	})
	if f.failed {
		t.Fatalf("failed although the condition held at the deadline: %s", f.msg)
	}
}
