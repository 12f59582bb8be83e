package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestCancelStormStaysWithItsClients: in transaction pooling with a small
// pool, clients whose context deadline ends their query at a random
// moment (pgx then sends a CancelRequest and closes the connection) share
// server connections with clients that never cancel anything. No
// statement of the latter may fail: a cancel reaching another client's
// statement is the cross-client failure pgx's own suite saw as 57014 in
// parallel tests (TestConnQueryScanWithManyColumns,
// TestRowsScanNilThenScanValue).
func TestCancelStormStaysWithItsClients(t *testing.T) {
	for _, routing := range []string{"off", "prefer_replica"} {
		t.Run(routing, func(t *testing.T) {
			cl := pgtest.Shared(t)
			// Clients that gave up still wait for a connection (and run
			// their statement): long waits here are queueing, not the
			// failure this test looks for.
			p := kinetictest.Params{PoolMode: "transaction", PoolSize: 2, MaxClientConn: 2000, AcquireTimeout: 30000}
			var px *kinetictest.Proxy
			if routing == "off" {
				px = kinetictest.Start(t, cl, p)
			} else {
				px = routedProxy(t, cl, p)
			}
			ctx := ctxT(t, 90*time.Second)
			const victims, cancellers = 3, 4
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var cancelled, victimStmts atomic.Int64
			errs := make(chan error, victims+cancellers)
			for i := range cancellers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 1))
					for {
						select {
						case <-stop:
							return
						default:
						}
						c, err := pgx.Connect(ctx, px.AppDSN())
						if err != nil {
							errs <- fmt.Errorf("canceller connect: %w", err)
							return
						}
						for range 5 {
							qctx, qcancel := context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
							_, err := c.Exec(qctx, "select pg_sleep(0.001)")
							qcancel()
							if err != nil {
								cancelled.Add(1)
								break // pgx closed the connection (asyncClose)
							}
						}
						c.Close(ctx)
					}
				}()
			}
			for i := range victims {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := pgx.Connect(ctx, px.AppDSN())
					if err != nil {
						errs <- fmt.Errorf("victim connect: %w", err)
						return
					}
					defer c.Close(ctx)
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						var got int
						if err := c.QueryRow(ctx, "select count(*)::int from generate_series(1, 2000)").Scan(&got); err != nil || got != 2000 {
							errs <- fmt.Errorf("victim %d, statement %d: %d, %v (another client's cancel reached it)", i, n, got, err)
							return
						}
						victimStmts.Add(1)
					}
				}()
			}
			select {
			case err := <-errs:
				close(stop)
				wg.Wait()
				t.Fatal(err)
			case <-time.After(4 * time.Second):
			}
			close(stop)
			wg.Wait()
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			t.Logf("%d statements of clients that cancel nothing, none failed; %d queries ended by a context deadline", victimStmts.Load(), cancelled.Load())
		})
	}
}

// TestCancelRacingCloseStaysWithItsClient: a client sends its
// CancelRequest concurrently with its statement and closes its connection
// as soon as the statement returns, without waiting for the cancel (pgx's
// CancelRequestContextWatcherHandler can do this). In transaction pooling
// with one server connection, the connection then serves another client:
// the cancel, still on its way to the server, must not stop that client's
// statement.
//
// Before the fix the session's end gave the connection back to its pool
// while the cancel's claim on it was still held: the other client's
// statement failed with 57014 within 3 s in 3 runs of 3.
func TestCancelRacingCloseStaysWithItsClient(t *testing.T) {
	for _, routing := range []string{"off", "prefer_replica"} {
		t.Run(routing, func(t *testing.T) { testCancelRacingClose(t, routing) })
	}
}

func testCancelRacingClose(t *testing.T, routing string) {
	cl := pgtest.Shared(t)
	p := kinetictest.Params{PoolMode: "transaction", PoolSize: 1, MaxClientConn: 2000, AcquireTimeout: 30000}
	var px *kinetictest.Proxy
	if routing == "off" {
		px = kinetictest.Start(t, cl, p)
	} else {
		px = routedProxy(t, cl, p)
	}
	ctx := ctxT(t, 60*time.Second)
	victim := connect(t, ctx, px.AppDSN())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rounds atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := pgconn.Connect(ctx, px.AppDSN())
				if err != nil {
					continue
				}
				go c.CancelRequest(ctx) //nolint:errcheck // racing the close on purpose
				c.Exec(ctx, "select pg_sleep(0.0005)").Close()
				c.Close(ctx)
				rounds.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(3 * time.Second)
	n := 0
	var failure error
	for time.Now().Before(deadline) {
		if _, err := victim.Exec(ctx, "select pg_sleep(0.001)"); err != nil {
			failure = fmt.Errorf("statement %d of the other client: %w (another client's cancel reached it)", n, err)
			break
		}
		n++
	}
	close(stop)
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	t.Logf("%d statements of the other client, none cancelled; %d cancel-and-close rounds", n, rounds.Load())
}
