package health

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fakeClock is Options.Clock plus the after knob: time moves only when a test
// calls Advance, and every wait a loop starts is reported on waits.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	waits  chan time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC), waits: make(chan time.Duration, 1024)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	select {
	case c.waits <- d:
	default:
	}
	return ch
}

// Advance moves time on by d and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now
	}
	c.timers = kept
}

// nextWait returns the duration of the next wait a loop started.
func (c *fakeClock) nextWait(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.waits:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no probe loop started waiting within 5s")
		return 0
	}
}

// answer is what the fake prober says for an address.
type answer struct {
	role  Role
	sysID string
	err   error
	hang  bool // block until the probe's context ends, then return its error
	late  bool // block until the probe's context ends, then claim success

	// WAL fields, returned as the Prober fills them.
	tl                       uint32
	current, receive, replay uint64
	paused                   bool
	started                  time.Time        // pg_postmaster_start_time()
	history                  *TimelineHistory // a primary's

	gate chan struct{} // when set, the probe waits for it to be closed (or its context to end)
}

var (
	standbyOK   = answer{role: RoleStandby, sysID: "7300000000000000001"}
	primaryOK   = answer{role: RolePrimary, sysID: "7300000000000000001"}
	errRefused  = errors.New("dial tcp: connection refused")
	unreachable = answer{err: errRefused}
)

type probeCall struct {
	addr string
	at   time.Time // fake clock time at the call
}

// inFlight counts the running probes of each address and remembers the most
// ever seen at once.
type inFlight struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
}

// fakeProber answers per address (standbyOK unless told otherwise) and
// records every call and every Forget.
type fakeProber struct {
	clock *fakeClock

	mu      sync.Mutex
	answers map[string]answer

	calls     chan probeCall
	forgotten chan string
	flight    inFlight
}

func newFakeProber(clock *fakeClock) *fakeProber {
	return &fakeProber{
		clock:     clock,
		answers:   make(map[string]answer),
		calls:     make(chan probeCall, 1024),
		forgotten: make(chan string, 1024),
		flight:    inFlight{running: map[string]int{}, most: map[string]int{}},
	}
}

func (p *fakeProber) set(addr string, a answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers[addr] = a
}

func (p *fakeProber) Probe(ctx context.Context, addr string) (Verdict, error) {
	p.flight.mu.Lock()
	p.flight.running[addr]++
	p.flight.most[addr] = max(p.flight.most[addr], p.flight.running[addr])
	p.flight.mu.Unlock()
	defer func() {
		p.flight.mu.Lock()
		p.flight.running[addr]--
		p.flight.mu.Unlock()
	}()
	p.calls <- probeCall{addr: addr, at: p.clock.Now()}
	p.mu.Lock()
	a, ok := p.answers[addr]
	p.mu.Unlock()
	if !ok {
		a = standbyOK
	}
	if a.gate != nil {
		select {
		case <-a.gate:
		case <-ctx.Done():
			return Verdict{}, ctx.Err()
		}
	}
	switch {
	case a.hang:
		<-ctx.Done()
		return Verdict{}, ctx.Err()
	case a.late:
		<-ctx.Done()
		return Verdict{Detected: RoleStandby, SystemID: "late"}, nil
	case a.err != nil:
		// Garbage in the verdict must not leak into an unreachable one.
		return Verdict{Detected: RolePrimary, SystemID: "garbage", Timeline: 9, CurrentLSN: 9, ReceiveLSN: 9, ReplayLSN: 9, ReplayPaused: true, LagBytes: 9, LagMS: 9, IdentityMismatch: true}, a.err
	}
	// A prober does not derive lag or identity: whatever it says there is
	// overwritten by the Checker.
	return Verdict{Detected: a.role, SystemID: a.sysID, Timeline: a.tl, CurrentLSN: a.current, ReceiveLSN: a.receive,
		ReplayLSN: a.replay, ReplayPaused: a.paused, StartedAt: a.started, History: a.history, LagBytes: 12345, LagMS: 12345, IdentityMismatch: true}, nil
}

// most returns the most probes of addr that ever ran at once.
func (p *fakeProber) most(addr string) int {
	p.flight.mu.Lock()
	defer p.flight.mu.Unlock()
	return p.flight.most[addr]
}

func (p *fakeProber) Forget(addr string) { p.forgotten <- addr }

// drainCalls returns the calls recorded so far and forgets them.
func (p *fakeProber) drainCalls() []probeCall {
	var out []probeCall
	for {
		select {
		case c := <-p.calls:
			out = append(out, c)
		default:
			return out
		}
	}
}

// testChecker starts a Checker on a fake prober and clock, closes it at the
// end of the test and then checks that no goroutine is left.
func testChecker(t *testing.T, opts Options, answers map[string]answer) (*Checker, *fakeProber, *fakeClock) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	clock := newFakeClock()
	p := newFakeProber(clock)
	for addr, a := range answers {
		p.set(addr, a)
	}
	opts.Prober = p
	opts.Clock = clock.Now
	opts.after = clock.After
	if opts.Interval == 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute // real time: only the timeout tests rely on it
	}
	c := NewChecker(opts)
	t.Cleanup(c.Close)
	return c, p, clock
}

// waitSnapshot waits, on Changed, for a snapshot satisfying cond.
func waitSnapshot(t *testing.T, c *Checker, what string, cond func(*Snapshot) bool) *Snapshot {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		s := c.Snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-s.Changed():
		case <-deadline:
			t.Fatalf("timed out waiting for %s; last snapshot: %+v", what, s.All())
		}
	}
}

// waitVerdict waits for addr's verdict probed at at.
func waitVerdict(t *testing.T, c *Checker, addr string, at time.Time) Verdict {
	t.Helper()
	s := waitSnapshot(t, c, addr+" probed at "+at.String(), func(s *Snapshot) bool {
		v, ok := s.Get(addr)
		return ok && v.ProbedAt.Equal(at)
	})
	v, _ := s.Get(addr)
	return v
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
