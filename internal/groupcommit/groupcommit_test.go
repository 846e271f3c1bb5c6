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
