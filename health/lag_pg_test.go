package health_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Integration tests of WAL positions, lag, timelines and identity against
// real PostgreSQL 15. Probes run every 50 ms; the tests wait on Changed with
// deadlines, never sleep.

const fastProbe = 50 * time.Millisecond

// checkerFor probes targets as user and closes checker and prober when the
// test ends.
func checkerFor(t *testing.T, user, password, db string, targets []health.Target) *health.Checker {
	t.Helper()
	p := health.NewPGProber(user, password, db, "disable")
	ch := health.NewChecker(health.Options{Targets: targets, Interval: fastProbe, Timeout: 5 * time.Second, MaxBackoff: time.Second, Prober: p})
	t.Cleanup(func() {
		ch.Close()
		p.Close()
	})
	return ch
}

func clusterTargets(c *pgtest.Cluster) []health.Target {
	ts := []health.Target{{Route: "main", Addr: c.Primary.Addr(), Configured: health.RolePrimary}}
	for _, s := range c.Standbys {
		ts = append(ts, health.Target{Route: "main", Addr: s.Addr(), Configured: health.RoleStandby})
	}
	return ts
}

// waitUntil waits on Changed, up to d, for a snapshot where cond holds.
func waitUntil(t *testing.T, ch *health.Checker, d time.Duration, what string, cond func(*health.Snapshot) bool) *health.Snapshot {
	t.Helper()
	deadline := time.After(d)
	for {
		s := ch.Snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; verdicts:\n%s", d, what, describe(s))
		}
	}
}

func describe(s *health.Snapshot) string {
	var out string
	for _, v := range s.All() {
		out += fmt.Sprintf("  %s %v/%v tl=%d current=%s replay=%s paused=%v lag=%dB/%dms foreign=%v err=%q\n",
			v.Addr, v.Configured, v.Detected, v.Timeline, freshness.LSN(v.CurrentLSN), freshness.LSN(v.ReplayLSN), v.ReplayPaused,
			v.LagBytes, v.LagMS, v.IdentityMismatch, v.Err)
	}
	return out
}

func get(s *health.Snapshot, addr string) health.Verdict { v, _ := s.Get(addr); return v }

func caughtUp(addrs ...string) func(*health.Snapshot) bool {
	return func(s *health.Snapshot) bool {
		for _, a := range addrs {
			if v, ok := s.Get(a); !ok || v.LagMS != 0 || v.LagBytes != 0 {
				return false
			}
		}
		return true
	}
}

// watchIdle follows standby verdicts until each of standbys has had n in a
// row while the primary's position stayed put, and fails if any of those
// shows lag. A verdict taken while the primary wrote (a background record)
// restarts the count: it was not an idle pair then.
func watchIdle(t *testing.T, ch *health.Checker, primary string, standbys []string, n int) {
	t.Helper()
	s := waitUntil(t, ch, 30*time.Second, "standbys caught up", caughtUp(standbys...))
	pos := get(s, primary).CurrentLSN
	last := map[string]time.Time{}
	count := map[string]int{}
	done := func() bool {
		for _, a := range standbys {
			if count[a] < n {
				return false
			}
		}
		return true
	}
	deadline := time.After(60 * time.Second)
	for !done() {
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("no %d idle probes in a row within 60s: %v", n, count)
		}
		s = ch.Snapshot()
		if p := get(s, primary).CurrentLSN; p != pos {
			t.Logf("primary wrote (%s → %s): counting again", freshness.LSN(pos), freshness.LSN(p))
			pos, count = p, map[string]int{}
			waitUntil(t, ch, 30*time.Second, "standbys caught up", caughtUp(standbys...))
			continue
		}
		for _, a := range standbys {
			v := get(s, a)
			if !v.ProbedAt.After(last[a]) {
				continue
			}
			last[a] = v.ProbedAt
			if v.LagMS != 0 || v.LagBytes != 0 {
				t.Fatalf("idle pair lagging: %s at %v: %d bytes, %d ms (primary at %s, replay %s)\n%s", a, v.ProbedAt.Format(time.StampMicro),
					v.LagBytes, v.LagMS, freshness.LSN(pos), freshness.LSN(v.ReplayLSN), describe(s))
			}
			count[a]++
		}
	}
}

// On an idle pair lag is 0 at every probe: of a fresh cluster, whose
// primary's insert position sits past a segment header, and after a WAL
// segment switch. Every server of a fresh cluster is on timeline 1.
func TestIdlePairNeverLags(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	c := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	ch := checkerFor(t, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, clusterTargets(c))
	var standbys []string
	for _, s := range c.Standbys {
		standbys = append(standbys, s.Addr())
	}

	s := waitUntil(t, ch, 30*time.Second, "every server reachable", func(s *health.Snapshot) bool {
		all := s.All()
		for _, v := range all {
			if !v.Reachable {
				return false
			}
		}
		return len(all) == 1+len(c.Standbys)
	})
	for _, v := range s.All() {
		if v.Timeline != 1 {
			t.Errorf("%s: timeline %d, want 1 in a fresh cluster", v.Addr, v.Timeline)
		}
		if v.IdentityMismatch {
			t.Errorf("%s: identity mismatch within one cluster", v.Addr)
		}
		switch v.Detected {
		case health.RolePrimary:
			if v.CurrentLSN == 0 || v.ReplayLSN != 0 || v.ReceiveLSN != 0 || v.ReplayPaused || v.LagMS != 0 || v.LagBytes != 0 {
				t.Errorf("primary verdict %+v", v)
			}
		case health.RoleStandby:
			if v.CurrentLSN != 0 || v.ReplayLSN == 0 || v.ReceiveLSN == 0 || v.ReplayPaused {
				t.Errorf("standby verdict %+v", v)
			}
		}
	}
	if p, ok := s.Primary(); !ok || p.Addr != c.Primary.Addr() {
		t.Fatalf("Snapshot.Primary() = %+v, %v", p, ok)
	}
	raw, err := c.Primary.QueryString(ctx, "SELECT pg_current_wal_insert_lsn()")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fresh cluster (the primary's raw insert position: %s):\n%s", raw, describe(s))

	watchIdle(t, ch, c.Primary.Addr(), standbys, 10)

	// A segment switch leaves the insert position past the next segment's
	// header; a caught-up standby stops at the boundary.
	if err := c.Primary.Exec(ctx, "CREATE TABLE IF NOT EXISTS health_idle (x int); INSERT INTO health_idle VALUES (1); SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE IF EXISTS health_idle") })
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	watchIdle(t, ch, c.Primary.Addr(), standbys, 10)
	t.Logf("after a segment switch:\n%s", describe(ch.Snapshot()))
}

// A standby whose replay is paused while the primary writes lags more at
// every probe, in bytes and time, and is refused by lag budgets and
// read-your-writes floors; after resuming it is back to 0 and eligible.
func TestPausedStandbyLagGrowsThenRecovers(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	c := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	paused, other := c.Standbys[0], c.Standbys[1]
	ch := checkerFor(t, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, clusterTargets(c))
	waitUntil(t, ch, 30*time.Second, "standbys caught up", caughtUp(paused.Addr(), other.Addr()))

	if err := c.Primary.Exec(ctx, "CREATE TABLE IF NOT EXISTS health_lag (x int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE IF EXISTS health_lag") })
	if err := paused.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = paused.ResumeReplay(context.Background()) })
	s := waitUntil(t, ch, 30*time.Second, "replay paused", func(s *health.Snapshot) bool { return get(s, paused.Addr()).ReplayPaused })
	pausedAt := get(s, paused.Addr()).ReplayLSN

	// A writer commits every 20 ms until stopped.
	wctx, stopWriter := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		writes atomic.Int64
	)
	wg.Go(func() {
		for wctx.Err() == nil {
			if err := c.Primary.Exec(wctx, "INSERT INTO health_lag VALUES (1)"); err == nil {
				writes.Add(1)
			}
			select {
			case <-wctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	stop := func() { stopWriter(); wg.Wait() }
	defer stop()

	// Follow the paused standby's verdicts for 1.5 s of probes after it
	// first shows lag.
	type obs struct {
		at        time.Time
		bytes, ms int64
	}
	var seen []obs
	var first time.Time
	maxOther := int64(0)
	s = waitUntil(t, ch, 30*time.Second, "1.5s of lag", func(s *health.Snapshot) bool {
		v := get(s, paused.Addr())
		if o := get(s, other.Addr()); o.LagMS > maxOther {
			maxOther = o.LagMS
		}
		if v.LagBytes <= 0 || v.LagMS <= 0 {
			return false
		}
		if len(seen) == 0 || v.ProbedAt.After(seen[len(seen)-1].at) {
			seen = append(seen, obs{v.ProbedAt, v.LagBytes, v.LagMS})
		}
		if first.IsZero() {
			first = v.ProbedAt
		}
		return v.ProbedAt.Sub(first) >= 1500*time.Millisecond
	})
	for i := 1; i < len(seen); i++ {
		if seen[i].ms <= seen[i-1].ms || seen[i].bytes < seen[i-1].bytes {
			t.Fatalf("lag did not grow from probe %d to %d: %+v then %+v", i-1, i, seen[i-1], seen[i])
		}
	}
	v := get(s, paused.Addr())
	if v.ReplayLSN != pausedAt {
		t.Fatalf("replay moved while paused: %s → %s", freshness.LSN(pausedAt), freshness.LSN(v.ReplayLSN))
	}
	if v.LagMS < 1500 {
		t.Fatalf("after 1.5 s of probes the lag is %d ms", v.LagMS)
	}
	t.Logf("paused standby over %d probes: lag %d→%d bytes, %d→%d ms (%d writes so far); the other standby's lag peaked at %d ms",
		len(seen), seen[0].bytes, v.LagBytes, seen[0].ms, v.LagMS, writes.Load(), maxOther)

	// What freshness makes of it: over any budget below its lag, and below
	// a token of the primary's latest position.
	now := time.Now()
	p, _ := s.Primary()
	token := freshness.Token{Timeline: p.Timeline, LSN: freshness.LSN(p.CurrentLSN)}
	base := freshness.Requirement{VerdictTTL: time.Second, PrimaryTimeline: p.Timeline}
	for _, tc := range []struct {
		req    func(r freshness.Requirement) freshness.Requirement
		reason string
	}{
		{func(r freshness.Requirement) freshness.Requirement { r.MaxLagMS = 1000; return r }, freshness.ReasonLagExceeded},
		{func(r freshness.Requirement) freshness.Requirement { r.MaxLagBytes = 1; return r }, freshness.ReasonLagExceeded},
		{func(r freshness.Requirement) freshness.Requirement { r.Floor = token; return r }, freshness.ReasonReadYourWrites},
		{func(r freshness.Requirement) freshness.Requirement { r.Floor, r.Strict = token, true; return r }, freshness.ReasonStrictFresh},
	} {
		if ok, reason := freshness.Eligible(v, true, tc.req(base), now); ok || reason != tc.reason {
			t.Errorf("paused standby: Eligible = %v, %q; want %q", ok, reason, tc.reason)
		}
	}

	stop()
	if err := paused.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	s = waitUntil(t, ch, 30*time.Second, "lag back to 0 after resume", func(s *health.Snapshot) bool {
		v := get(s, paused.Addr())
		return !v.ReplayPaused && v.LagMS == 0 && v.LagBytes == 0
	})
	v = get(s, paused.Addr())
	t.Logf("resumed: lag 0 bytes, 0 ms %v later (replay %s)", time.Since(resumed).Round(time.Millisecond), freshness.LSN(v.ReplayLSN))
	req := base
	req.Floor, req.MaxLagMS = token, 1
	if ok, reason := freshness.Eligible(v, true, req, time.Now()); !ok {
		t.Fatalf("caught-up standby refused: %q", reason)
	}
}

// A standby promoted behind the checker's back reports timeline 2 and the
// primary role at once (the WAL file name, not the checkpoint); the other
// standby, re-pointed at it, follows to timeline 2, which a probe user with
// pg_read_all_stats sees from the WAL receiver and any other after the
// standby's next restartpoint.
func TestTimelineAfterPromote(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last: after the checkers and cluster close
	c := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 3*time.Minute)
	oldPrimary, promoted, follower := c.Primary, c.Standbys[0], c.Standbys[1]
	targets := clusterTargets(c)
	app := checkerFor(t, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, targets)
	super := checkerFor(t, pgtest.SuperUser, "", "postgres", targets)
	for _, ch := range []*health.Checker{app, super} {
		s := waitUntil(t, ch, 30*time.Second, "every server reachable on timeline 1", func(s *health.Snapshot) bool {
			all := s.All()
			for _, v := range all {
				if !v.Reachable || v.Timeline != 1 {
					return false
				}
			}
			return len(all) == 3
		})
		if p, _ := s.Primary(); p.Addr != oldPrimary.Addr() || p.Detected != health.RolePrimary {
			t.Fatalf("primary verdict %+v", p)
		}
	}

	if err := oldPrimary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := c.Promote(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	s := waitUntil(t, app, 30*time.Second, "the promoted server as a primary", func(s *health.Snapshot) bool {
		v := get(s, promoted.Addr())
		return v.Reachable && v.Detected == health.RolePrimary
	})
	v := get(s, promoted.Addr())
	t.Logf("promoted server seen as primary %v after pg_promote: %s", time.Since(begin).Round(time.Millisecond), describe(s))
	if v.Timeline != 2 || !v.RoleMismatch() || v.IdentityMismatch || v.CurrentLSN == 0 || v.ReplayLSN != 0 {
		t.Fatalf("promoted server's verdict %+v, want a primary on timeline 2, configured standby (a split brain)", v)
	}
	if ok, reason := freshness.Eligible(v, true, freshness.Requirement{VerdictTTL: time.Minute}, time.Now()); ok || reason != freshness.ReasonSplitBrain {
		t.Fatalf("promoted replica: Eligible = %v, %q; want split_brain", ok, reason)
	}
	if p := get(s, oldPrimary.Addr()); p.Reachable {
		t.Fatalf("stopped primary reachable: %+v", p)
	}

	// The follower's WAL receiver moves to timeline 2.
	s = waitUntil(t, super, 60*time.Second, "the follower on timeline 2 (receiver details)", func(s *health.Snapshot) bool {
		return get(s, follower.Addr()).Timeline == 2
	})
	t.Logf("follower on timeline 2 %v after pg_promote (probing as superuser)", time.Since(begin).Round(time.Millisecond))
	t.Logf("the follower's timeline as the app user (no receiver details), before a restartpoint: %d",
		get(app.Snapshot(), follower.Addr()).Timeline)
	// A checkpoint on the new primary, replayed by the follower, then a
	// restartpoint there: its control file moves to timeline 2.
	if err := promoted.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	lsn, err := promoted.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.WaitReplay(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if err := follower.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, app, 30*time.Second, "the follower on timeline 2 (restartpoint)", func(s *health.Snapshot) bool {
		return get(s, follower.Addr()).Timeline == 2
	})

	// Reconfigured with the promoted server as the route primary, the
	// follower is a standby of it again: same identity, lag measured.
	super.SetTargets([]health.Target{
		{Route: "main", Addr: promoted.Addr(), Configured: health.RolePrimary},
		{Route: "main", Addr: follower.Addr(), Configured: health.RoleStandby},
	})
	s = waitUntil(t, super, 30*time.Second, "the follower caught up with the new primary", caughtUp(follower.Addr()))
	if f := get(s, follower.Addr()); f.Timeline != 2 || f.IdentityMismatch || f.RoleMismatch() {
		t.Fatalf("follower after reconfiguration: %+v", f)
	}
	tok := freshness.Token{Timeline: 1, LSN: 1}
	if ok, reason := freshness.Eligible(get(s, follower.Addr()), true,
		freshness.Requirement{VerdictTTL: time.Minute, Floor: tok, PrimaryTimeline: 2}, time.Now()); ok || reason != freshness.ReasonTimelineChanged {
		t.Fatalf("token from timeline 1: Eligible = %v, %q; want timeline_changed", ok, reason)
	}
}

// A standby of another cluster is flagged against the route primary's
// system identifier and has no lag.
func TestIdentityMismatchAcrossClusters(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	shared := pgtest.Shared(t)
	other := pgtest.New(t, pgtest.Options{Standbys: -1})
	foreign := shared.Standbys[0]
	ch := checkerFor(t, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, []health.Target{
		{Route: "main", Addr: other.Primary.Addr(), Configured: health.RolePrimary},
		{Route: "main", Addr: foreign.Addr(), Configured: health.RoleStandby},
	})
	s := waitUntil(t, ch, 30*time.Second, "the foreign standby flagged", func(s *health.Snapshot) bool {
		return get(s, foreign.Addr()).IdentityMismatch
	})
	v, p := get(s, foreign.Addr()), get(s, other.Primary.Addr())
	if v.SystemID == p.SystemID || v.LagMS != -1 || v.LagBytes != -1 || v.RoleMismatch() || p.IdentityMismatch {
		t.Fatalf("primary %+v\nforeign standby %+v", p, v)
	}
	if ok, reason := freshness.Eligible(v, true, freshness.Requirement{VerdictTTL: time.Minute}, time.Now()); ok || reason != freshness.ReasonSplitBrain {
		t.Fatalf("foreign standby: Eligible = %v, %q; want split_brain", ok, reason)
	}
}

// Hurry brings a replay position sooner than the interval: with a 10 s
// interval, a hurried probe answers within a second.
func TestHurryAgainstPostgres(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	st := c.Standbys[0]
	p := health.NewPGProber(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, "disable")
	ch := health.NewChecker(health.Options{Targets: clusterTargets(c), Interval: 10 * time.Second, Timeout: 5 * time.Second, Prober: p})
	t.Cleanup(func() {
		ch.Close()
		p.Close()
	})
	s := waitUntil(t, ch, 30*time.Second, "first verdicts", func(s *health.Snapshot) bool { return len(s.All()) == 1+len(c.Standbys) })
	before := get(s, st.Addr())

	if err := c.Primary.Exec(ctx, "CREATE TABLE IF NOT EXISTS health_hurry (x int); INSERT INTO health_hurry VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE IF EXISTS health_hurry") })
	lsn, err := c.Primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := freshness.ParseLSN(lsn)
	if err != nil {
		t.Fatal(err)
	}
	// Wait like a read would: hurry, then wake on Changed.
	begin := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		s := ch.Snapshot()
		if v := get(s, st.Addr()); freshness.LSN(v.ReplayLSN) >= want {
			t.Logf("replay position %s reached %v after the write, through hurried probes (interval 10s)", freshness.LSN(v.ReplayLSN), time.Since(begin).Round(time.Millisecond))
			if !v.ProbedAt.After(before.ProbedAt) {
				t.Fatal("no new probe")
			}
			return
		}
		ch.Hurry(st.Addr())
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("hurried probes did not bring replay position %s within 5s: %s", want, describe(s))
		}
	}
}
