package classify

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestHotStatementParsedOnce(t *testing.T) {
	c := New(Options{})
	const n = 1000
	sql := "SELECT * FROM users WHERE id = $1"
	first := c.Classify(sql)
	for i := 1; i < n; i++ {
		if d := c.Classify(sql); !reflect.DeepEqual(d, first) {
			t.Fatalf("classification %d differs: %+v vs %+v", i, d, first)
		}
	}
	if st := c.Stats(); st.Misses != 1 || st.TextHits != n-1 || st.ShapeHits != 0 {
		t.Fatalf("Stats() = %+v; want %d text hits, 1 miss", st, n-1)
	}
}

func TestCacheHitDoesNotAllocate(t *testing.T) {
	c := New(Options{})
	sql := "/* pg-kinetic: replica */ SELECT f(a), count(*) FROM t GROUP BY 1; SET search_path = a"
	c.Classify(sql)
	if allocs := testing.AllocsPerRun(1000, func() { c.Classify(sql) }); allocs != 0 {
		t.Fatalf("cache hit allocates %.1f times", allocs)
	}
}

// The exact-text level alone: these texts differ only in constants, which
// the shape level would answer.
func exactOnly(o Options) *Classifier {
	o.ShapeCacheSize = -1
	return New(o)
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := exactOnly(Options{CacheSize: 3})
	q := func(i int) string { return fmt.Sprintf("SELECT %d", i) }
	for i := 0; i < 3; i++ {
		c.Classify(q(i))
	}
	c.Classify(q(0)) // 0 is now the most recent; 1 the least
	c.Classify(q(3)) // evicts 1
	if n, _ := c.cache.size(); n != 3 {
		t.Fatalf("cache holds %d entries, want 3", n)
	}
	m0 := c.Stats().Misses
	c.Classify(q(0))
	c.Classify(q(2))
	c.Classify(q(3))
	if m := c.Stats().Misses; m != m0 {
		t.Fatalf("recent entries were evicted: %d new misses", m-m0)
	}
	c.Classify(q(1))
	if m := c.Stats().Misses; m != m0+1 {
		t.Fatalf("evicted entry was still cached")
	}
}

func TestCacheBounded(t *testing.T) {
	c := exactOnly(Options{CacheSize: 1000})
	for i := 0; i < 5000; i++ {
		c.Classify(fmt.Sprintf("SELECT %d", i))
	}
	if n, _ := c.cache.size(); n > 1000 {
		t.Fatalf("cache holds %d entries, bound is 1000", n)
	}
}

func TestCacheBytesBounded(t *testing.T) {
	const budget = 100_000
	c := exactOnly(Options{CacheBytes: budget})
	pad := strings.Repeat("x", 1000)
	for i := 0; i < 1000; i++ {
		c.Classify(fmt.Sprintf("SELECT '%s', %d", pad, i))
	}
	n, bytes := c.cache.size()
	if bytes > budget || n == 0 {
		t.Fatalf("cache holds %d entries costing %d bytes; budget %d", n, bytes, budget)
	}
	// The most recent text is still there.
	m0 := c.Stats().Misses
	c.Classify(fmt.Sprintf("SELECT '%s', %d", pad, 999))
	if m := c.Stats().Misses; m != m0 {
		t.Fatal("most recent entry evicted")
	}
}

func TestCacheSkipsLongTexts(t *testing.T) {
	c := New(Options{MaxCachedText: 100})
	long := "SELECT '" + strings.Repeat("x", 200) + "'"
	c.Classify(long)
	c.Classify(long)
	if st := c.Stats(); st.TextHits+st.ShapeHits != 0 || st.Misses != 2 {
		t.Fatalf("Stats() = %+v; want 0 hits, 2 misses", st)
	}
	if n, _ := c.cache.size(); n != 0 {
		t.Fatalf("long text cached")
	}
}

func TestCacheDisabled(t *testing.T) {
	c := New(Options{CacheSize: -1})
	for i := 0; i < 3; i++ {
		if d := c.Classify("SELECT 1"); d.Kind != KindRead {
			t.Fatal(d)
		}
	}
	if st := c.Stats(); st.TextHits+st.ShapeHits != 0 || st.Misses != 3 {
		t.Fatalf("Stats() = %+v; want 0 hits, 3 misses", st)
	}
}

// TestCacheKeyIsCopied: the caller may pass a string that aliases a buffer
// it reuses (a wire reader's); the cache must keep its own copy.
func TestCacheKeyIsCopied(t *testing.T) {
	c := New(Options{})
	buf := []byte("INSERT INTO t VALUES (1)")
	s := unsafe.String(&buf[0], len(buf))
	if d := c.Classify(s); d.Kind != KindWrite {
		t.Fatal(d)
	}
	for k := range c.cache.shard(s).m {
		if unsafe.StringData(k) == &buf[0] {
			t.Fatal("cache keeps the caller's buffer")
		}
	}
	copy(buf, "SELECT * FROM t          ")
	if d := c.Classify("INSERT INTO t VALUES (1)"); d.Kind != KindWrite {
		t.Fatal("cache entry changed with the caller's buffer")
	}
}

func TestConcurrentClassify(t *testing.T) {
	c := New(Options{CacheSize: 64})
	entries := loadCorpus(t)
	want := make([]Decision, len(entries))
	ref := New(Options{CacheSize: -1})
	for i, e := range entries {
		want[i] = ref.Classify(e.sql)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := 0; r < 5; r++ {
				for i := range entries {
					j := (i*7 + g*13 + r) % len(entries)
					if d := c.Classify(entries[j].sql); !reflect.DeepEqual(d, want[j]) {
						t.Errorf("goroutine %d: %q: %+v, want %+v", g, entries[j].sql, d, want[j])
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	st := c.Stats()
	if n := st.TextHits + st.ShapeHits + st.Misses; n != uint64(8*5*len(entries)) {
		t.Fatalf("Stats() counts %d lookups, want %d", n, 8*5*len(entries))
	}
}
