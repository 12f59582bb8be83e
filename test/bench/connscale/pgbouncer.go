package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/pg-kinetic/pg-kinetic/test/bench/internal/benchutil"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// startPgbouncer runs PgBouncer 1.18 in front of the primary with the same
// pool mode, pool size and client limit a kineticd run gets, clients
// authenticating with SCRAM against the app user's verifier from pg_authid
// (as in test/bench/run). PgBouncer refuses to run as root, so as root it
// runs as the postgres OS user. Its open-file limit is raised to fit
// max_client_conn: a child gets the soft limit Go found at start-up, not
// the one Go raised for itself.
func startPgbouncer(ctx context.Context, cl *pgtest.Cluster, dir, addr string, o options) (*proxy, error) {
	if _, err := os.Stat(benchutil.PgbouncerBin); err != nil {
		return nil, fmt.Errorf("%w (run scripts/install-bench-deps.sh)", err)
	}
	authLine, err := benchutil.AuthFileLine(ctx, cl.Primary)
	if err != nil {
		return nil, err
	}
	waitMS := o.acquireTimeout // query_wait_timeout plays acquire_timeout_ms's part
	if waitMS == 0 {
		waitMS = 2000 // kinetictest's default
	}
	ini := benchutil.Pgbouncer{
		Writer:        "test/bench/connscale",
		Databases:     fmt.Sprintf("%[1]s = host=127.0.0.1 port=%[2]d dbname=%[1]s\n", pgtest.AppDB, cl.Primary.Port),
		Listen:        addr,
		AuthFile:      filepath.Join(dir, "userlist.txt"),
		PoolMode:      o.poolMode,
		MaxClientConn: o.maxClientConn,
		PoolSize:      o.poolSize,
		Extra:         fmt.Sprintf("query_wait_timeout = %d\n", max(1, (waitMS+999)/1000)),
	}.INI()

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
	for name, text := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": authLine} {
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
	argv := []string{"/bin/sh", "-c", fmt.Sprintf("ulimit -S -n %d && exec %s %s", nofile, benchutil.PgbouncerBin,
		filepath.Join(dir, "pgbouncer.ini"))}
	return startProxy(ctx, "pgbouncer", argv, cred, addr, filepath.Join(dir, "pgbouncer.log"))
}

func pgbouncerVersion() string {
	out, err := exec.Command(benchutil.PgbouncerBin, "--version").Output()
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
