package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// The syncer of a route keeps its shared rollout view in step with the
// row on the route's primary (rollout_shared.go has the rule): one
// goroutine and one dedicated connection (pgconn, logged in like the
// health probes: the first [[users]] entry's backend credentials, the
// route's backend database) that LISTENs on pg_kinetic_rollout, reads the
// row when notified, every rolloutPoll otherwise, and at once after a
// local change (kick). The connection goes to the route's primary as
// writes do (the elected one with follow_failover, else the configured
// one of the config in force) and moves when that changes. The
// goroutines are owned by rolloutSyncers; Server.Close and Shutdown stop
// them and wait.

const (
	rolloutChannel = "pg_kinetic_rollout"
	rolloutPoll    = time.Second // fallback poll, and the retry after a connection error
	// rolloutRefused is the retry after the server refused (no table and
	// no privilege to create it, ...): each attempt leaves an ERROR in the
	// server's log.
	rolloutRefused = 10 * time.Second
	rolloutQueryTO = 2 * time.Second
	rolloutDialTO  = 5 * time.Second

	rolloutRead = `SELECT stage, rolled_back, version FROM pgkinetic.rollout_state WHERE route = $1`
	// rolloutCAS and rolloutInsert return the new version and notify in
	// the same statement (delivered when it commits), or return no row
	// when the version moved on (or another instance inserted first).
	rolloutCAS = `WITH u AS (UPDATE pgkinetic.rollout_state SET stage = $2, rolled_back = $3,
	version = version + 1, changed_by = $4, changed_at = now() WHERE route = $1 AND version = $5 RETURNING version)
SELECT version, pg_notify('` + rolloutChannel + `', $1) FROM u`
	rolloutInsert = `WITH i AS (INSERT INTO pgkinetic.rollout_state (route, stage, rolled_back, version, changed_by)
	VALUES ($1, $2, $3, 1, $4) ON CONFLICT (route) DO NOTHING RETURNING version)
SELECT version, pg_notify('` + rolloutChannel + `', $1) FROM i`
	// rolloutCreate is what deploy/sql/pg_kinetic_rollout.sql creates,
	// run only when the table is missing (CREATE SCHEMA checks the
	// privilege even when the schema exists).
	rolloutCreate = `CREATE SCHEMA IF NOT EXISTS pgkinetic;
CREATE TABLE IF NOT EXISTS pgkinetic.rollout_state (
	route       text PRIMARY KEY,
	stage       integer NOT NULL CHECK (stage >= 0),
	rolled_back boolean NOT NULL,
	version     bigint NOT NULL CHECK (version > 0),
	changed_by  text NOT NULL,
	changed_at  timestamptz NOT NULL DEFAULT now()
)`
)

// rolloutSyncers owns the syncer goroutines, one per shared route. Lock
// order: rolloutSyncers.mu, then rolloutSyncer.mu; neither is held across
// I/O, nor together with rollout.mu.
type rolloutSyncers struct {
	srv *Server
	wg  sync.WaitGroup
	mu  struct {
		sync.Mutex
		closed bool
		m      map[string]*rolloutSyncer // by route name
	}
}

// rolloutSyncer syncs one route. route is immutable; mu guards the rest.
type rolloutSyncer struct {
	route  string
	owner  *rolloutSyncers
	cancel context.CancelFunc
	kickCh chan struct{} // capacity 1: a local change to write
	mu     struct {
		sync.Mutex
		cancelWait context.CancelFunc // ends the wait for a notification
		status     string             // for SHOW ROLLOUT
	}
}

// reconcile starts a syncer for every route of cfg when [rollout] shared
// is on and stops those of routes gone (or of every route when off).
func (y *rolloutSyncers) reconcile(cfg *config.Config) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.mu.closed {
		return
	}
	want := map[string]bool{}
	if cfg.Rollout.Shared && len(cfg.Users) > 0 {
		for _, rt := range cfg.Routes {
			want[rt.Name] = true
		}
	}
	for name, sy := range y.mu.m {
		if !want[name] {
			sy.cancel()
			delete(y.mu.m, name)
		}
	}
	if y.mu.m == nil {
		y.mu.m = map[string]*rolloutSyncer{}
	}
	for name := range want {
		if y.mu.m[name] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		sy := &rolloutSyncer{route: name, owner: y, cancel: cancel, kickCh: make(chan struct{}, 1)}
		sy.mu.status = "starting"
		y.mu.m[name] = sy
		y.wg.Add(1)
		go func() {
			defer y.wg.Done()
			sy.run(ctx)
		}()
	}
}

// kick makes every syncer read and write at once (after a local change).
func (y *rolloutSyncers) kick() {
	y.mu.Lock()
	defer y.mu.Unlock()
	for _, sy := range y.mu.m {
		sy.kick()
	}
}

// status is route's sync status ("" when not shared).
func (y *rolloutSyncers) status(route string) string {
	y.mu.Lock()
	sy := y.mu.m[route]
	y.mu.Unlock()
	if sy == nil {
		return ""
	}
	sy.mu.Lock()
	defer sy.mu.Unlock()
	return sy.mu.status
}

// close stops every syncer and waits for it.
func (y *rolloutSyncers) close() {
	y.mu.Lock()
	y.mu.closed = true
	for _, sy := range y.mu.m {
		sy.cancel()
	}
	y.mu.m = nil
	y.mu.Unlock()
	y.wg.Wait()
}

func (sy *rolloutSyncer) kick() {
	select {
	case sy.kickCh <- struct{}{}:
	default:
	}
	sy.mu.Lock()
	if sy.mu.cancelWait != nil {
		sy.mu.cancelWait()
	}
	sy.mu.Unlock()
}

// setStatus records the sync status and logs when it changes (state
// changes only, not every failed attempt).
func (sy *rolloutSyncer) setStatus(status string, err error) {
	sy.mu.Lock()
	changed := sy.mu.status != status
	sy.mu.status = status
	sy.mu.Unlock()
	if !changed {
		return
	}
	log := sy.owner.srv.log.With(zap.String("route", sy.route))
	if err == nil {
		log.Info("rollout: shared state in sync with the route's primary", zap.String("status", status))
		return
	}
	log.Warn("rollout: cannot sync the shared state with the route's primary; keeping the last state known",
		zap.String("status", status), zap.Error(err))
}

// rolloutTarget is where and how the syncer logs in: the route's primary,
// with the first [[users]] entry's backend credentials (as the health
// probes: a plaintext password, or a pass-through user's key once a
// client proved its verifier).
type rolloutTarget struct {
	addr    string
	cred    pool.Credentials
	tlsMode string
	pc      *pgconn.Config // pgconn's settings for the connection it takes over
}

// target is the route's primary and the login to it: the elected primary
// with follow_failover (primaryOf, failover.go), else the configured one,
// of the config in force.
func (sy *rolloutSyncer) target() (rolloutTarget, error) {
	cfg := sy.owner.srv.opts.Config.Load()
	rt, ok := cfg.RouteByName(sy.route)
	if !ok || len(cfg.Users) == 0 {
		return rolloutTarget{}, errors.New("route not in the config in force")
	}
	primary, why := primaryOf(rt, sy.owner.srv.snapshotOf(sy.route))
	if primary == "" {
		return rolloutTarget{}, errors.New(why)
	}
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return rolloutTarget{}, err
	}
	tg := rolloutTarget{addr: primary, cred: sy.owner.srv.backendCredentials(&cfg.Users[0], rt.BackendDB()), tlsMode: cfg.Server.BackendTLSMode}
	tg.cred.Params = map[string]string{"application_name": "pg-kinetic rollout"}
	// pgconn's own settings (its context watcher, its frontend) for
	// pgconn.Construct; the login is pool's (dialRollout).
	u := url.URL{Scheme: "postgres", User: url.User(tg.cred.User), Host: net.JoinHostPort(host, port),
		Path: "/" + rt.BackendDB(), RawQuery: url.Values{"sslmode": {"disable"}}.Encode()}
	if tg.pc, err = pgconn.ParseConfig(u.String()); err != nil {
		return rolloutTarget{}, err
	}
	return tg, nil
}

// dialRollout logs in to the primary the way kineticd logs in to every
// server (pool.Dialer: PostgreSQL's SASLprep of the password, a
// pass-through user's ClientKey, backend_tls_mode) and hands the
// connection to pgconn, for LISTEN and the queries. pgconn's own login
// knows neither.
func dialRollout(ctx context.Context, tg rolloutTarget) (*pgconn.PgConn, error) {
	c, err := pool.Dialer{TLSMode: tg.tlsMode, ConnectTimeout: rolloutDialTO}.Dial(ctx, tg.addr, tg.cred)
	if err != nil {
		return nil, err
	}
	nc, err := c.Hijack()
	if err != nil {
		c.Close()
		return nil, err
	}
	conn, err := pgconn.Construct(&pgconn.HijackedConn{Conn: nc, PID: c.PID, SecretKey: c.SecretKey,
		ParameterStatuses: c.Params, TxStatus: 'I', Config: tg.pc})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return conn, nil
}

func (sy *rolloutSyncer) run(ctx context.Context) {
	var conn *pgconn.PgConn
	var addr string
	drop := func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(cctx)
			cancel()
			<-conn.CleanupDone() // no goroutine of pgconn's outlives the syncer
			conn = nil
		}
	}
	defer drop()
	for ctx.Err() == nil {
		tg, err := sy.target()
		if err != nil {
			sy.setStatus("no primary", err)
			sy.waitFor(ctx, rolloutPoll)
			continue
		}
		if conn != nil && (tg.addr != addr || conn.IsClosed()) {
			drop()
		}
		if conn == nil {
			dctx, cancel := context.WithTimeout(ctx, rolloutDialTO)
			conn, err = dialRollout(dctx, tg)
			cancel()
			if err == nil {
				err = sy.exec(ctx, conn, "LISTEN "+rolloutChannel)
			}
			if err != nil {
				drop()
				retry := rolloutPoll
				var pe *pgconn.PgError
				var pt *pool.PassThroughError
				switch {
				case ctx.Err() != nil:
				case errors.As(err, &pt):
					// A pass-through user before any client's
					// login (or a server asking for another
					// method): retried as often as a refusal.
					sy.setStatus("no credentials yet", err)
					retry = rolloutRefused
				case errors.As(err, &pe) && !strings.HasPrefix(pe.Code, "57"):
					// Refused (a password, a database): not
					// retried every second. 57: starting up,
					// shutting down.
					sy.setStatus("refused "+pe.Code, err)
					retry = rolloutRefused
				default:
					sy.setStatus("primary unreachable", err)
				}
				sy.waitFor(ctx, retry)
				continue
			}
			addr = tg.addr
		}
		if err := sy.sync(ctx, conn); err != nil {
			if ctx.Err() != nil {
				return
			}
			var pe *pgconn.PgError
			retry := rolloutRefused
			switch {
			case conn.IsClosed() || !errors.As(err, &pe):
				// The connection is gone (a FATAL such as 57P01,
				// a network error, a query timeout): reconnect.
				sy.setStatus("primary unreachable", err)
				drop()
				retry = rolloutPoll
			case pe.Code == "42501":
				sy.setStatus("insufficient privilege: run deploy/sql/pg_kinetic_rollout.sql", err)
			default:
				sy.setStatus("error "+pe.Code, err)
			}
			sy.waitFor(ctx, retry)
			continue
		}
		sy.setStatus("synced", nil)
		sy.waitNotified(ctx, conn)
		if conn.IsClosed() {
			drop()
		}
	}
}

// waitFor returns after d or a kick (one made before the wait counts).
func (sy *rolloutSyncer) waitFor(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-sy.kickCh:
	case <-t.C:
	}
}

// waitNotified returns after rolloutPoll, a notification on conn, or a
// kick (one made before the wait starts ends it at once).
func (sy *rolloutSyncer) waitNotified(ctx context.Context, conn *pgconn.PgConn) {
	wctx, cancel := context.WithTimeout(ctx, rolloutPoll)
	defer cancel()
	sy.mu.Lock()
	sy.mu.cancelWait = cancel
	sy.mu.Unlock()
	select {
	case <-sy.kickCh:
	default:
		conn.WaitForNotification(wctx) // a notification, the poll's deadline, a kick, or a broken connection
		select {
		case <-sy.kickCh:
		default:
		}
	}
	sy.mu.Lock()
	sy.mu.cancelWait = nil
	sy.mu.Unlock()
}

// sync reads the row and applies planSync until nothing is left to write
// (a lost compare-and-set reads again).
func (sy *rolloutSyncer) sync(ctx context.Context, conn *pgconn.PgConn) error {
	ro := sy.owner.srv.rollout
	log := sy.owner.srv.log.With(zap.String("route", sy.route))
	for range 5 {
		view, shared := ro.view(sy.route)
		if !shared {
			return nil
		}
		row, have, err := sy.read(ctx, conn)
		if err != nil {
			return err
		}
		var seq uint64
		if view.Pending != nil {
			seq = view.Pending.seq
		}
		plan := planSync(view, row, have)
		switch plan.action {
		case syncNothing:
			return nil
		case syncAdopt:
			if plan.dropped {
				log.Warn("rollout: a local change made while the primary was out of reach yields to a newer shared change",
					zap.Int("local_stage", view.Pending.Stage), zap.Bool("local_rolled_back", view.Pending.RolledBack),
					zap.Int64("local_base_version", view.Pending.Base), zap.Int("shared_stage", row.Stage),
					zap.Bool("shared_rolled_back", row.RolledBack), zap.Int64("shared_version", row.Version))
			}
			if err := ro.adopt(sy.route, row, seq); err != nil {
				log.Error("rollout: could not persist the shared state to state_file", zap.Error(err))
			}
			if view.Known.rolloutState != row.rolloutState || view.Pending != nil {
				log.Warn("rollout: shared state changed", zap.Int("stage", row.Stage),
					zap.Bool("rolled_back", row.RolledBack), zap.Int64("version", row.Version))
			}
			return nil
		case syncWrite:
			version, ok, err := sy.write(ctx, conn, plan)
			if err != nil {
				return err
			}
			if !ok {
				continue // the row moved on: read again
			}
			if err := ro.written(sy.route, plan.write, version, seq); err != nil {
				log.Error("rollout: could not persist the shared state to state_file", zap.Error(err))
			}
			log.Warn("rollout: shared state written", zap.Int("stage", plan.write.Stage),
				zap.Bool("rolled_back", plan.write.RolledBack), zap.Int64("version", version))
			return nil
		}
	}
	return errors.New("rollout: the shared row kept changing under five compare-and-set attempts")
}

// read reads the route's row, creating the table first when it is missing
// and the role may.
func (sy *rolloutSyncer) read(ctx context.Context, conn *pgconn.PgConn) (sharedState, bool, error) {
	row, have, err := sy.readRow(ctx, conn)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
		if err := sy.exec(ctx, conn, rolloutCreate); err != nil {
			return row, false, fmt.Errorf("creating pgkinetic.rollout_state: %w", err)
		}
		sy.owner.srv.log.Info("rollout: created pgkinetic.rollout_state on the route's primary", zap.String("route", sy.route))
		return sy.readRow(ctx, conn)
	}
	return row, have, err
}

func (sy *rolloutSyncer) readRow(ctx context.Context, conn *pgconn.PgConn) (sharedState, bool, error) {
	qctx, cancel := context.WithTimeout(ctx, rolloutQueryTO)
	defer cancel()
	res := conn.ExecParams(qctx, rolloutRead, [][]byte{[]byte(sy.route)}, nil, nil, nil).Read()
	if res.Err != nil {
		return sharedState{}, false, res.Err
	}
	if len(res.Rows) == 0 {
		return sharedState{}, false, nil
	}
	r := res.Rows[0]
	stage, err1 := strconv.Atoi(string(r[0]))
	version, err2 := strconv.ParseInt(string(r[2]), 10, 64)
	if err := errors.Join(err1, err2); err != nil || stage < 0 || version < 1 {
		return sharedState{}, false, fmt.Errorf("rollout: bad row in pgkinetic.rollout_state for route %q: %v", sy.route, err)
	}
	return sharedState{rolloutState: rolloutState{Stage: stage, RolledBack: string(r[1]) == "t"}, Version: version}, true, nil
}

// write runs the plan's compare-and-set (or insert); ok false when another
// change got there first.
func (sy *rolloutSyncer) write(ctx context.Context, conn *pgconn.PgConn, plan syncPlan) (version int64, ok bool, err error) {
	qctx, cancel := context.WithTimeout(ctx, rolloutQueryTO)
	defer cancel()
	args := [][]byte{[]byte(sy.route), []byte(strconv.Itoa(plan.write.Stage)),
		[]byte(strconv.FormatBool(plan.write.RolledBack)), []byte(sy.owner.srv.instance)}
	sql := rolloutInsert
	if plan.expect > 0 {
		sql = rolloutCAS
		args = append(args, []byte(strconv.FormatInt(plan.expect, 10)))
	}
	res := conn.ExecParams(qctx, sql, args, nil, nil, nil).Read()
	if res.Err != nil {
		return 0, false, res.Err
	}
	if len(res.Rows) == 0 {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(string(res.Rows[0][0]), 10, 64)
	return v, err == nil, err
}

func (sy *rolloutSyncer) exec(ctx context.Context, conn *pgconn.PgConn, sql string) error {
	qctx, cancel := context.WithTimeout(ctx, rolloutQueryTO)
	defer cancel()
	_, err := conn.Exec(qctx, sql).ReadAll()
	return err
}

// instanceName identifies this kineticd in changed_by.
func instanceName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}
