package bus

// window remembers the event ids the bus has accepted, to drop a second
// publish of the same id. It keeps two generations of ids: new ids go into
// the current one; when it holds count ids, or is age old, it becomes the
// previous generation and the old previous one is forgotten whole.
//
// So an id is remembered for at least count further ids and at least age,
// and at most twice either; memory is bounded by 2×count ids. Forgetting a
// generation at once, rather than id by id, keeps lookups at a constant cost
// (deleting keys one by one from a large Go map degrades its probes).
//
// Past the window a repeated id is accepted and handled again: the bus's
// de-duplication protects against retries and replays that happen close
// together (a client resending, a redelivery). Exactly-once effects over
// longer spans are the store's effect ledger's job, keyed by turn and tool
// call, not the bus's.
//
// An id is remembered per chat: two chats' events with the same id are
// different events. Event ids may come from clients (POST /api/events), and
// chats belong to one tenant each, so one tenant's ids never drop
// another's events.
//
// window is not safe for concurrent use; the bus guards it with its mutex.
type window struct {
	count    int
	age      int64 // nanoseconds
	cur      map[seenKey]struct{}
	prev     map[seenKey]struct{}
	curStart int64 // when cur became current
	prevEnd  int64 // when prev stopped being current
}

func newWindow(count int, age int64) *window {
	return &window{
		count: count,
		age:   age,
		cur:   make(map[seenKey]struct{}, min(count, 1<<16)),
		prev:  make(map[seenKey]struct{}, min(count, 1<<16)),
	}
}

// seenKey is an event id within its chat ("" for chat-less events).
type seenKey struct{ chat, id string }

// contains reports whether chat's event id was seen within the window as of
// now.
func (w *window) contains(chat, id string, now int64) bool {
	if w.count == 0 {
		return false
	}
	w.rotate(now)
	k := seenKey{chat, id}
	if _, ok := w.cur[k]; ok {
		return true
	}
	_, ok := w.prev[k]
	return ok
}

// add records chat's event id as seen at now.
func (w *window) add(chat, id string, now int64) {
	if w.count == 0 {
		return
	}
	if len(w.cur) >= w.count {
		w.shift(now)
	}
	w.cur[seenKey{chat, id}] = struct{}{}
}

// rotate forgets generations that are too old.
func (w *window) rotate(now int64) {
	if len(w.prev) > 0 && now-w.prevEnd >= w.age {
		// Everything in prev was added before prevEnd, so at least age ago:
		// and cur too, if it has been current for age.
		clear(w.prev)
	}
	if len(w.cur) > 0 && now-w.curStart >= 2*w.age {
		clear(w.cur)
		w.curStart = now
	} else if len(w.cur) > 0 && now-w.curStart >= w.age {
		w.shift(now)
	}
}

// shift makes cur the previous generation and starts an empty one.
func (w *window) shift(now int64) {
	clear(w.prev) // keeps its capacity: no allocation at steady state
	w.prev, w.cur = w.cur, w.prev
	w.prevEnd = now
	w.curStart = now
}

func (w *window) len() int { return len(w.cur) + len(w.prev) }
