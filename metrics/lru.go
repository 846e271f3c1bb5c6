package metrics

import (
	"container/list"
	"iter"
)

// lru is a map bounded by its number of entries: beyond max, the least
// recently used entry goes first, through evict. What the collector and the
// tracer keep per chat (and per model call in progress) lives in one, so
// that their memory is bounded by count however many chats finish or pause
// — an idle timeout alone let 10,000 finished chats hold ~48 MB for half an
// hour. It is not safe for concurrent use: its owner guards it.
type lru[V any] struct {
	max   int
	ll    list.List // of *lruEntry[V]; front: most recently used
	m     map[string]*list.Element
	evict func(key string, v V) // called for each entry put out by the cap; may be nil
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](max int, evict func(string, V)) *lru[V] {
	return &lru[V]{max: max, m: map[string]*list.Element{}, evict: evict}
}

// get returns key's value and marks it used.
func (c *lru[V]) get(key string) (V, bool) {
	el, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.MoveToFront(el)
	return el.Value.(*lruEntry[V]).val, true
}

// peek returns key's value without marking it used.
func (c *lru[V]) peek(key string) (V, bool) {
	el, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	return el.Value.(*lruEntry[V]).val, true
}

// put sets key's value, marks it used, and puts out the least recently
// used entries beyond max.
func (c *lru[V]) put(key string, v V) {
	if el, ok := c.m[key]; ok {
		el.Value.(*lruEntry[V]).val = v
		c.ll.MoveToFront(el)
		return
	}
	c.m[key] = c.ll.PushFront(&lruEntry[V]{key: key, val: v})
	for c.max > 0 && len(c.m) > c.max {
		old := c.ll.Back()
		e := old.Value.(*lruEntry[V])
		c.ll.Remove(old)
		delete(c.m, e.key)
		if c.evict != nil {
			c.evict(e.key, e.val)
		}
	}
}

// delete removes key (evict is not called).
func (c *lru[V]) delete(key string) {
	if el, ok := c.m[key]; ok {
		c.ll.Remove(el)
		delete(c.m, key)
	}
}

// len returns the number of entries.
func (c *lru[V]) len() int { return len(c.m) }

// all yields every entry, most recently used first. The loop may delete
// the entry it is given, and no other.
func (c *lru[V]) all() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for el := c.ll.Front(); el != nil; {
			next := el.Next()
			e := el.Value.(*lruEntry[V])
			if !yield(e.key, e.val) {
				return
			}
			el = next
		}
	}
}
