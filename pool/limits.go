package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Limits bound the server connections of a server across pools (PgBouncer's
// max_db_connections and max_user_connections) and the logins in progress
// to it. Zero values mean unlimited; MaxDials < 1 means 1.
type Limits struct {
	// MaxDB: connections to one (server address, database), all users.
	MaxDB int
	// MaxUser: connections to one server address per user, across
	// databases.
	MaxUser int
	// MaxDials: logins (connect, TLS, authentication) in progress at once
	// to one (server address, database).
	MaxDials int
}

type dbKey struct{ addr, database string }

type userKey struct{ addr, user string }

// limiter counts the connections of every pool of a Manager against their
// Limits, and gates their dials. Safe for concurrent use.
type limiter struct {
	mu struct {
		sync.Mutex
		dbConns   map[dbKey]int
		userConns map[userKey]int
		// waiting counts callers waiting for room at a dbKey; a
		// connection released there is closed rather than pooled while
		// someone waits (Pool.put), and idle ones of other pools are
		// evicted for them (Manager.evict).
		waiting map[dbKey]int
		// room is closed (and replaced) whenever a connection is
		// released: the one predicate is "a count went down".
		room  chan struct{}
		gates map[dbKey]*dialGate
	}
	inProgress atomic.Int64 // dials in progress, all servers
	peak       atomic.Int64 // the most inProgress has been
	// evict closes one idle connection of a pool of k other than the
	// caller's, reporting whether it found one (Manager.evict).
	evict func(k dbKey, except *Pool) bool
}

// dialGate is the semaphore of concurrent dials to one server.
type dialGate struct{ slots chan struct{} }

func newLimiter() *limiter {
	l := &limiter{}
	l.mu.dbConns = map[dbKey]int{}
	l.mu.userConns = map[userKey]int{}
	l.mu.waiting = map[dbKey]int{}
	l.mu.gates = map[dbKey]*dialGate{}
	l.mu.room = make(chan struct{})
	return l
}

// ErrLimitTimeout is returned by Acquire when the acquire timeout passed
// while waiting for room under Limits (max_db_connections,
// max_user_connections) or for a dial slot. errors.Is(err,
// ErrPoolTimeout) holds for it too.
var ErrLimitTimeout = fmt.Errorf("%w: the server's connection limits stayed reached", ErrPoolTimeout)

var errNoRoom = ErrLimitTimeout

// reserve counts one more connection of p, waiting while a limit is
// reached, until ctx ends. The caller must release it once the connection
// is closed (or was never opened).
func (l *limiter) reserve(ctx context.Context, p *Pool) error {
	lim := p.opts.Limits
	dk := dbKey{p.key.Addr, p.key.Database}
	uk := userKey{p.key.Addr, p.key.User}
	evicted := false
	for {
		l.mu.Lock()
		if (lim.MaxDB <= 0 || l.mu.dbConns[dk] < lim.MaxDB) && (lim.MaxUser <= 0 || l.mu.userConns[uk] < lim.MaxUser) {
			l.mu.dbConns[dk]++
			l.mu.userConns[uk]++
			l.mu.Unlock()
			return nil
		}
		dbFull := lim.MaxDB > 0 && l.mu.dbConns[dk] >= lim.MaxDB
		room := l.mu.room
		l.mu.waiting[dk]++
		l.mu.Unlock()
		if dbFull && !evicted && l.evict != nil {
			// Room taken by idle connections of other users' pools:
			// close one (PgBouncer does the same at max_db_connections).
			evicted = l.evict(dk, p)
		}
		var err error
		select {
		case <-room:
			evicted = false
		case <-ctx.Done():
			err = ctx.Err()
			if errors.Is(context.Cause(ctx), ErrPoolTimeout) {
				err = errNoRoom
			}
		}
		l.mu.Lock()
		if l.mu.waiting[dk]--; l.mu.waiting[dk] == 0 {
			delete(l.mu.waiting, dk)
		}
		l.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// release uncounts a connection of key.
func (l *limiter) release(key Key) {
	dk := dbKey{key.Addr, key.Database}
	uk := userKey{key.Addr, key.User}
	l.mu.Lock()
	if l.mu.dbConns[dk]--; l.mu.dbConns[dk] <= 0 {
		delete(l.mu.dbConns, dk)
	}
	if l.mu.userConns[uk]--; l.mu.userConns[uk] <= 0 {
		delete(l.mu.userConns, uk)
	}
	close(l.mu.room)
	l.mu.room = make(chan struct{})
	l.mu.Unlock()
}

// waitingFor reports whether a caller waits for room at key's server.
func (l *limiter) waitingFor(key Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.waiting[dbKey{key.Addr, key.Database}] > 0
}

// gate returns the dial gate of key's server holding n slots. A gate of
// another size (a reload changed max_concurrent_dials) is replaced: dials
// in progress through the old one finish there.
func (l *limiter) gate(key Key, n int) *dialGate {
	n = max(n, 1)
	dk := dbKey{key.Addr, key.Database}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.mu.gates[dk]
	if g == nil || cap(g.slots) != n {
		g = &dialGate{slots: make(chan struct{}, n)}
		l.mu.gates[dk] = g
	}
	return g
}

// enter waits, within ctx, for a slot of the dial gate of key's server
// holding maxDials slots; leave gives it back.
func (l *limiter) enter(ctx context.Context, key Key, maxDials int) (*dialGate, error) {
	g := l.gate(key, maxDials)
	select {
	case g.slots <- struct{}{}:
	default:
		select {
		case g.slots <- struct{}{}:
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), ErrPoolTimeout) {
				return nil, errNoRoom
			}
			return nil, ctx.Err()
		}
	}
	n := l.inProgress.Add(1)
	for {
		peak := l.peak.Load()
		if n <= peak || l.peak.CompareAndSwap(peak, n) {
			break
		}
	}
	return g, nil
}

func (l *limiter) leave(g *dialGate) {
	l.inProgress.Add(-1)
	<-g.slots
}

// Dial opens a connection outside any pool (the proxy's own lookups, a
// check that a server is up, a replication connection) through the dial
// gate of key's server (key.Addr and key.Database; maxDials slots, as
// the pools of that server have): it waits, within ctx, for a slot, so
// a storm of such logins makes at most maxDials at a time together with
// the pools' own. The connection is not counted against Limits' MaxDB
// or MaxUser; the caller closes it.
func (m *Manager) Dial(ctx context.Context, key Key, maxDials int, d Dialer, cred Credentials) (*Conn, error) {
	g, err := m.lim.enter(ctx, key, maxDials)
	if err != nil {
		return nil, err
	}
	defer m.lim.leave(g)
	return d.Dial(ctx, key.Addr, cred)
}

// DialStats are the server logins a Manager's pools have in progress now
// and the most they had at once.
type DialStats struct {
	InProgress, Peak int64
}

// DialStats reports the logins in progress across every pool.
func (m *Manager) DialStats() DialStats {
	return DialStats{InProgress: m.lim.inProgress.Load(), Peak: m.lim.peak.Load()}
}

// evict closes the idle connection that has been idle longest among the
// pools of k other than except.
func (m *Manager) evict(k dbKey, except *Pool) bool {
	var ps []*Pool
	m.Each(func(p *Pool) {
		if p != except && p.key.Addr == k.addr && p.key.Database == k.database {
			ps = append(ps, p)
		}
	})
	for _, p := range ps {
		if p.closeOldestIdle() {
			return true
		}
	}
	return false
}
