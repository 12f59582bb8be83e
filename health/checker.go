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
// It fills Detected, SystemID, Timeline, CurrentLSN (already normalized,
// see NormalizeInsertLSN), ReceiveLSN, ReplayLSN and ReplayPaused of the
// returned Verdict; the Checker sets Target, Reachable, ProbedAt and Err,
// and derives LagBytes, LagMS and IdentityMismatch from the route primary's
// verdicts. A non-nil error means the server is unreachable for this probe.
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

// hurryGap is the least time between the starts of two probes of one server
// when the second is hurried (see Hurry).
const hurryGap = 10 * time.Millisecond

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
	// fails (PGProber lets a slow login go on in the background, for the
	// next probe). Default DefaultTimeout.
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
	// reachable again, a change of detected role, system identifier or
	// timeline, replay paused or resumed, and the start and end of a role
	// or identity mismatch. Default: no logging.
	Logger *zap.Logger
	// Unreachable, if set, is called with a server's address when a probe
	// finds it unreachable after it was reachable (not for a server never
	// reached yet), after the verdict is published and outside the
	// Checker's lock. It must not block for long: the server's next probe
	// waits for it.
	Unreachable func(addr string)
	// FollowFailover elects each route's primary among its servers (Elect)
	// instead of taking the configured one (routes.ha.follow_failover):
	// lag is then measured against the elected primary, and a server not
	// in recovery that is not the elected primary is a split brain.
	FollowFailover bool
	// Elections seeds each route's election (by route name), for a Checker
	// that replaces another (a reload): the elected primary stays elected
	// until a verdict says otherwise, and the highest timeline elected
	// never goes down (see Elect).
	Elections map[string]Election

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
	onDown     func(addr string)
	follow     bool                // Options.FollowFailover
	seed       map[string]Election // Options.Elections

	ctx    context.Context // parent of every loop; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per running loop

	snap atomic.Pointer[Snapshot]

	mu       sync.Mutex // guards the fields below; never held across a probe
	closed   bool
	order    []string // target addresses in SetTargets order
	loops    map[string]*loop
	verdicts map[string]Verdict     // with the derived fields filled in
	routes   map[string]*routeState // by Target.Route
}

// loop is the probe loop of one address.
type loop struct {
	addr   string
	target Target // guarded by Checker.mu: a reload may relabel it
	cancel context.CancelFunc
	done   chan struct{} // closed after the loop's last publication and Forget
	hurry  chan struct{} // capacity 1: a pending Hurry
	// standbyTL is the highest timeline the server reported as a standby
	// in its current run (standbySince, its pg_postmaster_start_time()).
	// Guarded by Checker.mu.
	standbyTL    uint32
	standbySince time.Time
}

// keepStandbyTimeline returns the timeline to record for a standby probed
// by l: a standby's replay timeline never goes down while it runs, but
// what a probe sees of it may. Without a WAL receiver (streaming broke
// off, as when its primary dies) or without pg_read_all_stats (and
// REPLICATION, see identify.go), the probe falls back to the timeline of
// the standby's latest restartpoint, which may be one or more timelines
// behind. Within one run of the server
// (same start time) the highest timeline seen stands; a restart (a
// rewind, a re-clone) starts afresh. Guarded by Checker.mu.
func (l *loop) keepStandbyTimeline(tl uint32, started time.Time) uint32 {
	if started.IsZero() || !started.Equal(l.standbySince) {
		l.standbyTL, l.standbySince = tl, started
		return tl
	}
	l.standbyTL = max(l.standbyTL, tl)
	return l.standbyTL
}

// routeState is what the Checker knows about a route's configured primary,
// from which it derives its standbys' lag and identity (SPEC §5).
type routeState struct {
	// primary is the address lag is measured against: the first target
	// configured RolePrimary, or with FollowFailover the elected primary
	// (the configured one until an election says otherwise); "" when none.
	primary    string
	configured string   // the first target configured RolePrimary
	election   Election // FollowFailover only
	sysID      string   // the system identifier the primary last reported
	timeline   uint32   // the timeline the primary last reported as a primary
	// history is the primary's positions, oldest first (see appendSample);
	// seen[i] is when history[i] was recorded. A standby verdict probed at
	// t is judged against the samples recorded by t: their positions were
	// read before its replay position was.
	history []Sample
	seen    []time.Time
}

// reset forgets the primary's history: its positions no longer continue it
// (another cluster, timeline or server, or a position that went backwards).
func (r *routeState) reset() { r.history, r.seen = r.history[:0], r.seen[:0] }

// carryHistory starts lag measurement against a newly elected primary
// whose verdict is v (ok: there is one). When v is a primary of the same
// system on a later timeline whose history names the switch point of the
// route's previous timeline, the previous primary's samples up to that
// point stay: that WAL is the new timeline's too, so a standby that has
// not yet switched timelines still has a measurable lag (until the new
// primary's first samples, it would have none, and its reads would be
// refused while no primary serves them). Samples past the switch point
// were never on the new timeline and go. Otherwise lag starts afresh.
func (r *routeState) carryHistory(v Verdict, ok bool) {
	sp, found := uint64(0), false
	if ok && v.Reachable && v.Detected == RolePrimary && v.SystemID == r.sysID && r.timeline != 0 && v.Timeline > r.timeline {
		sp, found = v.History.SwitchPoint(r.timeline)
	}
	if !found {
		r.timeline = 0
		r.reset()
		return
	}
	n := 0
	for n < len(r.history) && r.history[n].LSN <= sp {
		n++
	}
	r.history, r.seen = r.history[:n], r.seen[:n]
	r.timeline = v.Timeline
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
		onDown:     opts.Unreachable,
		follow:     opts.FollowFailover,
		seed:       opts.Elections,
		loops:      make(map[string]*loop),
		verdicts:   make(map[string]Verdict),
		routes:     make(map[string]*routeState),
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

// Hurry asks for a probe of the server at addr now rather than at the end
// of its interval: a read waiting for that replica to replay a position
// calls it, then waits on Snapshot().Changed() (SPEC §5: waiting reads are
// woken by fresh replay positions, not fixed sleeps). It never blocks and
// never starts a probe itself; the server's own loop runs it, so two probes
// of one server never overlap. Requests are coalesced: a Hurry while a probe
// runs asks for one more probe after it, and hurried probes of a server
// start at least 10 ms apart, however many readers wait. A server whose last
// probe failed keeps its backoff (a hurried reader gains nothing from
// another refused connection). Unknown addresses, and calls after Close,
// are ignored.
func (c *Checker) Hurry(addr string) {
	c.mu.Lock()
	l := c.loops[addr]
	c.mu.Unlock()
	if l == nil {
		return
	}
	select {
	case l.hurry <- struct{}{}:
	default: // one is pending already
	}
}

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
	if c.setRoutesLocked(wanted) {
		republish = true
	}
	for _, addr := range order {
		old, had := c.verdicts[addr]
		if !had {
			continue
		}
		if v := c.deriveLocked(old); v != old {
			c.verdicts[addr] = v
			notes = append(notes, c.describeChange(old, true, v))
			republish = true
		}
	}
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
	l := &loop{addr: t.Addr, target: t, cancel: cancel, done: make(chan struct{}), hurry: make(chan struct{}, 1)}
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
		select {
		case <-l.hurry: // this probe answers every request made so far
		default:
		}
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
		// While its route looks for a primary (follow_failover), a server
		// is probed every interval and may be hurried, failing or not:
		// the promoted one must be seen as soon as it answers.
		seeking := failures > 0 && c.seekingPrimary(l)
		if seeking {
			wait = c.interval
		}
		if !c.wait(ctx, l, at, wait, failures > 0 && !seeking) {
			return
		}
	}
}

// seekingPrimary reports whether l's route follows failovers and has no
// reachable elected primary.
func (c *Checker) seekingPrimary(l *loop) bool {
	if !c.follow {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.routes[l.target.Route]
	if rs == nil {
		return false
	}
	v, ok := c.verdicts[rs.election.Primary]
	return rs.election.Primary == "" || ok && !v.Reachable
}

// wait blocks until the next probe of l is due: d after the last one ended,
// or earlier when hurried, but then no sooner than hurryGap after the last
// one began (last). A failing server is not hurried, unless its route
// follows failovers and has no reachable elected primary. It returns false
// when ctx ends first.
func (c *Checker) wait(ctx context.Context, l *loop, last time.Time, d time.Duration, failing bool) bool {
	due := c.after(d)
	hurry := l.hurry
	if failing && !c.follow {
		hurry = nil // a pending request waits for the server to answer again
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-due:
			return true
		case <-hurry:
		}
		// A failing server is hurried only while its route looks for a
		// primary (follow_failover): the server in backoff may be the
		// one just promoted.
		if !failing || c.seekingPrimary(l) {
			break
		}
	}
	rest := hurryGap - c.clock().Sub(last)
	if rest <= 0 {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-due:
	case <-c.after(rest):
	}
	return true
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
		v.Timeline = probed.Timeline
		v.ReplayPaused = probed.ReplayPaused
		v.StartedAt = probed.StartedAt
		if v.Detected == RolePrimary {
			v.CurrentLSN, v.History = probed.CurrentLSN, probed.History
			l.standbyTL, l.standbySince = 0, time.Time{}
		} else {
			v.ReceiveLSN, v.ReplayLSN = probed.ReceiveLSN, probed.ReplayLSN
			if v.Detected == RoleStandby && v.Timeline != 0 {
				v.Timeline = l.keepStandbyTimeline(v.Timeline, v.StartedAt)
			}
		}
	}
	var notes []func()
	rs := c.routes[v.Route]
	isPrimary := rs != nil && rs.primary == l.addr
	if isPrimary {
		c.observePrimaryLocked(rs, v, c.clock())
	}
	v = c.deriveLocked(v)
	prev, had := c.verdicts[l.addr]
	c.verdicts[l.addr] = v
	elected := false
	if c.follow && rs != nil {
		prevPrimary := rs.election.Primary
		if note, changed := c.electLocked(v.Route, rs); changed {
			notes = append(notes, note)
			isPrimary = true // re-derive every server of the route
			v = c.deriveLocked(v)
			c.verdicts[l.addr] = v
			elected = rs.election.Primary != "" && rs.election.Primary != prevPrimary
		}
	}
	notes = append(notes, c.describeChange(prev, had, v))
	if isPrimary {
		// A new sample or identity changes the derived fields of the
		// route's standbys at once, in this same snapshot.
		for _, addr := range c.order {
			old, ok := c.verdicts[addr]
			if !ok || addr == l.addr || old.Route != v.Route {
				continue
			}
			if nv := c.deriveLocked(old); nv != old {
				c.verdicts[addr] = nv
				notes = append(notes, c.describeChange(old, true, nv))
			}
		}
	}
	var hurry []*loop
	if c.follow && rs != nil && (elected || v.Addr == rs.election.Primary && !v.Reachable && (!had || prev.Reachable)) {
		// The elected primary went down: probe the route's other servers
		// now, to see a promotion as soon as it happens. A new primary was
		// elected: its standbys' lag starts afresh from its samples, and
		// is unknown until each is probed again: now.
		for addr, o := range c.loops {
			if addr != v.Addr && o.target.Route == v.Route {
				hurry = append(hurry, o)
			}
		}
	}
	c.publishLocked()
	c.mu.Unlock()
	for _, o := range hurry {
		select {
		case o.hurry <- struct{}{}:
		default:
		}
	}
	for _, note := range notes {
		note()
	}
	if c.onDown != nil && had && prev.Reachable && !v.Reachable {
		c.onDown(l.addr)
	}
}

// setRoutesLocked makes c.routes follow the targets (c.order and wanted):
// one state per route, keyed to the route's first target configured
// RolePrimary. A route whose primary changed starts afresh, seeded with the
// new primary's current verdict if there is one. It reports whether any
// route's state changed. c.mu is held.
func (c *Checker) setRoutesLocked(wanted map[string]Target) bool {
	primaries := make(map[string]string) // route -> primary address
	for _, addr := range c.order {
		t := wanted[addr]
		if _, seen := primaries[t.Route]; !seen {
			primaries[t.Route] = ""
		}
		if t.Configured == RolePrimary && primaries[t.Route] == "" {
			primaries[t.Route] = addr
		}
	}
	changed := false
	for route := range c.routes {
		if _, keep := primaries[route]; !keep {
			delete(c.routes, route)
			changed = true
		}
	}
	for route, primary := range primaries {
		if rs := c.routes[route]; rs != nil && rs.configured == primary {
			continue
		}
		rs := &routeState{primary: primary, configured: primary, election: c.seed[route]}
		if p := rs.election.Primary; c.follow && p != "" {
			rs.primary = p
		}
		if v, ok := c.verdicts[primary]; ok && primary != "" {
			c.observePrimaryLocked(rs, v, c.clock())
		}
		c.routes[route] = rs
		changed = true
	}
	return changed
}

// electLocked runs the election of route (state rs) again over the
// latest verdicts of its servers (FollowFailover). When the elected
// primary changed, lag is measured against the new one from then on. It
// returns the log line of the change and whether the election changed.
// c.mu is held.
func (c *Checker) electLocked(route string, rs *routeState) (func(), bool) {
	vs := make([]Verdict, 0, len(c.order))
	for _, addr := range c.order {
		if v, ok := c.verdicts[addr]; ok && v.Route == route {
			vs = append(vs, v)
		}
	}
	prev := rs.election
	e := Elect(vs, rs.sysID, prev)
	if e == prev {
		return nil, false
	}
	rs.election = e
	if e.Primary != "" && e.Primary != rs.primary {
		rs.primary = e.Primary
		v, ok := c.verdicts[e.Primary]
		rs.carryHistory(v, ok)
		if ok {
			c.observePrimaryLocked(rs, v, c.clock())
		}
	}
	return func() {
		fields := []zap.Field{zap.String("route", route), zap.String("previous_primary", prev.Primary),
			zap.Uint32("timeline", e.Timeline)}
		switch {
		case e.Primary != "" && prev.Primary == "" && prev.Timeline == 0:
			c.log.Info("health: primary elected", append(fields, zap.String("primary", e.Primary))...)
		case e.Primary != "":
			c.log.Warn("health: new primary elected (failover)", append(fields, zap.String("primary", e.Primary))...)
		case e.Ambiguous:
			c.log.Error("health: two servers are primaries on the same timeline (split brain): writes fail closed", fields...)
		default:
			c.log.Warn("health: no server of the route is a primary: writes fail", fields...)
		}
	}, true
}

// observePrimaryLocked learns from v, a verdict of rs's primary recorded at
// recorded: its system identifier, and while it is a primary its timeline
// and a sample of its position. c.mu is held.
func (c *Checker) observePrimaryLocked(rs *routeState, v Verdict, recorded time.Time) {
	if !v.Reachable {
		return // what it said last still stands
	}
	if v.SystemID != rs.sysID {
		rs.sysID = v.SystemID
		rs.reset()
	}
	if v.Detected != RolePrimary {
		return
	}
	if v.Timeline != rs.timeline {
		rs.timeline = v.Timeline
		rs.reset()
	}
	if v.CurrentLSN == 0 {
		return
	}
	if n := len(rs.history); n > 0 && (v.CurrentLSN < rs.history[n-1].LSN || v.ProbedAt.Before(rs.history[n-1].At)) {
		rs.reset()
	}
	rs.history, rs.seen = appendSample(rs.history, rs.seen, Sample{At: v.ProbedAt, LSN: v.CurrentLSN}, recorded)
}

// deriveLocked returns v with LagBytes, LagMS and IdentityMismatch computed
// from its route's state (see Verdict). c.mu is held.
func (c *Checker) deriveLocked(v Verdict) Verdict {
	v.LagBytes, v.LagMS, v.IdentityMismatch, v.Elected, v.SplitBrain = -1, -1, false, false, false
	rs := c.routes[v.Route]
	if rs != nil && c.follow {
		v.Elected = v.Addr == rs.election.Primary
		v.SplitBrain = v.Reachable && v.Detected == RolePrimary && !v.Elected
	} else {
		v.Elected = rs != nil && v.Addr == rs.primary
		v.SplitBrain = v.RoleMismatch()
	}
	if !v.Reachable || rs == nil || rs.primary == "" {
		return v
	}
	if v.Addr == rs.primary {
		if v.Detected == RolePrimary {
			v.LagBytes, v.LagMS = 0, 0
		}
		return v
	}
	v.IdentityMismatch = rs.sysID != "" && v.SystemID != rs.sysID
	if v.IdentityMismatch || v.Detected != RoleStandby {
		return v
	}
	if rs.timeline != 0 && v.Timeline != 0 && v.Timeline != rs.timeline {
		// Positions on different timelines do not compare, except a
		// standby still on an ancestor of the primary's timeline that has
		// not replayed past its switch point: all it has is the primary's
		// history too (it may switch timelines yet, or be stuck there: its
		// lag then grows as the primary writes).
		sp, ok := c.primaryHistoryLocked(rs).SwitchPoint(v.Timeline)
		if !ok || v.ReplayLSN > sp {
			return v
		}
	}
	// The samples recorded by the time this probe began: read before it.
	n, _ := slices.BinarySearchFunc(rs.seen, v.ProbedAt, func(e, t time.Time) int {
		if e.After(t) {
			return 1
		}
		return -1
	})
	v.LagBytes, v.LagMS = EstimateLag(rs.history[:n], v.ReplayLSN, v.ProbedAt)
	return v
}

// primaryHistoryLocked returns the timeline history rs's primary last
// reported (nil when none). c.mu is held.
func (c *Checker) primaryHistoryLocked(rs *routeState) *TimelineHistory {
	if v, ok := c.verdicts[rs.primary]; ok && v.Detected == RolePrimary && v.Timeline == rs.timeline {
		return v.History
	}
	return nil
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
	snap := newSnapshot(vs)
	if c.follow {
		snap.elections = make(map[string]Election, len(c.routes))
		for route, rs := range c.routes {
			snap.elections[route] = rs.election
		}
	}
	old := c.snap.Swap(snap)
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
		if prev.Timeline != v.Timeline && prev.Timeline != 0 && v.Timeline != 0 {
			lines = append(lines, func() {
				c.log.Warn("health: timeline changed",
					fields(zap.Uint32("previous_timeline", prev.Timeline), zap.Uint32("timeline", v.Timeline))...)
			})
		}
		if prev.ReplayPaused != v.ReplayPaused {
			msg := "health: WAL replay paused"
			if !v.ReplayPaused {
				msg = "health: WAL replay resumed"
			}
			lines = append(lines, func() { c.log.Info(msg, fields()...) })
		}
	}
	// A mismatch is judged against the latest reachable evidence: an
	// unreachable verdict neither starts nor ends one.
	if v.Reachable {
		wasMismatch := had && prev.Reachable && prev.SplitBrain
		switch {
		case v.SplitBrain && !wasMismatch:
			lines = append(lines, func() { c.log.Error("health: role mismatch (split brain): server gets no reads", fields()...) })
		case !v.SplitBrain && wasMismatch:
			lines = append(lines, func() { c.log.Info("health: role mismatch resolved", fields()...) })
		}
		wasForeign := had && prev.Reachable && prev.IdentityMismatch
		switch {
		case v.IdentityMismatch && !wasForeign:
			lines = append(lines, func() {
				c.log.Error("health: system identifier differs from the route primary's (split brain): server gets no reads",
					fields(zap.String("system_id", v.SystemID))...)
			})
		case !v.IdentityMismatch && wasForeign:
			lines = append(lines, func() { c.log.Info("health: system identifier matches the route primary's again", fields()...) })
		}
	}
	return func() {
		for _, line := range lines {
			line()
		}
	}
}

// Elections returns the current election of every route the Checker
// follows (FollowFailover), to seed a Checker that replaces it; nil
// otherwise.
func (c *Checker) Elections() map[string]Election {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.follow {
		return nil
	}
	out := make(map[string]Election, len(c.routes))
	for route, rs := range c.routes {
		out[route] = rs.election
	}
	return out
}
