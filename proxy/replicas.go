package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// routing is what the Server derives from one config for routing: a
// runtime per route. It is rebuilt on reload and swapped whole.
type routing struct {
	routes      map[string]*routeRuntime // by route name
	probers     []*health.PGProber
	stopReaders context.CancelFunc
}

// routeRuntime is the run-time state of one route, built with its config
// and swapped whole with it on reload. What counts across a reload (reads
// fallen back and in flight, the decision counters of SHOW ROUTES) is
// carried over to the new runtime of a route of the same name; answers
// that may have changed (function volatility) start afresh. What belongs
// to a server, not a route (backoffs, observed replay positions), stays
// on Server, by address: two routes on one cluster share it.
type routeRuntime struct {
	classifier *classify.Classifier
	// checker probes the route's servers (nil when the route routes no
	// reads); reader reads the primary's WAL position for every session
	// of the route on a connection of its own (freshness.Reader: nothing
	// is injected into the sessions' server connections); replays read a
	// replica's current replay position the same way, on demand, for a
	// read that would fall back because the last probe saw the replica
	// behind (by replica address).
	checker *health.Checker
	reader  *freshness.Reader
	replays map[string]*freshness.Reader
	// flusher makes the elected primary flush its WAL up to flushWant
	// (the highest position asked for since its last query), for a read
	// held back by WAL the primary has not written out yet
	// (flushPrimary); its answer is the position of what it wrote, zero
	// when nothing was needed.
	flusher   *freshness.Reader
	flushWant atomic.Uint64
	// flushed is a position the primary's WAL is known to be written out
	// to (the position reader's and the flusher's answers, the highest on
	// the latest timeline seen): a held-back read whose floor is at or
	// below it costs no flusher query.
	flushed flushedAt
	// fallbacks counts reads fallen back to the primary and still
	// running (max_primary_fallback_inflight); decisions counts route
	// decisions by class and target (SHOW ROUTES, SHOW STATS).
	fallbacks *atomic.Int64
	decisions *sync.Map // class + "\x00" + target -> *atomic.Uint64
	// volatility and unlogged are what the router asks the primary's
	// catalog about the names a read uses: whether a function of that
	// name is VOLATILE, whether a relation of that name is UNLOGGED.
	volatility *catalogFacts
	unlogged   *catalogFacts
}

// route is the runtime of the route named name, nil if none (or no
// routing yet).
func (r *routing) route(name string) *routeRuntime {
	if r == nil {
		return nil
	}
	return r.routes[name]
}

// runtime is the current runtime of the session's route (nil before the
// Server has one, or in tests without a Server).
func (ss *session) runtime() *routeRuntime {
	if ss.srv == nil || ss.route == nil {
		return nil
	}
	return ss.srv.routing.Load().route(ss.route.Name)
}

// elections is the election state of rt's checker, to seed the checker
// that replaces it (nil when there is none).
func (rt *routeRuntime) elections() map[string]health.Election {
	c := rt.checkerOf()
	if c == nil {
		return nil
	}
	return c.Elections()
}

// checkerOf is rt's health checker, nil if rt is nil or routes no reads.
func (rt *routeRuntime) checkerOf() *health.Checker {
	if rt == nil {
		return nil
	}
	return rt.checker
}

// newRouting builds the runtimes of cfg's routes, carrying over from prev
// (the routing in force, nil at start) what counts across a reload. onDown
// is called when a probe finds a server unreachable after it was reachable
// (health.Options.Unreachable). backend makes a user's server credentials
// (Server.backendCredentials: pass-through secrets included); nil uses
// the plaintext ones of config.User.Backend.
func newRouting(cfg *config.Config, log *zap.Logger, onDown func(addr string), prev *routing, backend func(*config.User, string) pool.Credentials) *routing {
	r := &routing{routes: map[string]*routeRuntime{}}
	readersCtx, stop := context.WithCancel(context.Background())
	r.stopReaders = stop
	for i := range cfg.Routes {
		rt := &cfg.Routes[i]
		run := newRouteRuntime(rt, prev.route(rt.Name))
		r.routes[rt.Name] = run
		// Probes run for a route with replicas that routes reads or
		// follows failovers (its election needs them).
		if len(rt.Replicas) == 0 || (rt.ReadRouting.ReadRoutingMode == config.RoutingOff && !rt.HA.FollowFailover) || len(cfg.Users) == 0 {
			continue
		}
		probeCred := probeCredentials(cfg, rt, backend)
		prober := health.NewPGProberWith(probeCred, cfg.Server.BackendTLSMode)
		targets := []health.Target{{Route: rt.Name, Addr: rt.Primary.Address, Configured: health.RolePrimary}}
		for _, rep := range rt.Replicas {
			targets = append(targets, health.Target{Route: rt.Name, Addr: rep.Address, Configured: health.RoleStandby})
		}
		run.checker = health.NewChecker(health.Options{
			Targets:     targets,
			Interval:    rt.HA.HealthInterval(),
			Timeout:     rt.HA.HealthTimeout(),
			Prober:      prober,
			Logger:      log,
			Unreachable: onDown,
			// The election's highest timeline carries over a reload: an
			// old primary restarted without a rewind stays a split brain.
			FollowFailover: rt.HA.FollowFailover,
			Elections:      prev.route(rt.Name).elections(),
		})
		positions := health.NewPGProberWith(probeCred, cfg.Server.BackendTLSMode).Named("pg-kinetic position")
		// (The flusher's connection is its own: sharing the position
		// reader's, either would log in afresh whenever both ran at once.)
		flushes := health.NewPGProberWith(probeCred, cfg.Server.BackendTLSMode).Named("pg-kinetic flush")
		r.probers = append(r.probers, prober, positions, flushes)
		run.startReaders(readersCtx, rt, positions, flushes)
	}
	return r
}

// newRouteRuntime is route rt's runtime before its probes start: the
// counters of the route's previous runtime (old, nil for a new route)
// carry over a reload.
func newRouteRuntime(rt *config.Route, old *routeRuntime) *routeRuntime {
	run := &routeRuntime{fallbacks: new(atomic.Int64), decisions: new(sync.Map), replays: map[string]*freshness.Reader{},
		volatility: &catalogFacts{sql: volatilitySQL, what: "function volatility"},
		unlogged:   &catalogFacts{sql: unloggedSQL, what: "unlogged relations", failOpen: true}}
	if old != nil {
		run.fallbacks, run.decisions = old.fallbacks, old.decisions
	}
	run.classifier = classify.New(classify.Options{
		WriteFunctions:    rt.ReadRouting.WriteFunctions,
		ReadOnlyFunctions: rt.ReadRouting.ReadOnlyFunctions,
	})
	return run
}

// probeCredentials are what route rt's probes log in with: the first
// [[users]] entry's backend credentials, to the route's backend database
// (SPEC is silent; documented in docs/behaviour.md). A pass-through
// user's probes log in once a client has proved its verifier
// (passthrough.go): backend, when set, gives those.
func probeCredentials(cfg *config.Config, rt *config.Route, backend func(*config.User, string) pool.Credentials) pool.Credentials {
	if backend != nil {
		return backend(&cfg.Users[0], rt.BackendDB())
	}
	user, pass := cfg.Users[0].Backend()
	return pool.Credentials{User: user, Password: pass, Database: rt.BackendDB()}
}

// startReaders starts the route's position readers (positions logs them
// in): the elected primary's WAL position, and each server's replay
// position, until ctx ends; and its flusher (flushes logs it in).
func (run *routeRuntime) startReaders(ctx context.Context, rt *config.Route, positions, flushes *health.PGProber) {
	timeout, checker := rt.HA.HealthTimeout(), run.checker
	run.reader = freshness.NewReader(ctx, func(ctx context.Context) (freshness.Token, error) {
		// The elected primary's position (failover.go): read where the
		// writes go now.
		primary, why := primaryOf(rt, checker.Snapshot())
		if primary == "" {
			return freshness.Token{}, errors.New(why)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		lsn, flushed, tli, err := positions.Position(ctx, primary)
		if err == nil {
			run.flushed.note(freshness.Token{Timeline: tli, LSN: freshness.LSN(flushed)})
		}
		return freshness.Token{Timeline: tli, LSN: freshness.LSN(lsn)}, err
	})
	run.flusher = freshness.NewReader(ctx, func(ctx context.Context) (freshness.Token, error) {
		primary, why := primaryOf(rt, checker.Snapshot())
		if primary == "" {
			return freshness.Token{}, errors.New(why)
		}
		// Every request raised flushWant before it was made, and is
		// served by a query begun after it: this one, or a later one
		// when this one took its position before the request raised it
		// (then this one flushed up to it first).
		want := run.flushWant.Swap(0)
		if want == 0 {
			return freshness.Token{}, nil
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		wrote, flushed, err := flushes.FlushTo(ctx, primary, want)
		if err != nil {
			return freshness.Token{}, err
		}
		run.flushed.noteLSN(freshness.LSN(flushed))
		if !wrote {
			return freshness.Token{}, nil
		}
		return freshness.Token{LSN: freshness.LSN(want)}, nil
	})
	for _, rep := range routeServers(rt) { // the configured primary too: it may be demoted
		addr := rep.Address
		run.replays[addr] = freshness.NewReader(ctx, func(ctx context.Context) (freshness.Token, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			lsn, tli, started, err := positions.ReplayPosition(ctx, addr)
			if err != nil {
				return freshness.Token{}, err
			}
			// A standby restarted since its last probe may have come back
			// behind what the probes and reads saw: its position counts
			// once a probe has seen it up again.
			if v, ok := checker.Snapshot().Get(addr); !ok || !v.StartedAt.Equal(started) {
				return freshness.Token{}, errors.New("replica restarted since its last probe")
			}
			return freshness.Token{Timeline: tli, LSN: freshness.LSN(lsn)}, nil
		})
	}
}

// flushedAt is routeRuntime.flushed.
type flushedAt struct {
	mu  sync.Mutex
	tok freshness.Token
}

// note records that the primary's WAL is written out to tok: the highest
// such position on tok's timeline, a later timeline's replacing it.
func (f *flushedAt) note(tok freshness.Token) {
	f.mu.Lock()
	if f.tok.Less(tok) {
		f.tok = tok
	}
	f.mu.Unlock()
}

// noteLSN is note for a position without a timeline (the flusher's):
// it counts on the last timeline noted, as a flushed position only ever
// saves a query.
func (f *flushedAt) noteLSN(lsn freshness.LSN) {
	f.mu.Lock()
	if lsn > f.tok.LSN {
		f.tok.LSN = lsn
	}
	f.mu.Unlock()
}

// covers reports whether the WAL up to floor is known to be written out.
func (f *flushedAt) covers(floor freshness.Token) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tok.Timeline != 0 && f.tok.Timeline == floor.Timeline && f.tok.LSN >= floor.LSN
}

func (r *routing) close() {
	r.stopReaders()
	for _, run := range r.routes {
		if run.checker != nil {
			run.checker.Close()
		}
		run.volatility.close()
		run.unlogged.close()
	}
	for _, p := range r.probers {
		p.Close()
	}
}

// backoffs remembers replicas that refused a connection, so reads skip
// them for a while (exponential, capped) instead of paying a failed
// connect each.
type backoffs struct {
	mu    sync.Mutex
	state map[string]backoffState
}

type backoffState struct {
	failures int
	at       time.Time // the last failure that counted
	until    time.Time
}

const (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 30 * time.Second
)

func (b *backoffs) failed(addr string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state[addr]
	if now.Before(st.until) {
		// Sessions failing at the same moment are one failure, not many.
		return st.until.Sub(now)
	}
	st.failures++
	st.at = now
	d := backoffBase << min(st.failures-1, 10)
	if d > backoffMax {
		d = backoffMax
	}
	st.until = now.Add(d)
	b.state[addr] = st
	return d
}

func (b *backoffs) succeeded(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.state, addr)
}

// blocked reports whether addr is backed off at now. A probe that found
// the server reachable after its last failure ends the backoff early.
func (b *backoffs) blocked(addr string, now time.Time, v health.Verdict, have bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.state[addr]
	if !ok || !now.Before(st.until) {
		return false
	}
	if have && v.Reachable && v.ProbedAt.After(st.at) {
		delete(b.state, addr)
		return false
	}
	return true
}

// candidates lists a route's replicas with their eligibility for a read
// needing req, now.
func (s *Server) candidates(rt *config.Route, req freshness.Requirement) []candidate {
	var snap *health.Snapshot
	if c := s.routing.Load().route(rt.Name).checkerOf(); c != nil {
		snap = c.Snapshot()
	}
	return s.candidatesFrom(rt, snap, req)
}

func (s *Server) candidatesFrom(rt *config.Route, snap *health.Snapshot, req freshness.Requirement) []candidate {
	return s.appendCandidates(nil, rt, snap, req)
}

// appendCandidates is candidatesFrom appending to out: a session's
// decision reuses its list (allocations per routed read otherwise).
func (s *Server) appendCandidates(out []candidate, rt *config.Route, snap *health.Snapshot, req freshness.Requirement) []candidate {
	now := time.Now()
	if req.VerdictTTL == 0 {
		req.VerdictTTL = rt.HA.VerdictTTL()
	}
	forReadServers(rt, snap, func(rep config.Endpoint) {
		c := candidate{addr: rep.Address, weight: rep.Weight, lagMS: -1}
		var v health.Verdict
		have := false
		if snap != nil {
			v, have = snap.Get(rep.Address)
		}
		if have {
			// A replay position this proxy saw itself after a read there
			// is newer than the last probe's: use the larger.
			// (Only of the same run of the server: one that restarted
			// may have come back behind it.)
			if o, ok := s.observed.Load(rep.Address); ok {
				if ob := o.(observedReplay); ob.tok.Timeline == v.Timeline && uint64(ob.tok.LSN) > v.ReplayLSN &&
					!v.StartedAt.IsZero() && v.StartedAt.Equal(ob.started) {
					v.ReplayLSN = uint64(ob.tok.LSN)
				}
			}
		}
		c.eligible, c.reason = freshness.Eligible(v, have, req, now)
		if have {
			c.lagMS = v.LagMS
		}
		if c.eligible && s.backoff.blocked(rep.Address, now, v, have) {
			c.eligible, c.reason = false, reasonReplicaUnavailable
		}
		out = append(out, c)
	})
	return out
}

// primaryVerdict is the latest verdict on a route's configured primary.
func (s *Server) primaryVerdict(rt *config.Route) (health.Verdict, bool) {
	if c := s.routing.Load().route(rt.Name).checkerOf(); c != nil {
		return c.Snapshot().Primary()
	}
	return health.Verdict{}, false
}

// fallbackSlot is one read that fell back to the primary, counted against
// max_primary_fallback_inflight until its unit ends.
type fallbackSlot struct{ n *atomic.Int64 }

func (f *fallbackSlot) release() { f.n.Add(-1) }

// holdFallbackLocked makes slot the session's fallback, releasing the one
// it held (nil: just release). Callers hold ss.mu.
func (ss *session) holdFallbackLocked(slot *fallbackSlot) {
	if ss.mu.fallback != nil {
		ss.mu.fallback.release()
	}
	ss.mu.fallback = slot
}

// takeFallback counts a primary fallback of route rt; false when the
// route's max_primary_fallback_inflight is reached (SPEC §5: protect the
// primary a recovery needs).
func (s *Server) takeFallback(rt *config.Route) (*fallbackSlot, bool) {
	n := new(atomic.Int64) // (no runtime: shutting down)
	if run := s.routing.Load().route(rt.Name); run != nil {
		n = run.fallbacks
	}
	if limit := int64(rt.Freshness.MaxPrimaryFallbackInflight); limit > 0 && n.Add(1) > limit {
		n.Add(-1)
		return nil, false
	} else if limit <= 0 {
		n.Add(1)
	}
	return &fallbackSlot{n: n}, true
}

// replicaLink returns the session's link to replica addr, attaching one
// from the pool on first use.
func (ss *session) replicaLink(addr string) (*link, error) {
	ss.mu.Lock()
	l := ss.mu.replicas[addr]
	if l.claimLocked() {
		ss.mu.Unlock()
		return l, nil
	}
	var gone *link
	if l != nil {
		delete(ss.mu.replicas, addr)
		if !l.released {
			gone = l
		}
	}
	ss.mu.Unlock()
	if gone != nil {
		ss.detach(gone, false) // frees its pool slot
	}
	// A read must not wait long for a replica that does not answer: the
	// primary or another replica can serve it.
	p, err := ss.pool(addr, replicaDialTimeout(ss.route, ss.srv.opts.connectTimeout))
	if err != nil {
		return nil, err
	}
	c, err := ss.acquireConn(p)
	if err != nil {
		if !errors.Is(err, pool.ErrPoolTimeout) && !errors.Is(err, errQueuedCancel) {
			d := ss.srv.backoff.failed(addr, time.Now())
			ss.log.Warn("replica refused a connection; skipping it", zap.String("server", addr),
				zap.Duration("for", d), zap.Error(err))
		}
		return nil, err
	}
	ss.srv.backoff.succeeded(addr)
	l = newLink(c, p, true, true)
	ss.mu.Lock()
	ss.mu.replicas[addr] = l
	ss.mu.Unlock()
	ss.attach(l)
	return l, nil
}

// catalogFacts caches a yes or no per name from the route's primary's
// catalog (routeRuntime): for volatility, whether any function of that
// name is VOLATILE; for unlogged, whether any relation of that name is
// UNLOGGED. Yes sends the read to the primary. Each name is looked up
// once (on a connection of its own, logged in like the route's sessions:
// pool.Dialer), even when many sessions miss it at once: the
// names missing from the cache are batched, one lookup at a time per
// route, and a session waits for the lookup that answers its names. A
// reload starts a new cache. mu guards the fields and is never held across
// a dial or a query: the one lookup running (catalogFacts.run) takes the
// connection out and puts it back when done.
type catalogFacts struct {
	sql  string // the lookup: a format taking the names as a text[] literal
	what string // what it looks up, for the log
	// failOpen: a failed lookup (the primary down, say) answers no, and
	// that answer is kept until forget, instead of yes and not kept. For
	// unlogged relations: a standby that cannot read one refuses the read
	// visibly (0A000) and so makes the route forget, while yes would send
	// every read to a primary that may be down.
	failOpen bool

	mu      sync.RWMutex        // read-locked to answer from known alone (every routed read asks)
	known   map[string]bool     // name -> yes (volatile, unlogged)
	waiting map[string]*volCall // a name being looked up, or queued -> the lookup that answers it
	next    *volCall            // names queued for the lookup after the running one
	running bool                // a lookup (catalogFacts.run) is under way
	catalog *pool.Conn          // idle connection, made on first use (nil while a lookup has it)
	closed  bool                // the runtime was replaced: a lookup ending keeps nothing
}

// volCall is one lookup of a batch of names and its answer (valid once
// done is closed).
type volCall struct {
	names []string
	done  chan struct{}
	got   map[string]bool
	err   error
}

// close forgets every answer and closes the catalog connection (a lookup
// running meanwhile closes its own when it ends).
func (v *catalogFacts) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.catalog != nil {
		v.catalog.Terminate(time.Second)
		v.catalog = nil
	}
	clear(v.known)
	v.closed = true
}

// volatilitySQL looks up names (a text[] literal, pgTextArray) in pg_proc:
// one row per name, true when any function of that name is VOLATILE or
// none exists.
const volatilitySQL = "select n, coalesce(bool_or(p.provolatile = 'v'), true) from unnest(%s::text[]) n left join pg_catalog.pg_proc p on p.proname = n group by n"

// unloggedSQL looks up relation names in pg_class: one row per name, true
// when a relation of that name in any schema is UNLOGGED (a hot standby
// refuses to read it: 0A000) or a sequence (a standby shows the value
// WAL-logged ahead of nextval, up to 32 past the primary's last_value and
// with log_cnt 0: PostgreSQL's regression suite, sequence.sql), false when
// none is or none exists. The
// schema is not looked at: the session's search_path is not the lookup
// connection's, so a name unlogged anywhere counts (pgpool-II's
// check_unlogged_table asks the catalog the same question).
const unloggedSQL = "select n, coalesce(bool_or(c.relpersistence = 'u' or c.relkind = 'S'), false) from unnest(%s::text[]) n left join pg_catalog.pg_class c on c.relname = n group by n"

// anyVolatile reports whether any of funcs is VOLATILE on the session's
// primary (catalogFacts.any), looking missing names up in its catalog.
func (s *Server) anyVolatile(ss *session, funcs []string) bool {
	return s.catalogSaysYes(ss, func(run *routeRuntime) *catalogFacts { return run.volatility }, funcs)
}

// anyUnlogged reports whether any of rels is an UNLOGGED relation on the
// session's primary (catalogFacts.any), looking missing names up in its
// catalog.
func (s *Server) anyUnlogged(ss *session, rels []string) bool {
	return s.catalogSaysYes(ss, func(run *routeRuntime) *catalogFacts { return run.unlogged }, rels)
}

// catalogSaysYes asks the session's route's catalogFacts (which) about
// names, looking missing ones up on the primary; yes without a runtime.
func (s *Server) catalogSaysYes(ss *session, which func(*routeRuntime) *catalogFacts, names []string) bool {
	run := ss.runtime()
	if run == nil {
		return true
	}
	v := which(run)
	if yes, known := v.cached(names); known {
		return yes // (before the lookup closure, which would be allocated per unit)
	}
	return v.any(names, func(missing []string) (map[string]bool, error) { return s.lookupNames(ss, v, missing) })
}

// unloggedOnStandby is PostgreSQL's message (in English) for a read of an
// unlogged relation on a hot standby.
const unloggedOnStandby = "cannot access temporary or unlogged relations during recovery"

// forgetUnlogged drops what the session's route knows of unlogged
// relations: the session is about to run a statement that may make one.
func (s *Server) forgetUnlogged(ss *session) {
	if run := ss.runtime(); run != nil {
		run.unlogged.forget()
	}
}

// forget drops every cached answer: the catalog may have changed (a
// relation made or turned UNLOGGED through the proxy). Lookups under way
// keep theirs.
func (v *catalogFacts) forget() {
	v.mu.Lock()
	clear(v.known)
	v.mu.Unlock()
}

// any reports whether the answer for any of funcs is yes (volatile, or
// unlogged). A name missing from the cache joins the lookup that already
// answers it, or the next one; one lookup runs at a time (lookup, with
// every name queued for it), and the caller waits for the lookups of its
// names. An unknown answer (a failed lookup, or a name the answer lacks)
// counts as yes, not cached (the unit goes to the primary), or with
// failOpen as no, cached. Answers are cached until forget or until the
// runtime is replaced (close).
func (v *catalogFacts) any(funcs []string, lookup func(names []string) (map[string]bool, error)) bool {
	type pending struct {
		name string
		call *volCall
	}
	if yes, known := v.cached(funcs); known {
		return yes
	}
	var wait []pending
	v.mu.Lock()
	for _, f := range funcs {
		vol, ok := v.known[f]
		if ok && vol {
			v.mu.Unlock()
			return true
		}
		if ok || slices.ContainsFunc(wait, func(p pending) bool { return p.name == f }) {
			continue
		}
		c := v.waiting[f]
		if c == nil {
			if v.next == nil {
				v.next = &volCall{done: make(chan struct{})}
			}
			c = v.next
			c.names = append(c.names, f)
			if v.waiting == nil {
				v.waiting = map[string]*volCall{}
			}
			v.waiting[f] = c
		}
		wait = append(wait, pending{f, c})
	}
	var start *volCall
	if !v.running && v.next != nil {
		v.running, start, v.next = true, v.next, nil
	}
	v.mu.Unlock()
	if start != nil {
		go v.run(start, lookup)
	}
	vol := false
	for _, p := range wait {
		<-p.call.done
		got, ok := p.call.got[p.name]
		switch {
		case v.failOpen:
			vol = vol || got && p.call.err == nil
		case p.call.err != nil || !ok || got:
			vol = true
		}
	}
	return vol
}

// cached answers any from the cache alone: known is false when a name is
// missing from it.
func (v *catalogFacts) cached(names []string) (yes, known bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, n := range names {
		y, ok := v.known[n]
		if !ok {
			return false, false
		}
		yes = yes || y
	}
	return yes, true
}

// run looks up c's names, then the names queued meanwhile, until none
// are, one lookup at a time.
func (v *catalogFacts) run(c *volCall, lookup func(names []string) (map[string]bool, error)) {
	for c != nil {
		got, err := lookup(c.names)
		v.mu.Lock()
		if (err == nil || v.failOpen) && !v.closed {
			if v.known == nil {
				v.known = map[string]bool{}
			}
			for _, n := range c.names {
				if vol, ok := got[n]; ok || v.failOpen {
					v.known[n] = vol && err == nil
				}
			}
		}
		for _, n := range c.names {
			if v.waiting[n] == c {
				delete(v.waiting, n) // answered (or failed: the next miss looks it up again)
			}
		}
		c.got, c.err = got, err
		close(c.done)
		c, v.next = v.next, nil
		if c == nil {
			v.running = false
		}
		v.mu.Unlock()
	}
}

// errCatalogClosed refuses a lookup after the runtime was replaced.
var errCatalogClosed = errors.New("the route's runtime was replaced")

// lookupNames looks names up on the route's catalog connection, never
// holding v.mu across the dial or the query. Only catalogFacts.run calls
// it, so one lookup at a time per route uses the connection.
func (s *Server) lookupNames(ss *session, v *catalogFacts, names []string) (map[string]bool, error) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil, errCatalogClosed
	}
	conn := v.catalog
	v.catalog = nil
	v.mu.Unlock()

	rows, conn, err := s.lookupCatalog(ss, conn, fmt.Sprintf(v.sql, pool.QuoteLiteral(pgTextArray(names))))

	v.mu.Lock()
	if conn != nil {
		if v.closed || v.catalog != nil {
			conn.Terminate(time.Second)
		} else {
			v.catalog = conn
		}
	}
	v.mu.Unlock()
	if err != nil {
		ss.log.Warn("catalog lookup failed", zap.String("of", v.what), zap.Bool("answered_yes", !v.failOpen), zap.Error(err))
		return nil, err
	}
	got := make(map[string]bool, len(rows))
	for _, row := range rows {
		if len(row) != 2 || row[0] == nil {
			ss.log.Warn("catalog lookup: unexpected row", zap.String("of", v.what), zap.Bool("answered_yes", !v.failOpen), zap.Int("columns", len(row)))
			return nil, errors.New("unexpected row")
		}
		got[string(row[0])] = string(row[1]) == "t"
	}
	return got, nil
}

// lookupCatalog runs a catalogFacts query on conn (dialled when nil or
// broken). It returns the connection to keep, nil if none.
func (s *Server) lookupCatalog(ss *session, conn *pool.Conn, sql string) ([][][]byte, *pool.Conn, error) {
	var rows [][][]byte
	var err error
	// A connection kept from an earlier lookup may have been closed by the
	// server since (a restart): then the lookup runs once more on a new one.
	for attempt := 0; attempt < 2; attempt++ {
		reused := conn != nil
		if conn == nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.connectTimeout)
			addr, _ := ss.primaryAddr()
			if addr == "" {
				addr = ss.route.Primary.Address // (none elected: that lookup fails as the primary would)
			}
			conn, err = s.dialCatalog(ctx, ss.route, addr, s.backendCredentials(ss.userCfg, ss.route.BackendDB()), ss.cfg.Server.BackendTLSMode)
			cancel()
			if err != nil {
				return nil, nil, fmt.Errorf("cannot connect for the catalog: %w", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rows, err = conn.Query(ctx, sql)
		cancel()
		if conn.Broken() {
			conn.Close()
			if err != nil && reused {
				conn = nil
				continue
			}
			return rows, nil, err
		}
		break
	}
	return rows, conn, err
}

// dialCatalog opens the connection catalog lookups run on, logged in as
// a session of the route would be (pool.Dialer: PostgreSQL's own SASLprep
// for SCRAM passwords, raw bytes for md5), on addr, the route's primary
// (with follow_failover the elected one: session.primaryAddr), through its
// dial gate (gatedDial). A connection kept from before a failover answers
// from the old primary's catalog until it breaks; pg_class and pg_proc
// are replicated, so a rejoined standby's answers are the same.
func (s *Server) dialCatalog(ctx context.Context, rt *config.Route, addr string, cred pool.Credentials, tlsMode string) (*pool.Conn, error) {
	if tlsMode == "" {
		tlsMode = "disable"
	}
	cred.Params = map[string]string{"application_name": "pg-kinetic catalog"}
	return s.gatedDial(ctx, rt, addr, pool.Dialer{TLSMode: tlsMode}, cred)
}

// gatedDial opens a connection of the proxy's own to addr outside the
// pools (a lookup, a check that a server is up, a replication
// connection) through the dial gate the pools of rt use there
// (max_concurrent_dials): a storm of them waits its turn with the pools'
// logins instead of adding to them. It waits for a slot within ctx.
func (s *Server) gatedDial(ctx context.Context, rt *config.Route, addr string, d pool.Dialer, cred pool.Credentials) (*pool.Conn, error) {
	return s.pools.Dial(ctx, pool.Key{Addr: addr, User: cred.User, Database: cred.Database}, rt.Pool.MaxConcurrentDials, d, cred)
}

// pgTextArray renders names as a PostgreSQL text[] literal.
func pgTextArray(names []string) string {
	b := []byte{'{'}
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for _, r := range []byte(n) {
			if r == '"' || r == '\\' {
				b = append(b, '\\')
			}
			b = append(b, r)
		}
		b = append(b, '"')
	}
	return string(append(b, '}'))
}

// observe records a replay position read on replica addr on demand
// (refreshReplicas): the server-wide freshest knowledge of how far it has
// replayed, which a probe only confirms later. Kept per timeline and per
// run of the server (started, its pg_postmaster_start_time as probed):
// a position on a new timeline, or of a restarted server, replaces the
// old one, and candidatesFrom uses it only while the probes show the same
// run.
func (s *Server) observe(addr string, t freshness.Token, started time.Time) {
	if started.IsZero() {
		return // which run it belongs to is unknown
	}
	n := observedReplay{tok: t, started: started}
	for {
		old, loaded := s.observed.LoadOrStore(addr, n)
		if !loaded {
			return
		}
		o := old.(observedReplay)
		if o.started.Equal(started) && o.tok.Timeline == t.Timeline && o.tok.LSN >= t.LSN {
			return
		}
		if s.observed.CompareAndSwap(addr, old, n) {
			return
		}
	}
}

// observedReplay is a replay position read on demand on a replica, with
// the start time of the server run it was read on.
type observedReplay struct {
	tok     freshness.Token
	started time.Time
}

// replicaDialTimeout bounds connecting to a replica for a read: twice the
// probe timeout, at least a second, at most the general connect timeout.
func replicaDialTimeout(rt *config.Route, ceiling time.Duration) time.Duration {
	return min(max(2*rt.HA.HealthTimeout(), time.Second), ceiling)
}

// abandonReads is called when a probe finds server addr unreachable. A
// server that stopped answering (a hung host, a dead network path) keeps
// its connections open and silent, and every session waiting on one would
// wait until TCP gave up: each session lets go of its connection to addr if
// it waits there for a retryable read's first byte (the read then runs
// elsewhere) or for the answer to a WAL position query behind a unit
// already answered (the session's next read would wait for it).
func (s *Server) abandonReads(addr string) {
	s.observed.Delete(addr) // it may come back behind what was observed
	for _, ss := range s.sessionList() {
		ss.abandonWaits(addr)
	}
}

// abandonWaits closes the session's connection to replica addr when the
// session waits on it without serving the client from it: a retryable
// read waiting for its first byte, or injected messages (a re-prepare)
// still unanswered on an otherwise idle link. The reader then fails
// (linkFailed uncounts the queries) and a waiting read runs elsewhere. A
// transaction or a unit already answering on addr is left alone.
func (ss *session) abandonWaits(addr string) {
	ss.mu.Lock()
	l := ss.mu.replicas[addr]
	if ss.mu.awaiting != nil && ss.mu.awaiting.addr == addr {
		l = ss.mu.awaiting
	}
	if l == nil || l.dead || l.released {
		ss.mu.Unlock()
		return
	}
	retry := ss.mu.awaiting == l && !ss.mu.answered
	serving := l == ss.mu.cur && (ss.mu.pending > 0 || ss.mu.tx != 'I')
	if !retry && (serving || len(l.swallow) == 0) {
		ss.mu.Unlock()
		return
	}
	l.abandoned = retry
	// Closed under ss.mu: while the link is awaited or owes answers it
	// cannot go back to its pool (releaseIdle), so the connection is
	// never another session's.
	l.conn.Close()
	ss.mu.Unlock()
	what := "a read waited for its answer; running the read elsewhere"
	if !retry {
		what = "the session waited for a WAL position answer; dropping the connection"
	}
	ss.log.Warn("a probe found the replica unreachable while "+what, zap.String("server", addr))
}
