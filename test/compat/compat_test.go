package compat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// expectReplicaReads turns on the assertions that need read routing
// (issue 3): autocommit reads, the read-only transaction and server-side
// prepared reads made before the session's first write must reach a
// replica. Everything else (every statement succeeds, writes and read-write
// transactions on the primary, no transaction hops) holds with or without
// routing.
const expectReplicaReads = true

// seedRows is how many rows the test writes into each client's table before
// the client runs; row i is ('seed-i', 10*i). The clients read only these
// rows outside read-write transactions, so a replica that has replayed the
// seed gives the same answers as the primary.
const seedRows = 50

// Every client program runs exactly this many statements of each op. The
// mix and its order are the same in every program (see psycopg2/mix.py):
//
//	read               autocommit reads (by id, count), before any write
//	prepared_read      one parameterized query executed 12 times, before any
//	                   write: server-side prepared in pgx, pgJDBC (from the
//	                   5th execution), node-postgres (named) and psycopg 3
//	                   (from the 5th); client-side in psycopg2
//	tx_read            inside read-only transactions: ro1 before any write,
//	                   ro2 after
//	sql_prepared_read  EXECUTE of a SQL PREPAREd statement
//	session_read       current_setting of a SET made earlier in the session
//	write              autocommit INSERT/UPDATE ... RETURNING
//	read_after_write   autocommit reads after the session wrote
//	tx_write           inside read-write transactions rw1 (insert, select,
//	                   update) and rw2 (count of the session's own rows)
//	prepared_write     one INSERT executed 10 times (server-side prepared
//	                   where the driver does that)
//
// "control" lines (BEGIN, COMMIT, SET, PREPARE, DEALLOCATE) carry no port.
var wantOps = map[string]int{
	"read":              10,
	"prepared_read":     12,
	"tx_read":           6,
	"sql_prepared_read": 5,
	"session_read":      1,
	"write":             9,
	"read_after_write":  4,
	"tx_write":          4,
	"prepared_write":    10,
}

// writeOps are the ops that must run on the primary whatever the routing.
var writeOps = map[string]bool{"write": true, "prepared_write": true, "tx_write": true}

// Each client's own rows (ids >= 1000) after its mix: 17 rows whose qty add
// up to 21 (1001..1003 and 1010 updated once).
const (
	ownRows   = 17
	ownQtySum = 21
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// record is one JSON line of a client program.
type record struct {
	Client string `json:"client"`
	Op     string `json:"op"`
	Tx     string `json:"tx,omitempty"`
	Port   int    `json:"port,omitempty"`
	SQL    string `json:"sql,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	// Value is what a feature statement answered where the check needs it
	// (features_test.go); the main mix never sets it.
	Value string `json:"value,omitempty"`
}

func (r record) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// target is where a client connects and what it works on.
type target struct {
	Host     string
	Port     int
	User     string
	Password string
	DB       string
	Table    string
	// Feature, when set, makes the program run that feature of
	// features_test.go instead of the main mix (COMPAT_FEATURE).
	Feature string
}

// env is the target as the PG* variables libpq, node-postgres and our JDBC
// program read, plus COMPAT_TABLE and COMPAT_SEED.
func (tg target) env() []string {
	return []string{
		"PGHOST=" + tg.Host,
		fmt.Sprintf("PGPORT=%d", tg.Port),
		"PGUSER=" + tg.User,
		"PGPASSWORD=" + tg.Password,
		"PGDATABASE=" + tg.DB,
		"PGSSLMODE=disable",
		"PGCONNECT_TIMEOUT=10",
		"COMPAT_TABLE=" + tg.Table,
		fmt.Sprintf("COMPAT_SEED=%d", seedRows),
		"COMPAT_FEATURE=" + tg.Feature,
	}
}

// A client is one driver's mix. prepare finds (and, for Java, compiles) the
// program before any server is touched, skipping or failing t when its
// runtime is missing; the mixer it returns runs the mix against tg and
// returns the JSON lines, failing t when the program does not run to the end.
type client struct {
	name    string // as in the "client" field of its lines
	prepare func(t *testing.T, ctx context.Context) mixer
}

type mixer func(t *testing.T, ctx context.Context, tg target) []byte

func clients() []client {
	return []client{
		{"psycopg2", pythonClient("psycopg2", "psycopg2", "python3-psycopg2", "psycopg2/mix.py")},
		{"psycopg3", pythonClient("psycopg3", "psycopg", "python3-psycopg", "psycopg3/mix.py")},
		{"node-postgres", nodeClient},
		{"jdbc", jdbcClient},
		{"pgx", func(*testing.T, context.Context) mixer { return pgxClient }},
	}
}

// TestClients runs every client's mix through kineticd with two replicas and
// prefer_replica, and checks where each statement ran.
func TestClients(t *testing.T) {
	for _, cl := range clients() {
		t.Run(cl.name, func(t *testing.T) { testClient(t, cl) })
	}
}

func testClient(t *testing.T, cl client) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	run := cl.prepare(t, ctx)
	c := pgtest.Shared(t)

	table := fmt.Sprintf("compat_%s_%d", strings.ReplaceAll(cl.name, "-", "_"), time.Now().UnixNano())
	createSeed(t, ctx, c, table)
	// The reads target rows every standby has, so wherever they land they
	// see the same data and freshness rules have no reason to avoid a
	// replica.
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	var replicas []string
	for _, s := range c.Standbys {
		replicas = append(replicas, s.Addr())
	}
	px := kinetictest.Start(t, c, kinetictest.Params{Replicas: replicas, ReadRoutingMode: "prefer_replica"})
	if expectReplicaReads {
		kinetictest.AwaitReadOn(t, ctx, px.AppDSN(), c.StandbyPorts())
	}

	out := run(t, ctx, target{
		Host: "127.0.0.1", Port: px.Port(),
		User: pgtest.AppUser, Password: pgtest.AppPassword, DB: pgtest.AppDB,
		Table: table,
	})
	recs := parseRecords(t, cl.name, out)
	checkRecords(t, c, cl.name, recs)
	checkOwnRows(t, ctx, c, table)
}

// createSeed creates table on the primary, directly, with seedRows rows, and
// drops it when the test ends.
func createSeed(t *testing.T, ctx context.Context, c *pgtest.Cluster, table string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sql := fmt.Sprintf(`CREATE TABLE %[1]s (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
INSERT INTO %[1]s SELECT i, 'seed-' || i, 10 * i FROM generate_series(1, %[2]d) i`, table, seedRows)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("creating %s: %v", table, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
		if err != nil {
			t.Errorf("dropping %s: %v", table, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
	})
}

// parseRecords decodes a client's output, which must be JSON lines from that
// client ending with {"op":"done"}.
func parseRecords(t *testing.T, name string, out []byte) []record {
	t.Helper()
	var recs []record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r record
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s printed a line that is not a record (%v): %s", name, err, line)
		}
		if r.Client != name {
			t.Fatalf("%s printed a record of client %q: %s", name, r.Client, line)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 || recs[len(recs)-1].Op != "done" {
		t.Fatalf("%s did not finish its mix (no final done line); output:\n%s", name, out)
	}
	return recs[:len(recs)-1]
}

// checkRecords asserts where every statement ran and that each succeeded,
// and logs how many ran on the primary and on the replicas.
func checkRecords(t *testing.T, c *pgtest.Cluster, name string, recs []record) {
	t.Helper()
	primary := c.Primary.Port
	standby := c.StandbyPorts()

	ops := map[string]int{}
	for _, r := range recs {
		if !r.OK {
			t.Errorf("%s: statement failed: %s", name, r)
		}
		if r.Op == "control" {
			if r.Port != 0 {
				t.Errorf("%s: control line with a port: %s", name, r)
			}
			continue
		}
		ops[r.Op]++
		if !r.OK && r.Port == 0 {
			continue // no answer, nothing to place
		}
		switch {
		case r.Port != primary && !standby[r.Port]:
			t.Errorf("%s: port %d is neither the primary (%d) nor a standby (%v): %s", name, r.Port, primary, slices.Sorted(maps.Keys(standby)), r)
		case writeOps[r.Op] && standby[r.Port]:
			t.Errorf("%s: a write or read-write transaction statement ran on replica port %d: %s", name, r.Port, r)
		}
	}
	for op, n := range wantOps {
		if ops[op] != n {
			t.Errorf("%s: %d %q statements, want %d", name, ops[op], op, n)
		}
	}
	for op := range ops {
		if _, ok := wantOps[op]; !ok {
			t.Errorf("%s: unknown op %q", name, op)
		}
	}

	// Statements of one transaction never hop across servers.
	txPort := map[string]int{}
	for _, r := range recs {
		if r.Tx == "" || r.Port == 0 {
			continue
		}
		if p, ok := txPort[r.Tx]; ok && p != r.Port {
			t.Errorf("%s: transaction %s hopped from port %d to %d: %s", name, r.Tx, p, r.Port, r)
		}
		if _, ok := txPort[r.Tx]; !ok {
			txPort[r.Tx] = r.Port
		}
	}
	for _, tx := range []string{"ro1", "ro2", "rw1", "rw2"} {
		if _, ok := txPort[tx]; !ok {
			t.Errorf("%s: no statement of transaction %s reported a port", name, tx)
		}
	}

	logPlacement(t, name, recs, primary, standby)

	if !expectReplicaReads {
		return
	}
	// Before its first write a session has no freshness constraint, and
	// every standby has replayed the seed rows: these reads must be served
	// by replicas.
	onReplica := func(op, tx string) (n, total int) {
		for _, r := range recs {
			if r.Op == op && (tx == "" || r.Tx == tx) && r.Port != 0 {
				total++
				if standby[r.Port] {
					n++
				}
			}
		}
		return n, total
	}
	const needs = "(needs read routing; expectReplicaReads)"
	if n, total := onReplica("read", ""); n == 0 {
		t.Errorf("%s: none of %d autocommit reads ran on a replica %s", name, total, needs)
	}
	if n, total := onReplica("prepared_read", ""); n == 0 {
		t.Errorf("%s: none of %d prepared reads ran on a replica %s", name, total, needs)
	}
	if p := txPort["ro1"]; p != 0 && !standby[p] {
		t.Errorf("%s: read-only transaction ro1 ran on port %d, want a replica %v %s", name, p, slices.Sorted(maps.Keys(standby)), needs)
	}
}

// logPlacement logs, per op, how many statements ran on the primary and on
// each replica.
func logPlacement(t *testing.T, name string, recs []record, primary int, standby map[int]bool) {
	t.Helper()
	type count struct{ primary, replica int }
	perOp := map[string]*count{}
	perPort := map[int]int{}
	var total count
	for _, r := range recs {
		if r.Port == 0 {
			continue
		}
		c := perOp[r.Op]
		if c == nil {
			c = &count{}
			perOp[r.Op] = c
		}
		if r.Port == primary {
			c.primary++
			total.primary++
		} else if standby[r.Port] {
			c.replica++
			total.replica++
			perPort[r.Port]++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d statements: %d on the primary (port %d), %d on replicas", name, total.primary+total.replica, total.primary, primary, total.replica)
	for _, p := range slices.Sorted(maps.Keys(standby)) {
		fmt.Fprintf(&b, " [port %d: %d]", p, perPort[p])
	}
	for _, op := range slices.Sorted(maps.Keys(perOp)) {
		fmt.Fprintf(&b, "\n  %-18s primary %2d  replicas %2d", op, perOp[op].primary, perOp[op].replica)
	}
	t.Log(b.String())
}

// checkOwnRows checks the client's writes on the primary and, once
// replicated, on every standby.
func checkOwnRows(t *testing.T, ctx context.Context, c *pgtest.Cluster, table string) {
	t.Helper()
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	servers := append([]*pgtest.Server{c.Primary}, c.Standbys...)
	for _, s := range servers {
		conn, err := pgx.Connect(ctx, s.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
		if err != nil {
			t.Fatal(err)
		}
		var n, sum int64
		err = conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(qty), 0) FROM "+table+" WHERE id >= 1000").Scan(&n, &sum)
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if n != ownRows || sum != ownQtySum {
			t.Errorf("%s: %d own rows with qty sum %d, want %d and %d", s.Name, n, sum, ownRows, ownQtySum)
		}
	}
}
