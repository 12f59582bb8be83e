package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// pgbouncerBin is where Debian's pgbouncer package installs it
// (scripts/install-bench-deps.sh).
const pgbouncerBin = "/usr/sbin/pgbouncer"

// startPgbouncer runs PgBouncer 1.18 in front of the primary with the same
// pool mode, pool size and client limit a kineticd run gets, clients
// authenticating with SCRAM against the app user's verifier from pg_authid
// (as in test/bench/run). PgBouncer refuses to run as root, so as root it
// runs as the postgres OS user. Its open-file limit is raised to fit
// max_client_conn: a child gets the soft limit Go found at start-up, not
// the one Go raised for itself.
func startPgbouncer(ctx context.Context, cl *pgtest.Cluster, dir, addr string, o options) (*proxy, error) {
	if _, err := os.Stat(pgbouncerBin); err != nil {
		return nil, fmt.Errorf("%w (run scripts/install-bench-deps.sh)", err)
	}
	verifier, err := cl.Primary.QueryString(ctx, fmt.Sprintf(
		"SELECT rolpassword FROM pg_authid WHERE rolname = '%s'", pgtest.AppUser))
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	waitMS := o.acquireTimeout // query_wait_timeout plays acquire_timeout_ms's part
	if waitMS == 0 {
		waitMS = 2000 // kinetictest's default
	}
	ini := fmt.Sprintf(`;; written by test/bench/connscale
[databases]
%[1]s = host=127.0.0.1 port=%[2]d dbname=%[1]s

[pgbouncer]
listen_addr = %[3]s
listen_port = %[4]s
unix_socket_dir =
pidfile =
logfile =
auth_type = scram-sha-256
auth_file = %[5]s
pool_mode = %[6]s
max_client_conn = %[7]d
default_pool_size = %[8]d
min_pool_size = 0
reserve_pool_size = 0
query_wait_timeout = %[9]d
server_reset_query = DISCARD ALL
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 60
`, pgtest.AppDB, cl.Primary.Port, host, port, filepath.Join(dir, "userlist.txt"), o.poolMode,
		o.maxClientConn, o.poolSize, max(1, (waitMS+999)/1000))
	users := fmt.Sprintf("%q %q\n", pgtest.AppUser, verifier)

	var cred *syscall.Credential
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("PgBouncer refuses root and there is no OS user postgres: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
	}
	for name, text := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": users} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return nil, err
		}
		if cred != nil {
			if err := os.Chown(path, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	nofile := o.maxClientConn + o.poolSize + 100
	argv := []string{"/bin/sh", "-c", fmt.Sprintf("ulimit -S -n %d && exec %s %s", nofile, pgbouncerBin,
		filepath.Join(dir, "pgbouncer.ini"))}
	return startProxy(ctx, "pgbouncer", argv, cred, addr, filepath.Join(dir, "pgbouncer.log"))
}

func pgbouncerVersion() string {
	out, err := exec.Command(pgbouncerBin, "--version").Output()
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
