package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrPoolTimeout is returned by Acquire when no connection became free within
// the pool's acquire timeout.
var ErrPoolTimeout = errors.New("timed out waiting for a free server connection")

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("pool is closed")

// Key identifies a pool: one per server, server-side user and database.
type Key struct {
	Addr, User, Database string
}

// Options configure a Pool.
type Options struct {
	Size           int           // required, > 0
	AcquireTimeout time.Duration // 0 = wait for the context only
	Credentials    Credentials
	Dialer         Dialer
	// ResetQuery runs on Release before a connection is reused.
	// Default "DISCARD ALL".
	ResetQuery string
	// CheckAfter: an idle connection is checked for a closed socket or
	// unsolicited data (alive) before reuse only when it has been idle at
	// least this long; 0 checks every time. Transaction pooling reuses
	// connections within microseconds, where a check per unit would cost
	// a syscall per query (PgBouncer's server_check_delay, 30 s there).
	CheckAfter time.Duration
	// NoReset skips ResetQuery on Release (transaction pooling: the
	// holder tracks what each connection carries in Conn.State and brings
	// it in line on the next use). ReleaseReset still resets.
	NoReset bool
	// Lifetime: a connection older than this is closed when released or
	// found idle (server_lifetime_ms); 0 = no limit.
	Lifetime time.Duration
	// IdleTimeout: Sweep closes connections idle longer than this
	// (server_idle_timeout_ms); 0 = no limit.
	IdleTimeout time.Duration
	// Limits count the pool's connections with the other pools of its
	// Manager to the same server (ignored by a pool made with New).
	Limits Limits
}

// Stats is a point-in-time view of a pool.
type Stats struct {
	Active, Idle, Waiting int
}

// Pool holds the connections of one Key.
type Pool struct {
	key  Key
	opts Options

	slots chan struct{} // one token per connection that may exist
	lim   *limiter      // the Manager's, nil for a pool made with New

	mu      sync.Mutex
	idle    []*Conn // LIFO: the most recently used connection is warmest
	active  int
	waiting int
	closed  bool
}

// New makes an empty pool; connections are dialled on demand.
func New(key Key, opts Options) *Pool {
	if opts.ResetQuery == "" {
		opts.ResetQuery = "DISCARD ALL"
	}
	if opts.Size < 1 {
		opts.Size = 1
	}
	return &Pool{key: key, opts: opts, slots: make(chan struct{}, opts.Size)}
}

// Size is the most connections the pool holds.
func (p *Pool) Size() int { return cap(p.slots) }

// Key returns the pool's key.
func (p *Pool) Key() Key { return p.key }

// Acquire returns an idle connection or dials a new one, waiting for a free
// slot when Size connections exist.
func (p *Pool) Acquire(ctx context.Context) (*Conn, error) {
	// Fast path: a free slot, no timer.
	select {
	case p.slots <- struct{}{}:
		return p.take(ctx, false)
	default:
	}
	if p.opts.AcquireTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.opts.AcquireTimeout, ErrPoolTimeout)
		defer cancel()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.waiting++
	p.mu.Unlock()
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
		if errors.Is(context.Cause(ctx), ErrPoolTimeout) {
			return nil, ErrPoolTimeout
		}
		return nil, ctx.Err()
	}
	p.mu.Lock()
	p.waiting--
	p.mu.Unlock()
	return p.take(ctx, true)
}

// take hands out an idle connection or dials one; the caller holds a slot.
// timed: ctx already carries the acquire timeout.
func (p *Pool) take(ctx context.Context, timed bool) (*Conn, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if p.expired(c, time.Now()) || (p.opts.CheckAfter == 0 || time.Since(c.idleFrom) >= p.opts.CheckAfter) && !c.alive() {
			p.closeConn(c)
			continue
		}
		p.active++
		p.mu.Unlock()
		return c, nil
	}
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, ErrClosed
	}
	p.active++
	p.mu.Unlock()

	c, err := p.dial(ctx, timed)
	if err != nil {
		var goesOn *loginGoesOn
		if !errors.As(err, &goesOn) {
			// (A login that goes on keeps the slot: adopt.)
			p.mu.Lock()
			p.active--
			p.mu.Unlock()
			<-p.slots
		}
		return nil, err
	}
	c.pool = p
	return c, nil
}

// loginGoesOn is the error of a caller that stopped waiting for a login
// still in progress: the login runs on to its own deadline, and its
// connection joins the pool's idle ones (adopt).
type loginGoesOn struct {
	addr  string
	cause error
}

func (e *loginGoesOn) Error() string {
	return "login to " + e.addr + " still in progress when the wait for it ended: " + e.cause.Error()
}

func (e *loginGoesOn) Unwrap() error { return e.cause }

// dialResult is a login's outcome.
type dialResult struct {
	c   *Conn
	err error
}

// adopt takes over the slot of a caller that stopped waiting for the
// login whose outcome res will carry: a connection that logs in joins the
// idle ones, a failed login frees the slot and its count.
func (p *Pool) adopt(res <-chan dialResult) {
	r := <-res
	if r.err != nil {
		p.lim.release(p.key)
		p.mu.Lock()
		p.active--
		p.mu.Unlock()
		<-p.slots
		return
	}
	r.c.born, r.c.counted, r.c.pool = time.Now(), true, p
	p.put(r.c)
}

// dial opens a connection within the Manager's limits: it waits for room
// under max_db_connections/max_user_connections, then for a dial slot,
// both within the acquire timeout.
func (p *Pool) dial(ctx context.Context, timed bool) (*Conn, error) {
	if p.lim == nil {
		c, err := p.opts.Dialer.Dial(ctx, p.key.Addr, p.opts.Credentials)
		if err == nil {
			c.born = time.Now()
		}
		return c, err
	}
	if !timed && p.opts.AcquireTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.opts.AcquireTimeout, ErrPoolTimeout)
		defer cancel()
	}
	if err := p.lim.reserve(ctx, p); err != nil {
		return nil, err
	}
	g, err := p.lim.enter(ctx, p.key, p.opts.Limits.MaxDials)
	if err != nil {
		p.lim.release(p.key)
		return nil, err
	}
	// The login runs to its own deadline (the Dialer's ConnectTimeout),
	// not the caller's: a caller that stops waiting (its acquire timeout,
	// its client gone) leaves it to finish, and its connection to join
	// the pool. Abandoned halfway, a login still costs the server its
	// fork and authentication; on a server too slow to log anyone in
	// within the wait, redialling at once filled its accept queue with
	// abandoned connections and no login ever got through again (the
	// soak's congestion collapse, docs/soak-report.md).
	res := make(chan dialResult, 1)
	go func() {
		login := context.WithoutCancel(ctx)
		if p.opts.Dialer.ConnectTimeout <= 0 {
			var cancel context.CancelFunc
			login, cancel = context.WithTimeout(login, defaultLoginTimeout)
			defer cancel()
		}
		c, err := p.opts.Dialer.Dial(login, p.key.Addr, p.opts.Credentials)
		p.lim.leave(g)
		res <- dialResult{c, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			p.lim.release(p.key)
			return nil, r.err
		}
		r.c.born = time.Now()
		r.c.counted = true
		return r.c, nil
	case <-ctx.Done():
		go p.adopt(res)
		// (Not ErrPoolTimeout: the pool had room, the server was slow.)
		cause := ctx.Err()
		if errors.Is(context.Cause(ctx), ErrPoolTimeout) {
			cause = fmt.Errorf("the login did not finish within acquire_timeout_ms: %w", context.DeadlineExceeded)
		}
		return nil, &loginGoesOn{addr: p.key.Addr, cause: cause}
	}
}

// defaultLoginTimeout bounds a login that outlives its caller when the
// Dialer has no ConnectTimeout.
const defaultLoginTimeout = 30 * time.Second

// expired reports whether c has outlived the pool's Lifetime.
func (p *Pool) expired(c *Conn, now time.Time) bool {
	return p.opts.Lifetime > 0 && now.Sub(c.born) >= p.opts.Lifetime
}

// closeConn closes c and uncounts it from the Manager's limits.
func (p *Pool) closeConn(c *Conn) {
	c.raw.Close()
	if c.counted {
		c.counted = false
		p.lim.release(p.key)
	}
}

// Release makes c available again, after ResetQuery unless the pool has
// NoReset; a broken connection, or one whose reset fails, is closed
// instead.
func (p *Pool) Release(c *Conn) {
	if p.opts.NoReset {
		p.put(c)
		return
	}
	p.ReleaseReset(c)
}

// ReleaseReset runs ResetQuery on c (which forgets Conn.State) and makes it
// available again, whatever NoReset says.
func (p *Pool) ReleaseReset(c *Conn) {
	if !c.broken {
		// A server that does not answer the reset in time is in a state
		// the caller misjudged (one skipping to a Sync ignores it): it is
		// closed, never waited on for ever.
		c.SetReadDeadline(time.Now().Add(resetTimeout))
		if err := c.Exec(p.opts.ResetQuery, nil); err != nil {
			c.broken = true
		}
		c.SetReadDeadline(time.Time{})
		c.State = nil
	}
	p.put(c)
}

// resetTimeout bounds the reset query on release (ReleaseReset).
const resetTimeout = 10 * time.Second

// Discard closes c and frees its slot.
func (p *Pool) Discard(c *Conn) {
	c.broken = true
	p.put(c)
}

func (p *Pool) put(c *Conn) {
	// A connection past its lifetime is closed; so is one another pool
	// waits for room for (max_db_connections), unless this pool has
	// callers waiting for it.
	closeIt := c.broken || p.expired(c, time.Now()) || p.lim != nil && p.lim.waitingFor(p.key) && p.Stats().Waiting == 0
	p.mu.Lock()
	p.active--
	if closeIt || p.closed {
		p.mu.Unlock()
		p.closeConn(c)
	} else {
		c.idleFrom = time.Now()
		p.idle = append(p.idle, c)
		p.mu.Unlock()
	}
	<-p.slots
}

// Stats returns counts of connections on loan, idle, and waiting callers.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Active: p.active, Idle: len(p.idle), Waiting: p.waiting}
}

// Close closes idle connections; connections on loan close when returned.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		p.closeConn(c)
	}
}

// Sweep closes the idle connections past the pool's IdleTimeout or
// Lifetime at now (server_idle_timeout_ms; the proxy's janitor calls it).
func (p *Pool) Sweep(now time.Time) {
	if p.opts.IdleTimeout <= 0 && p.opts.Lifetime <= 0 {
		return
	}
	var doomed []*Conn
	p.mu.Lock()
	kept := p.idle[:0]
	for _, c := range p.idle {
		if p.expired(c, now) || p.opts.IdleTimeout > 0 && now.Sub(c.idleFrom) >= p.opts.IdleTimeout {
			doomed = append(doomed, c)
		} else {
			kept = append(kept, c)
		}
	}
	for i := len(kept); i < len(p.idle); i++ {
		p.idle[i] = nil
	}
	p.idle = kept
	p.mu.Unlock()
	for _, c := range doomed {
		p.closeConn(c)
	}
}

// closeOldestIdle closes the connection idle longest, if any.
func (p *Pool) closeOldestIdle() bool {
	p.mu.Lock()
	if len(p.idle) == 0 {
		p.mu.Unlock()
		return false
	}
	c := p.idle[0]
	p.idle = append(p.idle[:0], p.idle[1:]...)
	p.mu.Unlock()
	p.closeConn(c)
	return true
}

// Manager finds or creates the pool of a Key. Safe for concurrent use.
type Manager struct {
	mu     sync.Mutex
	pools  map[Key]*Pool
	closed bool
	lim    *limiter // counts the pools' connections per server (limits.go)
}

// NewManager returns an empty Manager.
func NewManager() *Manager {
	m := &Manager{pools: map[Key]*Pool{}, lim: newLimiter()}
	m.lim.evict = m.evict
	return m
}

// Get returns the pool of key, creating it with opts if it does not exist.
// When opts differ from the existing pool's (a reload changed the size, a
// timeout, credentials or TLS), the old pool is retired: its idle
// connections close now, connections on loan close when returned, and a
// new pool with opts takes its place. For a moment both may hold
// connections, so the server can briefly see old size + new size.
func (m *Manager) Get(key Key, opts Options) (*Pool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	p, ok := m.pools[key]
	if ok && !sameOptions(p.opts, opts) {
		p.Close()
		ok = false
	}
	if !ok {
		p = New(key, opts)
		p.lim = m.lim
		m.pools[key] = p
	}
	return p, nil
}

func sameOptions(a, b Options) bool {
	if b.ResetQuery == "" {
		b.ResetQuery = "DISCARD ALL"
	}
	if b.Size < 1 {
		b.Size = 1
	}
	if a.Size != b.Size || a.AcquireTimeout != b.AcquireTimeout || a.ResetQuery != b.ResetQuery || a.NoReset != b.NoReset || a.CheckAfter != b.CheckAfter || a.Dialer != b.Dialer {
		return false
	}
	if a.Lifetime != b.Lifetime || a.IdleTimeout != b.IdleTimeout || a.Limits != b.Limits {
		return false
	}
	ca, cb := a.Credentials, b.Credentials
	if ca.User != cb.User || ca.Password != cb.Password || ca.Database != cb.Database || len(ca.Params) != len(cb.Params) ||
		ca.SCRAM != cb.SCRAM || ca.MD5 != cb.MD5 {
		return false
	}
	for k, v := range ca.Params {
		if cb.Params[k] != v {
			return false
		}
	}
	return true
}

// Each calls f for every pool.
func (m *Manager) Each(f func(*Pool)) {
	m.mu.Lock()
	ps := make([]*Pool, 0, len(m.pools))
	for _, p := range m.pools {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, p := range ps {
		f(p)
	}
}

// Close closes every pool.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.Each((*Pool).Close)
}
