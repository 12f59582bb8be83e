package classify

import (
	"strconv"
	"testing"
)

const benchSQL = "/* pg-kinetic: class=catalog_browse */ SELECT p.id, p.name, lower(p.sku), count(r.id) " +
	"FROM products p LEFT JOIN reviews r ON r.product_id = p.id WHERE p.category_id = $1 " +
	"GROUP BY p.id ORDER BY p.name LIMIT 50"

func reportHitRate(b *testing.B, c *Classifier) {
	hits, misses := c.Stats()
	if hits+misses > 0 {
		b.ReportMetric(100*float64(hits)/float64(hits+misses), "hit%")
	}
}

// BenchmarkClassifyHit is the hot path: the text is in the cache.
func BenchmarkClassifyHit(b *testing.B) {
	c := New(Options{})
	c.Classify(benchSQL)
	b.ReportAllocs()
	for b.Loop() {
		if d := c.Classify(benchSQL); d.Kind != KindRead {
			b.Fatal(d)
		}
	}
	reportHitRate(b, c)
}

// BenchmarkClassifyHitParallel: the hot path from many goroutines over a
// working set of texts spread across the cache's shards.
func BenchmarkClassifyHitParallel(b *testing.B) {
	c := New(Options{})
	texts := make([]string, 256)
	for i := range texts {
		texts[i] = benchSQL + " OFFSET " + strconv.Itoa(i)
		c.Classify(texts[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Classify(texts[i&255])
			i++
		}
	})
	reportHitRate(b, c)
}

// BenchmarkClassifyMiss parses a distinct text every iteration (the cost
// of a statement seen for the first time, including cache insertion and
// eviction).
func BenchmarkClassifyMiss(b *testing.B) {
	c := New(Options{CacheSize: 1000})
	buf := []byte(benchSQL + " OFFSET ")
	n := len(buf)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = strconv.AppendInt(buf[:n], int64(i), 10)
		i++
		if d := c.Classify(string(buf)); d.Kind != KindRead {
			b.Fatal(d)
		}
	}
	reportHitRate(b, c)
}

// BenchmarkClassifyMissWrite: a first-seen INSERT, to compare shapes.
func BenchmarkClassifyMissWrite(b *testing.B) {
	c := New(Options{CacheSize: 1000})
	buf := []byte("INSERT INTO orders (user_id, total, note) VALUES ($1, $2, 'x') RETURNING id -- ")
	n := len(buf)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = strconv.AppendInt(buf[:n], int64(i), 10)
		i++
		if d := c.Classify(string(buf)); d.Kind != KindWrite {
			b.Fatal(d)
		}
	}
}
