package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestHostNameAddresses: server addresses may be host names (Kubernetes
// Services, DNS); they are resolved by the dialer at every new server
// connection and probe (Go's resolver keeps no cache). Reads reach the
// replica named "localhost:PORT" (pg_is_in_recovery), a VOLATILE call the
// primary named so.
func TestHostNameAddresses(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	name := func(s *pgtest.Server) string { return "localhost:" + strconv.Itoa(s.Port) }
	px := kinetictest.Start(t, cl, kinetictest.Params{Primary: name(cl.Primary), Replicas: []string{name(cl.Standbys[0])},
		ReadRoutingMode: "prefer_replica"})
	kinetictest.AwaitReadOn(t, ctx, px.AppDSN(), map[int]bool{cl.Standbys[0].Port: true})
	c := connect(t, ctx, px.AppDSN())
	var inRecovery bool
	if err := c.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		t.Fatalf("read through host-name addresses: in recovery %v, %v", inRecovery, err)
	}
	if err := c.QueryRow(ctx, "select pg_is_in_recovery() from (select txid_current()) w").Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("volatile call through host-name addresses: in recovery %v, %v", inRecovery, err)
	}
}
