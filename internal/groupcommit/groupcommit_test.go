package groupcommit

import (
	"slices"
	"testing"
	"time"
)

func TestGatherTakesWhatIsWaitingUpToMax(t *testing.T) {
	reqs := make(chan int, 5)
	for i := range 5 {
		reqs <- i
	}
	stop := make(chan struct{})
	batch, ok := Gather(reqs, stop, nil, 3)
	if !ok || !slices.Equal(batch, []int{0, 1, 2}) {
		t.Fatalf("first batch = %v, %v; want [0 1 2], true", batch, ok)
	}
	// The buffer is reused from the start, and a batch does not wait to fill.
	batch, ok = Gather(reqs, stop, batch, 3)
	if !ok || !slices.Equal(batch, []int{3, 4}) {
		t.Fatalf("second batch = %v, %v; want [3 4], true", batch, ok)
	}
}

func TestGatherWaitsForTheFirstRequest(t *testing.T) {
	reqs := make(chan int)
	stop := make(chan struct{})
	type result struct {
		batch []int
		ok    bool
	}
	got := make(chan result, 1)
	go func() {
		b, ok := Gather(reqs, stop, nil, 4)
		got <- result{b, ok}
	}()
	reqs <- 7 // unbuffered: returns once Gather has taken it
	select {
	case r := <-got:
		if !r.ok || !slices.Equal(r.batch, []int{7}) {
			t.Fatalf("batch = %v, %v; want [7], true", r.batch, r.ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Gather did not return after its first request")
	}
}

func TestGatherStops(t *testing.T) {
	reqs := make(chan int, 1)
	stop := make(chan struct{})
	close(stop)
	batch, ok := Gather(reqs, stop, []int{1, 2}, 4)
	if ok || len(batch) != 0 {
		t.Fatalf("after stop: %v, %v; want [], false", batch, ok)
	}
}

// stoppedTimer is a timer as Linger wants it: stopped, nothing to drain.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// lingerReturns runs Linger and fails the test if it has not returned
// within a minute (the cases here return at once, or after a millisecond).
func lingerReturns[T any](t *testing.T, reqs <-chan T, stop <-chan struct{}, timer *time.Timer, d time.Duration, batch []T, max int) []T {
	t.Helper()
	done := make(chan []T, 1)
	go func() { done <- Linger(reqs, stop, timer, d, batch, max) }()
	select {
	case b := <-done:
		return b
	case <-time.After(time.Minute):
		t.Fatalf("Linger(d=%v, %d requests, max %d) has not returned after a minute", d, len(batch), max)
		return nil
	}
}

func TestLingerTakesWhatArrivesUntilFull(t *testing.T) {
	reqs := make(chan int)
	stop := make(chan struct{})
	go func() {
		for i := 2; i <= 3; i++ {
			select {
			case reqs <- i: // unbuffered: each send waits for Linger to take it
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)
	// An hour to wait: Linger can only return because the batch is full.
	batch := lingerReturns(t, reqs, stop, stoppedTimer(), time.Hour, []int{1}, 3)
	if !slices.Equal(batch, []int{1, 2, 3}) {
		t.Fatalf("batch = %v; want [1 2 3]", batch)
	}
}

func TestLingerTakesWhatIsWaiting(t *testing.T) {
	reqs := make(chan int, 2)
	reqs <- 2
	reqs <- 3
	batch := lingerReturns(t, reqs, make(chan struct{}), stoppedTimer(), time.Hour, []int{1}, 2)
	if !slices.Equal(batch, []int{1, 2}) || len(reqs) != 1 {
		t.Fatalf("batch = %v, %d left waiting; want [1 2], 1 (no more than max)", batch, len(reqs))
	}
}

func TestLingerReturnsWhenTheWaitIsOver(t *testing.T) {
	reqs := make(chan int)
	timer := stoppedTimer()
	for round := range 2 { // the timer is left reusable
		batch := lingerReturns(t, reqs, make(chan struct{}), timer, time.Millisecond, []int{1}, 8)
		if !slices.Equal(batch, []int{1}) {
			t.Fatalf("round %d: batch = %v; want [1]", round, batch)
		}
	}
}

func TestLingerStops(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	batch := lingerReturns(t, make(chan int), stop, stoppedTimer(), time.Hour, []int{1}, 8)
	if !slices.Equal(batch, []int{1}) {
		t.Fatalf("batch = %v; want [1], the requests taken kept", batch)
	}
}

func TestLingerWithoutAWaitOrRoom(t *testing.T) {
	reqs := make(chan int, 1)
	reqs <- 9
	if batch := lingerReturns(t, reqs, make(chan struct{}), stoppedTimer(), 0, []int{1}, 8); !slices.Equal(batch, []int{1}) {
		t.Fatalf("no wait: batch = %v; want [1]", batch)
	}
	if batch := lingerReturns(t, reqs, make(chan struct{}), stoppedTimer(), time.Hour, []int{1, 2}, 2); !slices.Equal(batch, []int{1, 2}) {
		t.Fatalf("full: batch = %v; want [1 2]", batch)
	}
}
