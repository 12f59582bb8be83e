// Package memprobe measures what an idle client costs inside kineticd, in
// process, with the Go runtime's own accounting (heap and stack per
// session) and a heap profile of the proxy's allocations. It complements
// test/bench/connscale, which measures the RSS of the real binary:
//
//	go test -run XXX -bench IdleSessions -benchtime 1x ./test/bench/memprobe/
//	go tool pprof -sample_index=inuse_space -focus proxy -top /tmp/kinetic-idle-heap.out
package memprobe

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

const sessions = 2000

func BenchmarkIdleSessions(b *testing.B) {
	runtime.MemProfileRate = 512
	ctx := context.Background()
	cl, err := pgtest.Start(ctx, pgtest.Options{Standbys: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	px := kinetictest.Start(b, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 4, MaxClientConn: sessions + 100, LogLevel: "warn"})
	for i := 0; i < b.N; i++ {
		before := memNow()
		conns := make([]*pgconn.PgConn, 0, sessions)
		for j := 0; j < sessions; j++ {
			c, err := pgconn.Connect(ctx, px.AppDSN())
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Exec(ctx, "select 1").Close(); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		after := memNow()
		// Client-side pgconn memory is in these figures too; pgconn holds
		// no goroutine per idle connection, so the stack is the proxy's.
		b.ReportMetric(float64(after.stack-before.stack)/sessions, "stack-B/session")
		b.ReportMetric(float64(after.heap-before.heap)/sessions, "heap-B/session(with-client)")
		f, err := os.Create(filepath.Join(os.TempDir(), "kinetic-idle-heap.out"))
		if err == nil {
			pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
		for _, c := range conns {
			c.Close(ctx)
		}
	}
}

type mem struct{ heap, stack uint64 }

func memNow() mem {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{heap: ms.HeapInuse, stack: ms.StackInuse}
}
