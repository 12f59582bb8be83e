package health_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pg-kinetic/pg-kinetic/health"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) } // also checks for leaked goroutines

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startChecker probes cluster's servers with the real prober, as the app
// user, and closes checker and prober when the test ends.
func startChecker(t *testing.T, c *pgtest.Cluster, interval, maxBackoff time.Duration) *health.Checker {
	t.Helper()
	targets := []health.Target{{Route: "main", Addr: c.Primary.Addr(), Configured: health.RolePrimary}}
	for _, s := range c.Standbys {
		targets = append(targets, health.Target{Route: "main", Addr: s.Addr(), Configured: health.RoleStandby})
	}
	p := health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "disable")
	ch := health.NewChecker(health.Options{
		Targets: targets, Interval: interval, Timeout: 5 * time.Second, MaxBackoff: maxBackoff, Prober: p,
	})
	t.Cleanup(func() {
		ch.Close()
		p.Close()
	})
	return ch
}

// waitFor waits on Changed for a snapshot where cond holds.
func waitFor(t *testing.T, ch *health.Checker, what string, cond func(*health.Snapshot) bool) *health.Snapshot {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s := ch.Snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("timed out waiting for %s; verdicts: %+v", what, s.All())
		}
	}
}

func TestPGProberDetectsRolesAndIdentity(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last: after the checker and cluster close
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	wantID, err := c.Primary.QueryString(ctx, "select system_identifier::text from pg_control_system()")
	if err != nil {
		t.Fatal(err)
	}

	ch := startChecker(t, c, 100*time.Millisecond, time.Second)
	servers := 1 + len(c.Standbys)
	s := waitFor(t, ch, "every server reachable", func(s *health.Snapshot) bool {
		all := s.All()
		for _, v := range all {
			if !v.Reachable {
				return false
			}
		}
		return len(all) == servers
	})
	for _, v := range s.All() {
		want := health.RoleStandby
		if v.Addr == c.Primary.Addr() {
			want = health.RolePrimary
		}
		if v.Detected != want || v.Configured != want || v.RoleMismatch() || v.Err != "" {
			t.Errorf("%s: %+v, want detected %v and no mismatch", v.Addr, v, want)
		}
		if v.SystemID != wantID {
			t.Errorf("%s: system id %q, want the primary's %q", v.Addr, v.SystemID, wantID)
		}
		if v.ProbedAt.IsZero() {
			t.Errorf("%s: no ProbedAt", v.Addr)
		}
	}

	// The connection stays open between probes: after several more probes
	// the standby still has exactly one prober session.
	st := c.Standbys[0]
	seen := 0
	waitFor(t, ch, "three more probes of "+st.Addr(), func(s *health.Snapshot) bool {
		seen++
		return seen > 3*servers
	})
	n, err := st.QueryString(ctx, "select count(*) from pg_stat_activity where application_name = 'pg-kinetic health'")
	if err != nil {
		t.Fatal(err)
	}
	if n != "1" {
		t.Fatalf("%s prober sessions on %s, want 1 kept open", n, st.Name)
	}
}

func TestPGProberErrors(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last: after the checker and cluster close
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	tests := []struct {
		name    string
		prober  *health.PGProber
		addr    string
		wantErr string
	}{
		{"wrong password", health.NewPGProber(pgtest.AppUser, "wrong", pgtest.AppDB, ""), c.Primary.Addr(), "password authentication failed"},
		{"unknown database", health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, "nosuchdb", ""), c.Primary.Addr(), "does not exist"},
		{"TLS required, server has none", health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "require"), c.Primary.Addr(), "server refused TLS"},
		{"invalid TLS mode", health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "sometimes"), c.Primary.Addr(), "backend TLS mode \"sometimes\""},
		{"address without port", health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, ""), "127.0.0.1", "missing port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.prober.Close()
			v, err := tc.prober.Probe(ctx, tc.addr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Probe = %+v, %v; want an error containing %q", v, err, tc.wantErr)
			}
		})
	}
}

// A standby that stops becomes unreachable at its next probe and reachable
// again after it starts; the backoff in between is capped.
func TestPGProberStandbyStopsAndStarts(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last: after the checker and cluster close
	c := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 2*time.Minute)
	st := c.Standbys[0]
	ch := startChecker(t, c, 50*time.Millisecond, 200*time.Millisecond)
	verdict := func(s *health.Snapshot) health.Verdict { v, _ := s.Get(st.Addr()); return v }

	// Both first: the primary's verdict after the standby's outage is
	// compared with its verdict before (a CI run under load stopped the
	// standby before the primary's first probe had answered).
	up := verdict(waitFor(t, ch, "standby and primary reachable", func(s *health.Snapshot) bool {
		p, _ := s.Get(c.Primary.Addr())
		return verdict(s).Reachable && p.Reachable
	}))
	if up.Detected != health.RoleStandby {
		t.Fatalf("standby detected as %v", up.Detected)
	}

	if err := st.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	down := verdict(waitFor(t, ch, "stopped standby unreachable", func(s *health.Snapshot) bool { return !verdict(s).Reachable }))
	if down.Err == "" || down.Detected != health.RoleUnknown || down.SystemID != "" {
		t.Fatalf("unreachable verdict %+v", down)
	}
	if p, ok := ch.Snapshot().Get(c.Primary.Addr()); !ok || !p.Reachable {
		t.Fatalf("primary affected by the standby's outage: %+v", p)
	}

	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	back := verdict(waitFor(t, ch, "restarted standby reachable", func(s *health.Snapshot) bool { return verdict(s).Reachable }))
	if back.Detected != health.RoleStandby || back.SystemID != up.SystemID || back.Err != "" {
		t.Fatalf("after restart %+v, want the standby as before (%+v)", back, up)
	}
}

// A login slower than the probe timeout (here: the server's first answer
// held back by a relay) fails the probe that started it but goes on in the
// background, and a later probe, with the same short timeout, uses the
// connection it made. Before, every probe cancelled and redialled, so such
// a server was never probed.
func TestPGProberSlowLoginCompletesInBackground(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last
	c := pgtest.Shared(t)
	const hold = 400 * time.Millisecond
	relay := slowFirstAnswer(t, c.Primary.Addr(), hold)
	p := health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "")
	defer p.Close()

	short := func() (health.Verdict, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return p.Probe(ctx, relay)
	}
	if v, err := short(); err == nil || !strings.Contains(err.Error(), "under way") {
		t.Fatalf("first probe = %+v, %v; want it to time out while the login is held back", v, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := short()
		if err == nil {
			if v.Detected != health.RolePrimary {
				t.Fatalf("probe through the relay detected %v, want primary", v.Detected)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no probe succeeded within 10s of a %v login: %v", hold, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slowFirstAnswer relays one TCP connection at a time to addr, holding the
// server's first bytes back for hold. It returns its own address and stops
// when the test ends.
func slowFirstAnswer(t *testing.T, addr string, hold time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(cs ...net.Conn) {
		mu.Lock()
		conns = append(conns, cs...)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr)
			if err != nil {
				client.Close()
				continue
			}
			track(client, server)
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(server, client); server.Close() }()
			go func() {
				defer wg.Done()
				defer client.Close()
				buf := make([]byte, 32<<10)
				n, err := server.Read(buf)
				if err != nil {
					return
				}
				time.Sleep(hold)
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
				io.Copy(client, server)
			}()
		}
	}()
	return ln.Addr().String()
}

// A probe logs in as kineticd's sessions do (pool.Dialer), so a backend
// password that PostgreSQL's SASLprep changes or refuses gets a verdict
// for every server. Through pgconn (PRECIS, NFC) these logins failed with
// 28P01 and the servers stayed unreachable.
func TestPGProberSASLprepPasswords(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last: after the checkers and cluster close
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct{ role, password string }{
		{"probe_roman", "pass\u2168word"},         // NFKC: passIXword; pgconn's NFC keeps U+2168
		{"probe_zwsp", "pa\u200bss-word"},         // PostgreSQL maps U+200B to a space
		{"probe_u0340", "pa\u0340ss-word"},        // prohibited before normalisation: hashed raw
		{"probe_fullwidth", "\uff50\uff57\uff17"}, // NFKC: pw7
	} {
		t.Run(tc.role, func(t *testing.T) {
			if err := c.Primary.Exec(ctx, "create role "+tc.role+" login password '"+tc.password+"'"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Primary.Exec(context.Background(), "drop role if exists "+tc.role) })
			if err := c.WaitReplicated(ctx); err != nil {
				t.Fatal(err)
			}
			ch := checkerFor(t, tc.role, tc.password, pgtest.AppDB, clusterTargets(c))
			s := waitUntil(t, ch, 20*time.Second, "every server reachable", func(s *health.Snapshot) bool {
				all := s.All()
				for _, v := range all {
					if !v.Reachable {
						return false
					}
				}
				return len(all) == 1+len(c.Standbys)
			})
			for _, v := range s.All() {
				want := health.RoleStandby
				if v.Addr == c.Primary.Addr() {
					want = health.RolePrimary
				}
				if v.Detected != want || v.Err != "" || v.SystemID == "" {
					t.Errorf("%s: %+v, want a %v verdict", v.Addr, v, want)
				}
			}
		})
	}
}

// TestPGProberPosition: the position read on the primary is at or after
// the end of a commit acknowledged before it, on the primary's timeline;
// a standby gives no position (an error, never a low one).
func TestPGProberPosition(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	p := health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "disable")
	t.Cleanup(p.Close)
	for i := 0; i < 3; i++ {
		commitEnd, err := c.Primary.QueryString(ctx, "select (pg_current_wal_lsn() - '0/0')::text from (select txid_current()) t")
		if err != nil {
			t.Fatal(err)
		}
		lsn, flushed, tli, err := p.Position(ctx, c.Primary.Addr())
		if err != nil {
			t.Fatal(err)
		}
		end, _ := strconv.ParseUint(commitEnd, 10, 64)
		if lsn < end || tli == 0 {
			t.Fatalf("position %d on timeline %d, before the commit's end %d", lsn, tli, end)
		}
		if flushed < end || flushed > lsn {
			t.Fatalf("flush position %d, want between the commit's end %d and the insert position %d", flushed, end, lsn)
		}
	}
	if _, _, _, err := p.Position(ctx, c.Standbys[0].Addr()); err == nil {
		t.Fatal("a standby gave a primary position")
	}
}

// TestPGProberFlushTo: FlushTo writes nothing when the primary's WAL is
// flushed up to the position asked for already; when it is not (VACUUM's
// WAL, with the WAL writer asleep for 10 s), it flushes it, and a standby
// replays past the position before the WAL writer would have woken.
func TestPGProberFlushTo(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	c := pgtest.New(t, pgtest.Options{Standbys: 1, Conf: "wal_writer_delay = 10s"})
	ctx := ctxT(t, time.Minute)
	p := health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "disable")
	t.Cleanup(p.Close)
	lsnOf := func(sql string) uint64 {
		t.Helper()
		s, err := c.Primary.QueryString(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	flushed := lsnOf("select (pg_current_wal_flush_lsn() - '0/0')::text")
	if wrote, at, err := p.FlushTo(ctx, c.Primary.Addr(), flushed); err != nil || wrote || at < flushed {
		t.Fatalf("FlushTo a flushed position: wrote %v, flushed to %d, %v; want nothing written, at least %d", wrote, at, err, flushed)
	}
	if err := c.Primary.Exec(ctx, "create table flushto (k int); insert into flushto select generate_series(1, 500); delete from flushto where k < 500"); err != nil {
		t.Fatal(err)
	}
	if err := c.Primary.Exec(ctx, "vacuum flushto"); err != nil {
		t.Fatal(err)
	}
	insert := lsnOf("select (pg_current_wal_insert_lsn() - '0/0')::text")
	if flushed := lsnOf("select (pg_current_wal_flush_lsn() - '0/0')::text"); flushed >= insert {
		t.Fatalf("VACUUM's WAL flushed already (%d >= %d): nothing to test", flushed, insert)
	}
	wrote, at, err := p.FlushTo(ctx, c.Primary.Addr(), insert)
	if err != nil || !wrote || at < insert {
		t.Fatalf("FlushTo an unflushed position: wrote %v, flushed to %d, %v; want a write, at least %d", wrote, at, err, insert)
	}
	if flushed := lsnOf("select (pg_current_wal_flush_lsn() - '0/0')::text"); flushed < insert {
		t.Fatalf("flushed to %d after FlushTo(%d)", flushed, insert)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := c.Standbys[0].QueryString(ctx, "select (pg_last_wal_replay_lsn() - '0/0')::text")
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.ParseUint(s, 10, 64); n >= insert {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby replayed to %s, not past %d, 5 s after the flush", s, insert)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
