package compat

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// feature runs one feature of features_test.go with pgx (COMPAT_FEATURE).
func (m *pgxMix) feature(t *testing.T, cfg *pgx.ConnConfig, tg target) {
	t.Helper()
	switch tg.Feature {
	case "cursor":
		m.cursor(tg.Table)
	case "listen_notify":
		m.listenNotify(t, cfg, tg.Table)
	case "unnamed":
		m.unnamed(tg.Table)
	case "kinetic_ext":
		m.kineticExt(tg.Table)
	default:
		t.Fatalf("pgx has no feature %q", tg.Feature)
	}
}

// rowsOf runs sql and returns every row's values, and the port of the
// first row (its last column).
func (m *pgxMix) rowsOf(q querier, sql string, args ...any) (vals [][]any, port int, err error) {
	rows, err := q.Query(m.ctx, sql, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, 0, err
		}
		vals = append(vals, v)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(vals) > 0 {
		p, ok := vals[0][len(vals[0])-1].(int32)
		if !ok {
			return nil, 0, fmt.Errorf("inet_server_port() came back as %T", vals[0][len(vals[0])-1])
		}
		port = int(p)
	}
	return vals, port, nil
}

// checkSeedRun: rows are seed rows first, first+1, ... (id, name, qty, port).
func checkSeedRun(vals [][]any, first int) error {
	for k, v := range vals {
		id := first + k
		if fmt.Sprint(v[0]) != fmt.Sprint(id) || fmt.Sprint(v[1]) != fmt.Sprintf("seed-%d", id) || fmt.Sprint(v[2]) != fmt.Sprint(10*id) {
			return fmt.Errorf("row %d = %v, want seed row %d", k, v, id)
		}
	}
	return nil
}

func (m *pgxMix) emitResult(op, tx string, port int, value string, err error) {
	r := record{Op: op, Tx: tx, Port: port, Value: value, OK: err == nil}
	if err != nil {
		r.Error = err.Error()
	}
	m.emit(r)
}

// cursor: DECLARE and FETCH 7 inside a read-only transaction.
func (m *pgxMix) cursor(t string) {
	tx := m.begin("cur", pgx.TxOptions{AccessMode: pgx.ReadOnly})
	m.control(tx, "cur", fmt.Sprintf("DECLARE compat_cur CURSOR FOR SELECT id, name, qty, inet_server_port() FROM %s WHERE id <= %d ORDER BY id", t, seedRows))
	next := 1
	for range seedRows/7 + 2 {
		vals, port, err := m.rowsOf(tx, "FETCH 7 FROM compat_cur")
		if err == nil && len(vals) == 0 {
			if next != seedRows+1 {
				err = fmt.Errorf("cursor ended before row %d", next)
			}
			m.emitResult("cursor_end", "cur", 0, "", err)
			break
		}
		if err == nil {
			if want := min(7, seedRows-next+1); len(vals) != want {
				err = fmt.Errorf("FETCH 7 returned %d rows at row %d, want %d", len(vals), next, want)
			} else {
				err = checkSeedRun(vals, next)
			}
		}
		m.emitResult("cursor_fetch", "cur", port, "", err)
		if err != nil {
			break
		}
		next += len(vals)
	}
	m.control(tx, "cur", "CLOSE compat_cur")
	m.commit("cur", tx)
}

// listenNotify: a second connection notifies; the listener, idle, hears.
func (m *pgxMix) listenNotify(t *testing.T, cfg *pgx.ConnConfig, table string) {
	t.Helper()
	channel := "ch_" + table
	m.control(m.conn, "", "LISTEN "+channel)
	m.run(m.conn, "listen_port", "", func([]any) error { return nil }, "SELECT 'listening', inet_server_port()")
	notifier, err := pgx.ConnectConfig(m.ctx, cfg)
	if err != nil {
		t.Fatalf("pgx notifier connect: %v", err)
	}
	defer notifier.Close(context.WithoutCancel(m.ctx))
	nm := &pgxMix{ctx: m.ctx, conn: notifier, out: m.out}
	nm.control(notifier, "", "NOTIFY "+channel+", 'payload-1'")
	nm.run(notifier, "notify", "", func([]any) error { return nil },
		"SELECT 'sent', inet_server_port() FROM (SELECT pg_notify($1, $2)) AS n", channel, "payload-2")
	for _, want := range []string{"payload-1", "payload-2"} {
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		n, err := m.conn.WaitForNotification(ctx)
		cancel()
		if err == nil && (n.Channel != channel || n.Payload != want) {
			err = fmt.Errorf("notification %q on %q, want %q on %q", n.Payload, n.Channel, want, channel)
		}
		value := ""
		if n != nil {
			value = n.Payload
		}
		m.emitResult("notify_received", "", 0, value, err)
	}
	m.control(m.conn, "", "UNLISTEN *")
}

// unnamed: parameterised reads and writes through the unnamed statement,
// in pgx's describe_exec and exec modes.
func (m *pgxMix) unnamed(t string) {
	c := m.conn
	byID := "SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = $1"
	insert := "INSERT INTO " + t + " (id, name, qty) VALUES ($1, $2, 1) RETURNING id, inet_server_port()"
	id := 3000
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		for i := 1; i <= 12; i++ {
			m.run(c, "unnamed_read", "", seedCheck(i), byID, mode, i)
		}
		first := id
		for range 2 {
			m.run(c, "unnamed_write", "", equals(id), insert, mode, id, fmt.Sprintf("own-%d", id))
			id++
		}
		for k := range 6 {
			if k%2 == 0 {
				m.run(c, "unnamed_read_after_write", "", seedCheck(k+1), byID, mode, k+1)
			} else {
				own := first + k/2%2
				m.run(c, "unnamed_read_after_write", "", equals(fmt.Sprintf("own-%d", own)), byID, mode, own)
			}
		}
	}
}

var tokenRE = regexp.MustCompile(`^[0-9]+:[0-9A-F]+/[0-9A-F]+$`)

// kineticExt: SHOW pg_kinetic.write_lsn and SET pg_kinetic.min_lsn through
// pgx's default mode, which prepares them (Parse, Describe, Bind, Execute).
// pgx's Exec of a statement without arguments uses the simple protocol, so
// the SETs go through Query like any statement with a result.
func (m *pgxMix) kineticExt(t string) {
	c := m.conn
	m.run(c, "kinetic_write", "", equals(2000),
		"INSERT INTO "+t+" (id, name, qty) VALUES ($1, $2, 1) RETURNING id, inet_server_port()", 2000, "own-2000")

	var token string
	err := c.QueryRow(m.ctx, "SHOW pg_kinetic.write_lsn").Scan(&token)
	if err == nil {
		var simple string
		err = c.QueryRow(m.ctx, "SHOW pg_kinetic.write_lsn", pgx.QueryExecModeSimpleProtocol).Scan(&simple)
		switch {
		case err != nil:
			err = fmt.Errorf("simple-protocol SHOW: %w", err)
		case !tokenRE.MatchString(token):
			err = fmt.Errorf("pg_kinetic.write_lsn = %q, want TIMELINE:LSN", token)
		case token != simple:
			err = fmt.Errorf("extended SHOW says %q, simple SHOW %q", token, simple)
		}
	}
	m.emitResult("kinetic_show_write_lsn", "", 0, token, err)

	m.emitResult("kinetic_set_min_lsn", "", 0, "", m.queryOnly("SET pg_kinetic.min_lsn = '"+token+"'"))
	byID := "SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = $1"
	m.run(c, "kinetic_read", "", seedCheck(5), byID, 5)

	err = m.queryOnly("SET pg_kinetic.min_lsn = 'not-a-token'")
	var pe *pgconn.PgError
	switch {
	case err == nil:
		err = errors.New("an invalid pg_kinetic.min_lsn was accepted")
	case errors.As(err, &pe) && pe.Code == "22023":
		err = nil
	default:
		err = fmt.Errorf("invalid pg_kinetic.min_lsn: %v, want SQLSTATE 22023", err)
	}
	m.emitResult("kinetic_set_invalid", "", 0, "", err)
	m.run(c, "kinetic_read", "", seedCheck(6), byID, 6)

	var route string
	err = c.QueryRow(m.ctx, "SHOW pg_kinetic.last_route").Scan(&route)
	if err == nil && (!strings.HasPrefix(route, "target=") || !strings.Contains(route, " reason=")) {
		err = fmt.Errorf("pg_kinetic.last_route = %q, want target=… reason=…", route)
	}
	m.emitResult("kinetic_show_last_route", "", 0, route, err)
}

// queryOnly runs sql through Query (pgx's default, extended mode) and
// discards any rows.
func (m *pgxMix) queryOnly(sql string) error {
	rows, err := m.conn.Query(m.ctx, sql)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
