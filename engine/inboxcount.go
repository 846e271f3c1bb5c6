package engine

import (
	"errors"
	"sync"

	"github.com/batonhq/baton"
)

// inboxCount lets a run skip reading a chat's inbox at an input point when
// nothing can be waiting there. Without leases every input of a chat is
// kept through this engine (Submit, RespondUI, Start, a user_query
// published straight on the bus), so the engine counts, per chat, the
// inputs kept since a run of the chat last read the inbox; a run whose
// state last found the inbox empty (state.inboxClear) and sees no count
// reads nothing. A count is added after the store's write returns (even a
// failed one: a write whose outcome is unknown may have kept the input), so
// a read that misses an input it cannot yet see leaves its count behind,
// and the next input point reads again.
//
// An entry exists while its count is above zero; a chat whose inputs are
// never read again (deleted with a message waiting) keeps a few bytes.
type inboxCount struct {
	mu sync.Mutex
	n  map[string]int64
}

// kept counts an input kept for chatID.
func (c *inboxCount) kept(chatID string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[chatID]++
	c.mu.Unlock()
}

// count returns the inputs kept for chatID and not yet read.
func (c *inboxCount) count(chatID string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[chatID]
}

// read takes off n, a count taken before a read of the inbox that saw
// every input it counts.
func (c *inboxCount) read(chatID string, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if left := c.n[chatID] - n; left > 0 {
		c.n[chatID] = left
	} else {
		delete(c.n, chatID)
	}
}

// inputKept counts an input kept for chat id, whose store write returned
// err, without leases (with them the count is never read, and another
// instance's runs take the input). A write refused for what it asked (no
// such chat in scope, an invalid input) kept nothing; any other error may
// have kept it.
func (e *Engine) inputKept(id string, err error) {
	if e.instance != "" || errors.Is(err, baton.ErrNotFound) || errors.Is(err, baton.ErrInvalid) {
		return
	}
	e.inbox.kept(id)
}
