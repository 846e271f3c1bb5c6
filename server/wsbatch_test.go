package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// recordingConn is a net.Conn that records every Write it is given.
type recordingConn struct {
	net.Conn // nil: only Write is called
	mu       sync.Mutex
	writes   [][]byte
	fail     error
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *recordingConn) got() (n int, all []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes), bytes.Join(c.writes, nil)
}

// TestBatchConn_GathersWritesInOrder: outside a batch every write goes out
// at once; inside one, nothing goes out until flush, which sends every
// byte in one write, in the order written; a batch past batchWriteLimit
// goes out in pieces of about that size, still in order.
func TestBatchConn_GathersWritesInOrder(t *testing.T) {
	rc := &recordingConn{}
	var count atomic.Int64
	c := &batchConn{Conn: rc, writes: &count}

	if _, err := c.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if n, all := rc.got(); n != 1 || string(all) != "one" {
		t.Fatalf("outside a batch: %d writes %q, want 1 \"one\"", n, all)
	}

	c.gather()
	for _, s := range []string{"a", "bb", "ccc"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("gathered write %q: %d, %v", s, n, err)
		}
	}
	if n, _ := rc.got(); n != 1 {
		t.Fatalf("%d writes before flush, want none beyond the first", n-1)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if n, all := rc.got(); n != 2 || string(all) != "oneabbccc" {
		t.Fatalf("after flush: %d writes %q, want 2 \"oneabbccc\"", n, all)
	}
	if err := c.flush(); err != nil { // nothing gathered: nothing written
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("two")); err != nil { // the batch is over
		t.Fatal(err)
	}
	if n, _ := rc.got(); n != 3 {
		t.Fatalf("%d writes, want 3: an empty flush wrote, or a write after flush was gathered", n)
	}

	// A long batch: 100 pieces of 1 KiB.
	rc2 := &recordingConn{}
	c2 := &batchConn{Conn: rc2}
	var want []byte
	c2.gather()
	for i := range 100 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1024)
		want = append(want, p...)
		if _, err := c2.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c2.flush(); err != nil {
		t.Fatal(err)
	}
	n, all := rc2.got()
	if !bytes.Equal(all, want) {
		t.Fatal("a long batch went out reordered or incomplete")
	}
	if max := len(want)/batchWriteLimit + 1; n < 2 || n > max {
		t.Fatalf("a %d-byte batch went out in %d writes, want 2 to %d (pieces of batchWriteLimit)", len(want), n, max)
	}
	if got := count.Load(); got != 3 {
		t.Fatalf("write count %d, want 3", got)
	}
}

// TestBatchConn_FlushError: a failed write of the batch is flush's error,
// and the connection stops gathering.
func TestBatchConn_FlushError(t *testing.T) {
	boom := errors.New("boom")
	rc := &recordingConn{fail: boom}
	c := &batchConn{Conn: rc}
	c.gather()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("a gathered write failed: %v", err)
	}
	if err := c.flush(); !errors.Is(err, boom) {
		t.Fatalf("flush: %v, want %v", err, boom)
	}
	if c.buf != nil {
		t.Fatal("still gathering after a failed flush")
	}
	if _, err := c.Write([]byte("y")); !errors.Is(err, boom) {
		t.Fatalf("a write after the batch: %v, want it written (and failing)", err)
	}
}

// TestBatchConn_ConcurrentWritesStayWhole: writes from other goroutines
// during a batch (the library's pongs, a ping) are gathered whole, each in
// one piece, none lost.
func TestBatchConn_ConcurrentWritesStayWhole(t *testing.T) {
	rc := &recordingConn{}
	c := &batchConn{Conn: rc}
	c.gather()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				_, _ = c.Write([]byte(fmt.Sprintf("<%d:%02d:%s>", g, i, strings.Repeat("x", 300))))
			}
		})
	}
	wg.Wait()
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	_, all := rc.got()
	s := string(all)
	for g := range 4 {
		last := -1
		for i := range 50 {
			w := fmt.Sprintf("<%d:%02d:%s>", g, i, strings.Repeat("x", 300))
			at := strings.Index(s, w)
			if at < 0 {
				t.Fatalf("write %d of goroutine %d is missing or was split", i, g)
			}
			if at < last {
				t.Fatalf("goroutine %d's writes out of order at %d", g, i)
			}
			last = at
		}
	}
	if len(s) != 4*50*len(fmt.Sprintf("<0:00:%s>", strings.Repeat("x", 300))) {
		t.Fatalf("%d bytes went out, want every write once", len(s))
	}
}

// TestWS_EnvelopeStoredBeforeTheClientHasIt: persist before send
// (invariant 1) through the batched writer: a client reading a chat live,
// from its start to run_complete, finds each recorded envelope in the
// store the moment it receives it.
func TestWS_EnvelopeStoredBeforeTheClientHasIt(t *testing.T) {
	e := newEnv(t, withWorkflows(benchDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		id := e.start(t, "bench", nil)
		c := e.dial(ctx, t, id, 0, e.keys[scopeAda])
		recorded := 0
		for done := false; !done; {
			_, raw, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			v := decodeEnvelope(t, raw)
			done = v.Type == baton.TypeChatRunComplete
			s := v.seq()
			if s == 0 {
				continue
			}
			recorded++
			stored := false
			for ev, err := range baton.EventsAfter(ctx, e.store, scopeAda, id, s-1, 1) {
				if err != nil {
					t.Fatal(err)
				}
				stored = ev.Sequence == s
				break
			}
			if !stored {
				t.Fatalf("envelope %d (%s) reached the client before the store held it", s, v.Type)
			}
		}
		c.CloseNow()
		if recorded < 3 {
			t.Fatalf("%d recorded envelopes: the chat did not run", recorded)
		}
	}
}
