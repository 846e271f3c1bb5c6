package engine

import (
	"errors"
	"sync"

	"github.com/batonhq/baton"
)

// inboxCount lets a run skip reading a chat's inbox at an input point when
// nothing can be waiting there, or when only the message in hand can be.
// Without leases every input of a chat is kept through this engine
// (Submit, RespondUI, Start, a user_query published straight on the bus),
// so the engine counts, per chat, the inputs kept since a run of the chat
// last read the inbox; a run whose state last found the inbox empty
// (state.inboxClear) and sees no count reads nothing. A count is added
// after the store's write returns (even a failed one: a write whose outcome
// is unknown may have kept the input), so a read that misses an input it
// cannot yet see leaves its count behind, and the next input point reads
// again.
//
// With the count it keeps the id of the one input kept since the last read
// when that input was new to the inbox (so waiting), and no other was kept:
// then, the inbox clear before it, the inbox holds that input and nothing
// else (run.onlyInHand). A second input, a write that failed or found the
// id kept before, or a read that leaves counts behind forgets the id.
//
// An entry exists while its count is above zero; a chat whose inputs are
// never read again (deleted with a message waiting) keeps a few bytes.
type inboxCount struct {
	mu sync.Mutex
	n  map[string]keptSince
}

// keptSince is what was kept for a chat since a run of it last read its
// inbox.
type keptSince struct {
	n    int64
	sole string // the id of the one input kept, new when kept; "" when unknown
}

// kept counts an input kept for chatID: inputID, new to the inbox (waiting)
// when fresh.
func (c *inboxCount) kept(chatID, inputID string, fresh bool) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]keptSince{}
	}
	k := c.n[chatID]
	k.n++
	k.sole = ""
	if k.n == 1 && fresh {
		k.sole = inputID
	}
	c.n[chatID] = k
	c.mu.Unlock()
}

// since returns how many inputs were kept for chatID and not yet read, and
// the one input's id when that is all (see inboxCount).
func (c *inboxCount) since(chatID string) (n int64, sole string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.n[chatID]
	return k.n, k.sole
}

// count returns the inputs kept for chatID and not yet read.
func (c *inboxCount) count(chatID string) int64 {
	n, _ := c.since(chatID)
	return n
}

// read takes off n, a count taken before a read of the inbox that saw
// every input it counts. What is left was kept during the read, and which
// inputs those are is not known: the sole id is forgotten.
func (c *inboxCount) read(chatID string, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if left := c.n[chatID].n - n; left > 0 {
		c.n[chatID] = keptSince{n: left}
	} else {
		delete(c.n, chatID)
	}
}

// inputKept counts an input kept for chat id, whose store write returned
// err (added: the input was new to the inbox), without leases (with them
// the count is never read, and another instance's runs take the input). A
// write refused for what it asked (no such chat in scope, an invalid input)
// kept nothing; any other error may have kept it.
func (e *Engine) inputKept(chatID, inputID string, added bool, err error) {
	if e.instance != "" || errors.Is(err, baton.ErrNotFound) || errors.Is(err, baton.ErrInvalid) {
		return
	}
	e.inbox.kept(chatID, inputID, added && err == nil)
}
