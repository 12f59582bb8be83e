package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// drillWrite is one acknowledged INSERT of the drill workload.
type drillWrite struct {
	session, seq int
	port         int       // inet_server_port() of the server that acknowledged it
	at           time.Time // when it was sent (its acknowledgement came after)
	drill        int       // the drills begun before it was sent
	inc          int       // the client connection (a reconnect is a new kineticd session)
}

// drillReport is a KN002 a session got: after the write seq of connection inc.
type drillReport struct{ inc, seq int }

// drillStats is what one workload session saw.
type drillStats struct {
	// block: the session writes in a transaction block (BEGIN, INSERT,
	// COMMIT), so a failover may lose the block under it.
	block      bool
	rollbacks  []string // a ROLLBACK after a failed statement of a block that failed itself
	connErrors []string // writes that failed without a SQLSTATE
	endErrors  []string // the errors that ended its connections
	writes     []drillWrite
	kn002      []drillReport  // the last acknowledged write when a statement got KN002
	ended      map[int]string // connections that ended with an error, and the SQLSTATE
	readErrors map[string]int
	// writeErrors counts the INSERTs' errors by SQLSTATE ("conn": no
	// server answer): 25006 would be a write sent to a standby.
	writeErrors map[string]int
	ryw         []string // read-your-writes violations
	// Monotonic reads: the session's row count as its last read saw it,
	// on connection monoInc (-1: no baseline: a new connection, or a
	// KN002 told it writes were lost), and the violations.
	monoInc, monoLast int
	mono              []string
}

// TestFailoverDrills (issue 14 item 8): five unplanned failovers in a row
// under a read/write load, with kineticd's config never changed (the three
// servers are the route's candidates). Each drill kills the primary,
// promotes a standby, lets the old primary come back without a rewind for
// a moment (split brain), then rewinds it as a standby of the new one. In
// drills 1, 3 and 5 both standbys stop receiving WAL for a moment before
// the kill, so the primary acknowledges writes the failover loses.
//
// Reported per drill: time from the promotion to the first successful
// write through kineticd, and reads of new sessions refused during the
// outage. Checked over all drills: no write acknowledged by a server other
// than the primary of the moment (the old primary after its kill, a
// standby); every session with a lost write told KN002 at its next unit,
// including one that kept going after its write failed with 08006 during
// the outage, and one whose unit was in flight when the primary died
// (08006 or 08007, and the session goes on: sessionEnded); read-your-writes for every read that got an
// answer, and monotonic reads: a session's count of its own rows never
// goes down on one connection unless a KN002 told it of lost writes. A
// KN002 for a session whose writes all survived (a token read
// after other sessions' lost WAL, or a write whose position was not read
// before the kill: "may have been lost") is logged, not an error.
//
// KINETIC_DRILLS sets the number of drills (default 5).
func TestFailoverDrills(t *testing.T) {
	drills := 5
	if n, err := strconv.Atoi(os.Getenv("KINETIC_DRILLS")); err == nil && n > 0 {
		drills = n
	}
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, time.Duration(drills)*60*time.Second+60*time.Second)
	su := connect(t, ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
	for _, q := range []string{
		"GRANT pg_read_all_stats TO " + pgtest.AppUser,
		"GRANT EXECUTE ON FUNCTION pg_read_file(text) TO " + pgtest.AppUser,
	} {
		if _, err := su.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	su.Close(ctx)
	tbl := uniqueIdent("drill")
	pc := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := pc.Exec(ctx, "create table "+tbl+" (session int, seq int, primary key (session, seq))"); err != nil {
		t.Fatal(err)
	}
	pc.Close(ctx)
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	all := append([]*pgtest.Server{cl.Primary}, cl.Standbys...)
	dsn := chaosProxy(t, cl, kinetictest.Params{Primary: all[0].Addr(), Replicas: addrs(all[1:]...), PoolSize: 30, MaxClientConn: 200}, "")
	awaitReplicaRead(t, dsn, pgtest.Ports(all[1:]...))

	// The servers' roles over time, for the check that every write was
	// acknowledged by the primary of its moment: killedAt[port] is when
	// a primary was killed (a later acknowledgement from it is a write
	// the split brain took).
	var (
		mu       sync.Mutex
		killedAt = map[int]time.Time{}
		drillNo  atomic.Int32
	)

	// The workload: sessions that write a row and read it back, then read
	// again; a lost connection is a new session.
	// Sessions 0-3 keep out of the moment of each kill (quiet: they are
	// idle then, so they survive it and must be told KN002 of a lost
	// write); 4 and 5 may have a write in flight (told 08007 or 08006),
	// and 6, which writes in transaction blocks, a block open.
	const sessions, quietSessions, blockSession = 7, 4, 6
	var quiet sync.RWMutex
	stop := make(chan struct{})
	stats := make([]*drillStats, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		st := &drillStats{readErrors: map[string]int{}, ended: map[int]string{}, block: i == blockSession}
		stats[i] = st
		var gate *sync.RWMutex
		if i < quietSessions {
			gate = &quiet
		}
		wg.Go(func() { drillSession(ctx, t, dsn, tbl, i, st, stop, &drillNo, gate) })
	}

	type drillResult struct {
		firstWrite     time.Duration
		reads, refused int64
		lostPlanned    bool
	}
	var results []drillResult
	for d := 1; d <= drills; d++ {
		primary, target, other := cl.Primary, cl.Standbys[0], cl.Standbys[1]
		loseWrites := d%2 == 1
		time.Sleep(500 * time.Millisecond) // load on the healthy cluster
		if loseWrites {
			// The other standby stops first: the one promoted then has
			// all it has, and the other can follow its new timeline.
			stopStreaming(t, ctx, other)
			stopStreaming(t, ctx, target)
			time.Sleep(300 * time.Millisecond) // acknowledged, never replicated
		}
		// New sessions read throughout the outage.
		readers := startNewSessionReads(ctx, t, dsn, "select inet_server_port()")
		drillNo.Store(int32(d))
		t.Logf("drill %d: killing %s (port %d), promoting %s (port %d)", d, primary.Name, primary.Port, target.Name, target.Port)
		quiet.Lock()
		if err := primary.Kill(); err != nil {
			quiet.Unlock()
			t.Fatal(err)
		}
		// No acknowledgement can come from it after this (until its
		// restart below, as a split brain).
		mu.Lock()
		killedAt[primary.Port] = time.Now()
		mu.Unlock()
		// The quiet sessions stay idle until a write through kineticd has
		// reached the promoted server (below): their next unit then meets
		// the new primary, not the outage (where a write fails with 08006
		// and the session, ended by the test, is no longer there to be
		// told KN002; under CI's load every quiet session once went so).
		err := cl.Promote(ctx, target)
		if err != nil {
			quiet.Unlock()
			t.Fatal(err)
		}
		promotedAt := time.Now()
		var first time.Duration
		lastLog := time.Time{}
		for {
			w, err := pgx.Connect(ctx, dsn)
			p := 0
			if err == nil {
				p, err = readPort(ctx, w, "select inet_server_port() from (select txid_current()) x")
				w.Close(ctx)
				if err == nil && p == target.Port {
					first = time.Since(promotedAt)
					break
				}
			}
			if time.Since(lastLog) > 500*time.Millisecond {
				lastLog = time.Now()
				t.Logf("drill %d: a write through kineticd: port %d (promoted %d), %v", d, p, target.Port, err)
			}
			if time.Since(promotedAt) > 20*time.Second {
				quiet.Unlock()
				t.Fatalf("drill %d: no write reached the promoted server within 20 s: %v", d, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		quiet.Unlock()
		// The old primary back without a rewind for a moment: a split brain
		// on timeline d (the new primary is on d+1).
		if err := primary.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		reads, refused, refusals := readers.stop()
		for _, r := range refusals {
			t.Logf("drill %d: a new session's read was refused: %s", d, r)
		}
		if err := cl.Rejoin(ctx, primary); err != nil {
			t.Fatal(err)
		}
		results = append(results, drillResult{firstWrite: first, reads: reads, refused: refused, lostPlanned: loseWrites})
	}
	time.Sleep(500 * time.Millisecond) // reads after the last drill
	close(stop)
	wg.Wait()

	// What survived: the rows on the final primary.
	final := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	rows, err := final.Query(ctx, "select session, seq from "+tbl)
	if err != nil {
		t.Fatal(err)
	}
	present := map[[2]int]bool{}
	for rows.Next() {
		var s, q int
		if err := rows.Scan(&s, &q); err != nil {
			t.Fatal(err)
		}
		present[[2]int{s, q}] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	var acked, lost, nonPrimary, detectedSessions, lostSessions, falseReports, missed, endedFirst int
	for i, st := range stats {
		lostSeqs := map[int]bool{}
		for _, w := range st.writes {
			acked++
			mu.Lock()
			k, killed := killedAt[w.port]
			mu.Unlock()
			if killed && w.at.After(k) && !present[[2]int{i, w.seq}] {
				// (Sent after the killed server's processes were gone: an
				// acknowledgement from it is a split brain's. One sent
				// before may be acknowledged by it and read later, under
				// load: CI 2026-12-05 read one 8 ms after the kill.)
				nonPrimary++
				t.Errorf("session %d seq %d sent at %v and acknowledged by %d, after that server was killed as the primary at %v",
					i, w.seq, w.at.Format(time.StampMilli), w.port, k.Format(time.StampMilli))
			}
			if !present[[2]int{i, w.seq}] {
				lost++
				lostSeqs[w.seq] = true
			}
		}
		if len(lostSeqs) > 0 {
			lostSessions++
		}
		// Each KN002 must follow a lost write of its connection; each lost
		// write must be followed by a KN002 on its connection, which
		// kineticd keeps open through the failover.
		lostOf := func(inc, upTo int) bool {
			for _, w := range st.writes {
				if w.inc == inc && w.seq <= upTo && lostSeqs[w.seq] {
					return true
				}
			}
			return false
		}
		for _, r := range st.kn002 {
			if !lostOf(r.inc, r.seq) {
				falseReports++
				t.Logf("session %d: KN002 after seq %d, whose writes on that connection all survived (a token read after other sessions' lost WAL)", i, r.seq)
			}
		}
		if len(st.kn002) > 0 {
			detectedSessions++
		}
		for _, w := range st.writes {
			if !lostSeqs[w.seq] {
				continue
			}
			reported := false
			for _, r := range st.kn002 {
				if r.inc == w.inc && r.seq >= w.seq {
					reported = true
				}
			}
			switch {
			case reported:
			case st.ended[w.inc] != "":
				// kineticd closed the session before it could be told
				// (issue 14: every lost write reported): only when the
				// loss left a transaction block open or cut a message
				// short (docs/behaviour.md, "Losing the primary"), which
				// the drill's units never do.
				endedFirst++
				t.Errorf("session %d: write seq %d was lost and its connection ended (%s) before it was told KN002", i, w.seq, st.ended[w.inc])
			default:
				missed++
				t.Errorf("session %d: write seq %d was lost and never reported on its connection", i, w.seq)
			}
		}
		for _, v := range st.mono {
			t.Errorf("session %d: monotonic-read violation: %s", i, v)
		}
		for _, v := range st.ryw {
			t.Errorf("session %d: read-your-writes violation: %s", i, v)
		}
		for _, v := range st.rollbacks {
			t.Errorf("session %d: %s", i, v)
		}
		if len(st.readErrors) > 0 {
			t.Logf("session %d read errors by SQLSTATE: %v", i, st.readErrors)
		}
		if len(st.writeErrors) > 0 {
			t.Logf("session %d write errors by SQLSTATE: %v", i, st.writeErrors)
		}
		for _, e := range st.endErrors {
			t.Logf("session %d: a connection ended with: %s", i, e)
		}
		for _, e := range st.connErrors {
			t.Logf("session %d: a write failed without a SQLSTATE: %s", i, e)
		}
		for code, n := range st.writeErrors {
			// A write's error is the failover's (08xxx: the primary gone
			// or unavailable; 57P0x: it shut down; KN002; a timeout or a
			// dropped connection): anything else means a write reached a
			// server that refused it, 25006 a standby.
			switch {
			case code == "KN002", code == "conn", strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57P"), code == "57014":
			default:
				t.Errorf("session %d: %d writes failed with %s (a write sent to a server that is not the primary?)", i, n, code)
			}
		}
	}
	for d, r := range results {
		t.Logf("drill %d (lost writes provoked: %v): first write %v after the promotion; new-session reads %d, refused %d",
			d+1, r.lostPlanned, r.firstWrite.Round(time.Millisecond), r.reads, r.refused)
		// The goal is 0, not met: reads of new sessions are refused while
		// no standby's lag is known, from the moment a standby is seen on
		// the new timeline, or the new primary elected, until the
		// standby's next probe (docs/behaviour.md, Failover). Asserted:
		// most reads are served.
		if r.refused*2 > r.reads {
			t.Errorf("drill %d: %d of %d new-session reads refused during the failover (more than half)", d+1, r.refused, r.reads)
		}
		if r.firstWrite > 5*time.Second {
			t.Errorf("drill %d: the first write through kineticd came %v after the promotion", d+1, r.firstWrite)
		}
	}
	t.Logf("writes acknowledged %d, lost (absent on the final primary) %d in %d sessions; sessions told KN002 %d; "+
		"lost on a connection that then ended with 08xxx %d; lost and never reported %d; KN002 without a lost write %d; acknowledged by a non-primary %d",
		acked, lost, lostSessions, detectedSessions, endedFirst, missed, falseReports, nonPrimary)
	if detectedSessions == 0 {
		t.Errorf("no session was told KN002")
	}
	if lost == 0 {
		t.Errorf("no write was lost: the drills that stop replication before the kill provoked none, so KN002 was not exercised")
	}
}

// drillSession is one client of TestFailoverDrills: INSERT (i, seq)
// RETURNING inet_server_port(), then read it back, until stop. With a
// gate, each round holds it for reading (the drill takes it to kill the
// primary while the session is idle). A KN002 is
// recorded against the last acknowledged seq; a lost connection (or an
// unknown commit outcome) starts a new session.
func drillSession(ctx context.Context, t *testing.T, dsn, tbl string, i int, st *drillStats, stop <-chan struct{}, drill *atomic.Int32, gate *sync.RWMutex) {
	var c *pgx.Conn
	defer func() {
		if c != nil {
			c.Close(ctx)
		}
	}()
	lastAcked, inc := -1, 0
	end := func(err error) {
		code := pgCode(err)
		if code == "" {
			code = "conn"
		}
		st.ended[inc] = code
		st.endErrors = append(st.endErrors, err.Error())
		c.Close(ctx)
		c = nil
	}
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		if c == nil {
			var err error
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err = pgx.Connect(cctx, dsn)
			cancel()
			if err != nil {
				c = nil
				time.Sleep(50 * time.Millisecond)
				continue
			}
			lastAcked, inc = -1, inc+1 // a new session has no token
		}
		if gate != nil {
			gate.RLock()
		}
		st.round(ctx, c, tbl, i, seq, &lastAcked, inc, drill, end)
		if gate != nil {
			gate.RUnlock()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drillDumpOnce: the proxy's goroutines are dumped at the first write
// that timed out (a hang).
var drillDumpOnce sync.Once

// round is one INSERT and its reads of a drill session.
func (st *drillStats) round(ctx context.Context, c *pgx.Conn, tbl string, i, seq int, lastAcked *int, inc int, drill *atomic.Int32, end func(error)) {
	{
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var port int
		sent := time.Now()
		// (Parameters, as applications write them: pgx caches one
		// statement. With a new text per round its cache evicts, and a
		// deallocation the primary's loss fails makes pgx close the
		// connection itself: docs/behaviour.md, "Losing the primary".)
		insert := fmt.Sprintf("insert into %s values ($1, $2) returning inet_server_port()", tbl)
		var err error
		if st.block {
			// BEGIN, INSERT, COMMIT: a block lost with the primary fails
			// until it is rolled back (or its COMMIT fails).
			var tx pgx.Tx
			if tx, err = c.Begin(octx); err == nil {
				if err = tx.QueryRow(octx, insert, i, seq).Scan(&port); err == nil {
					err = tx.Commit(octx)
				} else if rerr := tx.Rollback(octx); rerr != nil && pgCode(err) != "" {
					st.rollbacks = append(st.rollbacks, fmt.Sprintf("seq %d: ROLLBACK after %v failed: %v", seq, err, rerr))
				}
			}
		} else {
			err = c.QueryRow(octx, insert, i, seq).Scan(&port)
		}
		cancel()
		if err != nil {
			code := pgCode(err)
			if st.writeErrors == nil {
				st.writeErrors = map[string]int{}
			}
			if code == "" {
				st.writeErrors["conn"]++
				st.connErrors = append(st.connErrors, fmt.Sprintf("seq %d: %v", seq, err))
				if errors.Is(err, context.DeadlineExceeded) {
					drillDumpOnce.Do(func() {
						buf := make([]byte, 1<<22)
						buf = buf[:runtime.Stack(buf, true)]
						for _, g := range strings.Split(string(buf), "\n\n") {
							if strings.Contains(g, "pg-kinetic/proxy.") {
								fmt.Fprintf(os.Stderr, "drill hang: proxy goroutine:\n%s\n\n", g)
							}
						}
					})
				}
			} else {
				st.writeErrors[code]++
			}
			switch {
			case code == "KN002":
				st.kn002 = append(st.kn002, drillReport{inc, *lastAcked})
				st.monoInc = -1 // (its lost writes may be counted no more)
			case sessionEnded(c, code):
				end(err)
			}
			time.Sleep(20 * time.Millisecond)
			return
		}
		st.writes = append(st.writes, drillWrite{session: i, seq: seq, port: port, at: sent, drill: int(drill.Load()), inc: inc})
		*lastAcked = seq
		// Read it back; then count the session's rows (monotonic reads:
		// never fewer than the last count on this connection, unless a
		// KN002 told it writes were lost).
		for r := 0; r < 2; r++ {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var n int
			q, args := fmt.Sprintf("select count(*) from %s where session = $1 and seq = $2", tbl), []any{i, seq}
			if r == 1 {
				q, args = fmt.Sprintf("select count(*) from %s where session = $1", tbl), []any{i}
			}
			err := c.QueryRow(octx, q, args...).Scan(&n)
			cancel()
			switch code := pgCode(err); {
			case err == nil && r == 0 && n != 1:
				st.ryw = append(st.ryw, fmt.Sprintf("seq %d read back as %d rows at %s (acknowledged by port %d)", seq, n, time.Now().UTC().Format("15:04:05.000"), port))
			case err == nil && r == 1:
				if st.monoInc == inc && n < st.monoLast {
					st.mono = append(st.mono, fmt.Sprintf("after seq %d the session's rows counted %d at %s, %d before", seq, n, time.Now().UTC().Format("15:04:05.000"), st.monoLast))
				}
				st.monoInc, st.monoLast = inc, n
			case code == "KN002":
				// The write was lost and the session told so: read back
				// again, it is rightly absent.
				st.kn002 = append(st.kn002, drillReport{inc, *lastAcked})
				st.monoInc = -1
				return
			case err != nil:
				if code == "" {
					code = "conn"
					var ce interface{ Timeout() bool }
					if errors.As(err, &ce) && ce.Timeout() {
						code = "timeout"
					}
				}
				st.readErrors[code]++
				if code == "conn" || sessionEnded(c, code) {
					end(err)
					return
				}
			}
		}
	}
}

// sessionEnded reports whether a statement's error ended the drill
// session's connection: closed, or no SQLSTATE (the connection lost).
// kineticd keeps a session whose write failed with 08006 while the primary
// is down, or whose unit in flight the primary's loss failed (08006, or
// 08007 for a write whose outcome is unknown), and so does the drill:
// such a session must still be told KN002 of a write the failover lost
// (issue 14).
func sessionEnded(c *pgx.Conn, code string) bool {
	return c.IsClosed() || code == ""
}
