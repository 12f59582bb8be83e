package memprobe

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMemProbe(t *testing.T) {
	if os.Getenv("MEMPROBE") == "" {
		t.Skip("MEMPROBE not set")
	}
	ctx := context.Background()
	cl, err := pgtest.Start(ctx, pgtest.Options{Standbys: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 4, MaxClientConn: 3000, LogLevel: "warn"})
	var conns []*pgconn.PgConn
	for i := 0; i < 2000; i++ {
		c, err := pgconn.Connect(ctx, px.AppDSN())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, "select 1").Close(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	runtime.GC()
	runtime.GC()
	f, _ := os.Create("/tmp/heap.out")
	pprof.Lookup("heap").WriteTo(f, 0)
	f.Close()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heapinuse %d KiB stackinuse %d KiB goroutines %d", ms.HeapInuse>>10, ms.StackInuse>>10, runtime.NumGoroutine())
	for _, c := range conns {
		c.Close(ctx)
	}
}
