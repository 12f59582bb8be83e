package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/bench/internal/benchutil"
)

// dialResult is how opening the clients went.
type dialResult struct {
	conns    []*pgconn.PgConn // the connected ones, in no particular order
	failed   int
	stopped  bool           // gave up after maxFailures
	errs     map[string]int // failure message -> count
	duration time.Duration
}

// dialAll opens n connections to dsn, concurrency at a time, and stops
// opening more once maxFailures have failed or ctx ends.
func dialAll(ctx context.Context, dsn string, n, concurrency, maxFailures int) dialResult {
	var (
		next   atomic.Int64
		failed atomic.Int64
		mu     sync.Mutex
		wg     sync.WaitGroup
		res    = dialResult{errs: map[string]int{}}
	)
	start := time.Now()
	for range min(concurrency, n) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && failed.Load() < int64(maxFailures) && ctx.Err() == nil {
				conn, err := pgconn.Connect(ctx, dsn)
				if err != nil && ctx.Err() != nil {
					return // interrupted, not failed
				}
				mu.Lock()
				if err != nil {
					failed.Add(1)
					res.errs[errorKind(err)]++
				} else {
					res.conns = append(res.conns, conn)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.duration = time.Since(start)
	res.failed = int(failed.Load())
	res.stopped = len(res.conns)+res.failed < n && ctx.Err() == nil
	return res
}

// errorKind names a failure for grouping: the server's SQLSTATE and
// message when it sent one, the error text otherwise.
func errorKind(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", pe.Severity, pe.Message, pe.Code)
	}
	return err.Error()
}

// closeAll closes conns, 64 at a time, each with a short deadline.
func closeAll(conns []*pgconn.PgConn) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, c := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c.Close(ctx)
		})
	}
	wg.Wait()
}

// pgbench -S's statement, as pgbench -M simple (literal) and -M extended
// ($1) send it.
const (
	selectSimple   = "SELECT abalance FROM pgbench_accounts WHERE aid = "
	selectExtended = "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
	accounts       = 100000 // pgbench_accounts rows at scale 1
)

// protoStats are one protocol's completed queries and their latencies.
type protoStats struct {
	clients   int
	latencies []time.Duration
}

func (p protoStats) percentile(q float64) time.Duration {
	if len(p.latencies) == 0 {
		return 0
	}
	return p.latencies[int(q*float64(len(p.latencies)-1))]
}

// loadResult is what the active clients did.
type loadResult struct {
	elapsed  time.Duration
	simple   protoStats
	extended protoStats
	all      protoStats
	errors   int
	firstErr error
	broken   int // connections that closed during the load
}

// runLoad runs pgbench -S's lookup in a loop on every conn until d has
// passed or ctx ends. With protocol "both", even-numbered clients use the
// simple protocol and odd-numbered ones the extended protocol.
func runLoad(ctx context.Context, conns []*pgconn.PgConn, d time.Duration, protocol string) loadResult {
	type worker struct {
		extended  bool
		latencies []time.Duration
		errors    int
		firstErr  error
		broken    bool
	}
	workers := make([]worker, len(conns))
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for i, conn := range conns {
		w := &workers[i]
		w.extended = protocol == "extended" || (protocol == "both" && i%2 == 1)
		w.latencies = make([]time.Duration, 0, 1<<14)
		wg.Go(func() {
			sql := make([]byte, 0, len(selectSimple)+8)
			param := make([]byte, 0, 8)
			for ctx.Err() == nil {
				aid := 1 + rand.IntN(accounts)
				t0 := time.Now()
				var n int
				var err error
				if w.extended {
					param = strconv.AppendInt(param[:0], int64(aid), 10)
					rr := conn.ExecParams(ctx, selectExtended, [][]byte{param}, nil, nil, nil)
					for rr.NextRow() {
						n++
					}
					_, err = rr.Close()
				} else {
					sql = strconv.AppendInt(append(sql[:0], selectSimple...), int64(aid), 10)
					n, err = benchutil.CountRows(conn.Exec(ctx, string(sql)))
				}
				lat := time.Since(t0)
				if ctx.Err() != nil {
					return // the deadline interrupted this query: not a result
				}
				if err == nil && n != 1 {
					err = fmt.Errorf("aid %d: %d rows, want 1", aid, n)
				}
				if err != nil {
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					if conn.IsClosed() {
						w.broken = true
						return
					}
					continue
				}
				w.latencies = append(w.latencies, lat)
			}
		})
	}
	wg.Wait()
	res := loadResult{elapsed: time.Since(start)}
	for i := range workers {
		w := &workers[i]
		p := &res.simple
		if w.extended {
			p = &res.extended
		}
		p.clients++
		p.latencies = append(p.latencies, w.latencies...)
		res.all.clients++
		res.all.latencies = append(res.all.latencies, w.latencies...)
		res.errors += w.errors
		if res.firstErr == nil {
			res.firstErr = w.firstErr
		}
		if w.broken {
			res.broken++
		}
	}
	for _, p := range []*protoStats{&res.simple, &res.extended, &res.all} {
		slices.Sort(p.latencies)
	}
	return res
}

// checkIdle runs SELECT 1 on every conn, 32 at a time, and returns how
// many answered and the first error.
func checkIdle(ctx context.Context, conns []*pgconn.PgConn) (ok int, firstErr error) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, 32)
	)
	for _, c := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := c.Exec(qctx, "SELECT 1").ReadAll()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else if firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	return ok, firstErr
}
