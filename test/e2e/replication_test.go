package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestReplicationConnectionCopyBoth runs a physical replication stream
// through the proxy: a client asking for replication gets a dedicated server
// connection, and CopyBothResponse/CopyData/CopyDone relay both ways.
func TestReplicationConnectionCopyBoth(t *testing.T) {
	cl := pgtest.Shared(t)
	for _, mode := range []string{"off", "prefer_replica"} {
		// With read routing on, a replication connection is still never
		// routed: nothing of the proxy's may enter its COPY BOTH stream.
		t.Run("routing_"+mode, func(t *testing.T) { replicationCopyBoth(t, cl, mode) })
	}
}

func replicationCopyBoth(t *testing.T, cl *pgtest.Cluster, mode string) {
	var reps []string
	for _, s := range cl.Standbys {
		reps = append(reps, s.Addr())
	}
	px := kinetictest.Start(t, cl, kinetictest.Params{ReadRoutingMode: mode, Replicas: reps, Extra: fmt.Sprintf(`
[[users]]
name = %q
password = %q
`, pgtest.ReplUser, pgtest.ReplPassword)})
	ctx := ctxT(t, 60*time.Second)
	cfg, err := pgconn.ParseConfig(px.DSN(pgtest.ReplUser, pgtest.ReplPassword, pgtest.AppDB))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "true"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	res, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	row := res[0].Rows[0]
	sysid, tli, xlogpos := string(row[0]), string(row[1]), string(row[2])
	want, _ := cl.Primary.QueryString(ctx, "select system_identifier::text from pg_control_system()")
	if sysid != want {
		t.Fatalf("IDENTIFY_SYSTEM through the proxy: system id %s, the primary's is %s", sysid, want)
	}

	conn.Frontend().Send(&pgproto3.Query{String: fmt.Sprintf("START_REPLICATION PHYSICAL %s TIMELINE %s", xlogpos, tli)})
	if err := conn.Frontend().Flush(); err != nil {
		t.Fatal(err)
	}
	// Make WAL to stream.
	go cl.Primary.Exec(context.Background(), "select pg_switch_wal(), txid_current()")
	gotBoth, gotData := false, false
	for !gotData {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("streaming: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			gotBoth = true
		case *pgproto3.CopyData:
			if len(m.Data) > 0 && (m.Data[0] == 'w' || m.Data[0] == 'k') {
				gotData = true
			}
		case *pgproto3.ErrorResponse:
			t.Fatalf("server error: %s", m.Message)
		}
	}
	if !gotBoth {
		t.Fatal("CopyData before CopyBothResponse")
	}
	conn.Frontend().Send(&pgproto3.CopyDone{})
	if err := conn.Frontend().Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("ending the stream: %v", err)
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			break
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("server error ending the stream: %s", e.Message)
		}
	}
	// The dedicated connection is closed with the client and never pooled:
	// no walsender of ours is left on the primary.
	conn.Close(ctx)
	for {
		n, err := cl.Primary.QueryString(ctx, fmt.Sprintf("select count(*) from pg_stat_replication where usename = '%s'", pgtest.ReplUser))
		if err != nil {
			t.Fatal(err)
		}
		if n == "0" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the replication connection outlived its client")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
