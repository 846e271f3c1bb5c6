package openai

import (
	"bytes"
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

// wrappingTransport returns a transport whose connections wrap wraps.
func wrappingTransport(t *testing.T, wrap func(net.Conn) net.Conn) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// doneSpy is a client connection that reports when a read brings [DONE].
type doneSpy struct {
	net.Conn
	done chan<- struct{}
}

func (c *doneSpy) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if bytes.Contains(p[:n], []byte("[DONE]")) {
		select {
		case c.done <- struct{}{}:
		default:
		}
	}
	return n, err
}

// TestSequentialCallsReuseTheirConnection: the server ends each body only
// once the client has read its [DONE] (the end of a chunked body often
// comes in a packet of its own). A stream that closed the body at [DONE],
// before its end, cost the connection, and each call dialled anew; one
// that reads to the end keeps its connection. (A few dials are allowed:
// net/http drops a connection whose request it has not seen written within
// 50 ms, which a loaded machine can make happen.)
func TestSequentialCallsReuseTheirConnection(t *testing.T) {
	const calls, maxDials = 10, 3
	var dials atomic.Int32
	sawDone := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sse(textChunk("hello"), chunk(`{}`, "stop"), usageChunk)(w, r)
		w.(http.Flusher).Flush()
		select { // return, ending the body, once the client has read [DONE]
		case <-sawDone:
		case <-r.Context().Done():
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := wrappingTransport(t, func(c net.Conn) net.Conn { return &doneSpy{Conn: c, done: sawDone} })
	p := New(WithBaseURL(srv.URL+"/v1"), WithAPIKey("sk-test"), WithHTTPClient(&http.Client{Transport: tr}),
		WithLogger(slog.New(slog.DiscardHandler)))
	for i := range calls {
		_, acc, err := collect(t, t.Context(), p, request())
		if err != nil || acc.Text() != "hello" {
			t.Fatalf("call %d: text %q, err %v", i, acc.Text(), err)
		}
	}
	if n := dials.Load(); n > maxDials {
		t.Fatalf("%d calls one after another dialled %d connections, want at most %d", calls, n, maxDials)
	}
}

// TestStreamOpenAfterDoneEnds: a server that keeps the stream open after
// [DONE] does not hold the call: the reply is whole, and the call ends
// after drainWait, long before the context's deadline (no stall timeout
// would end it either).
func TestStreamOpenAfterDoneEnds(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		sse(textChunk("whole"), chunk(`{}`, "stop"))(w, r)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, acc, err := collect(t, ctx, f.provider(WithStallTimeouts(-1, -1)), request())
	if err != nil || acc.Text() != "whole" || f.calls.Load() != 1 {
		t.Fatalf("err %v, text %q, calls %d", err, acc.Text(), f.calls.Load())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the call took %v: it waited for the stream's end, not drainWait (%v)", d, drainWait)
	}
}

// TestDrainOnlyOverHTTP1: a reply over HTTP/1.1 is read to its end after
// [DONE]; one over HTTP/2, where closing the body resets its stream only,
// is not.
func TestDrainOnlyOverHTTP1(t *testing.T) {
	reply := sse(textChunk("hi"), chunk(`{}`, "stop"))
	h1 := httptest.NewServer(reply)
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(reply)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	for _, tc := range []struct {
		srv   *httptest.Server
		proto int
		drain bool
	}{{h1, 1, true}, {h2, 2, false}} {
		p := New(WithBaseURL(tc.srv.URL+"/v1"), WithAPIKey("sk-test"), WithHTTPClient(tc.srv.Client()),
			WithLogger(slog.New(slog.DiscardHandler)))
		s := p.newStream(t.Context(), []byte(`{"model":"m","stream":true}`), nil)
		if s.err != nil {
			t.Fatalf("HTTP/%d: %v", tc.proto, s.err)
		}
		if s.drain != tc.drain {
			t.Errorf("HTTP/%d: drain %v, want %v", tc.proto, s.drain, tc.drain)
		}
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Errorf("HTTP/%d: %v", tc.proto, err)
		}
	}
}

// writeCounter is a client connection that counts its writes.
type writeCounter struct {
	net.Conn
	writes *atomic.Int32
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestRequestIsOneWrite: a model call's request — its headers and its
// body — leaves in one write, not the headers first and the body after.
func TestRequestIsOneWrite(t *testing.T) {
	f := newFake(t, sse(textChunk("hi"), chunk(`{}`, "stop"), usageChunk))
	var writes atomic.Int32
	tr := wrappingTransport(t, func(c net.Conn) net.Conn { return &writeCounter{Conn: c, writes: &writes} })
	p := f.provider(WithHTTPClient(&http.Client{Transport: tr}))
	if _, acc, err := collect(t, t.Context(), p, request()); err != nil || acc.Text() != "hi" {
		t.Fatalf("text %q, err %v", acc.Text(), err)
	}
	if n := f.calls.Load(); n != 1 || len(f.body(t, 0)) == 0 {
		t.Fatalf("the server got %d requests, want one with a body", n)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("the request took %d writes, want 1", n)
	}
}
