package server

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// eventStream writes a text/event-stream response (the SSE stream and the
// AG-UI and Chat Completions streams): each write is flushed to the client
// at once, except between hold and release, which coalesce the events of
// one delivery — frames that were all waiting already — into one flush.
// It is not safe for concurrent use: a stream with a heartbeat serializes
// its writes (and its hold and release).
type eventStream struct {
	w http.ResponseWriter
	writeDeadline
	held    bool
	pending bool // written while held, not yet flushed
}

// writeDeadline keeps a response's write deadline timeout ahead of its
// writes, give or take timeout/deadlineSlack: it is moved to now+timeout
// once that much has passed since it was last set, not on every write, as
// setting a socket deadline re-arms a runtime timer, which cost more than
// a small event's write.
type writeDeadline struct {
	rc      *http.ResponseController
	timeout time.Duration
	armed   time.Time        // when the deadline was last set
	now     func() time.Time // time.Now; a test's clock
}

// deadlineSlack is how finely an event stream's write deadline follows
// the clock: a write has between (1-1/deadlineSlack)·timeout and timeout
// to reach the client.
const deadlineSlack = 16

// newEventStream answers the request with a text/event-stream — its
// headers, flushed by the first write — and returns its writer: each write
// has timeout (at least 15/16 of it, see writeDeadline) to reach the client and is
// flushed at once unless held.
func newEventStream(w http.ResponseWriter, timeout time.Duration) *eventStream {
	rc := http.NewResponseController(w)
	// The server's ReadTimeout bounds reading requests; a stream has nothing
	// more to read, and an expired read deadline would end it.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, writeDeadline: writeDeadline{rc: rc, timeout: timeout, now: time.Now}}
}

// arm keeps the write deadline at least timeout·(1-1/deadlineSlack) ahead.
func (d *writeDeadline) arm() {
	now := d.now()
	if d.armed.IsZero() || now.Sub(d.armed) >= d.timeout/deadlineSlack {
		_ = d.rc.SetWriteDeadline(now.Add(d.timeout))
		d.armed = now
	}
}

// write writes b (nothing, for an empty b) and flushes, unless the stream
// is held: then the flush waits for release.
func (e *eventStream) write(b []byte) error {
	// Armed before the write too: a write larger than the response's
	// buffer reaches the socket without a flush.
	e.arm()
	if len(b) > 0 {
		if _, err := e.w.Write(b); err != nil {
			return err
		}
	}
	if e.held {
		e.pending = true
		return nil
	}
	return e.rc.Flush()
}

// hold makes the writes until release wait for its flush.
func (e *eventStream) hold() { e.held = true }

// release flushes what was written since hold, if anything was.
func (e *eventStream) release() error {
	e.held = false
	if !e.pending {
		return nil
	}
	e.pending = false
	e.arm()
	return e.rc.Flush()
}

// lockedEventStream is an eventStream shared by a stream's writer and its
// heartbeat. After a failed write it writes nothing more and returns that
// error.
type lockedEventStream struct {
	mu  sync.Mutex
	es  *eventStream
	err error
}

// write writes b (eventStream.write).
func (l *lockedEventStream) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked(b)
}

// writeLocked is write with mu held (for a writer that builds b under it).
func (l *lockedEventStream) writeLocked(b []byte) error {
	if l.err == nil {
		l.err = l.es.write(b)
	}
	return l.err
}

// heartbeats writes comment (an SSE comment line) every interval until ctx
// ends, so that proxies keep a stream open through a long wait; it returns
// the first write's error.
func (l *lockedEventStream) heartbeats(ctx context.Context, interval time.Duration, comment string) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := l.write([]byte(comment)); err != nil {
				return err
			}
		}
	}
}

// hold coalesces the writes until release into one flush.
func (l *lockedEventStream) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.es.hold()
}

// release flushes the writes since hold.
func (l *lockedEventStream) release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.es.release(); l.err == nil {
		l.err = err
	}
	return l.err
}
