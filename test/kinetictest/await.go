package kinetictest

import (
	"context"
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
// does within ReplicaPatience. It uses one session for all attempts.
func AwaitReadOn(t testing.TB, ctx context.Context, dsn string, ports map[int]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, ReplicaPatience)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect through kineticd: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start, last := time.Now(), 0
	for {
		var port int32
		err := conn.QueryRow(ctx, "SELECT inet_server_port()", pgx.QueryExecModeSimpleProtocol).Scan(&port)
		switch {
		case err == nil && ports[int(port)]:
			return
		case err == nil:
			last = int(port)
		case ctx.Err() == nil:
			t.Fatalf("SELECT inet_server_port() through kineticd: %v", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no read through kineticd reached one of ports %v within %v (the last ran on port %d)",
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
