package kinetictest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicaPatience bounds how long AwaitReadOn waits for the first read on a
// replica. Reads start reaching replicas once a probe of each has answered,
// which normally takes one probe interval (200 ms in these configs). The
// bound is far larger because a starved machine (a CI runner building and
// running several suites and a JVM at once) can make the first probes time
// out, and the checker then backs off up to 10 s between attempts. It is a
// patience, not a speed requirement: a healthy run returns in well under a
// second.
const ReplicaPatience = 60 * time.Second

// AwaitReadOn waits until a plain read (`SELECT inet_server_port()`, simple
// protocol) through dsn runs on one of ports, and fails the test if none
// does within ReplicaPatience. Errors count as "not yet": before the first
// verdicts a route with fallback_policy = "reject" refuses reads (KN001).
// One session serves all attempts; it is replaced if it breaks.
func AwaitReadOn(t testing.TB, ctx context.Context, dsn string, ports map[int]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, ReplicaPatience)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var (
		conn  *pgx.Conn
		start = time.Now()
		last  string
	)
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for {
		var err error
		if conn == nil || conn.IsClosed() {
			conn, err = pgx.Connect(ctx, dsn)
		}
		if err == nil {
			var port int32
			err = conn.QueryRow(ctx, "SELECT inet_server_port()", pgx.QueryExecModeSimpleProtocol).Scan(&port)
			if err == nil && ports[int(port)] {
				return
			}
			if err == nil {
				last = fmt.Sprintf("the last read ran on port %d", port)
			}
		}
		if err != nil {
			last = "the last attempt failed: " + err.Error()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no read through kineticd reached one of ports %v within %v (%s)",
				keys(ports), time.Since(start).Round(time.Millisecond), last)
		}
	}
}

func keys(m map[int]bool) []int {
	var ks []int
	for k, ok := range m {
		if ok {
			ks = append(ks, k)
		}
	}
	return ks
}
