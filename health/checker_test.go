package health

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const (
	addrA = "10.0.0.1:5432"
	addrB = "10.0.0.2:5432"
	addrC = "10.0.0.3:5432"
)

func standbyTarget(addr string) Target {
	return Target{Route: "main", Addr: addr, Configured: RoleStandby}
}

func TestFirstVerdictPublished(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}}, nil)
	start := clock.Now()

	v := waitVerdict(t, c, addrA, start)
	want := Verdict{Target: standbyTarget(addrA), Reachable: true, Detected: RoleStandby, SystemID: standbyOK.sysID, ProbedAt: start,
		LagBytes: -1, LagMS: -1} // no route primary: lag unknown
	if v != want {
		t.Fatalf("first verdict\n got %+v\nwant %+v", v, want)
	}
	if call := recv(t, p.calls, "the first probe"); call.addr != addrA || !call.at.Equal(start) {
		t.Fatalf("first probe %+v, want %s at %v", call, addrA, start)
	}
	if _, ok := c.Snapshot().Get(addrB); ok {
		t.Fatal("a verdict for a server that is not a target")
	}
	if all := c.Snapshot().All(); len(all) != 1 || all[0] != want {
		t.Fatalf("All() = %+v", all)
	}
}

func TestNoVerdictBeforeFirstProbe(t *testing.T) {
	c, _, _ := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}}, map[string]answer{addrA: {hang: true}})
	s := c.Snapshot()
	if s == nil {
		t.Fatal("Snapshot() = nil")
	}
	if _, ok := s.Get(addrA); ok {
		t.Fatal("verdict before the first probe answered")
	}
	if len(s.All()) != 0 {
		t.Fatalf("All() = %+v before any probe answered", s.All())
	}
	var nilSnap *Snapshot
	if _, ok := nilSnap.Get(addrA); ok || nilSnap.All() != nil {
		t.Fatal("a nil Snapshot has verdicts")
	}
}

// Each step sets the server's answer, lets one probe run, and checks the
// published verdict.
func TestVerdictTransitions(t *testing.T) {
	type step struct {
		answer       answer
		reachable    bool
		detected     Role
		sysID        string
		err          string
		roleMismatch bool
	}
	up := func(a answer, mismatch bool) step {
		return step{answer: a, reachable: true, detected: a.role, sysID: a.sysID, roleMismatch: mismatch}
	}
	down := step{answer: unreachable, err: errRefused.Error()}
	tests := []struct {
		name       string
		configured Role
		steps      []step
	}{
		{"unreachable then reachable", RoleStandby, []step{down, down, up(standbyOK, false)}},
		{"reachable then unreachable then back", RoleStandby, []step{up(standbyOK, false), down, up(standbyOK, false)}},
		{"standby promoted: role change is a mismatch", RoleStandby, []step{up(standbyOK, false), up(primaryOK, true), up(standbyOK, false)}},
		{"configured primary detected in recovery", RolePrimary, []step{up(primaryOK, false), up(standbyOK, true)}},
		{"mismatch is not reported while unreachable", RoleStandby, []step{up(primaryOK, true), down, up(primaryOK, true)}},
		{"system identifier recorded as given", RoleStandby, []step{up(answer{role: RoleStandby, sysID: "1"}, false), up(answer{role: RoleStandby, sysID: "2"}, false)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target := Target{Route: "main", Addr: addrA, Configured: tc.configured}
			c, p, clock := testChecker(t, Options{Targets: []Target{target}, MaxBackoff: time.Hour},
				map[string]answer{addrA: tc.steps[0].answer})
			for i, st := range tc.steps {
				if i > 0 {
					d := clock.nextWait(t)
					p.set(addrA, st.answer)
					clock.Advance(d)
				}
				got := waitVerdict(t, c, addrA, clock.Now())
				want := Verdict{Target: target, Reachable: st.reachable, Detected: st.detected, SystemID: st.sysID, ProbedAt: clock.Now(), Err: st.err,
					LagBytes: -1, LagMS: -1}
				if st.reachable && target.Configured == RolePrimary && st.detected == RolePrimary {
					want.LagBytes, want.LagMS = 0, 0 // the route primary is its own head
				}
				// Fixed roles: the configured primary is the one elected,
				// and a role mismatch is the split brain.
				want.Elected = target.Configured == RolePrimary
				want.SplitBrain = st.roleMismatch
				if got != want {
					t.Fatalf("step %d:\n got %+v\nwant %+v", i, got, want)
				}
				if got.RoleMismatch() != st.roleMismatch {
					t.Fatalf("step %d: RoleMismatch() = %v, want %v", i, got.RoleMismatch(), st.roleMismatch)
				}
			}
		})
	}
}

func TestRoleMismatch(t *testing.T) {
	tests := []struct {
		configured, detected Role
		reachable            bool
		want                 bool
	}{
		{RoleStandby, RoleStandby, true, false},
		{RolePrimary, RolePrimary, true, false},
		{RoleStandby, RolePrimary, true, true},
		{RolePrimary, RoleStandby, true, true},
		{RoleStandby, RolePrimary, false, false}, // not reachable: no evidence
		{RoleStandby, RoleUnknown, true, false},
		{RoleUnknown, RolePrimary, true, false},
		{RoleUnknown, RoleUnknown, false, false},
	}
	for _, tc := range tests {
		v := Verdict{Target: Target{Configured: tc.configured}, Detected: tc.detected, Reachable: tc.reachable}
		if got := v.RoleMismatch(); got != tc.want {
			t.Errorf("configured %v, detected %v, reachable %v: RoleMismatch() = %v, want %v",
				tc.configured, tc.detected, tc.reachable, got, tc.want)
		}
	}
}

func TestBackoffFunction(t *testing.T) {
	const s = time.Second
	tests := []struct {
		interval, ceiling time.Duration
		n                 int
		want              time.Duration
	}{
		{2 * s, 10 * s, 1, 2 * s},
		{2 * s, 10 * s, 2, 4 * s},
		{2 * s, 10 * s, 3, 8 * s},
		{2 * s, 10 * s, 4, 10 * s},
		{2 * s, 10 * s, 5, 10 * s},
		{2 * s, 10 * s, 1 << 30, 10 * s}, // no overflow
		{2 * s, 2 * s, 3, 2 * s},
		{time.Hour, 1 << 62, 100, 1 << 62},
	}
	for _, tc := range tests {
		if got := backoff(tc.interval, tc.ceiling, tc.n); got != tc.want {
			t.Errorf("backoff(%v, %v, %d) = %v, want %v", tc.interval, tc.ceiling, tc.n, got, tc.want)
		}
	}
}

// A failing server is probed after 1, 2, 4, 5, 5 Intervals (cap 5 s), each
// failure published at once; one success brings the interval back.
func TestBackoffGrowsAndIsCapped(t *testing.T) {
	const s = time.Second
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}, Interval: s, MaxBackoff: 5 * s},
		map[string]answer{addrA: unreachable})
	start := clock.Now()

	wantWaits := []time.Duration{1 * s, 2 * s, 4 * s, 5 * s, 5 * s}
	var gotWaits []time.Duration
	for i := range wantWaits {
		v := waitVerdict(t, c, addrA, clock.Now())
		if v.Reachable || v.Err == "" {
			t.Fatalf("failure %d published as %+v", i+1, v)
		}
		d := clock.nextWait(t)
		gotWaits = append(gotWaits, d)
		if i == len(wantWaits)-1 {
			p.set(addrA, standbyOK)
		}
		clock.Advance(d)
	}
	if fmt.Sprint(gotWaits) != fmt.Sprint(wantWaits) {
		t.Fatalf("waits after failures %v, want %v", gotWaits, wantWaits)
	}
	if v := waitVerdict(t, c, addrA, clock.Now()); !v.Reachable {
		t.Fatalf("recovery not published: %+v", v)
	}
	if d := clock.nextWait(t); d != s {
		t.Fatalf("wait after a success following failures = %v, want the interval %v", d, s)
	}

	// The prober saw the same schedule, on the injected clock.
	var offsets []time.Duration
	for _, call := range p.drainCalls() {
		offsets = append(offsets, call.at.Sub(start))
	}
	want := []time.Duration{0, 1 * s, 3 * s, 7 * s, 12 * s, 17 * s}
	if fmt.Sprint(offsets) != fmt.Sprint(want) {
		t.Fatalf("probe times (from start) %v, want %v", offsets, want)
	}
}

func TestMaxBackoffNeverBelowInterval(t *testing.T) {
	c, _, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}, Interval: 3 * time.Second, MaxBackoff: time.Second},
		map[string]answer{addrA: unreachable})
	waitVerdict(t, c, addrA, clock.Now())
	if d := clock.nextWait(t); d != 3*time.Second {
		t.Fatalf("wait after a failure = %v, want the 3s interval", d)
	}
}

// A probe that outlives Timeout fails, whether the prober gives up with the
// context's error or answers "fine" too late.
func TestProbeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    answer
	}{
		{"prober honours the context", answer{hang: true}},
		{"prober answers after the deadline", answer{late: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}, Timeout: 20 * time.Millisecond},
				map[string]answer{addrA: tc.a})
			v := waitVerdict(t, c, addrA, clock.Now())
			if v.Reachable || v.Detected != RoleUnknown || v.SystemID != "" {
				t.Fatalf("timed-out probe published as %+v", v)
			}
			if !strings.HasPrefix(v.Err, "probe timed out after 20ms") {
				t.Fatalf("Err = %q, want it to start with %q", v.Err, "probe timed out after 20ms")
			}
			if d := clock.nextWait(t); d != time.Second {
				t.Fatalf("wait after the first timeout = %v, want the interval", d)
			}
		})
	}
}

func TestChangedClosesOnPublication(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}}, nil)
	first := waitVerdict(t, c, addrA, clock.Now())
	s1 := c.Snapshot()
	ch := c.Changed()
	if ch != s1.Changed() {
		t.Fatal("Checker.Changed and Snapshot().Changed disagree")
	}
	select {
	case <-ch:
		t.Fatal("Changed closed without a publication")
	default:
	}
	d := clock.nextWait(t)
	p.set(addrA, primaryOK)
	clock.Advance(d)
	recv(t, ch, "Changed to close at the next publication")

	// The old snapshot is untouched by the new verdict and by its readers.
	if v, _ := s1.Get(addrA); v != first {
		t.Fatalf("published snapshot changed: %+v, was %+v", v, first)
	}
	all := s1.All()
	all[0].Reachable = false
	if v, _ := s1.Get(addrA); !v.Reachable {
		t.Fatal("All() exposed the snapshot's storage")
	}
	if v, _ := c.Snapshot().Get(addrA); v.Detected != RolePrimary {
		t.Fatalf("new snapshot %+v, want the primary verdict", v)
	}
}

func TestSetTargets(t *testing.T) {
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA), standbyTarget(addrB)}}, nil)
	start := clock.Now()
	waitVerdict(t, c, addrA, start)
	waitVerdict(t, c, addrB, start)

	// Remove A, relabel B (another route, now the primary), add C.
	relabelled := Target{Route: "other", Addr: addrB, Configured: RolePrimary}
	c.SetTargets([]Target{relabelled, standbyTarget(addrC)})

	// SetTargets returned: A's loop has ended and its verdict is gone.
	if got := recv(t, p.forgotten, "Forget of the removed server"); got != addrA {
		t.Fatalf("Forget(%q), want %q", got, addrA)
	}
	s := c.Snapshot()
	if _, ok := s.Get(addrA); ok {
		t.Fatal("removed server still in the snapshot")
	}
	b, ok := s.Get(addrB)
	if !ok || b.Target != relabelled || !b.ProbedAt.Equal(start) || !b.Reachable {
		t.Fatalf("B after reload: %+v (ok %v), want its old verdict relabelled %+v", b, ok, relabelled)
	}
	if !b.RoleMismatch() {
		t.Fatal("B is configured primary now but detected standby: want a mismatch")
	}
	waitVerdict(t, c, addrC, start)
	if all := c.Snapshot().All(); len(all) != 2 || all[0].Addr != addrB || all[1].Addr != addrC {
		t.Fatalf("All() = %+v, want B then C (target order)", all)
	}
	// B kept its loop: one probe each, and no time has passed.
	count := map[string]int{}
	for _, call := range p.drainCalls() {
		count[call.addr]++
	}
	if count[addrA] != 1 || count[addrB] != 1 || count[addrC] != 1 {
		t.Fatalf("probes per server %v, want one each", count)
	}
	select {
	case got := <-p.forgotten:
		t.Fatalf("Forget(%q) for a server still probed", got)
	default:
	}

	// Relabelled B's next probe carries the new target. A (before its
	// removal), B and C have each started a wait.
	for range 3 {
		clock.nextWait(t)
	}
	clock.Advance(time.Second)
	if v := waitVerdict(t, c, addrB, clock.Now()); v.Target != relabelled {
		t.Fatalf("B's next verdict has target %+v", v.Target)
	}

	// An empty target list stops everything.
	c.SetTargets(nil)
	if all := c.Snapshot().All(); len(all) != 0 {
		t.Fatalf("All() after removing every target = %+v", all)
	}
	forgotten := map[string]bool{}
	for range 2 {
		forgotten[recv(t, p.forgotten, "Forget")] = true
	}
	if !forgotten[addrB] || !forgotten[addrC] {
		t.Fatalf("forgotten %v, want B and C", forgotten)
	}
}

func TestDuplicateAddressProbedOnce(t *testing.T) {
	first := Target{Route: "one", Addr: addrA, Configured: RoleStandby}
	second := Target{Route: "two", Addr: addrA, Configured: RolePrimary}
	core, logs := observer.New(zapcore.WarnLevel)
	c, p, clock := testChecker(t, Options{Targets: []Target{first, second}, Logger: zap.New(core)}, nil)
	v := waitVerdict(t, c, addrA, clock.Now())
	if v.Target != first {
		t.Fatalf("verdict target %+v, want the first listed %+v", v.Target, first)
	}
	clock.nextWait(t) // the loop is idle now
	if calls := p.drainCalls(); len(calls) != 1 {
		t.Fatalf("%d probes, want 1: %+v", len(calls), calls)
	}
	if n := logs.FilterMessageSnippet("listed twice").Len(); n != 1 {
		t.Fatalf("%d warnings about the duplicate, want 1", n)
	}
}

func TestCloseStopsProbesInFlight(t *testing.T) {
	c, p, _ := testChecker(t, Options{Targets: []Target{standbyTarget(addrA), standbyTarget(addrB)}},
		map[string]answer{addrA: {hang: true}, addrB: {hang: true}})
	recv(t, p.calls, "a probe")
	recv(t, p.calls, "a probe")
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	recv(t, done, "Close to return while probes hang")
	if all := c.Snapshot().All(); len(all) != 0 {
		t.Fatalf("a cancelled probe was published: %+v", all)
	}
	forgotten := map[string]bool{}
	for range 2 {
		select {
		case a := <-p.forgotten: // Close waited for Forget
			forgotten[a] = true
		default:
			t.Fatal("Close returned before the prober forgot every server")
		}
	}
	c.Close() // idempotent
	c.SetTargets([]Target{standbyTarget(addrC)})
	if calls := p.drainCalls(); len(calls) != 0 {
		t.Fatalf("probes after Close: %+v", calls)
	}
	// testChecker's cleanup checks that no goroutine is left.
}

func TestSnapshotSurvivesClose(t *testing.T) {
	c, _, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}}, nil)
	want := waitVerdict(t, c, addrA, clock.Now())
	c.Close()
	if v, ok := c.Snapshot().Get(addrA); !ok || v != want {
		t.Fatalf("after Close: %+v (ok %v), want the last verdict", v, ok)
	}
}

// Log lines come from state changes, not from probes.
func TestLogsStateChangesOnly(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	c, p, clock := testChecker(t, Options{Targets: []Target{standbyTarget(addrA)}, Logger: zap.New(core), MaxBackoff: time.Hour},
		map[string]answer{addrA: standbyOK})
	steps := []struct {
		answer answer
		want   []string // messages logged by this probe
	}{
		{standbyOK, []string{"health: server reachable"}},
		{standbyOK, nil},
		{standbyOK, nil},
		{unreachable, []string{"health: server unreachable"}},
		{unreachable, nil},
		{unreachable, nil},
		{standbyOK, []string{"health: server reachable again"}},
		{primaryOK, []string{"health: detected role changed", "health: role mismatch (split brain): server gets no reads"}},
		{primaryOK, nil},
		{answer{role: RolePrimary, sysID: "other"}, []string{"health: system identifier changed"}},
		{standbyOK, []string{"health: detected role changed", "health: system identifier changed", "health: role mismatch resolved"}},
		{standbyOK, nil},
	}
	var wait time.Duration
	for i, st := range steps {
		if i > 0 {
			p.set(addrA, st.answer)
			clock.Advance(wait)
		}
		waitVerdict(t, c, addrA, clock.Now())
		wait = clock.nextWait(t) // the loop waits again only after it has logged
		var got []string
		for _, e := range logs.TakeAll() {
			got = append(got, e.Message)
			if e.ContextMap()["server"] != addrA {
				t.Errorf("step %d: log line without the server: %v", i, e.ContextMap())
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("step %d: logged %q, want %q", i, got, st.want)
		}
	}
}

func TestNewCheckerRequiresProber(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("NewChecker without a Prober did not panic")
		}
	}()
	NewChecker(Options{})
}

func TestDefaults(t *testing.T) {
	c := NewChecker(Options{Prober: newFakeProber(newFakeClock())})
	defer c.Close()
	if c.interval != DefaultInterval || c.timeout != DefaultTimeout || c.maxBackoff != DefaultMaxBackoff {
		t.Fatalf("defaults: interval %v timeout %v max backoff %v", c.interval, c.timeout, c.maxBackoff)
	}
	if c.clock == nil || c.after == nil || c.log == nil {
		t.Fatal("clock, timer or logger missing")
	}
}

// Options.Unreachable hears of a server going from reachable to
// unreachable, once per such change; a server never reached, or one that
// stays down, is not reported again.
func TestUnreachableCallback(t *testing.T) {
	down := make(chan string, 10)
	c, p, clock := testChecker(t, Options{
		Targets:     []Target{standbyTarget(addrA)},
		Unreachable: func(addr string) { down <- addr },
	}, map[string]answer{addrA: unreachable})
	waitVerdict(t, c, addrA, clock.Now()) // never reached: no call
	step := func(a answer) {
		t.Helper()
		p.set(addrA, a)
		clock.Advance(clock.nextWait(t))
		waitVerdict(t, c, addrA, clock.Now())
	}
	step(standbyOK)
	step(unreachable)
	step(unreachable)
	step(standbyOK)
	step(unreachable)
	clock.nextWait(t) // the loop waits again: its last record (and call) is done
	var got []string
	for len(down) > 0 {
		got = append(got, <-down)
	}
	if want := []string{addrA, addrA}; !slices.Equal(got, want) {
		t.Fatalf("Unreachable calls = %v, want %v (one per reachable→unreachable change)", got, want)
	}
}
