// Package tokenlat measures how long after a write's ReadyForQuery its
// read-your-writes token reaches the client (ParameterStatus
// pg_kinetic.write_lsn), with the route's WAL position reader answering
// every session (SPEC §5, issue 12): writers commit in a loop, each
// timing its own token, and the p50 and p99 are reported, for sessions
// that read from a replica first (their positions are read at once) and
// for write-only sessions (read in no hurry, within the reader's 10 ms
// delay, unless something needs them sooner).
//
//	go test -run '^$' -bench TokenLatency -benchtime 2000x ./test/bench/tokenlat/
package tokenlat

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// writers commit concurrently (each its own session).
const writers = 8

func BenchmarkTokenLatency(b *testing.B) {
	ctx := context.Background()
	cl := pgtest.New(b, pgtest.Options{Standbys: 1})
	if err := cl.Primary.Exec(ctx, "SELECT 1"); err != nil {
		b.Fatal(err)
	}
	px := kinetictest.Start(b, cl, kinetictest.Params{ReadRoutingMode: "prefer_replica", LogLevel: "warn", PoolSize: 4*writers + 2,
		Replicas: []string{cl.Standbys[0].Addr()}})
	direct, err := pgconn.Connect(ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := direct.Exec(ctx, "CREATE TABLE IF NOT EXISTS tokenlat (k bigserial, w int)").ReadAll(); err != nil {
		b.Fatal(err)
	}
	direct.Close(ctx)

	for _, mode := range []struct {
		name      string
		readFirst bool
	}{{"after-replica-read", true}, {"write-only", false}} {
		b.Run(mode.name, func(b *testing.B) { measure(b, px.AppDSN(), mode.readFirst) })
	}
}

func measure(b *testing.B, dsn string, readFirst bool) {
	ctx := context.Background()
	per := max(1, b.N/writers)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	b.ResetTimer()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := writer(ctx, dsn, w, per, readFirst)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			lat = append(lat, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat)), "tokens")
}

// writer commits n INSERTs in its own session, timing from each one's
// ReadyForQuery to the ParameterStatus with its token. readFirst: the
// session reads on a replica first.
func writer(ctx context.Context, dsn string, w, n int, readFirst bool) ([]time.Duration, error) {
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if readFirst {
		// (The replica may not be known eligible yet: the first probes.)
		for try := 0; ; try++ {
			rr := c.ExecParams(ctx, "SELECT pg_is_in_recovery()", nil, nil, nil, nil).Read()
			if rr.Err != nil {
				c.Close(ctx)
				return nil, rr.Err
			}
			if len(rr.Rows) == 1 && string(rr.Rows[0][0]) == "t" {
				break
			}
			if try == 50 {
				c.Close(ctx)
				return nil, fmt.Errorf("writer %d: no read ran on a replica in 5 s", w)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	hj, err := c.Hijack()
	if err != nil {
		return nil, err
	}
	defer hj.Conn.Close()
	fe := hj.Frontend
	var out []time.Duration
	for i := 0; i < n; i++ {
		fe.Send(&pgproto3.Query{String: fmt.Sprintf("INSERT INTO tokenlat (w) VALUES (%d)", w)})
		if err := fe.Flush(); err != nil {
			return nil, err
		}
		hj.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var ready time.Time
		for {
			msg, err := fe.Receive()
			if err != nil {
				return nil, fmt.Errorf("writer %d, insert %d: %w", w, i, err)
			}
			switch m := msg.(type) {
			case *pgproto3.ErrorResponse:
				return nil, fmt.Errorf("writer %d: %s", w, m.Message)
			case *pgproto3.ReadyForQuery:
				ready = time.Now()
			case *pgproto3.ParameterStatus:
				if m.Name == "pg_kinetic.write_lsn" && !ready.IsZero() {
					out = append(out, time.Since(ready))
					goto next
				}
			}
		}
	next:
	}
	return out, nil
}
