package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Roles and database every cluster has. The superuser is trusted from
// loopback; the others log in with their passwords.
const (
	SuperUser = "postgres"

	// AppUser owns AppDB and authenticates with SCRAM-SHA-256.
	AppUser     = "app"
	AppPassword = "app-secret"
	AppDB       = "app"

	// MD5User has an md5-hashed password and authenticates with md5.
	MD5User     = "md5user"
	MD5Password = "md5-secret"

	// ReplUser may open replication connections (REPLICATION LOGIN).
	ReplUser     = "kinetic_repl"
	ReplPassword = "repl-secret"
)

// Options shape a cluster.
type Options struct {
	// Standbys is the number of streaming hot standbys; 0 means 2 and a
	// negative number means none.
	Standbys int
	// Conf, when set, is appended to every server's postgresql.conf after
	// the harness's own settings (standbys inherit it), so it can override
	// them, e.g. "max_connections = 600" for a benchmark with many clients.
	Conf string
}

// Cluster is a primary and its standbys, all in Dir.
type Cluster struct {
	Primary  *Server
	Standbys []*Server // streaming from Primary, in the order they were made
	Dir      string

	run     runner
	conf    string    // Options.Conf
	servers []*Server // every server ever part of the cluster, for Close
	closed  bool
}

// Start creates and starts a cluster: initdb, roles and database on the
// primary, then the standbys in parallel, each started and streaming before
// Start returns. On failure everything started is stopped and removed, and
// the error carries the tail of the failing server's log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := checkBins(); err != nil {
		return nil, err
	}
	n := opts.Standbys
	switch {
	case n == 0:
		n = 2
	case n < 0:
		n = 0
	}
	ctx, cancel := withDefaultTimeout(ctx, 2*time.Minute)
	defer cancel()

	tmp := os.TempDir()
	sweepStale(tmp)
	dir, err := os.MkdirTemp(tmp, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{Dir: dir, conf: opts.Conf}
	defer func() {
		if err != nil {
			if cerr := c.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	if c.run, err = newRunner(dir); err != nil {
		return nil, err
	}
	// sockaddr_un holds 107 bytes: DIR/.s.PGSQL.PORT (and its .lock) must fit.
	if len(dir)+len("/.s.PGSQL.65535.lock") > 107 {
		return nil, fmt.Errorf("pgtest: %s is too long for PostgreSQL's unix sockets; set TMPDIR to a short path such as /tmp", dir)
	}
	if err := c.run.checkTraversable(dir); err != nil {
		return nil, err
	}
	if err := c.run.chown(dir); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}

	ports, err := freePorts(1 + n)
	if err != nil {
		return nil, err
	}
	c.Primary = c.newServer("primary", ports[0])
	for i := range n {
		c.Standbys = append(c.Standbys, c.newServer(fmt.Sprintf("standby%d", i+1), ports[1+i]))
	}

	if err := c.initPrimary(ctx); err != nil {
		return nil, err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range c.Standbys {
		wg.Go(func() { errs[i] = c.initStandby(ctx, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) newServer(name string, port int) *Server {
	data := filepath.Join(c.Dir, name)
	s := &Server{
		Name:      name,
		Port:      port,
		DataDir:   data,
		LogFile:   filepath.Join(data, logName),
		socketDir: c.Dir,
		run:       c.run,
	}
	c.servers = append(c.servers, s)
	return s
}

const logName = "postgresql.log"

func (c *Cluster) initPrimary(ctx context.Context) error {
	p := c.Primary
	if err := c.run.run(ctx, c.Dir, "initdb", "-D", p.DataDir, "--no-sync", "-U", SuperUser,
		"--auth-local=trust", "--auth-host=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(p.DataDir, "postgresql.conf"), serverConf(c.Dir)+extraConf(c.conf)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p.DataDir, "pg_hba.conf"), []byte(hbaConf), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := c.run.chown(filepath.Join(p.DataDir, "pg_hba.conf")); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := c.startFresh(ctx, p, nil); err != nil {
		return err
	}
	for _, step := range []struct{ db, sql string }{
		{"postgres", fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD %s;
			SET password_encryption = 'md5';
			CREATE ROLE %s LOGIN PASSWORD %s;
			RESET password_encryption;
			CREATE ROLE %s REPLICATION LOGIN PASSWORD %s`,
			AppUser, quote(AppPassword), MD5User, quote(MD5Password), ReplUser, quote(ReplPassword))},
		{"postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", AppDB, AppUser)},
		{AppDB, fmt.Sprintf("GRANT ALL ON SCHEMA public TO %s, %s", AppUser, MD5User)},
	} {
		if _, err := p.query(ctx, step.db, step.sql); err != nil {
			return err
		}
	}
	return nil
}

// serverConf is appended to the primary's postgresql.conf; standbys inherit
// it through pg_basebackup. Per-server settings (port, cluster_name,
// primary_conninfo) live in postgresql.auto.conf, which is read after it.
func serverConf(socketDir string) string {
	return fmt.Sprintf(`
# pgtest
listen_addresses = '127.0.0.1'
unix_socket_directories = %s
fsync = off
# pg_rewind needs full_page_writes (Cluster.Rejoin).
full_page_writes = on
synchronous_commit = on
wal_level = replica
max_wal_senders = 10
hot_standby = on
max_connections = 300
shared_buffers = 32MB
wal_keep_size = 256MB
# pg_rewind needs it: an old primary rejoins as a standby (Cluster.Rejoin).
wal_log_hints = on
password_encryption = 'scram-sha-256'
logging_collector = off
# A standby whose primary restarts reconnects within this, not the default 5s.
wal_retrieve_retry_interval = '200ms'
`, quote(socketDir))
}

// extraConf frames Options.Conf for postgresql.conf ("" when unset).
func extraConf(conf string) string {
	if conf == "" {
		return ""
	}
	return "\n# pgtest Options.Conf\n" + strings.TrimRight(conf, "\n") + "\n"
}

const hbaConf = `# pgtest
# TYPE  DATABASE     USER      ADDRESS        METHOD
local   all          all                      trust
host    all          postgres  127.0.0.1/32   trust
host    replication  all       127.0.0.1/32   trust
host    all          md5user   127.0.0.1/32   md5
host    all          all       127.0.0.1/32   scram-sha-256
`

func (c *Cluster) initStandby(ctx context.Context, s *Server) error {
	p := c.Primary
	if err := c.run.run(ctx, c.Dir, "pg_basebackup", "-D", s.DataDir, "-R", "-X", "stream", "-c", "fast", "--no-sync", "--no-manifest",
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", SuperUser); err != nil {
		return err
	}
	// The copy brought the primary's log along.
	if err := os.Remove(s.LogFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := c.startFresh(ctx, s, [][2]string{{"primary_conninfo", p.conninfo(s.Name)}}); err != nil {
		return err
	}
	return waitStreaming(ctx, s)
}

// conninfo is what a standby named app uses to stream from s.
func (s *Server) conninfo(app string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", s.Port, SuperUser, app)
}

// startFresh writes the per-server settings and starts s, moving it to
// another free port if its port was taken in the meantime.
func (c *Cluster) startFresh(ctx context.Context, s *Server, settings [][2]string) error {
	for attempt := 1; ; attempt++ {
		all := append([][2]string{{"port", strconv.Itoa(s.Port)}, {"cluster_name", s.Name}}, settings...)
		if err := setAutoConf(s.DataDir, all); err != nil {
			return err
		}
		err := s.Start(ctx)
		if !portClash(err) || attempt == 5 {
			return err
		}
		ports, perr := freePorts(1)
		if perr != nil {
			return errors.Join(err, perr)
		}
		s.Port = ports[0]
	}
}

// waitStreaming waits until standby s is in recovery and its WAL receiver
// streams.
func waitStreaming(ctx context.Context, s *Server) error {
	err := s.waitTrue(ctx, `SELECT pg_is_in_recovery() AND
			coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false)`,
		s.Name+" to stream from the primary")
	if err != nil {
		return fmt.Errorf("pgtest: %w\n--- tail of %s ---\n%s", err, s.LogFile, LogTail(s.LogFile, 30))
	}
	return nil
}

// WaitReplicated waits until every running standby has replayed WAL up to the
// primary's current position (pg_current_wal_lsn()), or ctx ends. A standby
// with paused replay keeps it waiting until ctx ends.
func (c *Cluster) WaitReplicated(ctx context.Context) error {
	lsn, err := c.Primary.CurrentLSN(ctx)
	if err != nil {
		return err
	}
	for _, s := range c.Standbys {
		if !s.Running() {
			continue
		}
		if err := s.WaitReplay(ctx, lsn); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	return nil
}

// Promote turns standby s into the primary (pg_promote()) and waits until it
// leaves recovery. Afterwards c.Primary is s, c.Standbys no longer holds it,
// and the other standbys are re-pointed at s and follow its new timeline
// (they can if they had not replayed past the promotion point, which holds
// when the old primary was stopped or killed first). The old primary is left
// as it was, outside Primary and Standbys; Close still stops it.
func (c *Cluster) Promote(ctx context.Context, s *Server) error {
	i := slices.Index(c.Standbys, s)
	if i < 0 {
		return fmt.Errorf("pgtest: promote %s: not a standby of this cluster", s.Name)
	}
	if err := s.Exec(ctx, "SELECT pg_promote(true, 60)"); err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	err := s.waitTrue(ctx, "SELECT NOT pg_is_in_recovery()", s.Name+" to leave recovery")
	if err != nil {
		return fmt.Errorf("pgtest: promote: %w", err)
	}
	c.Primary = s
	c.Standbys = slices.Delete(slices.Clone(c.Standbys), i, i+1)
	for _, o := range c.Standbys {
		if err := setAutoConf(o.DataDir, [][2]string{{"primary_conninfo", s.conninfo(o.Name)}}); err != nil {
			return err
		}
		if o.Running() {
			if err := o.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
				return fmt.Errorf("pgtest: re-point %s: %w", o.Name, err)
			}
		}
	}
	return nil
}

// Rejoin makes old, a former primary of this cluster left out by Promote,
// a standby of the current primary: it stops old cleanly (starting it
// first if it is down, so that a crash is recovered), rewinds it with
// pg_rewind onto the primary's timeline, and starts it streaming from the
// primary. Afterwards c.Standbys holds it.
func (c *Cluster) Rejoin(ctx context.Context, old *Server) error {
	if old == c.Primary || slices.Contains(c.Standbys, old) {
		return fmt.Errorf("pgtest: rejoin %s: it is in the cluster already", old.Name)
	}
	if !old.Running() {
		// pg_rewind wants a cleanly shut down target.
		if err := old.Start(ctx); err != nil {
			return err
		}
	}
	if err := old.Stop(ctx); err != nil {
		return err
	}
	src := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=postgres", c.Primary.Port, SuperUser)
	// A promoted server's control file names its new timeline only after
	// a checkpoint; pg_rewind reads it there.
	if err := c.Primary.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("pgtest: rewind %s: %w", old.Name, err)
	}
	if err := c.run.run(ctx, c.Dir, "pg_rewind", "--target-pgdata", old.DataDir, "--source-server", src, "--no-sync"); err != nil {
		return fmt.Errorf("pgtest: rewind %s: %w", old.Name, err)
	}
	if err := os.WriteFile(filepath.Join(old.DataDir, "standby.signal"), nil, 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := c.run.chown(filepath.Join(old.DataDir, "standby.signal")); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := c.startFresh(ctx, old, [][2]string{{"primary_conninfo", c.Primary.conninfo(old.Name)}}); err != nil {
		return err
	}
	if err := waitStreaming(ctx, old); err != nil {
		return err
	}
	c.Standbys = append(slices.Clone(c.Standbys), old)
	return nil
}

// Close stops every server the cluster started (immediate shutdown), kills
// whatever still runs in Dir, and removes Dir. It is safe to call twice.
func (c *Cluster) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, s := range c.servers {
		s.mu.Lock()
		s.collectLocked()
		if s.pid != 0 {
			_ = syscall.Kill(s.pid, syscall.SIGQUIT)
		}
		s.mu.Unlock()
	}
	for _, s := range c.servers {
		s.mu.Lock()
		errs = append(errs, s.signalLocked(syscall.SIGQUIT, 10*time.Second))
		s.mu.Unlock()
	}
	errs = append(errs, waitNoProcs(c.Dir, 5*time.Second))
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("pgtest: %w", err))
	}
	return errors.Join(errs...)
}

// setAutoConf sets name = 'value' pairs in DataDir/postgresql.auto.conf,
// replacing earlier settings of the same names.
func setAutoConf(dataDir string, settings [][2]string) error {
	path := filepath.Join(dataDir, "postgresql.auto.conf")
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgtest: %w", err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		key, _, _ := strings.Cut(line, "=")
		if slices.ContainsFunc(settings, func(kv [2]string) bool { return strings.TrimSpace(key) == kv[0] }) {
			continue
		}
		out = append(out, line)
	}
	for _, kv := range settings {
		out = append(out, kv[0]+" = "+quote(kv[1]))
	}
	// Rewriting the existing file keeps its owner; the server must read it.
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("pgtest: %w", err)
	}
	return f.Close()
}

// quote makes a single-quoted SQL or configuration literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// freePorts returns n distinct loopback ports that were free a moment ago.
// They are held open together so that the kernel cannot hand out one twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pgtest: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Ports is the set of the servers' ports, for checking where a query ran
// (inet_server_port()).
func Ports(servers ...*Server) map[int]bool {
	m := make(map[int]bool, len(servers))
	for _, s := range servers {
		m[s.Port] = true
	}
	return m
}

// StandbyPorts is Ports of every standby of c.
func (c *Cluster) StandbyPorts() map[int]bool { return Ports(c.Standbys...) }

// Ports is Ports of s alone.
func (s *Server) Ports() map[int]bool { return Ports(s) }
