package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/health"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// connect selects the route by database name, binds the session to a
// server connection, applies the client's settings there and completes the
// client's startup (AuthenticationOk, ParameterStatus, BackendKeyData,
// ReadyForQuery).
func (ss *session) connect() error {
	if ss.database == config.AdminDatabase {
		if !ss.cfg.IsAdmin(ss.user) || ss.userCfg == nil {
			return fatalf(codeInvalidAuthorization, "pg-kinetic: user %q is not allowed to use the admin console", ss.user)
		}
		return ss.serveAdmin()
	}
	route, ok := ss.cfg.RouteByDatabase(ss.database)
	if !ok {
		return fatalf(codeInvalidCatalogName, "database %q does not exist", ss.database)
	}
	ss.route = route
	_, repl := ss.startupParams["replication"]
	ss.txPool = ss.cfg.Server.PoolMode == config.PoolModeTransaction && !repl
	srv, p, viaReplica, err := ss.loginServer(route)
	if err != nil {
		return err
	}
	if err := ss.applyStartupSettings(srv, p); err != nil {
		return err
	}
	ss.client.stmts = map[string]stmtInfo{}
	ss.client.sqlPrepared = map[string]sqlPrep{}
	// Under mu: the Server reaches sessions still starting up (drain,
	// abandonReads), and reads these under mu.
	ss.mu.Lock()
	ss.mu.routeName = route.Name // (PAUSE reads it from the admin console's goroutine)
	ss.mu.replicas = map[string]*link{}
	ss.initWaits()
	ss.mu.started = true
	ss.mu.Unlock()
	if r := ss.srv.routing.Load().route(route.Name); r != nil {
		ss.classifier = r.classifier
	}
	if ss.classifier == nil {
		ss.classifier = classify.New(classify.Options{})
	}
	// The client is told the parameters of a server running its settings.
	params := make(map[string]string, len(srv.Params))
	for k, v := range srv.Params {
		params[k] = v
	}
	pid := srv.PID
	if ss.txPool || viaReplica {
		// Transaction pooling binds no server at login: the connection
		// that answered goes back to the pool (keeping the client's
		// settings, which the next unit is likely to want), and the
		// client's process ID is the proxy's own (PgBouncer does the same).
		// So does a session that logged in through a replica: it has no
		// primary backend whose PID it could be given.
		ss.releaseServer(srv, p, true)
		pid = proxyPID()
	} else {
		ss.mu.primary = newLink(srv, p, false, false)
	}
	ss.key = ss.srv.registerCancelKey(ss, pid)

	if err := ss.greet(params); err != nil {
		return err
	}
	ss.log.Debug("session started", zap.String("user", ss.user), zap.String("database", ss.database),
		zap.String("route", route.Name), zap.String("server", srv.Addr), zap.Bool("transaction_pooling", ss.txPool))
	return nil
}

// loginServer takes the session's first server connection: the primary's,
// or, when the primary is down and reads need none, a replica's
// (viaReplica).
func (ss *session) loginServer(route *config.Route) (srv *pool.Conn, p *pool.Pool, viaReplica bool, err error) {
	d := decideSessionServer(route)
	if addr, why := ss.primaryAddr(); addr == "" {
		// follow_failover and no primary elected: as if it were down.
		err = &clientError{severity: "FATAL", code: codeConnectionFailure,
			message: "pg-kinetic: the primary of route " + quoteIdent(route.Name) + " is unavailable", detail: why}
	} else {
		d.addr = addr
		srv, p, err = ss.acquire(d.addr)
	}
	if err != nil && ss.admitsWithoutPrimary(err) {
		// The primary is down, and reads need none (issue 14: reads stay
		// up while the primary is down). The session logs in through a
		// replica and gets a proxy PID; its writes fail with 08006 until
		// the primary is reachable again (primaryLink).
		if rsrv, rp, rerr := ss.acquireAnyReplica(); rerr == nil {
			ss.log.Warn("the primary is unavailable: session admitted for reads", zap.String("route", route.Name),
				zap.String("primary", d.addr), zap.String("server", rsrv.Addr), zap.Error(err))
			srv, p, err, viaReplica = rsrv, rp, nil, true
		}
	}
	return srv, p, viaReplica, err
}

// applyStartupSettings gives srv the client's startup settings (the
// session's settings key) unless it holds them already.
func (ss *session) applyStartupSettings(srv *pool.Conn, p *pool.Pool) error {
	ss.mu.settings.settingsKey = settingsQuery(ss.mu.settings.startup)
	st := stateOf(srv)
	if st.settings != ss.mu.settings.settingsKey {
		q := ss.mu.settings.settingsKey
		if st.settings != "" {
			q = resetAllQuery + "; " + q
		}
		// (A simple Query: the server drops its unnamed statement, which
		// in transaction pooling may be another client's. Without this
		// the record kept it, and that client's next Bind of it went
		// without a Parse: 26000.)
		st.unnamed = ""
		if err := srv.Exec(q, nil); err != nil {
			ss.releaseServer(srv, p, false)
			return err
		}
		st.settings = ss.mu.settings.settingsKey
	}
	ss.stampLocked(st)
	return nil
}

// greet ends the client's login: AuthenticationOk (after SASL's final
// message), the server parameters, BackendKeyData and ReadyForQuery.
func (ss *session) greet(params map[string]string) error {
	msgs := make([]interface{ Encode([]byte) ([]byte, error) }, 0, 24)
	if ss.authFinal != nil {
		msgs = append(msgs, ss.authFinal)
	}
	msgs = append(msgs, &pgproto3.AuthenticationOk{})
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		msgs = append(msgs, &pgproto3.ParameterStatus{Name: k, Value: params[k]})
	}
	ss.params.startup = make(map[string]string, len(ss.mu.settings.startup))
	for _, st := range ss.mu.settings.startup {
		ss.params.startup[strings.ToLower(st.name)] = st.value
	}
	ss.wmu.Lock()
	ss.params.reported = params
	ss.wmu.Unlock()
	var secret [4]byte
	secret[0], secret[1], secret[2], secret[3] = byte(ss.key.secret>>24), byte(ss.key.secret>>16), byte(ss.key.secret>>8), byte(ss.key.secret)
	msgs = append(msgs, &pgproto3.BackendKeyData{ProcessID: ss.key.pid, SecretKey: secret[:]},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})
	for _, m := range msgs {
		if err := ss.send(m); err != nil {
			return errClientGone{err}
		}
	}
	return nil
}

// txCheckAfter is how long a pooled connection may sit idle in
// transaction pooling before it is checked again at reuse.
const txCheckAfter = 10 * time.Millisecond

// checkAfter is the pool's CheckAfter: session pooling checks every
// connection it binds (once per session); transaction pooling only those
// idle for txCheckAfter, the others were in use a moment ago.
func (ss *session) checkAfter() time.Duration {
	if ss.txPool {
		return txCheckAfter
	}
	return 0
}

// proxyPID is a process ID for BackendKeyData when no server process is
// bound to the session (transaction pooling): positive, and above the
// usual PID range so it is not mistaken for a server's.
func proxyPID() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return 1<<30 | binary.BigEndian.Uint32(b[:])&(1<<30-1)
}

// acquire gets a server connection to addr for this session's user and
// route. A client asking for a replication connection gets a dedicated,
// unpooled connection carrying the replication parameter.
// serverUp reports whether a new login to addr succeeds now: after a
// server connection ended with FATAL 57P01, it tells a termination of
// that one backend (pg_terminate_backend: the server is up) from the
// server shutting down or crashing (the login fails).
func (ss *session) serverUp(addr string) bool {
	cred := ss.srv.backendCredentials(ss.userCfg, ss.route.BackendDB())
	dialer := pool.Dialer{TLSMode: ss.cfg.Server.BackendTLSMode, ConnectTimeout: ss.srv.opts.connectTimeout}
	// (Every session of a primary that was terminated asks at once: the
	// dial gate keeps that to max_concurrent_dials logins at a time.)
	ctx, cancel := context.WithTimeout(context.Background(), 2*ss.srv.opts.connectTimeout)
	defer cancel()
	c, err := ss.srv.gatedDial(ctx, ss.route, addr, dialer, cred)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (ss *session) acquire(addr string) (*pool.Conn, *pool.Pool, error) {
	cred := ss.srv.backendCredentials(ss.userCfg, ss.route.BackendDB())
	dialer := pool.Dialer{TLSMode: ss.cfg.Server.BackendTLSMode, ConnectTimeout: ss.srv.opts.connectTimeout}
	ctx := context.Background()
	if repl, ok := ss.startupParams["replication"]; ok {
		cred.Params = map[string]string{"replication": repl}
		c, err := ss.srv.gatedDial(ctx, ss.route, addr, dialer, cred)
		if err != nil {
			return nil, nil, ss.connectError(addr, err)
		}
		return c, nil, nil
	}
	p, err := ss.pool(addr, dialer.ConnectTimeout)
	if err != nil {
		return nil, nil, ss.connectError(addr, err)
	}
	c, err := ss.acquireConn(p)
	if errors.Is(err, errQueuedCancel) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, ss.connectError(addr, err)
	}
	return c, p, nil
}

// primaryAddr is the address of the session's route's primary in the
// config in force: a reload that repoints the route (a planned switchover:
// PAUSE, promote, repoint, RELOAD, RESUME) moves the session's next
// primary connection there. The rest of the session's config stays the
// snapshot it started with.
//
// With follow_failover it is the route's elected primary (failover.go:
// primaryOf), or "" and why there is none.
func (ss *session) primaryAddr() (addr, why string) {
	rt := ss.route
	if ss.srv == nil {
		return rt.Primary.Address, ""
	}
	if cur, ok := ss.srv.opts.Config.Load().RouteByName(ss.route.Name); ok && cur.Database == ss.route.Database {
		rt = cur
	}
	return primaryOf(rt, ss.srv.snapshotOf(rt.Name))
}

// admitsWithoutPrimary reports whether a session whose primary refused
// it with err may still log in through a replica: the route routes reads
// to replicas, and the primary is unreachable or not accepting connections
// (SQLSTATE class 57: shutting down, starting up, in recovery), not a
// refusal of the client (a password, a database, a full pool).
func (ss *session) admitsWithoutPrimary(err error) bool {
	if !ss.freshnessOn() {
		return false
	}
	var ce *clientError
	if errors.As(err, &ce) {
		return ce.code == codeConnectionFailure
	}
	var pe *pool.ServerError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "57")
}

// acquireAnyReplica takes a server connection from the first of the
// route's replicas (in config order; with follow_failover, the read
// servers of failover.go) that accepts one and is not backed off, for a
// login while the primary is down.
func (ss *session) acquireAnyReplica() (*pool.Conn, *pool.Pool, error) {
	err := errors.New("no replica")
	now := time.Now()
	snap := ss.snapshot()
	// Every server of the route that reads may use (failover.go): with
	// follow_failover the configured primary too, when it is a standby now.
	servers := ss.route.Replicas
	if snap != nil && ss.route.HA.FollowFailover {
		servers = readServers(ss.route, snap)
	}
	for _, rep := range servers {
		var v health.Verdict
		have := false
		if snap != nil {
			v, have = snap.Get(rep.Address)
		}
		if ss.srv.backoff.blocked(rep.Address, now, v, have) || have && !v.Reachable {
			continue
		}
		p, perr := ss.pool(rep.Address, replicaDialTimeout(ss.route, ss.srv.opts.connectTimeout))
		if perr != nil {
			err = perr
			continue
		}
		c, aerr := p.Acquire(context.Background())
		if aerr != nil {
			err = aerr
			ss.srv.backoff.failed(rep.Address, now)
			continue
		}
		return c, p, nil
	}
	return nil, nil, err
}

// pool is the pool of server connections to addr for the session's user
// and route: the one place its pool.Options are built. A dial to addr
// gives up after connectTimeout.
func (ss *session) pool(addr string, connectTimeout time.Duration) (*pool.Pool, error) {
	cred := ss.srv.backendCredentials(ss.userCfg, ss.route.BackendDB())
	return ss.srv.pools.Get(pool.Key{Addr: addr, User: cred.User, Database: cred.Database}, pool.Options{
		Size:           ss.route.Pool.Size,
		AcquireTimeout: ss.route.Pool.AcquireTimeout(),
		Credentials:    cred,
		NoReset:        ss.txPool,
		CheckAfter:     ss.checkAfter(),
		Dialer:         pool.Dialer{TLSMode: ss.cfg.Server.BackendTLSMode, ConnectTimeout: connectTimeout},
		Lifetime:       serverLifetime(ss.cfg.Server.ServerLifetimeMSFor(ss.route)),
		IdleTimeout:    ss.cfg.Server.ServerIdleTimeout(),
		Limits: pool.Limits{MaxDB: ss.route.Pool.MaxDBConnections, MaxUser: ss.route.Pool.MaxUserConnections,
			MaxDials: ss.route.Pool.MaxConcurrentDials},
	})
}

// serverLifetime is the pools' Lifetime for server_lifetime_ms, where 0
// means a connection is used once (PgBouncer's server_lifetime = 0): every
// connection is older than a nanosecond when it is released.
func serverLifetime(lifetimeMS int) time.Duration {
	if lifetimeMS == 0 {
		return time.Nanosecond
	}
	return time.Duration(lifetimeMS) * time.Millisecond
}

func (ss *session) connectError(addr string, err error) error {
	switch {
	case errors.Is(err, pool.ErrLimitTimeout):
		return &clientError{severity: "FATAL", code: codeTooManyConnections,
			message: "pg-kinetic: no server connection became free in time",
			detail: fmt.Sprintf("server %s stayed at max_db_connections (%d), max_user_connections (%d) or max_concurrent_dials (%d) for acquire_timeout_ms",
				addr, ss.route.Pool.MaxDBConnections, ss.route.Pool.MaxUserConnections, ss.route.Pool.MaxConcurrentDials)}
	case errors.Is(err, pool.ErrPoolTimeout):
		return &clientError{severity: "FATAL", code: codeTooManyConnections,
			message: "pg-kinetic: no server connection became free in time",
			detail:  fmt.Sprintf("all %d connections", ss.route.Pool.Size) + " of the pool for " + addr + " stayed busy for acquire_timeout_ms"}
	case errors.Is(err, pool.ErrClosed):
		return fatalf(codeAdminShutdown, "terminating connection due to administrator command")
	}
	var pe *pool.ServerError
	if errors.As(err, &pe) {
		ss.log.Warn("server refused the proxy's connection", zap.String("server", addr), zap.Error(err))
		return err
	}
	var pt *pool.PassThroughError
	if errors.As(err, &pt) {
		ss.log.Warn("cannot log in to the server with the client's secret", zap.String("server", addr), zap.Error(err))
		return &clientError{severity: "FATAL", code: codeInvalidPassword,
			message: fmt.Sprintf("pg-kinetic: cannot log in to server %s as %q with the client's credentials", addr, pt.User),
			detail:  upperFirst(pt.Reason) + "."}
	}
	ss.log.Warn("cannot reach server", zap.String("server", addr), zap.Error(err))
	return &clientError{severity: "FATAL", code: codeConnectionFailure,
		message: "pg-kinetic: could not connect to the server of route " + quoteIdent(ss.route.Name),
		detail:  "server " + addr + ": " + err.Error()}
}

// releaseServer returns a server connection: reset and pooled when clean,
// closed otherwise (and always for dedicated replication connections).
// In transaction pooling a clean connection goes back without a reset,
// except from a pinned session (its temporary tables, LISTENs and locks
// must not outlive it).
func (ss *session) releaseServer(c *pool.Conn, p *pool.Pool, clean bool) {
	switch {
	case p == nil:
		c.Close()
	case clean && ss.txPool && ss.pinnedReason() != "":
		p.ReleaseReset(c)
	case clean:
		p.Release(c)
	default:
		p.Discard(c)
	}
}

// primaryMovedError is the FATAL error of a session whose transaction, or
// the state it is pinned by (pinned), is on server from, which is no
// longer the route's primary (to; "" with why when there is none now): no
// write may go there (SPEC §7; the seeds: "primary changes during
// transaction: fail the pinned transaction").
func (ss *session) primaryMovedError(from, to, why, pinned string) error {
	now := to
	if now == "" {
		now = "none (" + why + ")"
	}
	detail := "the session's transaction was on server " + from + "; the primary is now " + now
	if pinned != "" {
		detail = "the session is pinned (" + pinned + ") to server " + from + "; the primary is now " + now
	}
	ss.log.Warn("the route's primary changed under a session's transaction or pinned state: ending the session",
		zap.String("from", from), zap.String("to", to))
	return &clientError{severity: "FATAL", code: codeConnectionFailure,
		message: "pg-kinetic: the primary of route " + quoteIdent(ss.route.Name) + " changed during the session's transaction",
		detail:  detail}
}

// primaryUnavailableError is the error of a unit that found no primary
// connection (err: why). The session survives (its reads go on); the unit
// fails.
func (ss *session) primaryUnavailableError(err error) error {
	var ce *clientError
	if errors.As(err, &ce) && ce.code == codeTooManyConnections {
		// A full pool (transaction pooling): the unit fails, like
		// PgBouncer's query_wait_timeout, and the client may retry.
		return &clientError{severity: "ERROR", code: ce.code, message: ce.message, detail: ce.detail}
	}
	detail := err.Error()
	if errors.As(err, &ce) && ce.detail != "" {
		detail = ce.detail // (the server and the cause)
	}
	return &clientError{severity: "ERROR", code: codeConnectionFailure,
		message: "pg-kinetic: the primary of route " + quoteIdent(ss.route.Name) + " is unavailable",
		detail:  detail}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// primaryLink returns the session's primary link, connecting a new one when
// the primary went away while the session did not use it (the session
// went on reading from replicas). The new server knows nothing of the
// session: settings and prepared statements are replayed on first use like
// on any server. Failing, it returns an error for the unit, not the session.
func (ss *session) primaryLink() (*link, error) {
	addr, why := ss.primaryAddr()
	ss.mu.Lock()
	l := ss.mu.primary
	// A reload repointed the route (a switchover), or a failover elected
	// another primary, while the session holds its old primary's
	// connection: with nothing running there and no state of the
	// session's own on it (not pinned), it moves.
	live := l != nil && !l.released && !l.dead
	moved := live && l.addr != addr && ss.idleLocked() && ss.mu.pinned == ""
	if live && l.addr != addr && !moved {
		// Its transaction, or the state it is pinned by, is on a server
		// that is no longer the primary: no write may go there (SPEC §7;
		// the seeds: "primary changes during transaction: fail the
		// pinned transaction").
		pinned := ss.mu.pinned
		if pinned == "" && ss.freshnessOn() && addr != "" && ss.mu.pending == 0 && ss.mu.tx != 'I' {
			// A transaction block: lost as with its server's loss
			// (blockOnOldPrimary, which the election came just after),
			// the session going on; acquireLink fails the unit.
			l.kept = true
			ss.mu.lostBlock, ss.mu.tx = lostUntold, 'E'
			ss.mu.Unlock()
			ss.log.Warn("the primary changed under a transaction block: the block is lost, the session continues",
				zap.String("from", l.addr), zap.String("to", addr))
			l.conn.Close()
			return nil, errBlockLost
		}
		ss.mu.Unlock()
		return nil, ss.primaryMovedError(l.addr, addr, why, pinned)
	}
	if !moved && l.claimLocked() {
		ss.mu.Unlock()
		return l, nil
	}
	if l != nil && l.released {
		l = nil // back in its pool: nothing of it is ours to stop
	}
	ss.mu.Unlock()
	if moved {
		ss.log.Info("the route's primary moved: reconnecting", zap.String("from", l.addr), zap.String("to", addr))
	}
	var (
		c   *pool.Conn
		p   *pool.Pool
		err error
	)
	if addr == "" {
		err = &clientError{severity: "ERROR", code: codeConnectionFailure, detail: why}
	} else {
		c, p, err = ss.acquire(addr)
	}
	if errors.Is(err, errQueuedCancel) {
		return nil, err
	}
	if err != nil {
		return nil, ss.primaryUnavailableError(err)
	}
	if l != nil {
		ss.detach(l, false)
	}
	nl := newLink(c, p, false, true)
	ss.mu.Lock()
	if l != nil && ss.mu.cur == l {
		ss.mu.cur = nil
	}
	ss.mu.primary = nl
	ss.mu.Unlock()
	ss.attach(nl)
	if l != nil {
		ss.log.Info("reconnected to the primary", zap.String("server", nl.addr), zap.Uint32("server_pid", c.PID))
	}
	return nl, nil
}
