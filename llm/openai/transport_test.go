package openai

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentCallsReuseConnections streams rounds of concurrent calls
// and counts the TCP connections the server accepts. With the default
// transport (two idle connections per host) every round after the first
// dials nearly all of its calls anew; with the provider's transport a round
// reuses the connections the previous one left idle.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	const inFlight, rounds = 20, 5
	var (
		dials   atomic.Int32
		mu      sync.Mutex
		waiting int
		release = make(chan struct{})
	)
	reply := sse(textChunk("hello"), chunk(`{}`, "stop"), usageChunk)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold each call until the whole round is in flight, so that the
		// round needs inFlight connections at once.
		mu.Lock()
		waiting++
		last := waiting == inFlight
		if last {
			waiting = 0
			close(release)
			release = make(chan struct{})
		}
		ch := release
		mu.Unlock()
		if !last {
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			}
		}
		reply(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := New(WithBaseURL(srv.URL+"/v1"), WithAPIKey("sk-test"), WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, inFlight)
		for range inFlight {
			wg.Go(func() {
				if _, _, err := collect(t, ctx, p, request()); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	// One round's connections, and slack for a connection that had not
	// yet gone back to the pool when the next round began.
	if n := dials.Load(); n > inFlight+inFlight/2 {
		t.Fatalf("%d calls in rounds of %d dialled %d connections: want about %d, reused", inFlight*rounds, inFlight, n, inFlight)
	}
}
