package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// batchWriteLimit is how many bytes a batchConn gathers before it writes
// them anyway: a long replay goes out in pieces of about this size rather
// than held whole in memory.
const batchWriteLimit = 32 << 10

// batchBufs recycles the buffers batchConns gather in: a connection holds
// one only while it gathers, so that an idle WebSocket holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// batchConn is a WebSocket's network connection, with its writes gathered
// while the stream's writer sends a batch of envelopes it already holds
// (gather … flush): coder/websocket flushes every message to the network
// as it is written, so a batch of n envelopes would cost n write system
// calls, and on a streamed reply these were the largest part of the
// WebSocket's cost. Gathering changes when bytes leave, never which or in
// what order: every envelope in a batch was recorded (or is a transient
// delta) before it was queued, so none is sent before it is durable, and
// flush sends them before the writer waits for anything else.
//
// Writes from other goroutines (the library's pong and close replies from
// the reader, a ping) are gathered too while a batch is open, in the order
// they come; the mutex keeps every write whole and in order.
type batchConn struct {
	net.Conn
	mu  sync.Mutex
	buf *[]byte // non-nil while gathering
	// writes, if set, counts the writes to the network (Server.wsWrites,
	// which the tests read).
	writes *atomic.Int64
}

// Write writes p now, or adds it to the batch being gathered (writing the
// batch once it reaches batchWriteLimit).
func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		c.count()
		return c.Conn.Write(p)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= batchWriteLimit {
		if err := c.writeLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Close writes what was gathered, then closes the connection. The library
// closes the connection right after its reply to a client's close frame,
// which the reader writes while the writer may be gathering a replay (a
// store read between two pages): without this the reply would be dropped,
// and the client's clean close end in an EOF. It never waits for the
// mutex: a flush blocked on a client that reads nothing holds it, and this
// Close (the stalled timer's) is what ends that write.
func (c *batchConn) Close() error {
	if c.mu.TryLock() {
		if c.buf != nil && len(*c.buf) > 0 {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_ = c.writeLocked()
		}
		c.mu.Unlock()
	}
	return c.Conn.Close()
}

// gather starts gathering writes until flush.
func (c *batchConn) gather() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		c.buf = batchBufs.Get().(*[]byte)
	}
}

// flush writes what was gathered, in one write, and stops gathering. It
// blocks as a write does: the caller bounds it (a WebSocket's stalled
// timer closes the connection, which ends the write).
func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		return nil
	}
	err := c.writeLocked()
	if cap(*c.buf) <= 4*batchWriteLimit {
		batchBufs.Put(c.buf)
	}
	c.buf = nil
	return err
}

// writeLocked writes the gathered bytes and empties the buffer; c.mu is
// held.
func (c *batchConn) writeLocked() error {
	b := *c.buf
	*c.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	c.count()
	if _, err := c.Conn.Write(b); err != nil {
		return fmt.Errorf("websocket: write %d bytes: %w", len(b), err)
	}
	return nil
}

func (c *batchConn) count() {
	if c.writes != nil {
		c.writes.Add(1)
	}
}

// batchHijacker hands websocket.Accept the request's connection wrapped in
// a batchConn.
type batchHijacker struct {
	http.ResponseWriter
	conn   *batchConn    // set by Hijack
	writes *atomic.Int64 // the batchConn's write count
}

// Hijack takes over the connection (through any wrapper of the
// ResponseWriter, as http.ResponseController does) and returns it as a
// batchConn, with a buffered writer that writes to it.
func (h *batchHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// net/http has written the handshake's response by now; flush anything
	// left all the same, as Reset drops it.
	if err := brw.Writer.Flush(); err != nil {
		_ = nc.Close()
		return nil, nil, fmt.Errorf("websocket: flush the handshake: %w", err)
	}
	h.conn = &batchConn{Conn: nc, writes: h.writes}
	brw.Writer.Reset(h.conn)
	return h.conn, brw, nil
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (h *batchHijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }
