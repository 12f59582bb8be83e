package pool

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// queryServer accepts one connection on loopback, logs the client in
// (trust), then runs script with the raw connection and a Backend on it.
// It returns the client's Conn, closed when the test ends; the script's
// error fails the test.
func queryServer(t *testing.T, script func(nc net.Conn, be *pgproto3.Backend) error) *Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			done <- err
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		be := pgproto3.NewBackend(nc, nc)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			done <- err
			return
		}
		if err := send(be, &pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}); err != nil {
			done <- err
			return
		}
		done <- script(nc, be)
	}()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("fake server: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dialer{}.Dial(ctx, ln.Addr().String(), Credentials{User: "u", Database: "d"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // runs before the wait above
	return c
}

// expectQuery reads one message, which must be a Query for sql.
func expectQuery(be *pgproto3.Backend, sql string) error {
	m, err := be.Receive()
	if err != nil {
		return err
	}
	if q, ok := m.(*pgproto3.Query); !ok || q.String != sql {
		return errors.New("expected Query " + sql)
	}
	return nil
}

// untilClosed waits for the client to close the connection.
func untilClosed(be *pgproto3.Backend) error {
	for {
		if _, err := be.Receive(); err != nil {
			return nil
		}
	}
}

func send(be *pgproto3.Backend, msgs ...pgproto3.BackendMessage) error {
	for _, m := range msgs {
		be.Send(m)
	}
	return be.Flush()
}

func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestQueryReturnsTextRows(t *testing.T) {
	c := queryServer(t, func(_ net.Conn, be *pgproto3.Backend) error {
		if err := expectQuery(be, "select a, b, c"); err != nil {
			return err
		}
		if err := send(be,
			&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("a")}, {Name: []byte("b")}, {Name: []byte("c")}}},
			&pgproto3.DataRow{Values: [][]byte{[]byte("1"), nil, {}}},
			&pgproto3.NoticeResponse{Severity: "NOTICE", Message: "in between"},
			&pgproto3.DataRow{Values: [][]byte{[]byte("pass\u2168"), []byte("t"), []byte("x")}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 2")},
			&pgproto3.ParameterStatus{Name: "application_name", Value: "probe"},
			&pgproto3.ReadyForQuery{TxStatus: 'I'},
		); err != nil {
			return err
		}
		if err := expectQuery(be, "set x = 1"); err != nil {
			return err
		}
		if err := send(be, &pgproto3.CommandComplete{CommandTag: []byte("SET")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}); err != nil {
			return err
		}
		return untilClosed(be)
	})
	ctx := ctx5s(t)
	rows, err := c.Query(ctx, "select a, b, c")
	if err != nil {
		t.Fatal(err)
	}
	want := [][][]byte{{[]byte("1"), nil, {}}, {[]byte("pass\u2168"), []byte("t"), []byte("x")}}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}
	if rows[0][1] != nil || rows[0][2] == nil {
		t.Fatalf("NULL and the empty string not told apart: %#v", rows[0])
	}
	if c.Params["application_name"] != "probe" || c.Broken() {
		t.Fatalf("params %v, broken %v", c.Params, c.Broken())
	}
	// The connection stays usable: a second query, without rows.
	rows, err = c.Query(ctx, "set x = 1")
	if err != nil || len(rows) != 0 || c.Broken() {
		t.Fatalf("second query: %q, %v, broken %v", rows, err, c.Broken())
	}
}

// Every way a Query can fail, and whether the connection survives it.
func TestQueryErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sql    string
		answer []pgproto3.BackendMessage
		// raw bytes sent after answer; then the server closes.
		raw     []byte
		wantErr string
		server  bool // the error is the server's (*ServerError)
		// usable: the connection is not broken, and a second query on it
		// works.
		usable bool
	}{
		{name: "ERROR", sql: "select nope", answer: []pgproto3.BackendMessage{
			&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42703", Message: `column "nope" does not exist`},
			&pgproto3.ReadyForQuery{TxStatus: 'I'},
		}, wantErr: "42703", server: true, usable: true},
		{name: "ERROR after rows", sql: "select 1/(2-x) from t", answer: []pgproto3.BackendMessage{
			&pgproto3.DataRow{Values: [][]byte{[]byte("1")}},
			&pgproto3.ErrorResponse{Severity: "ERROR", Code: "22012", Message: "division by zero"},
			&pgproto3.ReadyForQuery{TxStatus: 'I'},
		}, wantErr: "22012", server: true, usable: true},
		{name: "FATAL", sql: "select 1", answer: []pgproto3.BackendMessage{
			&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"},
		}, raw: []byte{}, wantErr: "57P01", server: true},
		{name: "left in a transaction", sql: "begin", answer: []pgproto3.BackendMessage{
			&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")}, &pgproto3.ReadyForQuery{TxStatus: 'T'},
		}, wantErr: "transaction state"},
		{name: "COPY", sql: "copy t to stdout", answer: []pgproto3.BackendMessage{
			&pgproto3.CopyOutResponse{ColumnFormatCodes: []uint16{0}},
		}, wantErr: "started a COPY"},
		{name: "malformed DataRow", sql: "select 1", raw: []byte{'D', 0, 0, 0, 11, 0, 1, 0, 0, 0, 9, 'x'}, wantErr: "malformed DataRow"},
		{name: "DataRow over the limit", sql: "select 1", raw: []byte{'D', 0x10, 0, 0, 0}, wantErr: "bytes during"},
		{name: "connection closed", sql: "select 1", raw: []byte{}, wantErr: "EOF"},
		{name: "answer cut short", sql: "select 1", raw: []byte{'D', 0, 0, 0, 20, 0, 1}, wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := queryServer(t, func(nc net.Conn, be *pgproto3.Backend) error {
				if err := expectQuery(be, tc.sql); err != nil {
					return err
				}
				if err := send(be, tc.answer...); err != nil {
					return err
				}
				if tc.raw != nil {
					_, err := nc.Write(tc.raw)
					return err // and close
				}
				if !tc.usable {
					return untilClosed(be)
				}
				if err := expectQuery(be, "select 2"); err != nil {
					return err
				}
				if err := send(be, &pgproto3.DataRow{Values: [][]byte{[]byte("2")}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}); err != nil {
					return err
				}
				return untilClosed(be)
			})
			ctx := ctx5s(t)
			rows, err := c.Query(ctx, tc.sql)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || rows != nil {
				t.Fatalf("Query = %q, %v; want an error containing %q", rows, err, tc.wantErr)
			}
			var se *ServerError
			if errors.As(err, &se) != tc.server {
				t.Fatalf("%v (%T): a server error? %v, want %v", err, err, !tc.server, tc.server)
			}
			if c.Broken() == tc.usable {
				t.Fatalf("broken = %v after %v, want %v", c.Broken(), err, !tc.usable)
			}
			if !tc.usable {
				return
			}
			rows, err = c.Query(ctx, "select 2")
			if err != nil || len(rows) != 1 || string(rows[0][0]) != "2" {
				t.Fatalf("query after the error: %q, %v", rows, err)
			}
		})
	}
}

// Query is bounded by its context: a server that does not answer makes it
// fail with the context's error at the deadline or on cancellation, and
// the connection is broken (its answer may still come).
func TestQueryContext(t *testing.T) {
	silent := func(_ net.Conn, be *pgproto3.Backend) error {
		if err := expectQuery(be, "select pg_sleep(60)"); err != nil {
			return err
		}
		return untilClosed(be)
	}
	t.Run("deadline", func(t *testing.T) {
		c := queryServer(t, silent)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Query(ctx, "select pg_sleep(60)")
		if !errors.Is(err, context.DeadlineExceeded) || !c.Broken() {
			t.Fatalf("Query = %v (broken %v), want context.DeadlineExceeded and broken", err, c.Broken())
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Query returned after %v", d)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		c := queryServer(t, silent)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := c.Query(ctx, "select pg_sleep(60)")
		if !errors.Is(err, context.Canceled) || !c.Broken() {
			t.Fatalf("Query = %v (broken %v), want context.Canceled and broken", err, c.Broken())
		}
	})
	t.Run("already ended", func(t *testing.T) {
		c := queryServer(t, untilClosedOnly)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.Query(ctx, "select 1"); !errors.Is(err, context.Canceled) || c.Broken() {
			t.Fatalf("Query = %v (broken %v), want context.Canceled before anything is sent", err, c.Broken())
		}
	})
}

func untilClosedOnly(_ net.Conn, be *pgproto3.Backend) error { return untilClosed(be) }

// A NUL cannot travel in a Query message (the server would read the text
// only up to it): refused before anything is sent.
func TestQueryRefusesNUL(t *testing.T) {
	c := queryServer(t, untilClosedOnly)
	if _, err := c.Query(ctx5s(t), "select 1\x00; drop table t"); err == nil || c.Broken() {
		t.Fatalf("Query = %v (broken %v), want an error and the connection intact", err, c.Broken())
	}
}

// Terminate says goodbye before closing, and closes a broken connection
// without writing to it.
func TestTerminate(t *testing.T) {
	got := make(chan pgproto3.FrontendMessage, 1)
	c := queryServer(t, func(_ net.Conn, be *pgproto3.Backend) error {
		m, err := be.Receive()
		if err != nil {
			return err
		}
		got <- m
		return untilClosed(be)
	})
	if err := c.Terminate(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := (<-got).(*pgproto3.Terminate); !ok {
		t.Fatal("no Terminate before the close")
	}
}

func TestDecodeDataRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		want [][]byte
		err  bool
	}{
		{"no fields", []byte{0, 0}, [][]byte{}, false},
		{"value, NULL, empty", []byte{0, 3, 0, 0, 0, 1, 'x', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, [][]byte{[]byte("x"), nil, {}}, false},
		{"short count", []byte{0}, nil, true},
		{"missing field", []byte{0, 2, 0, 0, 0, 1, 'x'}, nil, true},
		{"field past the end", []byte{0, 1, 0, 0, 0, 5, 'x'}, nil, true},
		{"negative length other than -1", []byte{0, 1, 0xff, 0xff, 0xff, 0xfe}, nil, true},
		{"trailing bytes", []byte{0, 1, 0, 0, 0, 1, 'x', 'y'}, nil, true},
	} {
		got, err := decodeDataRow(tc.body)
		if (err != nil) != tc.err || !tc.err && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, %v; want %q (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}
