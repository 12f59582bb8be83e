package health

import (
	"testing"
	"time"
)

func TestElect(t *testing.T) {
	const sys, other = "7300000000000000001", "7300000000000000002"
	prim := func(addr string, tl uint32) Verdict {
		return Verdict{Target: Target{Addr: addr}, Reachable: true, Detected: RolePrimary, SystemID: sys, Timeline: tl}
	}
	stby := func(addr string) Verdict {
		return Verdict{Target: Target{Addr: addr}, Reachable: true, Detected: RoleStandby, SystemID: sys}
	}
	down := func(addr string) Verdict { return Verdict{Target: Target{Addr: addr}} }
	foreign := func(v Verdict) Verdict { v.SystemID = other; return v }
	last := Election{Primary: "a", Timeline: 1}
	tests := []struct {
		name  string
		vs    []Verdict
		sysID string
		last  Election
		want  Election
	}{
		{"the configured primary, first election", []Verdict{prim("a", 1), stby("b"), stby("c")}, sys, Election{}, Election{Primary: "a", Timeline: 1}},
		{"unknown system: any primary", []Verdict{stby("b"), prim("a", 1)}, "", Election{}, Election{Primary: "a", Timeline: 1}},
		{"primary up", []Verdict{prim("a", 1), stby("b"), stby("c")}, sys, last, last},
		{"primary down: kept", []Verdict{down("a"), stby("b"), stby("c")}, sys, last, last},
		{"primary not probed yet: kept", []Verdict{stby("b")}, sys, last, last},
		{"promotion while the old primary is down", []Verdict{down("a"), prim("b", 2), stby("c")}, sys, last, Election{Primary: "b", Timeline: 2}},
		{"highest timeline wins over a running old primary", []Verdict{prim("a", 1), prim("b", 2), stby("c")}, sys, last, Election{Primary: "b", Timeline: 2}},
		{"two primaries on one timeline: ambiguous", []Verdict{prim("a", 1), prim("b", 1)}, sys, last, Election{Ambiguous: true, Timeline: 1}},
		{"ambiguity ends when one goes", []Verdict{down("a"), prim("b", 1)}, sys, Election{Ambiguous: true, Timeline: 1}, Election{Primary: "b", Timeline: 1}},
		{"demoted, no other primary: none", []Verdict{stby("a"), stby("b"), stby("c")}, sys, last, Election{Timeline: 1}},
		{"another system is never elected", []Verdict{down("a"), foreign(prim("b", 2))}, sys, last, last},
		{"the primary now of another system: none", []Verdict{foreign(prim("a", 1))}, sys, last, Election{Timeline: 1}},
		{"old primary restarted without rewind, new one down: none", []Verdict{prim("a", 1), down("b"), stby("c")}, sys, Election{Primary: "b", Timeline: 2}, Election{Primary: "b", Timeline: 2}},
		{"old primary restarted without rewind, new one demoted: none", []Verdict{prim("a", 1), stby("b")}, sys, Election{Primary: "b", Timeline: 2}, Election{Timeline: 2}},
		{"old primary rewound as a standby", []Verdict{stby("a"), prim("b", 2), stby("c")}, sys, Election{Primary: "b", Timeline: 2}, Election{Primary: "b", Timeline: 2}},
		{"a second failover", []Verdict{down("a"), down("b"), prim("c", 3)}, sys, Election{Primary: "b", Timeline: 2}, Election{Primary: "c", Timeline: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Elect(tc.vs, tc.sysID, tc.last); got != tc.want {
				t.Fatalf("Elect = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCheckerFollowsFailover drives a Checker with FollowFailover through a
// failover: the configured primary goes down, a replica is promoted on
// timeline 2, the old primary comes back without a rewind (split brain),
// then as a standby of the new primary (eligible again).
func TestCheckerFollowsFailover(t *testing.T) {
	targets := []Target{
		{Route: "main", Addr: addrA, Configured: RolePrimary},
		standbyTarget(addrB),
		standbyTarget(addrC),
	}
	primTL := func(tl uint32, lsn uint64) answer {
		return answer{role: RolePrimary, sysID: primaryOK.sysID, tl: tl, current: lsn}
	}
	stbyTL := func(tl uint32, lsn uint64) answer {
		return answer{role: RoleStandby, sysID: standbyOK.sysID, tl: tl, receive: lsn, replay: lsn}
	}
	c, p, clock := testChecker(t, Options{Targets: targets, FollowFailover: true, MaxBackoff: time.Second},
		map[string]answer{addrA: primTL(1, 1000), addrB: stbyTL(1, 1000), addrC: stbyTL(1, 1000)})
	step := stepper(t, c, p, clock, addrA, addrB, addrC)
	s := c.Snapshot()
	if e, ok := s.Election("main"); !ok || e.Primary != addrA {
		t.Fatalf("first election %+v %v, want %s", e, ok, addrA)
	}
	if v, _ := s.Primary(); v.Addr != addrA || !v.Elected {
		t.Fatalf("Primary() = %+v", v)
	}

	// The primary goes down: still elected (writes fail with a connection error).
	s = step(map[string]answer{addrA: unreachable})
	if e, _ := s.Election("main"); e.Primary != addrA {
		t.Fatalf("primary down: election %+v, want %s kept", e, addrA)
	}
	// B is promoted (timeline 2), C follows it.
	s = step(map[string]answer{addrB: primTL(2, 2000), addrC: stbyTL(2, 2000)})
	if e, _ := s.Election("main"); e.Primary != addrB || e.Timeline != 2 {
		t.Fatalf("after the promotion: election %+v, want %s on timeline 2", e, addrB)
	}
	if v, _ := s.Primary(); v.Addr != addrB {
		t.Fatalf("Primary() = %s, want %s", v.Addr, addrB)
	}
	if v, _ := s.Get(addrB); v.SplitBrain || v.LagBytes != 0 {
		t.Fatalf("elected primary verdict %+v", v)
	}
	if v, _ := s.Get(addrC); v.SplitBrain || v.LagBytes != 0 || v.Timeline != 2 {
		t.Fatalf("standby of the new primary: %+v, want lag 0 on timeline 2", v)
	}
	// A comes back without a rewind, on timeline 1: a split brain.
	s = step(map[string]answer{addrA: primTL(1, 1500)})
	if e, _ := s.Election("main"); e.Primary != addrB {
		t.Fatalf("old primary back on timeline 1: election %+v, want %s", e, addrB)
	}
	if v, _ := s.Get(addrA); !v.SplitBrain || v.Elected {
		t.Fatalf("old primary on timeline 1: %+v, want a split brain", v)
	}
	// A rewound as a standby of B: a replica like any other.
	s = step(map[string]answer{addrA: stbyTL(2, 2000)})
	if v, _ := s.Get(addrA); v.SplitBrain || v.LagBytes != 0 {
		t.Fatalf("old primary rewound: %+v, want a standby with lag 0", v)
	}
}

// TestCheckerLagAcrossFailover: while the primary is down and after a new
// one is elected, a standby keeps a measurable lag. Its probe may fall
// back to the timeline of its latest restartpoint once its WAL receiver
// stops (an older timeline than it is on): within one run of the server
// the highest timeline seen stands. After the election, a standby still
// on the previous timeline and not past its switch point is judged
// against the previous primary's samples up to that point; past it, its
// lag is unknown (it may hold WAL the new timeline never had).
func TestCheckerLagAcrossFailover(t *testing.T) {
	targets := []Target{
		{Route: "main", Addr: addrA, Configured: RolePrimary},
		standbyTarget(addrB),
		standbyTarget(addrC),
	}
	run1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prim := func(tl uint32, lsn uint64, h *TimelineHistory) answer {
		return answer{role: RolePrimary, sysID: primaryOK.sysID, tl: tl, current: lsn, started: run1, history: h}
	}
	stby := func(tl uint32, lsn uint64, started time.Time) answer {
		return answer{role: RoleStandby, sysID: standbyOK.sysID, tl: tl, receive: lsn, replay: lsn, started: started}
	}
	c, p, clock := testChecker(t, Options{Targets: targets, FollowFailover: true, MaxBackoff: time.Second},
		map[string]answer{addrA: prim(2, 900, nil), addrB: stby(2, 900, run1), addrC: stby(2, 900, run1)})
	step := stepper(t, c, p, clock, addrA, addrB, addrC)
	step(map[string]answer{addrA: prim(2, 1000, nil), addrB: stby(2, 1000, run1)})
	// The primary dies; the standbys' receivers stop, and their probes
	// fall back to a restartpoint on timeline 1.
	s := step(map[string]answer{addrA: unreachable, addrB: stby(1, 1000, run1), addrC: stby(1, 900, run1)})
	if v, _ := s.Get(addrB); v.Timeline != 2 || v.LagMS != 0 {
		t.Fatalf("standby B during the outage: timeline %d lag %d ms, want timeline 2 (kept) and lag 0", v.Timeline, v.LagMS)
	}
	if v, _ := s.Get(addrC); v.Timeline != 2 || v.LagMS < 0 || v.LagBytes != 100 {
		t.Fatalf("standby C during the outage: timeline %d lag %d ms %d bytes, want timeline 2 and a known lag of 100 bytes", v.Timeline, v.LagMS, v.LagBytes)
	}
	// A restarted standby (another start time) starts afresh.
	run2 := run1.Add(time.Hour)
	s = step(map[string]answer{addrC: stby(1, 900, run2)})
	if v, _ := s.Get(addrC); v.Timeline != 1 {
		t.Fatalf("restarted standby C: timeline %d, want the 1 it reports", v.Timeline)
	}
	// B is promoted to timeline 3, leaving timeline 2 at 1000; C, still on
	// timeline 2 at 900, has not switched yet: its lag is measured.
	h3, err := ParseTimelineHistory(3, "1\t0/100\tx\n2\t0/3E8\tx\n")
	if err != nil {
		t.Fatal(err)
	}
	s = step(map[string]answer{addrB: prim(3, 1100, h3), addrC: stby(2, 900, run2)})
	if e, _ := s.Election("main"); e.Primary != addrB || e.Timeline != 3 {
		t.Fatalf("election %+v, want %s on timeline 3", e, addrB)
	}
	if v, _ := s.Get(addrC); v.LagMS < 0 || v.LagBytes != 200 {
		t.Fatalf("standby C on timeline 2 below the switch point: lag %d ms %d bytes, want known, 200 bytes", v.LagMS, v.LagBytes)
	}
	// C past timeline 2's switch point while still on it: diverged WAL.
	s = step(map[string]answer{addrC: stby(2, 1050, run2)})
	if v, _ := s.Get(addrC); v.LagMS != -1 || v.LagBytes != -1 {
		t.Fatalf("standby C past the switch point on timeline 2: lag %d ms %d bytes, want unknown", v.LagMS, v.LagBytes)
	}
	// C follows timeline 3 and catches up.
	s = step(map[string]answer{addrC: stby(3, 1100, run2)})
	if v, _ := s.Get(addrC); v.LagMS != 0 || v.Timeline != 3 {
		t.Fatalf("standby C on timeline 3: timeline %d lag %d ms, want 3 and 0", v.Timeline, v.LagMS)
	}
}

// stepper waits for every server's first verdict, then returns step: it
// sets the answers and moves time on, 10 ms at a time, until every server
// was probed after that (backoffs and hurries make the loops' waits
// differ), and returns the snapshot.
func stepper(t *testing.T, c *Checker, p *fakeProber, clock *fakeClock, addrs ...string) func(map[string]answer) *Snapshot {
	t.Helper()
	start := clock.Now()
	for _, a := range addrs {
		waitVerdict(t, c, a, start)
	}
	return func(answers map[string]answer) *Snapshot {
		t.Helper()
		for a, ans := range answers {
			p.set(a, ans)
		}
		t0 := clock.Now()
		deadline := time.Now().Add(5 * time.Second)
		for {
			s := c.Snapshot()
			done := true
			for _, a := range addrs {
				if v, ok := s.Get(a); !ok || !v.ProbedAt.After(t0) {
					done = false
				}
			}
			if done {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("not every server was probed after %v: %+v", t0, s.All())
			}
			clock.Advance(10 * time.Millisecond)
			time.Sleep(time.Millisecond)
		}
	}
}
