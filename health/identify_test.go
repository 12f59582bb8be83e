package health

import (
	"context"
	"testing"
	"time"
)

func TestIdentifyWait(t *testing.T) {
	for n, want := range map[int]time.Duration{
		1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second,
		6: 16 * time.Second, 7: 30 * time.Second, 8: 30 * time.Second, 100: 30 * time.Second,
	} {
		if got := identifyWait(n); got != want {
			t.Errorf("identifyWait(%d) = %v, want %v", n, got, want)
		}
	}
}

// The worked examples of identifyDue's comment, and more.
func TestIdentifyDue(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	behind := replayTimeline{fallback: true, known: 1, askedAt: t0}
	with := func(f func(*replayTimeline)) replayTimeline {
		s := behind
		f(&s)
		return s
	}
	tests := []struct {
		name    string
		s       replayTimeline
		primary uint32
		now     time.Duration // after t0
		want    bool
	}{
		{"first ask since it fell behind", behind, 2, 0, true},
		{"asks 1, 400 ms later", with(func(s *replayTimeline) { s.asks = 1 }), 2, 400 * time.Millisecond, false},
		{"asks 1, 500 ms later", with(func(s *replayTimeline) { s.asks = 1 }), 2, 500 * time.Millisecond, true},
		{"asks 3, 1.999 s later", with(func(s *replayTimeline) { s.asks = 3 }), 2, 1999 * time.Millisecond, false},
		{"asks 3, 2 s later", with(func(s *replayTimeline) { s.asks = 3 }), 2, 2 * time.Second, true},
		{"asks 9, 29.999 s later (the cap)", with(func(s *replayTimeline) { s.asks = 9 }), 2, 29999 * time.Millisecond, false},
		{"asks 9, 30 s later", with(func(s *replayTimeline) { s.asks = 9 }), 2, 30 * time.Second, true},
		{"refused 29.999 s ago", with(func(s *replayTimeline) { s.refusedAt = t0 }), 2, 29999 * time.Millisecond, false},
		{"refused 30 s ago", with(func(s *replayTimeline) { s.refusedAt = t0 }), 2, 30 * time.Second, true},
		{"refused, then asks 7: the wait after the last ask too",
			with(func(s *replayTimeline) { s.refusedAt, s.asks = t0, 7 }), 2, 30 * time.Second, true},
		{"received_tli readable", with(func(s *replayTimeline) { s.fallback = false }), 2, time.Hour, false},
		{"primary on the same timeline", behind, 1, time.Hour, false},
		{"primary behind the standby", with(func(s *replayTimeline) { s.known = 3 }), 2, time.Hour, false},
		{"no primary seen", behind, 0, time.Hour, false},
		{"never probed (zero state)", replayTimeline{}, 5, time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.identifyDue(tc.primary, t0.Add(tc.now)); got != tc.want {
				t.Fatalf("identifyDue(%d, t0+%v) = %v, want %v (state %+v)", tc.primary, tc.now, got, tc.want, tc.s)
			}
		})
	}
}

// The worked examples of observe's comment, and more.
func TestIdentifyObserve(t *testing.T) {
	runS := time.Date(2026, 12, 5, 11, 0, 0, 0, time.UTC)
	runS2 := runS.Add(time.Hour)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Second)
	const sys = "7300000000000000001"
	standby := func(tl uint32, started time.Time) Verdict {
		return Verdict{Detected: RoleStandby, SystemID: sys, Timeline: tl, StartedAt: started}
	}
	prev := replayTimeline{sysID: sys, started: runS, fallback: true, known: 1}
	with := func(s replayTimeline, f func(*replayTimeline)) replayTimeline {
		f(&s)
		return s
	}
	answered := func(tl uint32) identifyResult { return identifyResult{asked: true, sysID: sys, tl: tl} }
	tests := []struct {
		name     string
		s        replayTimeline
		v        Verdict
		fallback bool
		id       identifyResult
		primary  uint32
		wantTL   uint32
		want     replayTimeline
	}{
		{"no ask", prev, standby(1, runS), true, identifyResult{}, 2,
			1, prev},
		{"asked in the same run, answered 2: caught up", with(prev, func(s *replayTimeline) { s.asks, s.askedAt = 2, earlier }), standby(1, runS), true, answered(2), 2,
			2, with(prev, func(s *replayTimeline) { s.known, s.askedAt = 2, now })},
		{"asked in the same run, answered 1: still behind", prev, standby(1, runS), true, answered(1), 2,
			1, with(prev, func(s *replayTimeline) { s.asks, s.askedAt = 1, now })},
		{"answered 2, but the probe shows a new run: the answer is dropped", with(prev, func(s *replayTimeline) { s.asks = 3 }), standby(1, runS2), true, answered(2), 2,
			1, with(prev, func(s *replayTimeline) { s.started, s.asks, s.askedAt = runS2, 1, now })},
		{"answered 2, from another system: dropped", prev, standby(1, runS), true, identifyResult{asked: true, sysID: "9", tl: 2}, 2,
			1, with(prev, func(s *replayTimeline) { s.asks, s.askedAt = 1, now })},
		{"an earlier answer 2 of this run holds, no ask", with(prev, func(s *replayTimeline) { s.known = 2 }), standby(1, runS), true, identifyResult{}, 2,
			2, with(prev, func(s *replayTimeline) { s.known = 2 })},
		{"an earlier answer of another run does not", with(prev, func(s *replayTimeline) { s.known = 2 }), standby(1, runS2), true, identifyResult{}, 2,
			1, with(prev, func(s *replayTimeline) { s.started = runS2 })},
		{"the fallback moved past an earlier answer", with(prev, func(s *replayTimeline) { s.known = 2 }), standby(3, runS), true, identifyResult{}, 3,
			3, with(prev, func(s *replayTimeline) { s.known = 3 })},
		{"received_tli readable: the state is cleared", with(prev, func(s *replayTimeline) { s.known, s.asks = 2, 4 }), standby(3, runS), false, identifyResult{}, 3,
			3, replayTimeline{sysID: sys, started: runS}},
		{"refused: remembered, counted", prev, standby(1, runS), true, identifyResult{asked: true, refused: true}, 2,
			1, with(prev, func(s *replayTimeline) { s.asks, s.askedAt, s.refusedAt = 1, now, now })},
		{"a refusal outlives the run", with(prev, func(s *replayTimeline) { s.refusedAt = earlier }), standby(1, runS2), true, identifyResult{}, 2,
			1, with(prev, func(s *replayTimeline) { s.started, s.refusedAt = runS2, earlier })},
		{"failed (a timeout): counted, not a refusal", prev, standby(1, runS), true, identifyResult{asked: true}, 2,
			1, with(prev, func(s *replayTimeline) { s.asks, s.askedAt = 1, now })},
		{"promoted: a primary keeps nothing but the refusal",
			with(prev, func(s *replayTimeline) { s.known, s.refusedAt = 1, earlier }),
			Verdict{Detected: RolePrimary, SystemID: sys, Timeline: 2, StartedAt: runS}, false, identifyResult{}, 2,
			2, replayTimeline{sysID: sys, started: runS, refusedAt: earlier}},
		{"no start time: no run to carry anything in", with(prev, func(s *replayTimeline) { s.started, s.known = time.Time{}, 2 }), standby(1, time.Time{}), true, answered(2), 2,
			1, replayTimeline{sysID: sys, fallback: true, known: 1, asks: 1, askedAt: now}},
		{"first probe", replayTimeline{}, standby(1, runS), true, identifyResult{}, 0,
			1, prev},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, tl := tc.s.observe(tc.v, tc.fallback, tc.id, tc.primary, now)
			if tl != tc.wantTL || got != tc.want {
				t.Fatalf("observe = %+v, %d\nwant     %+v, %d", got, tl, tc.want, tc.wantTL)
			}
			if tl > max(tc.v.Timeline, tc.id.tl, tc.s.known) {
				t.Fatalf("observe reported timeline %d, above everything it was told", tl)
			}
		})
	}
}

func TestDecodeIdentifySystem(t *testing.T) {
	row := func(cols ...string) [][][]byte {
		r := make([][]byte, len(cols))
		for i, c := range cols {
			if c != "NULL" {
				r[i] = []byte(c)
			}
		}
		return [][][]byte{r}
	}
	tests := []struct {
		name   string
		rows   [][][]byte
		sysID  string
		tl     uint32
		wantOK bool
	}{
		// As PostgreSQL 15 answered on a standby after a promotion.
		{"standby", row("7715639978422207501", "2", "0/401EF50", "NULL"), "7715639978422207501", 2, true},
		{"no rows", nil, "", 0, false},
		{"two rows", append(row("1", "2", "0/0", "NULL"), row("1", "2", "0/0", "NULL")...), "", 0, false},
		{"one column", row("1"), "", 0, false},
		{"no system id", row("", "2", "0/0", "NULL"), "", 0, false},
		{"timeline 0", row("1", "0", "0/0", "NULL"), "", 0, false},
		{"timeline not a number", row("1", "x", "0/0", "NULL"), "", 0, false},
		{"timeline above 2^32", row("1", "4294967296", "0/0", "NULL"), "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sysID, tl, err := decodeIdentifySystem(tc.rows)
			if (err == nil) != tc.wantOK || sysID != tc.sysID || tl != tc.tl {
				t.Fatalf("decodeIdentifySystem = %q, %d, %v; want %q, %d, ok %v", sysID, tl, err, tc.sysID, tc.tl, tc.wantOK)
			}
		})
	}
}

// An ask takes half of what is left of the probe's time.
func TestIdentifyContext(t *testing.T) {
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(200*time.Millisecond))
	defer cancel()
	ictx, icancel := identifyContext(ctx, now)
	defer icancel()
	if dl, _ := ictx.Deadline(); !dl.Equal(now.Add(100 * time.Millisecond)) {
		t.Fatalf("deadline %v after now, want 100ms", dl.Sub(now))
	}
	ictx2, icancel2 := identifyContext(context.Background(), now)
	defer icancel2()
	if _, ok := ictx2.Deadline(); !ok {
		t.Fatal("an ask without a probe deadline is unbounded")
	}
}
