package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultBinDir is where Debian's postgresql-15 packages install the server
// and client programs. PGTEST_BINDIR overrides it.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// dirPrefix names every cluster directory under os.TempDir(); .ci/run and
// sweepStale recognise abandoned ones by it and by ownerFile.
const (
	dirPrefix = "pgtest-"
	ownerFile = "owner.pid"
)

// Bin returns the absolute path of the PostgreSQL 15 program name, such as
// "psql" or "pgbench". It does not check that the file exists.
func Bin(name string) string {
	dir := os.Getenv("PGTEST_BINDIR")
	if dir == "" {
		dir = DefaultBinDir
	}
	return filepath.Join(dir, name)
}

// ErrNoPostgres reports that the PostgreSQL 15 programs are not installed.
var ErrNoPostgres = errors.New("pgtest: PostgreSQL 15 binaries not found")

// requiredBins are the programs Start runs.
var requiredBins = []string{"postgres", "initdb", "pg_basebackup"}

func checkBins() error {
	for _, name := range requiredBins {
		if _, err := os.Stat(Bin(name)); err != nil {
			return fmt.Errorf("%w: %s is missing; install them with `sudo scripts/install-deps.sh` "+
				"(apt-get install postgresql-15 postgresql-client-15) or set PGTEST_BINDIR", ErrNoPostgres, Bin(name))
		}
	}
	return nil
}

// runner runs PostgreSQL programs as the right OS user: "postgres" when this
// process is root, the current user otherwise.
type runner struct {
	cred *syscall.Credential // nil: run as the current user
	uid  int
	gid  int
	env  []string
}

func newRunner(home string) (runner, error) {
	r := runner{uid: os.Getuid(), gid: os.Getgid(), env: childEnv(home)}
	if os.Geteuid() != 0 {
		return r, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return r, fmt.Errorf("pgtest: running as root needs the OS user \"postgres\" (initdb refuses root): %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return r, fmt.Errorf("pgtest: user postgres has a non-numeric uid %q or gid %q", u.Uid, u.Gid)
	}
	r.uid, r.gid = uid, gid
	r.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	return r, nil
}

// childEnv is this process's environment without the libpq and locale
// variables that would change what the PostgreSQL programs do, with HOME
// pointing somewhere the postgres user may read (no ~/.pgpass surprises).
func childEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "LC_ALL=C")
}

// command prepares a one-shot program such as initdb or pg_basebackup.
func (r runner) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, Bin(name), args...)
	cmd.Dir = dir
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred, Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a one-shot program and returns its output in the error.
func (r runner) run(ctx context.Context, dir, name string, args ...string) error {
	out, err := r.command(ctx, dir, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: %s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// chown gives path to the user the programs run as (a no-op unless root).
func (r runner) chown(path string) error {
	if r.cred == nil {
		return nil
	}
	return os.Lchown(path, r.uid, r.gid)
}

// spawnPostmaster starts "postgres -D dataDir" as a direct child with stdout
// and stderr appended to logFile, in its own process group (a terminal's
// Ctrl-C is ours to handle, not the server's). The kernel sends it SIGQUIT,
// an immediate shutdown, when the thread that started it exits, which in Go
// means when this process dies.
func (r runner) spawnPostmaster(dataDir, logFile string) (int, error) {
	logf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	if err := r.chown(logFile); err != nil {
		return 0, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	bin := Bin("postgres")
	return syscall.ForkExec(bin, []string{bin, "-D", dataDir}, &syscall.ProcAttr{
		Dir:   dataDir,
		Env:   r.env,
		Files: []uintptr{devnull.Fd(), logf.Fd(), logf.Fd()},
		Sys: &syscall.SysProcAttr{
			Credential: r.cred,
			Setpgid:    true,
			Pdeathsig:  syscall.SIGQUIT,
		},
	})
}

// reaped reports whether child pid has exited, collecting it if so.
func reaped(pid int) bool {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: already collected
			return true
		default:
			return wpid == pid
		}
	}
}

// waitReaped waits up to timeout for child pid to exit.
func waitReaped(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if reaped(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procsUnder lists the processes whose working directory is dir or inside
// it. Every PostgreSQL process works in its data directory, so this finds a
// server's backends even after its postmaster is gone.
func procsUnder(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil {
			continue // gone, a zombie, or not ours to see
		}
		if cwd == dir || strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoProcs waits up to grace for the processes working in dir to exit by
// themselves, then SIGKILLs them and waits again. It reports the ones left.
func waitNoProcs(dir string, grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for len(procsUnder(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	pids := procsUnder(dir)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(pids) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		pids = procsUnder(dir)
	}
	if len(pids) > 0 {
		return fmt.Errorf("pgtest: processes %v still running in %s", pids, dir)
	}
	return nil
}

// sweepStale removes cluster directories under tmp whose owning test process
// is gone (it died before Close), killing anything still running in them.
// Directories without an owner file are left alone: they may be being made.
func sweepStale(tmp string) {
	matches, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
	for _, dir := range matches {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if waitNoProcs(dir, 0) == nil {
			_ = os.RemoveAll(dir)
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// checkTraversable fails when the postgres user cannot reach dir, which
// happens when root's TMPDIR lies in a private directory such as /root.
func (r runner) checkTraversable(dir string) error {
	if r.cred == nil {
		return nil
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && fi.Mode().Perm()&0o001 == 0 && int(st.Uid) != r.uid {
			return fmt.Errorf("pgtest: the postgres user cannot enter %s (mode %v); set TMPDIR to a directory it can reach, such as /tmp", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// LogTail returns the last n lines of file, for error messages.
func LogTail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
