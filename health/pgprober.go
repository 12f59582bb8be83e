package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// probeSQL is the whole probe: one round trip on an open connection.
// pg_control_system() is executable by any role.
const probeSQL = "select pg_is_in_recovery(), (select system_identifier::text from pg_control_system())"

// closeTimeout bounds the Terminate of a connection the prober gives up.
const closeTimeout = time.Second

// PGProber is the real Prober: it keeps one pgconn connection per server
// address open between probes, and runs probeSQL on it. A connection that
// fails is dropped and the next probe dials again.
//
// It is safe for concurrent use. Forget(addr) and Close release
// connections; after Close, Probe still works but keeps no connection.
type PGProber struct {
	user, password, database, sslmode string

	mu      sync.Mutex
	closed  bool
	idle    map[string]*pgconn.PgConn   // addr -> open connection between probes
	closing map[string][]*pgconn.PgConn // dropped connections pgconn is still cleaning up
}

var (
	_ Prober    = (*PGProber)(nil)
	_ Forgetter = (*PGProber)(nil)
)

// NewPGProber returns a prober that logs in as user/password to database
// with TLS per tlsMode (backend_tls_mode: "disable", "prefer" or "require";
// "" means disable). An invalid mode makes every probe fail with the parse
// error.
func NewPGProber(user, password, database, tlsMode string) *PGProber {
	if tlsMode == "" {
		tlsMode = "disable"
	}
	return &PGProber{
		user: user, password: password, database: database, sslmode: tlsMode,
		idle:    make(map[string]*pgconn.PgConn),
		closing: make(map[string][]*pgconn.PgConn),
	}
}

// Probe asks the server at addr whether it is in recovery and for its
// system identifier. It reuses the open connection to addr when there is
// one; if that fails (say the server restarted since) it retries once on a
// fresh connection, so one restart does not look like an outage.
func (p *PGProber) Probe(ctx context.Context, addr string) (Verdict, error) {
	conn, reused := p.take(addr), true
	if conn == nil {
		var err error
		if conn, err = p.dial(ctx, addr); err != nil {
			return Verdict{}, err
		}
		reused = false
	}
	v, err := query(ctx, conn)
	if err != nil && reused && ctx.Err() == nil {
		p.drop(addr, conn)
		if conn, err = p.dial(ctx, addr); err != nil {
			return Verdict{}, err
		}
		v, err = query(ctx, conn)
	}
	if err != nil {
		p.drop(addr, conn)
		return Verdict{}, err
	}
	p.put(addr, conn)
	return v, nil
}

// Forget closes the connection to addr and waits until pgconn has finished
// cleaning up every connection to addr this prober dropped (pgconn bounds
// that at 15 s for a server that stopped answering).
func (p *PGProber) Forget(addr string) {
	p.mu.Lock()
	conn := p.idle[addr]
	delete(p.idle, addr)
	closing := p.closing[addr]
	delete(p.closing, addr)
	p.mu.Unlock()
	if conn != nil {
		closing = append(closing, closeConn(conn))
	}
	for _, c := range closing {
		if c != nil {
			<-c.CleanupDone()
		}
	}
}

// Close forgets every address. Connections in use by a running Probe are
// closed when it returns.
func (p *PGProber) Close() {
	p.mu.Lock()
	p.closed = true
	addrs := make(map[string]bool, len(p.idle)+len(p.closing))
	for a := range p.idle {
		addrs[a] = true
	}
	for a := range p.closing {
		addrs[a] = true
	}
	p.mu.Unlock()
	for a := range addrs {
		p.Forget(a)
	}
}

func (p *PGProber) take(addr string) *pgconn.PgConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.idle[addr]
	delete(p.idle, addr)
	if c != nil && c.IsClosed() {
		p.closing[addr] = append(p.closing[addr], c)
		return nil
	}
	return c
}

// put keeps conn for the next probe of addr, or closes it when the prober
// is closed or another probe of addr already parked one.
func (p *PGProber) put(addr string, conn *pgconn.PgConn) {
	p.mu.Lock()
	if !p.closed && p.idle[addr] == nil {
		p.idle[addr] = conn
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.drop(addr, conn)
}

// drop closes conn and remembers it until pgconn's cleanup has finished.
func (p *PGProber) drop(addr string, conn *pgconn.PgConn) {
	if c := closeConn(conn); c != nil {
		p.mu.Lock()
		p.closing[addr] = append(p.closing[addr], c)
		p.mu.Unlock()
	}
	p.prune(addr)
}

// prune forgets dropped connections whose cleanup has finished.
func (p *PGProber) prune(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.closing[addr][:0]
	for _, c := range p.closing[addr] {
		select {
		case <-c.CleanupDone():
		default:
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		delete(p.closing, addr)
	} else {
		p.closing[addr] = kept
	}
}

// closeConn closes conn and returns it when pgconn is still cleaning it up
// in the background (a connection broken mid-query), nil when it is done.
func closeConn(conn *pgconn.PgConn) *pgconn.PgConn {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	conn.Close(ctx)
	select {
	case <-conn.CleanupDone():
		return nil
	default:
		return conn
	}
}

var connStringQuoter = strings.NewReplacer(`\`, `\\`, `'`, `\'`)

func (p *PGProber) dial(ctx context.Context, addr string) (*pgconn.PgConn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w", addr, err)
	}
	// Host and port go into the connection string so that pgconn derives
	// its TLS attempts for this TCP address rather than a unix socket
	// default (see pool.Dialer).
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host='%s' port='%s' sslmode='%s'",
		connStringQuoter.Replace(host), connStringQuoter.Replace(port), connStringQuoter.Replace(p.sslmode)))
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Password, cfg.Database = p.user, p.password, p.database
	// The environment must not shape the probe: PGOPTIONS and friends
	// would reach the session, and PGTARGETSESSIONATTRS would install a
	// validator refusing standbys.
	cfg.RuntimeParams = map[string]string{"application_name": "pg-kinetic health"}
	cfg.ValidateConnect = nil
	cfg.AfterConnect = nil
	return pgconn.ConnectConfig(ctx, cfg)
}

// query runs probeSQL on conn.
func query(ctx context.Context, conn *pgconn.PgConn) (Verdict, error) {
	results, err := conn.Exec(ctx, probeSQL).ReadAll()
	if err != nil {
		return Verdict{}, err
	}
	if len(results) == 1 && results[0].Err != nil {
		return Verdict{}, results[0].Err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 2 {
		return Verdict{}, errors.New("probe: unexpected result shape")
	}
	row := results[0].Rows[0]
	var v Verdict
	switch string(row[0]) {
	case "t":
		v.Detected = RoleStandby
	case "f":
		v.Detected = RolePrimary
	default:
		return Verdict{}, fmt.Errorf("probe: pg_is_in_recovery() returned %q", row[0])
	}
	if len(row[1]) == 0 {
		return Verdict{}, errors.New("probe: no system identifier")
	}
	v.SystemID = string(row[1])
	return v, nil
}
