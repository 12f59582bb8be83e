package e2e

// Failover drills (issue 14, SPEC §7 follow_failover) against a real
// cluster: the primary is killed, a standby promoted (timeline 2) and the
// other re-pointed at it, with kineticd's config left as it was. Where a
// statement ran is asked of the server (inet_server_port()).

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// adminServers runs SHOW SERVERS on the admin console of the proxy whose
// application DSN is dsn, and returns its rows by address (columns by name).
func adminServers(t *testing.T, ctx context.Context, dsn string) map[string]map[string]string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/pgkinetic"
	c, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("admin console: %v", err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SHOW SERVERS", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("SHOW SERVERS: %v", err)
	}
	defer rows.Close()
	out := map[string]map[string]string{}
	for rows.Next() {
		vals, _ := rows.Values()
		row := map[string]string{}
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = fmt.Sprint(vals[i])
		}
		out[row["address"]] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("SHOW SERVERS: %v", err)
	}
	return out
}

// TestFailoverDrill: an unplanned failover under follow_failover (the
// default). Reads of new sessions keep being served during the outage;
// writes resume on the promoted server without any config change; an idle
// session's next write follows; the old primary restarted without a
// rewind is a split brain (no reads, no writes); rewound as a standby of
// the new primary it serves reads again.
func TestFailoverDrill(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 180*time.Second)
	// The probe user sees a standby's streamed timeline at once with
	// pg_read_all_stats (docs/behaviour.md, Timelines).
	if err := cl.Primary.Exec(ctx, "GRANT pg_read_all_stats TO "+pgtest.AppUser); err != nil {
		t.Fatal(err)
	}
	tbl := chaosTable(t, ctx, cl)
	old, promoted, follower := cl.Primary, cl.Standbys[0], cl.Standbys[1]
	dsn := chaosProxy(t, cl, kinetictest.Params{Primary: old.Addr(), Replicas: addrs(promoted, follower)}, "")
	awaitReplicaRead(t, dsn, pgtest.Ports(promoted, follower))
	idle := connect(t, ctx, dsn)
	if p := insertAt(t, ctx, idle, tbl, 1); p != old.Port {
		t.Fatalf("INSERT ran on %d, want the primary %d", p, old.Port)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	// New sessions read throughout, each read a new connection.
	var (
		reads, refused atomic.Int64
		mu             sync.Mutex
		refusals       []string
		stop           = make(chan struct{})
		readersDone    = make(chan struct{})
	)
	go func() {
		defer close(readersDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := func() error {
				c, err := pgx.Connect(rctx, dsn)
				if err != nil {
					return err
				}
				defer c.Close(rctx)
				var n int64
				return c.QueryRow(rctx, "select count(*) from "+tbl+" where id = 1").Scan(&n)
			}()
			cancel()
			reads.Add(1)
			if err != nil {
				refused.Add(1)
				mu.Lock()
				refusals = append(refusals, err.Error())
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond) // a steady trickle, not a storm
		}
	}()
	stopReaders := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-readersDone
	}
	defer stopReaders()

	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Promote(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	promotedAt := time.Now()
	var firstWrite time.Duration
	for id := 2; ; id++ {
		w, err := pgx.Connect(ctx, dsn)
		if err == nil {
			var p int
			p, err = readPort(ctx, w, "insert into "+tbl+" values ($1, 'x') returning inet_server_port()", id)
			w.Close(ctx)
			if err == nil {
				if p != promoted.Port {
					t.Fatalf("write %d after the promotion ran on %d, want the promoted %d", id, p, promoted.Port)
				}
				firstWrite = time.Since(promotedAt)
				break
			}
		}
		if time.Since(promotedAt) > 20*time.Second {
			t.Fatalf("no write succeeded within 20 s of the promotion: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first successful write %v after the promotion (probe interval 200 ms)", firstWrite)

	// The idle session's next write follows the new primary, and its own
	// write is read back (read-your-writes on timeline 2).
	if p := insertAt(t, ctx, idle, tbl, 1000); p != promoted.Port {
		t.Fatalf("the idle session's write ran on %d, want the promoted %d", p, promoted.Port)
	}
	if p, n, err := rowAt(ctx, idle, tbl, 1000); err != nil || n != 1 {
		t.Fatalf("read of the session's own write: %d rows on %d, %v", n, p, err)
	}

	// The old primary back without a rewind: timeline 1, not in recovery.
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "SHOW SERVERS to show the old primary as a split brain", func() (bool, error) {
		rows := adminServers(t, ctx, dsn)
		o, p := rows[old.Addr()], rows[promoted.Addr()]
		return o["split_brain"] == "t" && o["detected_role"] == "primary" &&
			p["detected_role"] == "primary" && p["split_brain"] == "f" && p["configured_role"] == "standby", nil
	})
	for i := 0; i < 20; i++ {
		if p := insertAt(t, ctx, idle, tbl, 2000+i); p != promoted.Port {
			t.Fatalf("write %d with the old primary back ran on %d, want %d", i, p, promoted.Port)
		}
		if p, _, err := rowAt(ctx, idle, tbl, 1); err != nil || p == old.Port {
			t.Fatalf("read %d with the old primary back: on %d (old %d), %v", i, p, old.Port, err)
		}
	}
	stopReaders()
	t.Logf("reads of new sessions during the outage: %d, refused %d", reads.Load(), refused.Load())
	if refused.Load() > 0 {
		mu.Lock()
		t.Errorf("%d of %d reads were refused during the failover, e.g. %s", refused.Load(), reads.Load(), refusals[0])
		mu.Unlock()
	}

	// Rewound as a standby of the new primary, it serves reads again.
	if err := cl.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a read on the rejoined old primary", func() (bool, error) {
		rows := adminServers(t, ctx, dsn)
		if rows[old.Addr()]["split_brain"] != "f" || rows[old.Addr()]["detected_role"] != "standby" {
			return false, nil
		}
		c := connect(t, ctx, dsn)
		defer c.Close(ctx)
		p, err := readPort(ctx, c, "/* pg-kinetic: stale-ok */ select inet_server_port()")
		return p == old.Port, err
	})
	if p := insertAt(t, ctx, idle, tbl, 3000); p != promoted.Port {
		t.Fatalf("write after the rejoin ran on %d, want %d", p, promoted.Port)
	}
}
