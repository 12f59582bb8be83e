package classify

import (
	"hash/maphash"
	"sync"
)

// cache is a bounded LRU of decisions keyed by a string (the exact query
// text, or a shape key: shape.go), split into shards by a hash of the key
// so that concurrent sessions rarely meet on one mutex. A hit takes one
// shard lock, moves one entry and copies the Decision header: no
// allocation.
type cache struct {
	seed   maphash.Seed
	shards []cacheShard
	mask   uint64
}

type cacheShard struct {
	mu       sync.Mutex
	m        map[string]*cacheEntry
	root     cacheEntry // sentinel: root.next is the most recent
	capacity int        // entries
	bytes    int        // held by entries (their cost)
	maxBytes int
	hits     uint64
	_        [64]byte // keep shards' hot fields on separate cache lines
}

type cacheEntry struct {
	key        string
	d          Decision
	cost       int
	mark       uint64 // shape cache: hash of the last text served (see getMarked)
	prev, next *cacheEntry
}

// entryCost estimates the memory an entry holds: its text, the entry and
// map slot, and the decision's statements.
func entryCost(key string, d *Decision) int {
	return len(key) + 160 + 200*len(d.Statements)
}

// maxShards bounds the shard count; a small cache gets fewer shards so that
// each keeps a useful number of entries.
const (
	maxShards      = 16
	minShardLength = 64
)

// newCache returns a cache of at most size entries costing at most
// maxBytes (see entryCost) in all.
func newCache(size, maxBytes int) *cache {
	n := 1
	for n < maxShards && size/(n*2) >= minShardLength {
		n *= 2
	}
	c := &cache{seed: maphash.MakeSeed(), shards: make([]cacheShard, n), mask: uint64(n - 1)}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[string]*cacheEntry)
		s.capacity = (size + n - 1) / n
		s.maxBytes = (maxBytes + n - 1) / n
		s.root.next, s.root.prev = &s.root, &s.root
	}
	return c
}

func (c *cache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

// get returns the cached decision for key, counting a hit.
func (c *cache) get(key string) (Decision, bool) {
	d, ok, _ := c.getMarked(key, 0)
	return d, ok
}

// getMarked is get that also swaps the entry's mark for mark and reports
// whether they were equal. The shape cache marks an entry with a hash of
// the text it last answered, so that a text seen twice in a row can be
// promoted to the exact-text cache.
func (c *cache) getMarked(key string, mark uint64) (d Decision, ok, same bool) {
	s := c.shard(key)
	s.mu.Lock()
	e, ok := s.m[key]
	if !ok {
		s.mu.Unlock()
		return Decision{}, false, false
	}
	s.hits++
	s.unlink(e)
	s.pushFront(e)
	d = e.d
	same = e.mark == mark
	e.mark = mark
	s.mu.Unlock()
	return d, true, same
}

// put stores d under key (which must not alias a reused buffer), evicting
// the least recently used entries of the shard while it is over its entry
// count or its bytes. An entry costing more than a shard holds is dropped.
func (c *cache) put(key string, d Decision) {
	cost := entryCost(key, &d)
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cost > s.maxBytes {
		return
	}
	if e, ok := s.m[key]; ok { // a concurrent miss of the same text got here first
		s.unlink(e)
		s.pushFront(e)
		return
	}
	for len(s.m) > 0 && (len(s.m) >= s.capacity || s.bytes+cost > s.maxBytes) {
		old := s.root.prev
		s.unlink(old)
		delete(s.m, old.key)
		s.bytes -= old.cost
	}
	e := &cacheEntry{key: key, d: d, cost: cost}
	s.m[key] = e
	s.bytes += cost
	s.pushFront(e)
}

func (c *cache) hits() (hits uint64) {
	if c == nil {
		return 0
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		hits += s.hits
		s.mu.Unlock()
	}
	return hits
}

// size reports the entries held and their cost.
func (c *cache) size() (entries, bytes int) {
	if c == nil {
		return 0, 0
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		entries += len(s.m)
		bytes += s.bytes
		s.mu.Unlock()
	}
	return entries, bytes
}

func (s *cacheShard) unlink(e *cacheEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

func (s *cacheShard) pushFront(e *cacheEntry) {
	e.prev = &s.root
	e.next = s.root.next
	s.root.next.prev = e
	s.root.next = e
}
