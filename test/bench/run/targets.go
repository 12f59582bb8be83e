package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/pool"
	"github.com/pg-kinetic/pg-kinetic/test/bench/internal/benchutil"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// pgpoolBin is where the Debian package pgpool2 installs pgpool-II.
const pgpoolBin = "/usr/sbin/pgpool"

// Pool modes as the tables name them.
const (
	modeSession     = "session"
	modeTransaction = "transaction"
)

// target is one way of reaching the primary.
type target struct {
	name     string
	kind     string   // direct | pgbouncer | pgpool | kineticd
	poolMode string   // session | transaction ("" for direct)
	routed   bool     // kineticd with read_routing_mode = prefer_replica
	spread   bool     // direct: the clients split over the standbys, one pgbench per standby
	replicas int      // standbys used (direct spread, kineticd routed); 0: all
	db       string   // database name clients connect with
	env      []string // extra environment of the proxy process
	optIn    bool     // picked by its exact name only, not by "all" or kind
	bin      string   // kineticd binary when not -kineticd's (-kineticd-before)
}

var allTargets = []target{
	{name: "direct", kind: "direct", db: pgtest.AppDB},
	// The control for routed targets: the same clients straight at the
	// standbys, as evenly as routing spreads sessions. What it loses
	// against direct is what splitting the load over several servers costs
	// on this machine before any proxy is involved.
	{name: "direct-replicas", kind: "direct", spread: true, db: pgtest.AppDB},
	// Its own control: the same pgbench processes all at the first standby.
	// What direct-replicas loses against it is what a second PostgreSQL
	// instance on the same cores costs, standby or not.
	{name: "direct-one-replica", kind: "direct", spread: true, replicas: 1, db: pgtest.AppDB, optIn: true},
	{name: "pgbouncer-session", kind: "pgbouncer", poolMode: modeSession, db: "bench_session"},
	{name: "pgbouncer-tx", kind: "pgbouncer", poolMode: modeTransaction, db: "bench_tx"},
	{name: "pgpool", kind: "pgpool", poolMode: modeSession, db: pgtest.AppDB},
	{name: "kineticd-session", kind: "kineticd", poolMode: modeSession, db: pgtest.AppDB},
	{name: "kineticd-session-routed", kind: "kineticd", poolMode: modeSession, routed: true, db: pgtest.AppDB},
	{name: "kineticd-tx", kind: "kineticd", poolMode: modeTransaction, db: pgtest.AppDB},
	{name: "kineticd-tx-routed", kind: "kineticd", poolMode: modeTransaction, routed: true, db: pgtest.AppDB},
	// Routed to the first standby only (the others keep running idle): the
	// same code without the second PostgreSQL instance's cost.
	{name: "kineticd-session-routed-1", kind: "kineticd", poolMode: modeSession, routed: true, replicas: 1, db: pgtest.AppDB, optIn: true},
	{name: "kineticd-tx-routed-1", kind: "kineticd", poolMode: modeTransaction, routed: true, replicas: 1, db: pgtest.AppDB, optIn: true},
	// Variants for tuning: kineticd on one OS thread of Go code.
	{name: "kineticd-session-gmp1", kind: "kineticd", poolMode: modeSession, db: pgtest.AppDB, env: []string{"GOMAXPROCS=1"}, optIn: true},
	{name: "kineticd-tx-gmp1", kind: "kineticd", poolMode: modeTransaction, db: pgtest.AppDB, env: []string{"GOMAXPROCS=1"}, optIn: true},
}

// baseline names the PgBouncer target a kineticd target is compared with:
// the same pool mode ("" for other targets).
func (t target) baseline() string {
	if t.kind != "kineticd" {
		return ""
	}
	if t.poolMode == modeTransaction {
		return "pgbouncer-tx"
	}
	return "pgbouncer-session"
}

// standbys is the standbys target t uses, of those the cluster has.
func (t target) standbys(all []*pgtest.Server) []*pgtest.Server {
	if t.replicas > 0 && t.replicas < len(all) {
		return all[:t.replicas]
	}
	return all
}

// control names the direct target that splits its clients as routed
// target t does: the spread one over the same standbys ("" for other
// targets).
func (t target) control() string {
	if t.kind != "kineticd" || !t.routed {
		return ""
	}
	for _, c := range allTargets {
		if c.kind == "direct" && c.spread && c.replicas == t.replicas {
			return c.name
		}
	}
	return ""
}

// unrouted names the kineticd target a routed one is compared with: the
// same pool mode with routing off ("" for other targets).
func (t target) unrouted() string {
	if t.kind != "kineticd" || !t.routed {
		return ""
	}
	suffix := ""
	if t.bin != "" {
		suffix = "-before" // compared with the same build
	}
	if t.poolMode == modeTransaction {
		return "kineticd-tx" + suffix
	}
	return "kineticd-session" + suffix
}

// bench is the state every run shares: the cluster, where proxies live, who
// they run as.
type bench struct {
	cluster  *pgtest.Cluster
	dir      string // the benchmark's temp dir; removed at exit
	kineticd string // path of the kineticd binary
	authLine string // PgBouncer's auth_file: the app user's SCRAM verifier
	cred     *syscall.Credential
	uid, gid int
	runs     int // numbers the per-run directories
}

func newBench(dir, kineticd string) (*bench, error) {
	b := &bench{dir: dir, kineticd: kineticd, uid: os.Getuid(), gid: os.Getgid()}
	if os.Geteuid() != 0 {
		return b, nil
	}
	// PgBouncer refuses to run as root; pgpool runs as the postgres user too.
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the OS user postgres: %w", err)
	}
	b.uid, _ = strconv.Atoi(u.Uid)
	b.gid, _ = strconv.Atoi(u.Gid)
	b.cred = &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.gid), Groups: []uint32{}}
	return b, nil
}

// instance is a started target. Direct has no process.
type instance struct {
	addr  string
	addrs []string // direct-replicas: one address per standby, addr unused
	proc  *proc    // nil for direct
}

// stop ends the target's process (if any) and its process group.
func (in *instance) stop() error {
	if in.proc == nil {
		return nil
	}
	return in.proc.stop()
}

// start starts target t sized for clients: every pool holds a server
// connection per client plus a few, so no client waits for one.
func (b *bench) start(ctx context.Context, t target, clients int) (*instance, error) {
	if t.kind == "direct" && t.spread {
		// One pgbench per standby of the cluster, each at a standby t uses.
		in, use := &instance{}, t.standbys(b.cluster.Standbys)
		for i := range b.cluster.Standbys {
			in.addrs = append(in.addrs, use[i%len(use)].Addr())
		}
		return in, nil
	}
	if t.kind == "direct" {
		return &instance{addr: b.cluster.Primary.Addr()}, nil
	}
	b.runs++
	dir := filepath.Join(b.dir, fmt.Sprintf("%03d-%s", b.runs, t.name))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chown(dir, b.uid, b.gid); err != nil {
		return nil, err
	}
	addr, err := benchutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	var p *proc
	switch t.kind {
	case "pgbouncer":
		p, err = b.startPgbouncer(dir, addr, clients)
	case "pgpool":
		p, err = b.startPgpool(dir, addr, clients)
	case "kineticd":
		p, err = b.startKineticd(dir, addr, t, clients)
	default:
		err = fmt.Errorf("unknown target kind %q", t.kind)
	}
	if err != nil {
		return nil, err
	}
	in := &instance{addr: addr, proc: p}
	err = waitReady(ctx, p, addr, t.db)
	if err == nil && t.routed {
		err = waitReplicasHealthy(ctx, addr, len(t.standbys(b.cluster.Standbys)))
	}
	if err != nil {
		in.stop()
		return nil, fmt.Errorf("%s: %w\n--- tail of %s ---\n%s", t.name, err, p.logFile, pgtest.LogTail(p.logFile, 20))
	}
	return in, nil
}

// poolSize is the server connections a proxy may open for a run.
func poolSize(clients int) int { return clients + 4 }

// maxClientConn admits every pgbench client, the readiness probe and spare.
func maxClientConn(clients int) int { return max(300, clients+20) }

func (b *bench) startPgbouncer(dir, addr string, clients int) (*proc, error) {
	primary := b.cluster.Primary
	// Both pools point at the same primary; the pool mode is per database.
	// server_reset_query is DISCARD ALL (the default), which PgBouncer runs
	// only in session mode; transaction mode keeps server state.
	ini := benchutil.Pgbouncer{
		Writer: "test/bench/run",
		Databases: fmt.Sprintf("bench_session = host=127.0.0.1 port=%[1]d dbname=%[2]s pool_mode=session\n"+
			"bench_tx = host=127.0.0.1 port=%[1]d dbname=%[2]s pool_mode=transaction\n", primary.Port, pgtest.AppDB),
		Listen:        addr,
		AuthFile:      filepath.Join(dir, "userlist.txt"),
		PoolMode:      "session",
		MaxClientConn: maxClientConn(clients),
		PoolSize:      poolSize(clients),
		Extra:         "max_db_connections = 0\nmax_user_connections = 0\nserver_check_delay = 30\n",
	}.INI()
	if err := b.writeFiles(dir, map[string]string{"pgbouncer.ini": ini, "userlist.txt": b.authLine}); err != nil {
		return nil, err
	}
	// SIGTERM is PgBouncer 1.18's immediate shutdown (SIGINT would wait for
	// clients).
	return b.spawn(dir, b.cred, nil, syscall.SIGTERM, benchutil.PgbouncerBin, filepath.Join(dir, "pgbouncer.ini"))
}

func (b *bench) startPgpool(dir, addr string, clients int) (*proc, error) {
	host, port, _ := net.SplitHostPort(addr)
	pcpAddr, err := benchutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, pcpPort, _ := net.SplitHostPort(pcpAddr)
	primary, replica := b.cluster.Primary, b.cluster.Standbys[0]
	// Streaming-replication mode, reads balanced over both nodes (weights
	// 1:1, chosen per session; a transaction that wrote stays on the
	// primary). One child per client (num_init_children), each caching one
	// backend connection per node (max_pool = 1). Health checks and the
	// replication-delay check are off, and backend errors do not fail a node
	// over, so nothing marks the replica down during a run; the sr_check
	// user (the trusted superuser) still finds the primary at startup.
	conf := fmt.Sprintf(`# written by test/bench/run
backend_clustering_mode = 'streaming_replication'
listen_addresses = '%[1]s'
port = %[2]s
unix_socket_directories = '%[3]s'
pcp_listen_addresses = ''
pcp_port = %[4]s
pcp_socket_dir = '%[3]s'
pid_file_name = '%[3]s/pgpool.pid'
logdir = '%[3]s'

backend_hostname0 = '127.0.0.1'
backend_port0 = %[5]d
backend_weight0 = 1
backend_flag0 = 'ALLOW_TO_FAILOVER'
backend_application_name0 = 'primary'
backend_hostname1 = '127.0.0.1'
backend_port1 = %[6]d
backend_weight1 = 1
backend_flag1 = 'ALLOW_TO_FAILOVER'
backend_application_name1 = 'standby1'

num_init_children = %[7]d
max_pool = 1
reserved_connections = 0
child_life_time = 0
child_max_connections = 0
connection_life_time = 0
client_idle_limit = 0
connection_cache = on

enable_pool_hba = on
pool_passwd = 'pool_passwd'
allow_clear_text_frontend_auth = off
ssl = off

load_balance_mode = on
statement_level_load_balance = off
disable_load_balance_on_write = 'transaction'

sr_check_period = 0
sr_check_user = '%[8]s'
sr_check_password = ''
delay_threshold = 0
health_check_period = 0
health_check_user = '%[8]s'
health_check_password = ''
failover_on_backend_error = off
failover_command = ''
search_primary_node_timeout = 10
use_watchdog = off
memory_cache_enabled = off

log_destination = 'stderr'
log_min_messages = warning
log_connections = off
log_statement = off
log_per_node_statement = off
`, host, port, dir, pcpPort, primary.Port, replica.Port, poolSize(clients), pgtest.SuperUser)
	// pgpool 4.3 speaks SCRAM to clients and servers only with the password
	// itself in pool_passwd (TEXT prefix) or AES-encrypted.
	files := map[string]string{
		"pgpool.conf":   conf,
		"pool_hba.conf": "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
		"pool_passwd":   pgtest.AppUser + ":TEXT" + pgtest.AppPassword + "\n",
		"pcp.conf":      "",
	}
	if err := b.writeFiles(dir, files); err != nil {
		return nil, err
	}
	// SIGINT is pgpool's fast shutdown.
	return b.spawn(dir, b.cred, nil, syscall.SIGINT, pgpoolBin, "-n", "-D",
		"-f", filepath.Join(dir, "pgpool.conf"),
		"-F", filepath.Join(dir, "pcp.conf"),
		"-a", filepath.Join(dir, "pool_hba.conf"))
}

func (b *bench) startKineticd(dir, addr string, t target, clients int) (*proc, error) {
	p := kinetictest.Params{
		Listen:         addr,
		PoolMode:       t.poolMode,
		PoolSize:       poolSize(clients),
		MaxClientConn:  maxClientConn(clients),
		AcquireTimeout: 30000,
		LogLevel:       "warn",
	}
	if t.routed {
		p.ReadRoutingMode = "prefer_replica"
		p.Replicas = nil
		for _, st := range t.standbys(b.cluster.Standbys) {
			p.Replicas = append(p.Replicas, st.Addr())
		}
	}
	cfg, err := benchTOML(kinetictest.TOML(b.cluster, p))
	if err != nil {
		return nil, err
	}
	if err := b.writeFiles(dir, map[string]string{"kineticd.toml": cfg}); err != nil {
		return nil, err
	}
	// kineticd needs no particular user; it runs as we do.
	bin := b.kineticd
	if t.bin != "" {
		bin = t.bin
	}
	return b.spawn(dir, nil, t.env, syscall.SIGTERM, bin, "--config", filepath.Join(dir, "kineticd.toml"))
}

// benchTOML puts the SPEC's default health probing back into a kinetictest
// config. The test template probes every 200 ms so tests see state changes
// fast; on a benchmark machine with every core busy such frequent probes
// cost CPU and can time out and take servers out of rotation, which is not
// what a deployment with the defaults would see.
func benchTOML(cfg string) (string, error) {
	for _, kv := range [][2]string{
		{"replica_health_interval_ms = 200\n", "replica_health_interval_ms = 2000\n"},
		{"replica_health_timeout_ms = 200\n", "replica_health_timeout_ms = 750\n"},
	} {
		if !strings.Contains(cfg, kv[0]) {
			return "", fmt.Errorf("kinetictest.TOML no longer says %q; update benchTOML", strings.TrimSpace(kv[0]))
		}
		cfg = strings.Replace(cfg, kv[0], kv[1], 1)
	}
	return cfg, nil
}

// writeFiles writes name→content into dir, readable by the proxy's user only.
func (b *bench) writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
		if err := os.Chown(path, b.uid, b.gid); err != nil {
			return err
		}
	}
	return nil
}

// proc is a proxy process this program started, in its own process group.
type proc struct {
	cmd     *exec.Cmd
	logFile string
	stopSig syscall.Signal // asks for a prompt shutdown
	done    chan struct{}  // closed when cmd.Wait returned
	err     error
}

// spawn starts bin as cred (nil: as we are) in dir with output to dir/log;
// stopSig is the signal that makes it shut down without waiting for clients.
// The process leads its own group, so a terminal's Ctrl-C reaches only us
// and stop can signal every process the proxy forked; it gets SIGKILL if
// this program dies without stopping it.
func (b *bench) spawn(dir string, cred *syscall.Credential, env []string, stopSig syscall.Signal, bin string, args ...string) (*proc, error) {
	logFile := filepath.Join(dir, "log")
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir, "LC_ALL=C"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, logFile: logFile, stopSig: stopSig, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the proxy to shut down, waits up to 10 s, then kills its
// process group, which also ends whatever it forked (pgpool's children).
func (p *proc) stop() error {
	pgid := p.pid()
	_ = syscall.Kill(pgid, p.stopSig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pid %d survives SIGKILL", pgid)
	}
}

// waitReady waits until a query as the app user through addr succeeds:
// the proxy listens, authenticates, and reaches the primary.
func waitReady(ctx context.Context, p *proc, addr, db string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dsn := kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, db) + "&connect_timeout=5"
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("exited before accepting: %v", p.err)
		}
		conn, err := pgconn.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
			conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitReplicasHealthy waits until kineticd's SHOW SERVERS has want
// replicas healthy (eligible for reads). Until then a routed target's
// sessions are spread over the replicas probed so far: sessions keep the
// replica their first read went to, so a run that began before the second
// standby's first verdict would read from one standby only, which on a
// machine shared with the servers is a different benchmark.
func waitReplicasHealthy(ctx context.Context, addr string, want int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dsn := kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, "pgkinetic") + "&connect_timeout=5"
	healthy, last := 0, error(nil)
	for {
		if conn, err := pgconn.Connect(ctx, dsn); err != nil {
			last = err
		} else {
			res, err := conn.Exec(ctx, "SHOW SERVERS").ReadAll()
			conn.Close(context.WithoutCancel(ctx))
			last = err
			if err == nil && len(res) == 1 {
				healthy = countHealthyReplicas(res[0])
				if healthy >= want {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d replicas healthy after 30 s (last error: %v)", healthy, want, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countHealthyReplicas counts SHOW SERVERS rows of configured replicas (role standby)
// whose healthy column is true.
func countHealthyReplicas(r *pgconn.Result) int {
	role, healthy := -1, -1
	for i, f := range r.FieldDescriptions {
		switch f.Name {
		case "configured_role":
			role = i
		case "healthy":
			healthy = i
		}
	}
	if role < 0 || healthy < 0 {
		return 0
	}
	n := 0
	for _, row := range r.Rows {
		if string(row[role]) == "standby" && string(row[healthy]) == "t" {
			n++
		}
	}
	return n
}

// waitDrained waits until no session of the app user is left on any server:
// backends of a stopped proxy exit asynchronously, and the next run must
// neither count them nor run short of max_connections.
func (b *bench) waitDrained(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	servers := append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...)
	for _, s := range servers {
		for {
			n, err := s.QueryString(ctx, fmt.Sprintf(
				"SELECT count(*) FROM pg_stat_activity WHERE usename = '%s'", pgtest.AppUser))
			if err == nil && n == "0" {
				break
			}
			select {
			case <-ctx.Done():
				return errors.Join(fmt.Errorf("%s: %s sessions of %s still open", s.Name, n, pgtest.AppUser), err, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// xacts returns the committed plus rolled-back transactions in the app
// database on each server (primary first), to tell where reads went.
func (b *bench) xacts(ctx context.Context) ([]int64, error) {
	servers := append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...)
	out := make([]int64, len(servers))
	for i, s := range servers {
		v, err := s.QueryString(ctx, fmt.Sprintf(
			"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '%s'", pgtest.AppDB))
		if err != nil {
			return nil, err
		}
		if out[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ownStatementMarks are substrings of the statements kineticd runs on its
// own: health probes, the position reader, and what earlier versions
// injected after client units (a WAL position or replay position query),
// settings replays and resets.
var ownStatementMarks = []string{
	"pg_is_in_recovery() as r",
	"pg_current_wal_insert_lsn()",
	"pg_last_wal_replay_lsn()",
	"set_config(",
	"RESET ALL",
	"DISCARD ALL",
}

// resetStatements empties pg_stat_statements on every server.
func (b *bench) resetStatements(ctx context.Context) error {
	for _, s := range append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...) {
		if err := s.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	return nil
}

// statementCounts sums pg_stat_statements' calls in the app database over
// every server: those of kineticd's own statements and the rest.
func (b *bench) statementCounts(ctx context.Context) (own, client float64, err error) {
	var cond []string
	for _, m := range ownStatementMarks {
		cond = append(cond, "strpos(query, "+pool.QuoteLiteral(m)+") > 0")
	}
	q := fmt.Sprintf(`SELECT coalesce(sum(calls) FILTER (WHERE %s), 0)::text || ' ' ||
  coalesce(sum(calls) FILTER (WHERE NOT (%s)), 0)::text
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '%s')`,
		strings.Join(cond, " OR "), strings.Join(cond, " OR "), pgtest.AppDB)
	for _, s := range append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...) {
		v, err := s.QueryString(ctx, q)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", s.Name, err)
		}
		var o, c float64
		if _, err := fmt.Sscan(v, &o, &c); err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", s.Name, v, err)
		}
		own, client = own+o, client+c
	}
	return own, client, nil
}
