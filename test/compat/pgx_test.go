package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgxClient runs the mix with pgx in-process, printing the same JSON lines as
// the programs. pgx's default mode (QueryExecModeCacheStatement) prepares
// every parameterized query as a named statement on first use and reuses it;
// the autocommit "read" ops use QueryExecModeExec (the unnamed statement)
// for contrast.
func pgxClient(t *testing.T, ctx context.Context, tg target) []byte {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
		tg.Host, tg.Port, tg.User, tg.Password, tg.DB))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgx connect through kineticd: %v", err)
	}
	var out bytes.Buffer
	m := &pgxMix{ctx: ctx, conn: conn, out: &out}
	if tg.Feature != "" {
		m.feature(t, cfg, tg)
	} else {
		m.mix(tg.Table)
	}
	if err := conn.Close(ctx); err != nil {
		t.Errorf("pgx close: %v", err)
	}
	m.emit(record{Op: "done", OK: true})
	return out.Bytes()
}

// querier is what pgx.Conn and pgx.Tx have in common for the mix.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type pgxMix struct {
	ctx  context.Context
	conn *pgx.Conn
	out  *bytes.Buffer
}

func (m *pgxMix) emit(r record) {
	r.Client = "pgx"
	b, _ := json.Marshal(r)
	m.out.Write(append(b, '\n'))
}

// run executes one statement whose last column is inet_server_port() and
// checks the first row.
func (m *pgxMix) run(q querier, op, tx string, check func([]any) error, sql string, args ...any) {
	r := record{Op: op, Tx: tx}
	err := func() error {
		rows, err := q.Query(m.ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return fmt.Errorf("no row from: %s", sql)
		}
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		port, ok := vals[len(vals)-1].(int32)
		if !ok {
			return fmt.Errorf("inet_server_port() came back as %T", vals[len(vals)-1])
		}
		r.Port = int(port)
		if err := check(vals); err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}()
	r.OK = err == nil
	if err != nil {
		r.Error = err.Error()
	}
	m.emit(r)
}

func (m *pgxMix) control(q querier, tx, sql string) {
	_, err := q.Exec(m.ctx, sql)
	m.controlResult(tx, sql, err)
}

func (m *pgxMix) controlResult(tx, sql string, err error) {
	r := record{Op: "control", Tx: tx, SQL: sql, OK: err == nil}
	if err != nil {
		r.Error = err.Error()
	}
	m.emit(r)
}

func seedCheck(i int) func([]any) error {
	return func(v []any) error {
		if fmt.Sprint(v[0]) != fmt.Sprintf("seed-%d", i) || fmt.Sprint(v[1]) != fmt.Sprint(10*i) {
			return fmt.Errorf("seed row %d = (%v, %v), want (seed-%d, %d)", i, v[0], v[1], i, 10*i)
		}
		return nil
	}
}

func equals(want any) func([]any) error {
	return func(v []any) error {
		if fmt.Sprint(v[0]) != fmt.Sprint(want) {
			return fmt.Errorf("got %v, want %v", v[0], want)
		}
		return nil
	}
}

// begin starts a transaction; a failure is reported as a control line and
// the transaction's statements then fail on the connection.
func (m *pgxMix) begin(tx string, opts pgx.TxOptions) querier {
	t, err := m.conn.BeginTx(m.ctx, opts)
	sql := "BEGIN"
	if opts.AccessMode == pgx.ReadOnly {
		sql = "BEGIN READ ONLY"
	}
	m.controlResult(tx, sql, err)
	if err != nil {
		return m.conn
	}
	return t
}

func (m *pgxMix) commit(tx string, q querier) {
	t, ok := q.(pgx.Tx)
	if !ok {
		m.controlResult(tx, "COMMIT", fmt.Errorf("no transaction to commit"))
		return
	}
	m.controlResult(tx, "COMMIT", t.Commit(m.ctx))
}

func (m *pgxMix) mix(t string) {
	c := m.conn
	byID := "SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = $1"
	countSeed := "SELECT count(*), inet_server_port() FROM " + t + " WHERE id <= $1"
	insert := "INSERT INTO " + t + " (id, name, qty) VALUES ($1, $2, 1) RETURNING id, inet_server_port()"
	update := "UPDATE " + t + " SET qty = qty + 1 WHERE id = $1 RETURNING qty, inet_server_port()"

	// Phase A: reads before this session wrote anything.
	m.control(c, "", "SET statement_timeout = '31s'")
	for i := 1; i <= 8; i++ {
		m.run(c, "read", "", seedCheck(i), byID, pgx.QueryExecModeExec, i)
	}
	m.run(c, "read", "", equals(seedRows), fmt.Sprintf("SELECT count(*), inet_server_port() FROM %s WHERE id <= %d", t, seedRows), pgx.QueryExecModeSimpleProtocol)
	m.run(c, "read", "", equals(seedRows), countSeed, pgx.QueryExecModeExec, seedRows)
	for k := range 12 {
		i := k%seedRows + 1
		m.run(c, "prepared_read", "", seedCheck(i), byID, i)
	}
	ro := m.begin("ro1", pgx.TxOptions{AccessMode: pgx.ReadOnly})
	for _, i := range []int{3, 4, 5} {
		m.run(ro, "tx_read", "ro1", seedCheck(i), byID, i)
	}
	m.run(ro, "tx_read", "ro1", equals(seedRows), countSeed, seedRows)
	m.commit("ro1", ro)
	m.control(c, "", "PREPARE compat_by_id(int) AS SELECT name, qty, inet_server_port() FROM "+t+" WHERE id = $1")
	for i := 1; i <= 5; i++ {
		m.run(c, "sql_prepared_read", "", seedCheck(i), fmt.Sprintf("EXECUTE compat_by_id(%d)", i))
	}
	m.control(c, "", "DEALLOCATE compat_by_id")
	m.run(c, "session_read", "", equals("31s"), "SELECT current_setting('statement_timeout'), inet_server_port()")

	// Phase B: writes, and reads after them.
	for i := 1001; i <= 1005; i++ {
		m.run(c, "write", "", equals(i), insert, pgx.QueryExecModeExec, i, fmt.Sprintf("own-%d", i))
	}
	for i := 1001; i <= 1003; i++ {
		m.run(c, "write", "", equals(2), update, i)
	}
	m.run(c, "write", "", equals(1006), insert, 1006, "own-1006")
	m.run(c, "read_after_write", "", seedCheck(7), byID, 7)
	rw := m.begin("rw1", pgx.TxOptions{})
	m.run(rw, "tx_write", "rw1", equals(1010), insert, 1010, "own-1010")
	m.run(rw, "tx_write", "rw1", equals(1), "SELECT qty, inet_server_port() FROM "+t+" WHERE id = $1", 1010)
	m.run(rw, "tx_write", "rw1", equals(2), update, 1010)
	m.commit("rw1", rw)
	for i := 1100; i <= 1109; i++ {
		m.run(c, "prepared_write", "", equals(i), insert, i, fmt.Sprintf("own-%d", i))
	}
	for _, i := range []int{1, 2, 3} {
		m.run(c, "read_after_write", "", seedCheck(i), byID, i)
	}
	ro = m.begin("ro2", pgx.TxOptions{AccessMode: pgx.ReadOnly})
	m.run(ro, "tx_read", "ro2", seedCheck(9), byID, 9)
	m.run(ro, "tx_read", "ro2", equals(seedRows), countSeed, seedRows)
	m.commit("ro2", ro)
	rw = m.begin("rw2", pgx.TxOptions{})
	m.run(rw, "tx_write", "rw2", equals(ownRows), "SELECT count(*), inet_server_port() FROM "+t+" WHERE id >= 1000")
	m.commit("rw2", rw)
}
