package pgtest

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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Server is one PostgreSQL server of a Cluster.
type Server struct {
	Name    string // "primary", "standby1", "standby2", ...
	Port    int    // TCP port on 127.0.0.1
	DataDir string
	LogFile string // the server's stderr, DataDir/postgresql.log

	socketDir string
	run       runner

	mu  sync.Mutex
	pid int // postmaster pid; 0 when not running
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// DSN returns a URL connection string for user to database db over TCP,
// with TLS disabled.
func (s *Server) DSN(user, password, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     s.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	if password == "" {
		u.User = url.User(user)
	}
	return u.String()
}

// SuperDSN returns the DSN of the postgres superuser (trusted, no password)
// to database postgres over TCP.
func (s *Server) SuperDSN() string { return s.DSN(SuperUser, "", "postgres") }

// socketDSN reaches the server through its own unix socket, so that a
// foreign server that grabbed the port can never answer in its place.
func (s *Server) socketDSN(db string) string {
	return fmt.Sprintf("host='%s' port=%d user=%s dbname=%s sslmode=disable connect_timeout=5",
		s.socketDir, s.Port, SuperUser, db)
}

// Exec runs sql (one or more statements, simple protocol) as the superuser in
// database postgres.
func (s *Server) Exec(ctx context.Context, sql string) error {
	_, err := s.query(ctx, "postgres", sql)
	return err
}

// QueryString runs sql as the superuser in database postgres and returns the
// first column of the first row as text ("" for NULL). No row is an error.
func (s *Server) QueryString(ctx context.Context, sql string) (string, error) {
	res, err := s.query(ctx, "postgres", sql)
	if err != nil {
		return "", err
	}
	if len(res) == 0 || len(res[0].Rows) == 0 || len(res[0].Rows[0]) == 0 {
		return "", fmt.Errorf("pgtest: %s: query returned no rows: %s", s.Name, sql)
	}
	return string(res[0].Rows[0][0]), nil
}

func (s *Server) query(ctx context.Context, db, sql string) ([]*pgconn.Result, error) {
	conn, err := pgconn.Connect(ctx, s.socketDSN(db))
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s: connect: %w", s.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s: %w", s.Name, err)
	}
	return res, nil
}

// InRecovery reports pg_is_in_recovery(): true on a standby.
func (s *Server) InRecovery(ctx context.Context) (bool, error) {
	v, err := s.QueryString(ctx, "SELECT pg_is_in_recovery()")
	return v == "t", err
}

// PauseReplay asks a standby to stop applying WAL (pg_wal_replay_pause()). It
// keeps receiving WAL; no record after the one being applied is replayed
// until ResumeReplay.
func (s *Server) PauseReplay(ctx context.Context) error {
	return s.Exec(ctx, "SELECT pg_wal_replay_pause()")
}

// ResumeReplay undoes PauseReplay (pg_wal_replay_resume()).
func (s *Server) ResumeReplay(ctx context.Context) error {
	return s.Exec(ctx, "SELECT pg_wal_replay_resume()")
}

// ReplayLSN returns pg_last_wal_replay_lsn() in its text form, e.g.
// "0/3000148". It is an error on a server that never replayed WAL.
func (s *Server) ReplayLSN(ctx context.Context) (string, error) {
	v, err := s.QueryString(ctx, "SELECT pg_last_wal_replay_lsn()")
	if err == nil && v == "" {
		err = fmt.Errorf("pgtest: %s has no replay position (not a standby)", s.Name)
	}
	return v, err
}

// CurrentLSN returns pg_current_wal_lsn() of a primary (an error on a
// standby).
func (s *Server) CurrentLSN(ctx context.Context) (string, error) {
	return s.QueryString(ctx, "SELECT pg_current_wal_lsn()")
}

// WaitReplay waits until the server has replayed WAL up to lsn, or ctx ends.
// It waits forever on a standby whose replay is paused.
func (s *Server) WaitReplay(ctx context.Context, lsn string) error {
	if _, err := parseLSN(lsn); err != nil {
		return err
	}
	return s.waitTrue(ctx, fmt.Sprintf("SELECT coalesce(pg_last_wal_replay_lsn() >= '%s'::pg_lsn, false)", lsn),
		fmt.Sprintf("%s to replay up to %s", s.Name, lsn))
}

// waitTrue runs the boolean query sql every 10ms until it returns true or ctx
// ends, on one connection (reopened if it breaks) rather than one per try.
func (s *Server) waitTrue(ctx context.Context, sql, what string) error {
	var conn *pgconn.PgConn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	return pollUntil(ctx, 10*time.Millisecond, func() (bool, error) {
		if conn == nil {
			c, err := pgconn.Connect(ctx, s.socketDSN("postgres"))
			if err != nil {
				return false, err
			}
			conn = c
		}
		res, err := conn.Exec(ctx, sql).ReadAll()
		if err != nil {
			if conn.IsClosed() {
				conn = nil
			}
			return false, err
		}
		return len(res) > 0 && len(res[0].Rows) > 0 && string(res[0].Rows[0][0]) == "t", nil
	}, func() string { return what })
}

// Running reports whether the harness's postmaster for s is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collectLocked()
	return s.pid != 0
}

// PID returns the harness's postmaster pid for s, 0 when it is not
// running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collectLocked()
	return s.pid
}

// collectLocked forgets a postmaster that has exited.
func (s *Server) collectLocked() {
	if s.pid != 0 && reaped(s.pid) {
		s.pid = 0
	}
}

// Start starts the server (what pg_ctl start does) and waits until it accepts
// connections. Starting a running server is an error.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(ctx)
}

func (s *Server) startLocked(ctx context.Context) error {
	s.collectLocked()
	if s.pid != 0 {
		return fmt.Errorf("pgtest: %s is already running (pid %d)", s.Name, s.pid)
	}
	// After Kill, backends of the old postmaster may still hold its shared
	// memory; PostgreSQL refuses to start until they are gone.
	if err := waitNoProcs(s.DataDir, 10*time.Second); err != nil {
		return err
	}
	pid, err := s.run.spawnPostmaster(s.DataDir, s.LogFile)
	if err != nil {
		return fmt.Errorf("pgtest: start %s: %w", s.Name, err)
	}
	s.pid = pid
	ctx, cancel := withDefaultTimeout(ctx, time.Minute)
	defer cancel()
	err = pollUntil(ctx, 10*time.Millisecond, func() (bool, error) {
		if reaped(pid) {
			s.pid = 0
			return false, errExited
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		conn, err := pgconn.Connect(cctx, s.socketDSN("postgres"))
		if err != nil {
			return false, nil // not up yet: no socket, or "starting up"
		}
		_ = conn.Close(cctx)
		return true, nil
	}, func() string { return s.Name + " to accept connections" })
	if err != nil {
		if s.pid != 0 {
			s.signalLocked(syscall.SIGQUIT, 10*time.Second)
		}
		return fmt.Errorf("pgtest: start %s on port %d: %w\n--- tail of %s ---\n%s",
			s.Name, s.Port, err, s.LogFile, LogTail(s.LogFile, 30))
	}
	return nil
}

var errExited = errors.New("postmaster exited")

// portClash tells a failed start caused by the port being taken.
func portClash(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Address already in use")
}

// Stop shuts the server down cleanly (pg_ctl stop -m fast: SIGINT) and waits
// until the postmaster has exited. Stopping a stopped server is a no-op.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collectLocked()
	if s.pid == 0 {
		return nil
	}
	if err := syscall.Kill(s.pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("pgtest: stop %s: %w", s.Name, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, time.Minute)
	defer cancel()
	pid := s.pid
	err := pollUntil(ctx, 5*time.Millisecond, func() (bool, error) { return reaped(pid), nil },
		func() string { return s.Name + " to shut down" })
	if err != nil {
		return fmt.Errorf("pgtest: stop %s: %w", s.Name, err)
	}
	s.pid = 0
	return nil
}

// Kill SIGKILLs the postmaster, a crash: no shutdown checkpoint, backends
// left to notice their parent is gone. It returns once the postmaster and
// all its backends have exited, so Start can follow at once.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collectLocked()
	if s.pid == 0 {
		return fmt.Errorf("pgtest: kill %s: not running", s.Name)
	}
	if pid, err := readPostmasterPID(s.DataDir); err == nil && pid != s.pid {
		return fmt.Errorf("pgtest: kill %s: postmaster.pid names %d, the harness started %d", s.Name, pid, s.pid)
	}
	if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgtest: kill %s: %w", s.Name, err)
	}
	if !waitReaped(s.pid, 10*time.Second) {
		return fmt.Errorf("pgtest: kill %s: pid %d survived SIGKILL", s.Name, s.pid)
	}
	s.pid = 0
	return waitNoProcs(s.DataDir, 10*time.Second)
}

// signalLocked sends sig and waits up to timeout for the postmaster to exit,
// then SIGKILLs it.
func (s *Server) signalLocked(sig syscall.Signal, timeout time.Duration) error {
	s.collectLocked()
	if s.pid == 0 {
		return nil
	}
	_ = syscall.Kill(s.pid, sig)
	if !waitReaped(s.pid, timeout) {
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		if !waitReaped(s.pid, 5*time.Second) {
			return fmt.Errorf("pgtest: %s: pid %d does not exit", s.Name, s.pid)
		}
	}
	s.pid = 0
	return nil
}

// readPostmasterPID reads the first line of DataDir/postmaster.pid.
func readPostmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(dataDir + "/postmaster.pid")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// parseLSN parses "X/Y" into a 64-bit WAL position. It guards the LSNs we
// splice into SQL.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("pgtest: bad LSN %q", s)
	}
	return h<<32 | l, nil
}

// pollUntil calls cond every interval until it reports done, fails, or ctx
// ends; what describes the awaited state for the timeout error.
func pollUntil(ctx context.Context, interval time.Duration, cond func() (bool, error), what func() string) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr error
	for {
		done, err := cond()
		if done {
			return nil
		}
		if errors.Is(err, errExited) {
			return err
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what(), ctx.Err(), lastErr)
			}
			return fmt.Errorf("waiting for %s: %w", what(), ctx.Err())
		case <-t.C:
		}
	}
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// Freeze stops every process of s (postmaster, backends, WAL receiver)
// with SIGSTOP, as if its host hung: connections stay open and nothing
// answers. The returned thaw resumes them (SIGCONT); call it before the
// cluster closes, say from t.Cleanup, since a frozen server cannot stop.
func (s *Server) Freeze() (thaw func(), err error) {
	pids := procsUnder(s.DataDir)
	if len(pids) == 0 {
		return nil, fmt.Errorf("pgtest: freeze %s: no process runs in %s", s.Name, s.DataDir)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}, nil
}
