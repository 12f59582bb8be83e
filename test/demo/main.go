// Command demo is the newcomer's first look at pg-kinetic: it starts a real
// PostgreSQL 15 primary and one streaming replica (test/pgtest), writes a
// kineticd configuration for them, runs kineticd, and prints how to connect.
// Ctrl-C stops kineticd and the servers and removes their data.
//
//	make demo
//	go run ./test/demo -kineticd bin/kineticd
//
// The demo builds nothing: -kineticd names a binary that accepts
// `--check-config PATH` and `--config PATH` (make build writes bin/kineticd).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func main() {
	kineticd := flag.String("kineticd", "bin/kineticd", "the kineticd `binary` to run")
	workDir := flag.String("dir", ".demo", "`directory` for the generated config and kineticd's log")
	listen := flag.String("listen", "", "kineticd's client `address` (default 127.0.0.1:6432 if free, else a free port)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kineticd, *workDir, *listen); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kineticd, workDir, listen string) (err error) {
	bin, err := filepath.Abs(kineticd)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return fmt.Errorf("kineticd binary %s not found: build it with `make build` (or run `make demo`, which does)", kineticd)
	}
	if listen == "" {
		listen = pickListen()
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return err
	}
	cfgPath := filepath.Join(workDir, "kineticd.toml")
	logPath := filepath.Join(workDir, "kineticd.log")

	fmt.Println("Starting PostgreSQL 15: a primary and one streaming replica ...")
	begin := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cluster, err := pgtest.Start(startCtx, pgtest.Options{Standbys: 1})
	cancel()
	if err != nil {
		if errors.Is(err, pgtest.ErrNoPostgres) {
			return fmt.Errorf("%w\n(run `make deps` as root, or `sudo scripts/install-deps.sh`)", err)
		}
		return err
	}
	defer func() {
		fmt.Println("Stopping PostgreSQL and removing its data ...")
		if cerr := cluster.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		os.Remove(cfgPath)
		os.Remove(logPath)
		os.Remove(workDir) // only if empty: never someone's files
	}()
	primary, replica := cluster.Primary, cluster.Standbys[0]
	fmt.Printf("PostgreSQL is up in %v (data in %s).\n", time.Since(begin).Round(time.Millisecond), cluster.Dir)

	if err := os.WriteFile(cfgPath, []byte(configTOML(listen, primary.Addr(), replica.Addr())), 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, bin, "--check-config", cfgPath).CombinedOutput(); err != nil {
		return fmt.Errorf("kineticd rejects the demo config %s: %v\n%s", cfgPath, err, out)
	}

	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: the terminal's Ctrl-C reaches the demo, which then
	// stops kineticd in order. If the demo dies, kineticd is told to stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", kineticd, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if err := stopKineticd(cmd, exited); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		}
	}()

	if err := waitListening(ctx, listen, exited); err != nil {
		return fmt.Errorf("kineticd did not come up on %s: %w\n--- tail of %s ---\n%s", listen, err, logPath, tail(logPath, 20))
	}

	_, port, _ := net.SplitHostPort(listen)
	fmt.Printf(`
pg-kinetic demo is running.
  connect:  psql "postgres://%s:%s@127.0.0.1:%s/%s?sslmode=disable"
  primary:  %s   replica: %s
  try:      SELECT inet_server_port(), pg_is_in_recovery();   -- a read: the replica answers
            CREATE TABLE t (x int); INSERT INTO t VALUES (1);    -- writes: the primary
            SELECT x, inet_server_port() FROM t;                 -- your own write, read back safely
            SHOW pg_kinetic.last_route;  SHOW pg_kinetic.write_lsn;
Press Ctrl-C to stop and clean up.

(config: %s, kineticd log: %s, psql: %s)
`, pgtest.AppUser, pgtest.AppPassword, port, pgtest.AppDB, primary.Addr(), replica.Addr(), cfgPath, logPath, pgtest.Bin("psql"))

	select {
	case <-ctx.Done():
		fmt.Println("\nStopping kineticd ...")
		return nil
	case werr := <-exited:
		exited <- werr // for stopKineticd
		return fmt.Errorf("kineticd exited unexpectedly (%v)\n--- tail of %s ---\n%s", werr, logPath, tail(logPath, 20))
	}
}

// configTOML is the demo's kineticd configuration (SPEC §2): one user, one
// route with read routing on (prefer_replica, waiting briefly for the
// replica to replay a session's own writes).
func configTOML(listen, primary, replica string) string {
	return fmt.Sprintf(`# Written by the pg-kinetic demo (go run ./test/demo); removed when it exits.
# Try: change read_routing_mode below ("off", "require_replica") or
# fallback_policy ("primary", "reject"), then kill -HUP kineticd and reconnect.

[server]
listen = %q
shutdown_timeout_ms = 3000

[admin]
users = [%q]

[metrics]
listen = ""

[log]
level = "info"
format = "console"

[[users]]
name = %q
password = %q

[[routes]]
name = "main"
database = %q
[routes.primary]
address = %q
[[routes.replicas]]
address = %q
weight = 1
[routes.read_routing]
read_routing_mode = "prefer_replica"
fallback_policy = "wait"     # a read of your own write waits (max 750 ms) for the replica
[routes.ha]
replica_health_interval_ms = 500
replica_health_timeout_ms = 400
`, listen, pgtest.AppUser, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, primary, replica)
}

// pickListen prefers PgBouncer's customary 127.0.0.1:6432 and falls
// back to a free port.
func pickListen() string {
	if l, err := net.Listen("tcp", "127.0.0.1:6432"); err == nil {
		l.Close()
		return "127.0.0.1:6432"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:6432"
	}
	defer l.Close()
	return l.Addr().String()
}

// waitListening waits until addr accepts TCP connections, kineticd exits, or
// 30 seconds pass.
func waitListening(ctx context.Context, addr string, exited chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("kineticd exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// stopKineticd sends SIGTERM (kineticd drains for shutdown_timeout_ms) and
// SIGKILLs it if it is still there ten seconds later.
func stopKineticd(cmd *exec.Cmd, exited chan error) error {
	select {
	case <-exited:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("kineticd ignored SIGTERM for 10s; killed it")
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
