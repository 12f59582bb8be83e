package benchutil

import (
	"context"
	"fmt"
	"net"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// PgbouncerBin is where Debian's pgbouncer package installs PgBouncer
// (scripts/install-bench-deps.sh).
const PgbouncerBin = "/usr/sbin/pgbouncer"

// Pgbouncer is the PgBouncer configuration the benchmarks compare kineticd
// with: clients authenticate with SCRAM against the verifiers in AuthFile
// (PgBouncer then logs in to the server with the keys the client proved it
// holds), nothing is logged per connection, and the process stays in the
// foreground with its log on stderr.
type Pgbouncer struct {
	Writer        string // the tool that wrote the file, for its first line
	Databases     string // the [databases] section's lines
	Listen        string // host:port
	AuthFile      string
	PoolMode      string // the default; a database line may set its own
	MaxClientConn int
	PoolSize      int    // default_pool_size
	Extra         string // more [pgbouncer] lines
}

// INI renders the configuration file.
func (p Pgbouncer) INI() string {
	host, port, _ := net.SplitHostPort(p.Listen)
	return fmt.Sprintf(`;; written by %s
[databases]
%s
[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
pidfile =
logfile =
auth_type = scram-sha-256
auth_file = %s
pool_mode = %s
max_client_conn = %d
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
server_reset_query = DISCARD ALL
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 60
%s`, p.Writer, p.Databases, host, port, p.AuthFile, p.PoolMode, p.MaxClientConn, p.PoolSize, p.Extra)
}

// AuthFileLine is the auth_file line for the app user: its SCRAM verifier
// as pg_authid holds it on srv.
func AuthFileLine(ctx context.Context, srv *pgtest.Server) (string, error) {
	verifier, err := srv.QueryString(ctx, fmt.Sprintf(
		"SELECT rolpassword FROM pg_authid WHERE rolname = '%s'", pgtest.AppUser))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%q %q\n", pgtest.AppUser, verifier), nil
}
