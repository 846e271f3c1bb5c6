package server

import (
	"encoding/json"
	"sync"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/workflow"
)

// A stream's queue. The hub never waits for a stream (invariant 9), so a
// stream that writes slower than the chat produces falls behind. A burst of
// token deltas — thousands for one long reply — is the usual cause, and
// cutting a healthy reader off for it (it then replays the recorded events
// but has lost the deltas) is the wrong answer: deltas are transient and
// only their concatenation matters (invariant 7). So while a stream lags,
// the hub merges each delta into the previous one of the same message that
// is still waiting in its queue, and the stream gets fewer, larger deltas
// once it catches up. Recorded events are never merged or dropped: a stream
// is cut off (4000, replay) only when Config.QueueLen recorded events wait
// in its queue, or when transient events that cannot be merged (starts and
// ends of messages) pile up to mergeQueueFactor times that.

// mergeQueueFactor bounds a queue's frames in all, as a multiple of
// Config.QueueLen: transient frames beyond it cut the stream off too.
const mergeQueueFactor = 4

// maxMergedDelta is the text one merged delta holds at most; a longer run
// of deltas starts a new merged frame, so no single write grows without
// bound.
const maxMergedDelta = 256 << 10

// mergeLag is how many frames must wait in a stream's queue before the hub
// merges deltas for it: a stream that keeps up gets every delta as it came.
func mergeLag(queueLen int) int { return max(1, queueLen/8) }

// isDeltaType reports whether events of typ carry a "delta" that the
// client concatenates: text, reasoning, and a tool call's arguments.
func isDeltaType(typ string) bool {
	return typ == baton.TypeStreamText || typ == baton.TypeStreamReasoning || typ == baton.TypeStreamToolCall
}

// delta is a stream delta taken apart for merging: its payload without the
// "delta" field (two deltas merge only if these are equal: the same message,
// agent, tool call index…) and the delta's text.
type delta struct {
	ev   *baton.Event
	rest []byte // the payload's other fields, re-encoded with sorted keys
	text string
}

// lazyDelta parses an event's delta once, for the first stream that needs
// it, within one dispatch.
type lazyDelta struct {
	ev     *baton.Event
	done   bool
	parsed *delta
}

func (l *lazyDelta) get() *delta {
	if !l.done {
		l.done = true
		l.parsed = parseDelta(l.ev)
	}
	return l.parsed
}

// parseDelta takes ev apart; nil if it is not a mergeable delta (not a
// delta type, or a payload of another shape), which is then queued as it is.
func parseDelta(ev *baton.Event) *delta {
	if !isDeltaType(ev.Type) {
		return nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(ev.Payload, &fields) != nil {
		return nil
	}
	var text string
	if raw, ok := fields["delta"]; !ok || json.Unmarshal(raw, &text) != nil {
		return nil
	}
	delete(fields, "delta")
	rest, err := json.Marshal(fields)
	if err != nil {
		return nil
	}
	return &delta{ev: ev, rest: rest, text: text}
}

// merged is the content of a frame built for one stream out of consecutive
// deltas of one message. Its envelope is encoded when the stream takes it,
// by which time no more deltas can join it.
type merged struct {
	ev   baton.Event // the first delta: type, chat, agent and timestamp of the envelope
	wf   *workflow.Workflow
	rest []byte
	text []byte
	n    int // deltas merged
}

// accepts reports whether d continues m: same type and same fields but the
// delta, and room left.
func (m *merged) accepts(d *delta) bool {
	return m.ev.Type == d.ev.Type && string(m.rest) == string(d.rest) && len(m.text)+len(d.text) <= maxMergedDelta
}

// encode builds the merged delta's envelope.
func (m *merged) encode() []byte {
	p := make([]byte, 0, len(m.rest)+len(m.text)+16)
	p = append(p, m.rest[:len(m.rest)-1]...) // rest is a JSON object: drop its "}"
	if len(m.rest) > 2 {
		p = append(p, ',')
	}
	p = append(p, `"delta":`...)
	q, _ := json.Marshal(string(m.text)) // a string always marshals
	p = append(p, q...)
	p = append(p, '}')
	ev := m.ev
	ev.Payload = p
	b, _ := appendEnvelope(nil, m.wf, &ev) // visible: its first delta was
	return b
}

// queue is a stream's frames waiting to be written, oldest first. The hub
// pushes under h.mu; the stream takes everything at once. A frame the
// stream has taken is its own: merging only ever touches a frame still in
// the queue.
type queue struct {
	mu       sync.Mutex
	frames   []*frame
	recorded int           // recorded frames in frames
	ready    chan struct{} // one token: frames became non-empty
	limit    int           // recorded frames held at most (Config.QueueLen)
	lag      int           // frames waiting from which deltas are merged
	merges   int64         // deltas merged into an earlier one (for tests and stats)
}

func newQueue(limit int) queue {
	return queue{limit: limit, lag: mergeLag(limit), ready: make(chan struct{}, 1)}
}

// push queues f (whose event is d's, when it is a delta), merging a delta
// into the last queued frame while the stream lags. It reports false when
// the stream must be cut off: its queue is full of recorded events, or of
// transient ones that could not be merged. The caller holds a reference to
// f for this stream, which push releases when f is not queued as it is.
func (q *queue) push(f *frame, d *lazyDelta, wf *workflow.Workflow) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.frames)
	switch {
	case f.seq > 0:
		if q.recorded >= q.limit {
			return false
		}
		q.recorded++
	case n >= q.limit*mergeQueueFactor:
		return false
	case n >= q.lag && isDeltaType(f.typ):
		dl := d.get()
		if dl == nil {
			break
		}
		if m := q.frames[n-1].merge; m != nil && m.accepts(dl) {
			m.text = append(m.text, dl.text...)
			m.n++
			q.merges++
			f.release()
			return true
		}
		// The first delta of a merge: a frame of this stream's own, which
		// later deltas extend.
		m := &merged{ev: *dl.ev, wf: wf, rest: dl.rest, text: []byte(dl.text), n: 1}
		own := &frame{typ: f.typ, merge: m}
		f.release() // after its type is copied: the last release recycles it
		f = own
	}
	q.frames = append(q.frames, f)
	if n == 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return true
}

// take moves every waiting frame to dst and returns it. A merged frame is
// encoded by prepare, after take, when no delta can join it any more.
func (q *queue) take(dst []*frame) []*frame {
	q.mu.Lock()
	defer q.mu.Unlock()
	dst = append(dst, q.frames...)
	clear(q.frames)
	q.frames = q.frames[:0]
	q.recorded = 0
	return dst
}

// waiting returns the number of frames in the queue.
func (q *queue) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.frames)
}

// mergeCount returns the deltas merged into earlier ones so far.
func (q *queue) mergeCount() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.merges
}

// prepare encodes a merged frame's envelope; other frames are ready as
// they are. It is called by the stream that took f.
func (f *frame) prepare() *frame {
	if f.merge != nil && f.data == nil {
		f.data = f.merge.encode()
	}
	return f
}
