package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestChaosFrozenReplicaReadRunsElsewhere: a replica that stops answering
// without closing its connections (every process SIGSTOPped, as on a hung
// host) must not hold a read sent to it before anyone knew. When a probe
// finds it unreachable, the read that still waits for its first byte runs
// on the primary (fallback_policy = "primary"), and
// kinetic_read_retries_total{cause="unreachable"} counts it. Before this,
// such a read waited until TCP gave up.
func TestChaosFrozenReplicaReadRunsElsewhere(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	standby := cl.Standbys[0]
	px := kinetictest.Start(t, cl, kinetictest.Params{
		Replicas: []string{standby.Addr()}, ReadRoutingMode: "prefer_replica", FallbackPolicy: "primary",
	})
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, ctx, px.AppDSN())
	defer c.Close(context.WithoutCancel(ctx))

	// The read must be sent to the replica before a probe notices the
	// freeze (a probe every 200 ms, timing out after 200 ms): a read sent
	// right after the freeze nearly always is. When a probe got there
	// first, the read went straight to the primary and proves nothing, so
	// the round is repeated.
	for round := 1; ; round++ {
		// This session's last read ran on the replica, so it holds (or, in
		// transaction pooling, the pool keeps) an open connection there:
		// the next read is written to it at once, not held up by a login
		// the frozen server would never answer.
		awaitCond(t, time.Minute, "a read of this session to reach the replica", func() (bool, error) {
			p, err := readPort(ctx, c, "select inet_server_port()")
			return err == nil && p == standby.Port, nil
		})
		// SHOW pg_kinetic.write_lsn waits for the replay-position query
		// that followed that read, so none is in flight on the replica
		// when it freezes (abandonWaits would drop that connection too,
		// and the read would go straight to the primary, proving less).
		if _, err := c.Exec(ctx, "SHOW pg_kinetic.write_lsn", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		before := readRetries(t, px, "unreachable")
		thaw, err := standby.Freeze()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(thaw) // before the cluster stops: a frozen server cannot
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		port, err := readPort(rctx, c, "select inet_server_port()")
		cancel()
		took := time.Since(start)
		thaw()
		if err != nil {
			t.Fatalf("round %d: the read sent as the replica froze failed after %v: %v", round, took, err)
		}
		if port != cl.Primary.Port {
			t.Fatalf("round %d: the read ran on port %d, want the primary (%d): the replica was frozen", round, port, cl.Primary.Port)
		}
		if after := readRetries(t, px, "unreachable"); after > before {
			t.Logf("round %d: the read waited %v on the frozen replica, then ran on the primary", round, took)
			return
		}
		if round == 5 {
			t.Fatalf("in 5 rounds no read reached the frozen replica before a probe found it unreachable")
		}
		t.Logf("round %d: a probe noticed the freeze before the read was routed; again", round)
	}
}

// readRetries sums kinetic_read_retries_total for cause.
func readRetries(t *testing.T, px *kinetictest.Proxy, cause string) float64 {
	t.Helper()
	return counterSum(t, px, admin.MetricReadRetries, "cause", cause)
}
