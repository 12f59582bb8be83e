package compat

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Features (issue 11, deliverable 4): protocol paths the main mix does not
// take, each run by every driver that has it, in a process (and
// connections) of its own so that a failure or a hang cannot disturb the
// main mix or another feature. The program runs one when COMPAT_FEATURE
// names it and prints the same JSON lines as the mix. Each feature runs
// first directly against the primary, where that makes sense, to show the
// program is right about PostgreSQL, then through kineticd with two
// replicas and read_routing_mode = "prefer_replica" (as TestClients).
//
//	cursor         BEGIN READ ONLY; DECLARE compat_cur CURSOR FOR the seed rows
//	               ORDER BY id (with inet_server_port()); FETCH 7 until empty;
//	               CLOSE; COMMIT. 8 cursor_fetch lines (the rows checked, in
//	               order), then cursor_end for the empty FETCH.
//	portal         the driver's own row-limited fetch of the same rows inside a
//	               read-only transaction: psycopg2 and psycopg 3 named
//	               (server-side) cursors with itersize 7 and fetchmany(7), pgJDBC
//	               setFetchSize(7) (a named portal executed 7 rows at a time),
//	               node-postgres Query rows: 7 (Execute of 7 rows + Flush, again
//	               on PortalSuspended, Sync at the end), which node also runs in
//	               autocommit (portal_autocommit). 8 portal_fetch lines of 7 rows
//	               (the last of 1), then portal_end.
//	listen_notify  a listener connection LISTENs (then reports its port:
//	               listen_port), a second connection sends NOTIFY and
//	               pg_notify() (notify, with its port), and the listener receives
//	               both payloads in order while idle (2 notify_received).
//	unnamed        parameterised reads and writes through the unnamed statement:
//	               pgx QueryExecModeDescribeExec then QueryExecModeExec, pgJDBC
//	               prepareThreshold=0, psycopg 3 prepare_threshold=None,
//	               node-postgres queries with values and no name. 12
//	               unnamed_read, 2 unnamed_write, 6 unnamed_read_after_write
//	               (twice for pgx, once per mode).
//	kinetic_ext    SHOW pg_kinetic.write_lsn and SET pg_kinetic.min_lsn = 'TOKEN'
//	               through the driver's default path (the extended protocol,
//	               except psycopg2, which has only the simple one): a write
//	               (kinetic_write), the token (kinetic_show_write_lsn, value
//	               TIMELINE:LSN, equal to what the simple protocol or the
//	               ParameterStatus says), SET min_lsn to it (kinetic_set_min_lsn),
//	               a read (kinetic_read), SET min_lsn = 'not-a-token', which must
//	               fail with 22023 (kinetic_set_invalid: ok means it failed so),
//	               a read, SHOW pg_kinetic.last_route (kinetic_show_last_route,
//	               value "target=… reason=…"). Not run directly: PostgreSQL has
//	               no pg_kinetic.write_lsn.
type feature struct {
	name   string
	direct bool // meaningful directly against PostgreSQL
	// ops are the lines each client prints, by op; a client without an
	// entry does not have the feature.
	ops map[string]map[string]int
	// check makes the feature's own placement assertions for a run through
	// kineticd (the common ones are in checkFeature).
	check func(t *testing.T, fc featureRun)
}

// primaryOps must run on the primary through kineticd: writes, and the
// statements of a session that LISTEN pinned.
var primaryOps = map[string]bool{
	"unnamed_write": true, "kinetic_write": true, "listen_port": true, "notify": true,
}

// portlessOps have no row to report a port from.
var portlessOps = map[string]bool{
	"cursor_end": true, "portal_end": true, "notify_received": true,
	"kinetic_show_write_lsn": true, "kinetic_set_min_lsn": true, "kinetic_set_invalid": true,
	"kinetic_show_last_route": true,
}

func sameOps(clients []string, ops map[string]int) map[string]map[string]int {
	m := map[string]map[string]int{}
	for _, c := range clients {
		m[c] = ops
	}
	return m
}

var allClients = []string{"psycopg2", "psycopg3", "node-postgres", "jdbc", "pgx"}

var features = []feature{
	{
		name: "cursor", direct: true,
		ops:   sameOps(allClients, map[string]int{"cursor_fetch": 8, "cursor_end": 1}),
		check: func(t *testing.T, fc featureRun) { fc.txOnReplica(t, "cur") },
	},
	{
		name: "portal", direct: true,
		ops: func() map[string]map[string]int {
			m := sameOps([]string{"psycopg2", "psycopg3", "jdbc"}, map[string]int{"portal_fetch": 8, "portal_end": 1})
			m["node-postgres"] = map[string]int{"portal_fetch": 8, "portal_end": 1, "portal_autocommit": 1}
			return m
		}(),
		check: func(t *testing.T, fc featureRun) { fc.txOnReplica(t, "portal") },
	},
	{
		name: "listen_notify", direct: true,
		ops: sameOps(allClients, map[string]int{"listen_port": 1, "notify": 1, "notify_received": 2}),
	},
	{
		name: "unnamed", direct: true,
		ops: func() map[string]map[string]int {
			m := sameOps([]string{"psycopg3", "node-postgres", "jdbc"}, map[string]int{"unnamed_read": 12, "unnamed_write": 2, "unnamed_read_after_write": 6})
			m["pgx"] = map[string]int{"unnamed_read": 24, "unnamed_write": 4, "unnamed_read_after_write": 12}
			return m
		}(),
		check: func(t *testing.T, fc featureRun) { fc.someOnReplica(t, "unnamed_read") },
	},
	{
		name: "kinetic_ext",
		ops: sameOps(allClients, map[string]int{
			"kinetic_write": 1, "kinetic_show_write_lsn": 1, "kinetic_set_min_lsn": 1,
			"kinetic_read": 2, "kinetic_set_invalid": 1, "kinetic_show_last_route": 1,
		}),
	},
}

// featureTimeout bounds one program's run of one feature (a JVM start
// included); a healthy run takes well under a second or two.
const featureTimeout = 60 * time.Second

// TestClientFeatures runs every feature of every driver that has it.
func TestClientFeatures(t *testing.T) {
	for _, cl := range clients() {
		t.Run(cl.name, func(t *testing.T) { testClientFeatures(t, cl) })
	}
}

func testClientFeatures(t *testing.T, cl client) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	run := cl.prepare(t, ctx)
	c := pgtest.Shared(t)
	base := fmt.Sprintf("compatf_%s_%d", strings.ReplaceAll(cl.name, "-", "_"), time.Now().UnixNano())
	directTable, proxyTable := base+"_d", base+"_k"
	createSeed(t, ctx, c, directTable)
	createSeed(t, ctx, c, proxyTable)
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	var replicas []string
	for _, s := range c.Standbys {
		replicas = append(replicas, s.Addr())
	}
	px := kinetictest.Start(t, c, kinetictest.Params{Replicas: replicas, ReadRoutingMode: "prefer_replica"})
	kinetictest.AwaitReadOn(t, ctx, px.AppDSN(), c.StandbyPorts())

	// Each run has a deadline of its own, so that a hang fails its
	// feature only.
	runFor := func(t *testing.T, tg target) []record {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, featureTimeout)
		defer cancel()
		return parseRecords(t, cl.name, run(t, rctx, tg))
	}
	for _, f := range features {
		want, ok := f.ops[cl.name]
		t.Run(f.name, func(t *testing.T) {
			if !ok {
				t.Skipf("%s has no %s path", cl.name, f.name)
			}
			if f.direct {
				t.Run("direct", func(t *testing.T) {
					tg := target{Host: "127.0.0.1", Port: c.Primary.Port, User: pgtest.AppUser, Password: pgtest.AppPassword,
						DB: pgtest.AppDB, Table: directTable, Feature: f.name}
					fc := featureRun{client: cl.name, cluster: c, direct: true, recs: runFor(t, tg)}
					checkFeature(t, fc, want)
				})
			}
			t.Run("kineticd", func(t *testing.T) {
				tg := target{Host: "127.0.0.1", Port: px.Port(), User: pgtest.AppUser, Password: pgtest.AppPassword,
					DB: pgtest.AppDB, Table: proxyTable, Feature: f.name}
				fc := featureRun{client: cl.name, cluster: c, recs: runFor(t, tg)}
				checkFeature(t, fc, want)
				if f.check != nil && !t.Failed() {
					f.check(t, fc)
				}
			})
		})
	}
}

// featureRun is one program's lines for one feature.
type featureRun struct {
	client  string
	cluster *pgtest.Cluster
	direct  bool // against the primary, not kineticd
	recs    []record
}

// checkFeature: every line succeeded, the counts are the feature's, ports
// are the cluster's (the primary's when direct), writes and pinned
// sessions on the primary, and no transaction hopped.
func checkFeature(t *testing.T, fc featureRun, want map[string]int) {
	t.Helper()
	primary, standby := fc.cluster.Primary.Port, fc.cluster.StandbyPorts()
	ops := map[string]int{}
	txPort := map[string]int{}
	for _, r := range fc.recs {
		if !r.OK {
			t.Errorf("%s: failed: %s", fc.client, r)
		}
		if r.Op == "control" {
			if r.Port != 0 {
				t.Errorf("%s: control line with a port: %s", fc.client, r)
			}
			continue
		}
		ops[r.Op]++
		switch {
		case portlessOps[r.Op]:
			if r.Port != 0 {
				t.Errorf("%s: %s line with a port: %s", fc.client, r.Op, r)
			}
			continue
		case r.Port == 0:
			if r.OK {
				t.Errorf("%s: no port: %s", fc.client, r)
			}
			continue
		case fc.direct && r.Port != primary:
			t.Errorf("%s: direct run reported port %d, not the primary's %d: %s", fc.client, r.Port, primary, r)
		case r.Port != primary && !standby[r.Port]:
			t.Errorf("%s: port %d is neither the primary (%d) nor a standby (%v): %s", fc.client, r.Port, primary, slices.Sorted(maps.Keys(standby)), r)
		case primaryOps[r.Op] && r.Port != primary:
			t.Errorf("%s: %s ran on port %d, not the primary (%d): %s", fc.client, r.Op, r.Port, primary, r)
		}
		if r.Tx != "" {
			if p, ok := txPort[r.Tx]; ok && p != r.Port {
				t.Errorf("%s: transaction %s hopped from port %d to %d: %s", fc.client, r.Tx, p, r.Port, r)
			}
			txPort[r.Tx] = r.Port
		}
	}
	if !maps.Equal(ops, want) {
		t.Errorf("%s: lines by op %v, want %v", fc.client, ops, want)
	}
	logPlacement(t, fc.client, fc.recs, primary, standby)
	for _, r := range fc.recs {
		if r.Value != "" {
			t.Logf("%s: %s = %q", fc.client, r.Op, r.Value)
		}
	}
}

// txOnReplica: a read-only transaction of a session that has not written
// pins a replica (as ro1 of the main mix).
func (fc featureRun) txOnReplica(t *testing.T, tx string) {
	t.Helper()
	standby := fc.cluster.StandbyPorts()
	for _, r := range fc.recs {
		if r.Tx == tx && r.Port != 0 {
			if !standby[r.Port] {
				t.Errorf("%s: read-only transaction %s ran on port %d, want a replica %v", fc.client, tx, r.Port, slices.Sorted(maps.Keys(standby)))
			}
			return
		}
	}
	t.Errorf("%s: no line of transaction %s reported a port", fc.client, tx)
}

// someOnReplica: reads before the session's first write reach a replica.
func (fc featureRun) someOnReplica(t *testing.T, op string) {
	t.Helper()
	standby := fc.cluster.StandbyPorts()
	n := 0
	for _, r := range fc.recs {
		if r.Op == op && standby[r.Port] {
			n++
		}
	}
	if n == 0 {
		t.Errorf("%s: none of the %s lines ran on a replica", fc.client, op)
	}
}
