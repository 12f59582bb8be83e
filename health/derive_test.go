package health

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func primaryTarget(addr string) Target {
	return Target{Route: "main", Addr: addr, Configured: RolePrimary}
}

func primaryAt(tl uint32, lsn uint64) answer {
	return answer{role: RolePrimary, sysID: primaryOK.sysID, tl: tl, current: lsn}
}

func standbyAt(tl uint32, replay uint64) answer {
	return answer{role: RoleStandby, sysID: standbyOK.sysID, tl: tl, receive: replay + 0x10, replay: replay}
}

// waitBoth waits for the verdicts of primary addrA and standby addrB probed
// at now, and returns them from one snapshot.
func waitBoth(t *testing.T, c *Checker, now time.Time) (Verdict, Verdict) {
	t.Helper()
	s := waitSnapshot(t, c, "both servers probed at "+now.String(), func(s *Snapshot) bool {
		p, ok1 := s.Get(addrA)
		b, ok2 := s.Get(addrB)
		return ok1 && ok2 && p.ProbedAt.Equal(now) && b.ProbedAt.Equal(now)
	})
	p, _ := s.Get(addrA)
	b, _ := s.Get(addrB)
	return p, b
}

// waitCall waits for the probe of addr that starts at at.
func waitCall(t *testing.T, p *fakeProber, addr string, at time.Time) {
	t.Helper()
	for {
		c := recv(t, p.calls, "a probe of "+addr)
		if c.addr == addr && c.at.Equal(at) {
			return
		}
	}
}

// nextRound lets both loops finish waiting, sets their answers, and moves
// time on by their interval, starting the next probe of each.
func nextRound(t *testing.T, p *fakeProber, clock *fakeClock, primary, standby answer) {
	t.Helper()
	d1, d2 := clock.nextWait(t), clock.nextWait(t)
	if d1 != d2 {
		t.Fatalf("loops wait %v and %v", d1, d2)
	}
	p.set(addrA, primary)
	p.set(addrB, standby)
	clock.Advance(d1)
}

// A primary and a standby probed every second (fake time). The standby's lag
// follows EstimateLag over the primary's samples; the prober's own values
// for the derived fields are ignored.
func TestCheckerDerivesLag(t *testing.T) {
	steps := []struct {
		name            string
		primary         uint64
		replay          uint64
		paused          bool
		bytes, ms       int64
		primaryTimeline uint32
	}{
		{"caught up", 0x1000, 0x1000, false, 0, 0, 1},
		{"idle", 0x1000, 0x1000, false, 0, 0, 1},
		{"paused, primary writes", 0x2000, 0x1000, true, 0x1000, 1000, 1}, // at 0x1000 one probe ago
		{"still paused", 0x3000, 0x1000, true, 0x2000, 2000, 1},
		{"resumed, partly caught up", 0x3000, 0x2000, false, 0x1000, 2000, 1}, // at 0x2000 two probes ago
		{"caught up again", 0x3000, 0x3000, false, 0, 0, 1},
		{"idle again", 0x3000, 0x3000, false, 0, 0, 1},
		{"primary on another timeline: lag unknown", 0x4000, 0x3000, false, -1, -1, 2},
	}
	answers := func(i int) (answer, answer) {
		st := steps[i]
		sa := standbyAt(1, st.replay)
		sa.paused = st.paused
		return primaryAt(st.primaryTimeline, st.primary), sa
	}
	pa, sa := answers(0)
	c, p, clock := testChecker(t, Options{Targets: []Target{primaryTarget(addrA), standbyTarget(addrB)}},
		map[string]answer{addrA: pa, addrB: sa})
	for i, st := range steps {
		if i > 0 {
			pa, sa := answers(i)
			nextRound(t, p, clock, pa, sa)
		}
		pv, sv := waitBoth(t, c, clock.Now())
		if sv.LagBytes != st.bytes || sv.LagMS != st.ms {
			t.Fatalf("step %d (%s): standby lag (%d bytes, %d ms), want (%d, %d)", i, st.name, sv.LagBytes, sv.LagMS, st.bytes, st.ms)
		}
		if sv.ReplayLSN != st.replay || sv.ReceiveLSN != st.replay+0x10 || sv.ReplayPaused != st.paused || sv.Timeline != 1 ||
			sv.CurrentLSN != 0 || sv.IdentityMismatch {
			t.Fatalf("step %d: standby verdict %+v", i, sv)
		}
		if pv.LagBytes != 0 || pv.LagMS != 0 || pv.CurrentLSN != st.primary || pv.ReplayLSN != 0 || pv.ReceiveLSN != 0 ||
			pv.Timeline != st.primaryTimeline || pv.IdentityMismatch {
			t.Fatalf("step %d: primary verdict %+v", i, pv)
		}
	}
}

// A primary sample whose probe began no later than a standby's is part of
// that standby's lag as soon as it is recorded, in the same snapshot as the
// primary's verdict; one recorded after the standby's probe began is not
// (its position may be newer than the standby's replay reading).
func TestLagUpdatedBySamplesReadBeforeTheStandby(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{primaryTarget(addrA), standbyTarget(addrB)}},
		map[string]answer{addrA: primaryAt(1, 0x1000), addrB: standbyAt(1, 0x1000)})
	waitBoth(t, c, clock.Now())
	t0 := clock.Now()

	// Round 1: the primary's probe hangs while the standby's answers.
	gate := make(chan struct{})
	pa := primaryAt(1, 0x2000)
	pa.gate = gate
	nextRound(t, p, clock, pa, standbyAt(1, 0x1000))
	t1 := clock.Now()
	s := waitSnapshot(t, c, "standby probed at t1", func(s *Snapshot) bool { v, _ := s.Get(addrB); return v.ProbedAt.Equal(t1) })
	if v, _ := s.Get(addrB); v.LagBytes != 0 || v.LagMS != 0 {
		t.Fatalf("before the primary's sample: standby lag (%d, %d), want caught up with what was known", v.LagBytes, v.LagMS)
	}
	close(gate)
	s = waitSnapshot(t, c, "primary probed at t1", func(s *Snapshot) bool { v, _ := s.Get(addrA); return v.ProbedAt.Equal(t1) })
	v, _ := s.Get(addrB)
	if !v.ProbedAt.Equal(t1) || v.LagBytes != 0x1000 || v.LagMS != t1.Sub(t0).Milliseconds() {
		t.Fatalf("with the primary's sample of t1: standby %+v, want 0x1000 bytes and %v behind, without a new probe", v, t1.Sub(t0))
	}

	// Round 2: the primary's answer is recorded after the standby's next
	// probe began: it does not count for that probe.
	gate = make(chan struct{})
	pa = primaryAt(1, 0x3000)
	pa.gate = gate
	nextRound(t, p, clock, pa, standbyAt(1, 0x1000))
	t2 := clock.Now()
	waitSnapshot(t, c, "standby probed at t2", func(s *Snapshot) bool { v, _ := s.Get(addrB); return v.ProbedAt.Equal(t2) })
	waitCall(t, p, addrA, t2)
	clock.Advance(500 * time.Millisecond) // no loop is due: both wait until t2+1s
	close(gate)
	s = waitSnapshot(t, c, "primary probed at t2", func(s *Snapshot) bool { v, _ := s.Get(addrA); return v.ProbedAt.Equal(t2) })
	pv, _ := s.Get(addrA)
	v, _ = s.Get(addrB)
	if pv.CurrentLSN != 0x3000 || v.LagBytes != 0x1000 || v.LagMS != t2.Sub(t0).Milliseconds() {
		t.Fatalf("primary %+v; standby %+v: want the standby judged against the samples before t2 only", pv, v)
	}
}

func TestIdentityMismatch(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	foreign := standbyAt(1, 0x1000)
	foreign.sysID = "other"
	c, p, clock := testChecker(t, Options{Targets: []Target{primaryTarget(addrA), standbyTarget(addrB)}, Logger: zap.New(core)},
		map[string]answer{addrA: primaryAt(1, 0x1000), addrB: foreign})
	pv, sv := waitBoth(t, c, clock.Now())
	d, _ := clock.nextWait(t), clock.nextWait(t) // both loops have logged and wait
	if pv.IdentityMismatch || !sv.IdentityMismatch || sv.LagBytes != -1 || sv.LagMS != -1 || sv.RoleMismatch() {
		t.Fatalf("primary %+v\nstandby %+v\nwant the standby flagged, its lag unknown", pv, sv)
	}
	if n := logs.FilterMessageSnippet("system identifier differs").Len(); n != 1 {
		t.Fatalf("%d identity mismatch lines, want 1: %v", n, logs.All())
	}

	// The primary turns out to be of the standby's cluster: the standby is
	// cleared with the primary's verdict, before its own next probe. Its lag
	// is unknown until then: the primary's history restarted with the new
	// identity, after the standby's last probe.
	gate := make(chan struct{})
	held := foreign
	held.gate = gate
	pa := primaryAt(1, 0x1000)
	pa.sysID = "other"
	p.set(addrA, pa)
	p.set(addrB, held)
	clock.Advance(d)
	s := waitSnapshot(t, c, "the primary's new identity", func(s *Snapshot) bool { v, _ := s.Get(addrA); return v.SystemID == "other" })
	clock.nextWait(t) // the primary's loop has logged and waits
	sv, _ = s.Get(addrB)
	if sv.IdentityMismatch || sv.LagMS != -1 || sv.LagBytes != -1 || sv.ProbedAt.Equal(clock.Now()) {
		t.Fatalf("standby after the primary's change: %+v, want matched, lag unknown, not probed again", sv)
	}
	if n := logs.FilterMessageSnippet("matches the route primary's again").Len(); n != 1 {
		t.Fatalf("%d lines about the identity matching again, want 1", n)
	}
	close(gate)
	_, sv = waitBoth(t, c, clock.Now())
	if sv.IdentityMismatch || sv.LagMS != 0 || sv.LagBytes != 0 {
		t.Fatalf("standby probed again: %+v, want matched and caught up", sv)
	}
}

func TestNoRoutePrimary(t *testing.T) {
	// Standbys of another route's primary, or of none, have no lag and no
	// identity to compare.
	other := Target{Route: "other", Addr: addrA, Configured: RolePrimary}
	c, _, clock := testChecker(t, Options{Targets: []Target{other, standbyTarget(addrB)}},
		map[string]answer{addrA: primaryAt(1, 0x1000), addrB: answer{role: RoleStandby, sysID: "x", tl: 1, replay: 0x1000}})
	_, sv := waitBoth(t, c, clock.Now())
	if sv.LagBytes != -1 || sv.LagMS != -1 || sv.IdentityMismatch {
		t.Fatalf("standby without a route primary: %+v", sv)
	}
}

// Removing the route primary makes the standbys' lag unknown at once; a
// route primary found in recovery gives no samples.
func TestRoutePrimaryChanges(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{primaryTarget(addrA), standbyTarget(addrB)}},
		map[string]answer{addrA: primaryAt(1, 0x1000), addrB: standbyAt(1, 0x1000)})
	_, sv := waitBoth(t, c, clock.Now())
	if sv.LagMS != 0 {
		t.Fatalf("standby %+v, want caught up", sv)
	}
	clock.nextWait(t)
	clock.nextWait(t) // both loops wait for their next probe
	c.SetTargets([]Target{standbyTarget(addrB)})
	if v, _ := c.Snapshot().Get(addrB); v.LagBytes != -1 || v.LagMS != -1 || !v.ProbedAt.Equal(sv.ProbedAt) {
		t.Fatalf("standby after its primary left the targets: %+v, want lag unknown at once", v)
	}
	if _, ok := c.Snapshot().Primary(); ok {
		t.Fatal("Primary() after the primary left the targets")
	}

	// Back, but in recovery (a demoted primary): no samples, so no lag.
	p.set(addrA, standbyAt(1, 0x1000))
	c.SetTargets([]Target{primaryTarget(addrA), standbyTarget(addrB)})
	clock.Advance(time.Second) // B's next probe; A probes at once as a new target
	s := waitSnapshot(t, c, "A in recovery and B probed again", func(s *Snapshot) bool {
		a, ok := s.Get(addrA)
		b, _ := s.Get(addrB)
		return ok && a.Detected == RoleStandby && b.ProbedAt.After(sv.ProbedAt)
	})
	a, _ := s.Get(addrA)
	b, _ := s.Get(addrB)
	if !a.RoleMismatch() || a.LagMS != -1 || b.LagMS != -1 || b.IdentityMismatch {
		t.Fatalf("primary in recovery %+v; standby %+v", a, b)
	}
}

func TestSnapshotPrimary(t *testing.T) {
	var nilSnap *Snapshot
	if _, ok := nilSnap.Primary(); ok {
		t.Fatal("a nil Snapshot has a primary")
	}
	c, _, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrB), primaryTarget(addrA)}},
		map[string]answer{addrA: primaryAt(3, 0x1000), addrB: standbyAt(3, 0x1000)})
	waitBoth(t, c, clock.Now())
	v, ok := c.Snapshot().Primary()
	if !ok || v.Addr != addrA || v.Timeline != 3 || v.CurrentLSN != 0x1000 {
		t.Fatalf("Primary() = %+v, %v", v, ok)
	}
}

func TestHurry(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}}, nil)
	start := clock.Now()
	waitVerdict(t, c, addrA, start)
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("first wait %v, want the interval", d)
	}

	// Hurried at once after a probe: the loop waits out the 10 ms gap.
	c.Hurry(addrA)
	if d := clock.nextWait(t); d != hurryGap {
		t.Fatalf("hurried wait %v, want the rest of %v", d, hurryGap)
	}
	clock.Advance(hurryGap)
	waitVerdict(t, c, addrA, start.Add(hurryGap))

	// Many requests, one probe.
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("wait after a hurried probe %v, want the interval", d)
	}
	for range 100 {
		c.Hurry(addrA)
	}
	if d := clock.nextWait(t); d != hurryGap {
		t.Fatalf("hurried wait %v", d)
	}
	clock.Advance(hurryGap)
	waitVerdict(t, c, addrA, start.Add(2*hurryGap))
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("100 requests made more than one probe: next wait %v", d)
	}

	// Long enough after the last probe: no gap to wait.
	clock.Advance(500 * time.Millisecond)
	c.Hurry(addrA)
	waitVerdict(t, c, addrA, start.Add(2*hurryGap+500*time.Millisecond))
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("next wait %v, want the interval", d)
	}

	var offsets []time.Duration
	for _, call := range p.drainCalls() {
		offsets = append(offsets, call.at.Sub(start))
	}
	want := []time.Duration{0, hurryGap, 2 * hurryGap, 2*hurryGap + 500*time.Millisecond}
	if len(offsets) != len(want) {
		t.Fatalf("probes at %v, want %v", offsets, want)
	}
	for i := range want {
		if offsets[i] != want[i] {
			t.Fatalf("probes at %v, want %v", offsets, want)
		}
	}

	c.Hurry("10.9.9.9:5432") // not a target: ignored
	c.Close()
	c.Hurry(addrA) // closed: ignored
}

// Hurry during a probe asks for one more after it, never a second one at
// the same time.
func TestHurryDuringProbe(t *testing.T) {
	gate := make(chan struct{})
	held := standbyOK
	held.gate = gate
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}}, map[string]answer{addrA: held})
	start := clock.Now()
	recv(t, p.calls, "the first probe")
	for range 10 {
		c.Hurry(addrA)
	}
	close(gate)
	waitVerdict(t, c, addrA, start)
	// The loop sets up its regular wait, then finds the request pending.
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("wait after the probe: %v, want the interval", d)
	}
	if d := clock.nextWait(t); d != hurryGap {
		t.Fatalf("wait after a probe hurried meanwhile: %v, want the %v gap", d, hurryGap)
	}
	clock.Advance(hurryGap)
	waitVerdict(t, c, addrA, start.Add(hurryGap))
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("then %v, want the interval", d)
	}
	if n := p.most(addrA); n != 1 {
		t.Fatalf("%d probes of one server ran at once", n)
	}
}

// A failing server keeps its backoff: Hurry does not shorten it.
func TestHurryKeepsBackoff(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}, MaxBackoff: time.Hour},
		map[string]answer{addrA: unreachable})
	start := clock.Now()
	waitVerdict(t, c, addrA, start)
	if d := clock.nextWait(t); d != time.Second {
		t.Fatalf("wait after a failure %v", d)
	}
	c.Hurry(addrA)
	clock.Advance(hurryGap)
	clock.Advance(time.Second - hurryGap)
	waitVerdict(t, c, addrA, start.Add(time.Second))
	for _, call := range p.drainCalls() {
		if off := call.at.Sub(start); off != 0 && off != time.Second {
			t.Fatalf("a probe at +%v: the hurry shortened the backoff", off)
		}
	}
}

func TestDecodeProbeRow(t *testing.T) {
	row := func(cols ...string) [][]byte {
		out := make([][]byte, len(cols))
		for i, c := range cols {
			if c != "NULL" {
				out[i] = []byte(c)
			}
		}
		return out
	}
	tests := []struct {
		name    string
		row     [][]byte
		want    Verdict
		wantErr string
	}{
		{"fresh primary: insert position past the segment header",
			row("f", "7713904618879911539", "1", "50331688", "NULL", "NULL", "f", "8192", "NULL", "f"),
			Verdict{Detected: RolePrimary, SystemID: "7713904618879911539", Timeline: 1, CurrentLSN: 0x3000000}, ""},
		{"standby",
			row("t", "77", "2", "NULL", "50331800", "50331700", "t", "8192", "NULL", "f"),
			Verdict{Detected: RoleStandby, SystemID: "77", Timeline: 2, ReceiveLSN: 50331800, ReplayLSN: 50331700, ReplayPaused: true}, ""},
		{"standby with a start time",
			row("t", "77", "2", "NULL", "50331800", "50331700", "f", "8192", "1764547200123456", "f"),
			Verdict{Detected: RoleStandby, SystemID: "77", Timeline: 2, ReceiveLSN: 50331800, ReplayLSN: 50331700,
				StartedAt: time.UnixMicro(1764547200123456)}, ""},
		{"standby that never streamed",
			row("t", "77", "1", "NULL", "NULL", "50331648", "f", "8192", "NULL", "t"),
			Verdict{Detected: RoleStandby, SystemID: "77", Timeline: 1, ReplayLSN: 50331648}, ""},
		{"timeline above 2^31", row("f", "77", "4294967295", "100", "NULL", "NULL", "f", "8192", "NULL", "f"),
			Verdict{Detected: RolePrimary, SystemID: "77", Timeline: 4294967295, CurrentLSN: 100}, ""},
		{"LSN above 2^63", row("f", "77", "1", "18446744073709551615", "NULL", "NULL", "f", "8192", "NULL", "f"),
			Verdict{Detected: RolePrimary, SystemID: "77", Timeline: 1, CurrentLSN: 1<<64 - 1}, ""},
		{"bad role", row("x", "77", "1", "1", "NULL", "NULL", "f", "8192", "NULL", "f"), Verdict{}, "pg_is_in_recovery"},
		{"no system id", row("f", "", "1", "1", "NULL", "NULL", "f", "8192", "NULL", "f"), Verdict{}, "system identifier"},
		{"bad timeline", row("f", "77", "-1", "1", "NULL", "NULL", "f", "8192", "NULL", "f"), Verdict{}, "timeline"},
		{"timeline too big", row("f", "77", "4294967296", "1", "NULL", "NULL", "f", "8192", "NULL", "f"), Verdict{}, "timeline"},
		{"bad LSN", row("f", "77", "1", "0/16B6C50", "NULL", "NULL", "f", "8192", "NULL", "f"), Verdict{}, "current WAL position"},
		{"bad timeline fallback", row("t", "77", "1", "NULL", "1", "1", "f", "8192", "NULL", "NULL"), Verdict{}, "timeline fallback"},
		{"bad paused", row("t", "77", "1", "NULL", "1", "1", "maybe", "8192", "NULL", "f"), Verdict{}, "pg_is_wal_replay_paused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, fallback, err := decodeProbeRow(tc.row)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decodeProbeRow = %+v, %v; want an error about %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("decodeProbeRow = %+v, %v\nwant %+v", got, err, tc.want)
			}
			if want := tc.row[9][0] == 't'; fallback != want {
				t.Fatalf("decodeProbeRow fallback = %v, want %v", fallback, want)
			}
		})
	}
}
