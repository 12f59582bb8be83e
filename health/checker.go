package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Prober performs one probe of the server at addr: the Checker's only I/O.
// It fills Detected and SystemID of the returned Verdict; the Checker sets
// Target, Reachable, ProbedAt and Err itself. A non-nil error means the
// server is unreachable for this probe.
//
// Probe must return promptly once ctx is done: the Checker bounds every
// probe with Options.Timeout through ctx, and a probe that answers after
// that counts as failed anyway. Probe is called from one goroutine per
// address, so calls for different addresses may run concurrently.
type Prober interface {
	Probe(ctx context.Context, addr string) (Verdict, error)
}

// Forgetter is implemented by probers that keep per-server state, such as
// an open connection. The Checker calls Forget(addr) when the probe loop of
// addr ends (the target was removed by SetTargets, or the Checker closed),
// after that loop's last Probe returned. Close waits for Forget.
type Forgetter interface {
	Forget(addr string)
}

// Defaults for zero Options fields. Interval and Timeout are SPEC §2's
// routes.ha defaults.
const (
	DefaultInterval = 2 * time.Second
	DefaultTimeout  = 750 * time.Millisecond
	// DefaultMaxBackoff caps the wait between probes of a failing server.
	// A server that comes back is noticed within this (plus one Timeout),
	// while a dead one costs one failed connect attempt per 10 s.
	DefaultMaxBackoff = 10 * time.Second
)

// Options configure a Checker. Prober is required.
type Options struct {
	// Targets are the servers to probe from the start (see SetTargets).
	Targets []Target
	// Interval is the wait between the end of a successful probe and the
	// start of the next (routes.ha.replica_health_interval_ms). Default
	// DefaultInterval.
	Interval time.Duration
	// Timeout bounds each probe, connect included
	// (routes.ha.replica_health_timeout_ms). A probe that takes longer
	// fails. Default DefaultTimeout.
	Timeout time.Duration
	// MaxBackoff caps the wait after failed probes: after n consecutive
	// failures the loop waits min(Interval·2^(n-1), MaxBackoff), so the
	// first retry comes after one Interval, then 2, 4, ... Intervals. A
	// failed probe's verdict (unreachable) is still published at once.
	// Default DefaultMaxBackoff; never less than Interval.
	MaxBackoff time.Duration
	// Prober does the I/O (required). NewPGProber is the real one.
	Prober Prober
	// Clock stamps ProbedAt. Default time.Now.
	Clock func() time.Time
	// Logger receives state changes only: a server becoming unreachable or
	// reachable again, a change of detected role or system identifier, and
	// the start and end of a role mismatch. Default: no logging.
	Logger *zap.Logger

	// after is a testing knob replacing time.After for the waits between
	// probes, so that tests drive time instead of sleeping.
	after func(time.Duration) <-chan time.Time
}

// Checker runs one probe loop per target server and publishes every new
// verdict in a fresh immutable Snapshot. See the package documentation for
// its concurrency contract.
type Checker struct {
	prober     Prober
	interval   time.Duration
	timeout    time.Duration
	maxBackoff time.Duration
	clock      func() time.Time
	after      func(time.Duration) <-chan time.Time
	log        *zap.Logger

	ctx    context.Context // parent of every loop; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per running loop

	snap atomic.Pointer[Snapshot]

	mu       sync.Mutex // guards the fields below; never held across a probe
	closed   bool
	order    []string // target addresses in SetTargets order
	loops    map[string]*loop
	verdicts map[string]Verdict
}

// loop is the probe loop of one address.
type loop struct {
	addr   string
	target Target // guarded by Checker.mu: a reload may relabel it
	cancel context.CancelFunc
	done   chan struct{} // closed after the loop's last publication and Forget
}

// NewChecker starts one probe loop per target; each probes at once. It
// panics when opts.Prober is nil, a programming error.
func NewChecker(opts Options) *Checker {
	if opts.Prober == nil {
		panic("health: Options.Prober is required")
	}
	c := &Checker{
		prober:     opts.Prober,
		interval:   opts.Interval,
		timeout:    opts.Timeout,
		maxBackoff: opts.MaxBackoff,
		clock:      opts.Clock,
		after:      opts.after,
		log:        opts.Logger,
		loops:      make(map[string]*loop),
		verdicts:   make(map[string]Verdict),
	}
	if c.interval <= 0 {
		c.interval = DefaultInterval
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.maxBackoff <= 0 {
		c.maxBackoff = DefaultMaxBackoff
	}
	c.maxBackoff = max(c.maxBackoff, c.interval)
	if c.clock == nil {
		c.clock = time.Now
	}
	if c.after == nil {
		c.after = time.After
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.snap.Store(newSnapshot(nil))
	c.SetTargets(opts.Targets)
	return c
}

// Snapshot returns the current verdict table. It never blocks and never
// returns nil.
func (c *Checker) Snapshot() *Snapshot { return c.snap.Load() }

// Changed returns a channel closed at the next snapshot publication. To
// wait for a verdict to change, prefer Snapshot().Changed(), which ties the
// channel to the snapshot just examined; calling Changed before Snapshot is
// equally safe.
func (c *Checker) Changed() <-chan struct{} { return c.snap.Load().changed }

// SetTargets makes ts the set of probed servers (a config reload). Loops
// start for new addresses, probing at once; loops of addresses no longer
// listed stop and their verdicts leave the snapshot; a listed address whose
// Route or Configured role changed keeps its loop and its latest verdict,
// relabelled at once. When an address appears more than once the first
// target wins and the others are logged and ignored. SetTargets returns
// after the removed loops have ended. After Close it does nothing.
func (c *Checker) SetTargets(ts []Target) {
	var (
		stopped []*loop
		notes   []func()
	)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	wanted := make(map[string]Target, len(ts))
	order := make([]string, 0, len(ts))
	for _, t := range ts {
		if first, dup := wanted[t.Addr]; dup {
			notes = append(notes, func() {
				c.log.Warn("health: server listed twice; probing it once, for the first target",
					zap.String("server", t.Addr), zap.String("route", t.Route), zap.String("first_route", first.Route))
			})
			continue
		}
		wanted[t.Addr] = t
		order = append(order, t.Addr)
	}
	republish := !slices.Equal(order, c.order)
	for addr, l := range c.loops {
		if _, keep := wanted[addr]; keep {
			continue
		}
		l.cancel()
		delete(c.loops, addr)
		if _, had := c.verdicts[addr]; had {
			delete(c.verdicts, addr)
			republish = true
		}
		stopped = append(stopped, l)
	}
	for _, addr := range order {
		t := wanted[addr]
		l, running := c.loops[addr]
		if !running {
			c.start(t)
			continue
		}
		if l.target == t {
			continue
		}
		l.target = t
		if old, had := c.verdicts[addr]; had {
			v := old
			v.Target = t
			c.verdicts[addr] = v
			notes = append(notes, c.describeChange(old, true, v))
			republish = true
		}
	}
	c.order = order
	if republish {
		c.publishLocked()
	}
	c.mu.Unlock()

	for _, note := range notes {
		note()
	}
	for _, l := range stopped {
		<-l.done
	}
}

// Close stops every probe loop and waits for them to end (including the
// prober's Forget). Later calls return at once; the last Snapshot stays
// readable.
func (c *Checker) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.cancel()
		clear(c.loops) // results of probes still in flight are dropped
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// start launches the loop of t. c.mu is held and c is not closed.
func (c *Checker) start(t Target) {
	ctx, cancel := context.WithCancel(c.ctx)
	l := &loop{addr: t.Addr, target: t, cancel: cancel, done: make(chan struct{})}
	c.loops[t.Addr] = l
	c.wg.Add(1)
	go c.run(ctx, l)
}

// run is the probe loop of one server: probe, publish, wait, repeat, with
// capped exponential backoff after failures. It ends when ctx is cancelled.
func (c *Checker) run(ctx context.Context, l *loop) {
	defer c.wg.Done()
	defer close(l.done)
	defer c.cancelAndForget(l)
	failures := 0
	for {
		at := c.clock()
		v, err := c.probe(ctx, l.addr)
		if ctx.Err() != nil {
			return // stopped mid-probe: the result says nothing about the server
		}
		c.record(l, at, v, err)
		wait := c.interval
		if err != nil {
			failures++
			wait = backoff(c.interval, c.maxBackoff, failures)
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-c.after(wait):
		}
	}
}

func (c *Checker) cancelAndForget(l *loop) {
	l.cancel()
	if f, ok := c.prober.(Forgetter); ok {
		f.Forget(l.addr)
	}
}

// backoff is the wait after the n-th consecutive failed probe (n >= 1):
// min(interval·2^(n-1), ceiling).
func backoff(interval, ceiling time.Duration, n int) time.Duration {
	d := interval
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// probe runs one Prober call bounded by the timeout. A probe that outlives
// its timeout fails, even if the Prober ignored ctx and answered late.
func (c *Checker) probe(ctx context.Context, addr string) (Verdict, error) {
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := c.prober.Probe(pctx, addr)
	if errors.Is(pctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		if err == nil {
			err = pctx.Err()
		}
		err = fmt.Errorf("probe timed out after %v: %w", c.timeout, err)
	}
	return v, err
}

// record turns one probe result into l's new verdict and publishes it,
// unless l has been stopped meanwhile.
func (c *Checker) record(l *loop, at time.Time, probed Verdict, err error) {
	c.mu.Lock()
	if c.loops[l.addr] != l {
		c.mu.Unlock()
		return
	}
	v := Verdict{Target: l.target, ProbedAt: at}
	if err != nil {
		v.Err = err.Error()
	} else {
		v.Reachable = true
		v.Detected = probed.Detected
		v.SystemID = probed.SystemID
	}
	prev, had := c.verdicts[l.addr]
	c.verdicts[l.addr] = v
	c.publishLocked()
	note := c.describeChange(prev, had, v)
	c.mu.Unlock()
	note()
}

// publishLocked swaps in a snapshot of the current verdicts and wakes the
// waiters of the previous one. c.mu is held.
func (c *Checker) publishLocked() {
	vs := make([]Verdict, 0, len(c.verdicts))
	for _, addr := range c.order {
		if v, ok := c.verdicts[addr]; ok {
			vs = append(vs, v)
		}
	}
	old := c.snap.Swap(newSnapshot(vs))
	close(old.changed)
}

// describeChange returns the logging of the step from prev (had: whether
// there was one) to v; it does nothing when no state worth a line changed.
// The caller runs it after releasing c.mu.
func (c *Checker) describeChange(prev Verdict, had bool, v Verdict) func() {
	var lines []func()
	fields := func(extra ...zap.Field) []zap.Field {
		return append([]zap.Field{
			zap.String("route", v.Route), zap.String("server", v.Addr),
			zap.Stringer("configured_role", v.Configured), zap.Stringer("detected_role", v.Detected),
		}, extra...)
	}
	switch {
	case !had && v.Reachable:
		lines = append(lines, func() { c.log.Info("health: server reachable", fields(zap.String("system_id", v.SystemID))...) })
	case !v.Reachable && (!had || prev.Reachable):
		lines = append(lines, func() { c.log.Warn("health: server unreachable", fields(zap.String("error", v.Err))...) })
	case had && !prev.Reachable && v.Reachable:
		lines = append(lines, func() { c.log.Info("health: server reachable again", fields(zap.String("system_id", v.SystemID))...) })
	case had && prev.Reachable && v.Reachable:
		if prev.Detected != v.Detected {
			lines = append(lines, func() {
				c.log.Warn("health: detected role changed", fields(zap.Stringer("previous_role", prev.Detected))...)
			})
		}
		if prev.SystemID != v.SystemID {
			lines = append(lines, func() {
				c.log.Warn("health: system identifier changed",
					fields(zap.String("previous_system_id", prev.SystemID), zap.String("system_id", v.SystemID))...)
			})
		}
	}
	// A mismatch is judged against the latest reachable evidence: an
	// unreachable verdict neither starts nor ends one.
	if v.Reachable {
		wasMismatch := had && prev.Reachable && prev.RoleMismatch()
		switch {
		case v.RoleMismatch() && !wasMismatch:
			lines = append(lines, func() { c.log.Error("health: role mismatch (split brain): server gets no reads", fields()...) })
		case !v.RoleMismatch() && wasMismatch:
			lines = append(lines, func() { c.log.Info("health: role mismatch resolved", fields()...) })
		}
	}
	return func() {
		for _, line := range lines {
			line()
		}
	}
}
