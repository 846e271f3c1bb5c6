package testenv

import (
	"time"
)

// TB is the part of testing.TB that Eventually uses; a fake of it lets
// Eventually's own test watch it fail.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Poll bounds: the first retry comes at once-ish, later ones back off so
// that a slow condition (a store query) does not eat the cores of a loaded
// machine while it waits.
const (
	firstPoll = time.Millisecond
	maxPoll   = 20 * time.Millisecond
)

// Eventually polls cond until it returns nil, and fails the test (Fatalf)
// when timeout passes first, with a message naming what was awaited and
// cond's last error, which should say the state it saw ("status running,
// want completed"). The timeout only catches a hang: give it generously.
//
// cond runs on the calling goroutine, first at once, then with a backoff
// from 1ms up to 20ms between calls; it is called once more at the
// deadline, so a condition that holds by then is not reported as a timeout.
// Like Fatalf, Eventually must be called from the test's goroutine.
func Eventually(t TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := firstPoll
	for {
		err := cond()
		if err == nil {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
			return // a fake TB's Fatalf returns
		}
		// Sleeping here is the poll interval, not a synchronisation: cond
		// decides, and the deadline bounds the wait.
		time.Sleep(min(wait, left))
		wait = min(2*wait, maxPoll)
	}
}
