package engine

import (
	"container/list"
	"sync"
)

// stateCache keeps the states of recently active chats, so that the next
// input of a chat folds only the events recorded since (usually none)
// instead of its whole history. The store stays the truth: every load reads
// the chat row, and a cached state is used only if it belongs to the same
// tenant and is not ahead of the store; events recorded meanwhile (by
// another instance, say) are fetched and applied. A run takes its chat's
// state out of the cache and puts it back when it ends cleanly; a run that
// fails leaves nothing behind, so the next load rebuilds from the store.
//
// The cache is bounded by entries (least recently used out first): a paused
// chat costs at most one entry, and nothing once it is evicted.
type stateCache struct {
	mu  sync.Mutex
	max int
	ll  *list.List // front: most recent; values are *state
	m   map[string]*list.Element
}

// DefaultStateCache is the number of chat states kept in memory.
const DefaultStateCache = 1024

func newStateCache(max int) *stateCache {
	return &stateCache{max: max, ll: list.New(), m: map[string]*list.Element{}}
}

// take removes and returns the cached state of a chat, or nil.
func (c *stateCache) take(chatID string) *state {
	if c == nil || c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[chatID]
	if !ok {
		return nil
	}
	c.ll.Remove(el)
	delete(c.m, chatID)
	return el.Value.(*state)
}

// put keeps a chat's state, evicting the least recently used beyond max.
func (c *stateCache) put(st *state) {
	if c == nil || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[st.chat.ID]; ok {
		c.ll.Remove(el)
	}
	c.m[st.chat.ID] = c.ll.PushFront(st)
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*state).chat.ID)
	}
}
