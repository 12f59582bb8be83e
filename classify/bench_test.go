package classify

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

const benchSQL = "/* pg-kinetic: class=catalog_browse */ SELECT p.id, p.name, lower(p.sku), count(r.id) " +
	"FROM products p LEFT JOIN reviews r ON r.product_id = p.id WHERE p.category_id = $1 " +
	"GROUP BY p.id ORDER BY p.name LIMIT 50"

// benchShapes are statement shapes as simple-protocol clients send them:
// %d is a literal that changes from one execution to the next.
var benchShapes = []struct {
	name, format string
	kind         Kind
}{
	// pgbench -S and the TPC-B-like script, -M simple.
	{"pgbench_select", "SELECT abalance FROM pgbench_accounts WHERE aid = %d;", KindRead},
	{"pgbench_update", "UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = 48213;", KindWrite},
	{"insert", "INSERT INTO orders (user_id, total, note) VALUES (%d, 19.99, 'gift wrap') RETURNING id", KindWrite},
	{"join_hint", "/* pg-kinetic: class=catalog_browse */ SELECT p.id, p.name, lower(p.sku), count(r.id) " +
		"FROM products p LEFT JOIN reviews r ON r.product_id = p.id WHERE p.category_id = %d " +
		"AND p.status = 'active' GROUP BY p.id ORDER BY p.name LIMIT 50", KindRead},
}

func reportStats(b *testing.B, c *Classifier) {
	st := c.Stats()
	if n := st.TextHits + st.ShapeHits + st.Misses; n > 0 {
		b.ReportMetric(100*float64(st.TextHits)/float64(n), "text-hit%")
		b.ReportMetric(100*float64(st.ShapeHits)/float64(n), "shape-hit%")
	}
}

// BenchmarkClassify, for each shape:
//   - hit: the same text every time (the exact-text level);
//   - literals: a different literal every time, as pgbench -S sends it
//     (the shape level; without it, a miss);
//   - miss: a statement never seen, not even its shape (a trailing comment
//     differs), including cache insertion and eviction.
func BenchmarkClassify(b *testing.B) {
	for _, s := range benchShapes {
		check := func(b *testing.B, d Decision) {
			if d.Kind != s.kind || d.Reason == ReasonUnclassified {
				b.Fatalf("%s: %s", s.name, describe(d))
			}
		}
		b.Run(s.name+"/hit", func(b *testing.B) {
			c := New(Options{})
			sql := fmt.Sprintf(s.format, 48213)
			c.Classify(sql)
			b.ReportAllocs()
			for b.Loop() {
				check(b, c.Classify(sql))
			}
			reportStats(b, c)
		})
		b.Run(s.name+"/literals", func(b *testing.B) {
			c := New(Options{CacheSize: 1000})
			prefix, suffix, _ := strings.Cut(s.format, "%d")
			buf := []byte(prefix)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				buf = append(strconv.AppendInt(buf[:len(prefix)], int64(i), 10), suffix...)
				i++
				check(b, c.Classify(string(buf)))
			}
			reportStats(b, c)
		})
		b.Run(s.name+"/miss", func(b *testing.B) {
			c := New(Options{CacheSize: 1000})
			buf := []byte(fmt.Sprintf(s.format, 48213) + " -- ")
			n := len(buf)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				buf = strconv.AppendInt(buf[:n], int64(i), 10)
				i++
				check(b, c.Classify(string(buf)))
			}
			reportStats(b, c)
		})
	}
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
	reportStats(b, c)
}

// BenchmarkClassifyLiteralsParallel: pgbench -S from many goroutines, a
// different literal every time.
func BenchmarkClassifyLiteralsParallel(b *testing.B) {
	c := New(Options{})
	c.Classify(fmt.Sprintf(benchShapes[0].format, 1))
	prefix, suffix, _ := strings.Cut(benchShapes[0].format, "%d")
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64 // every text distinct across goroutines
	b.RunParallel(func(pb *testing.PB) {
		buf := []byte(prefix)
		for pb.Next() {
			buf = append(strconv.AppendInt(buf[:len(prefix)], next.Add(1), 10), suffix...)
			c.Classify(string(buf))
		}
	})
	reportStats(b, c)
}

// BenchmarkPgQuery measures pg_query's entry points on the shapes, to
// choose the cheapest sound key: Scan (the lexer alone, but through
// protobuf and a stderr pipe per call), Normalize (a raw parse in C, text
// out), Fingerprint, ParseToJSON (the fast path) and Parse (protobuf tree,
// the full path).
func BenchmarkPgQuery(b *testing.B) {
	entries := []struct {
		name string
		fn   func(string) error
	}{
		{"Scan", func(s string) error { _, err := pg.Scan(s); return err }},
		{"Normalize", func(s string) error { _, err := pg.Normalize(s); return err }},
		{"Fingerprint", func(s string) error { _, err := pg.FingerprintToUInt64(s); return err }},
		{"ParseToJSON", func(s string) error { _, err := pg.ParseToJSON(s); return err }},
		{"Parse", func(s string) error { _, err := pg.Parse(s); return err }},
	}
	for _, s := range benchShapes {
		sql := fmt.Sprintf(s.format, 48213)
		for _, e := range entries {
			b.Run(s.name+"/"+e.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := e.fn(sql); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
