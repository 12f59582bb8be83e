package e2e

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Timeouts of the client side (issue 16 item 3): client_login_timeout_ms,
// query_timeout_ms, idle_transaction_timeout_ms, client_idle_timeout_ms,
// against real PostgreSQL, in the pool mode of the run.

// readFatal reads what the proxy sends until it closes (at most within
// 5 s) and returns the first ErrorResponse in it.
func readFatal(t *testing.T, nc net.Conn) (*pgproto3.ErrorResponse, time.Duration) {
	t.Helper()
	start := time.Now()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, err := io.ReadAll(nc)
	took := time.Since(start)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the proxy kept the connection open for 5 s (read %q)", out)
	}
	for len(out) >= 5 {
		typ, n := out[0], int(binary.BigEndian.Uint32(out[1:5]))
		if n < 4 || len(out) < 1+n {
			break
		}
		if typ == 'E' {
			var er pgproto3.ErrorResponse
			if err := er.Decode(out[5 : 1+n]); err != nil {
				t.Fatal(err)
			}
			return &er, took
		}
		out = out[1+n:]
	}
	t.Fatalf("connection closed after %v without an ErrorResponse (read %q)", took, out)
	return nil, 0
}

// TestClientLoginTimeout: a client that does not finish its startup within
// client_login_timeout_ms — silent after connecting, stalled inside its
// startup packet, or never answering the SASL challenge — gets FATAL 08P01
// naming the limit, and is closed. (Before the key existed the proxy
// waited 60 s.)
func TestClientLoginTimeout(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{ServerExtra: "client_login_timeout_ms = 300"})
	startup, err := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": pgtest.AppUser, "database": pgtest.AppDB}}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a startup packet", startup[:len(startup)/2]},
		{"no answer to the SASL challenge", startup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.DialTimeout("tcp", px.Addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			er, took := readFatal(t, nc)
			if er.Severity != "FATAL" || er.Code != "08P01" || !strings.Contains(er.Message, "client_login_timeout_ms (300 ms)") {
				t.Fatalf("got %s %s %q, want FATAL 08P01 naming client_login_timeout_ms", er.Severity, er.Code, er.Message)
			}
			if took < 250*time.Millisecond {
				t.Errorf("closed after %v, before client_login_timeout_ms", took)
			}
			t.Logf("%s: %s %s %q after %v", tc.name, er.Severity, er.Code, er.Message, took.Round(time.Millisecond))
		})
	}
}

// TestQueryTimeout: with query_timeout_ms = 300 a statement still running
// after 300 ms is cancelled on its server (the server answers 57014 to the
// proxy's CancelRequest, so it stopped there) and the client gets 57014
// with PostgreSQL's statement_timeout message and a DETAIL naming the
// proxy's limit; the session goes on. Simple and extended protocol,
// outside and inside a transaction block (which the cancel aborts).
func TestQueryTimeout(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{ServerExtra: "query_timeout_ms = 300"})
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			c := connect(t, ctx, px.AppDSN())
			check := func(err error) {
				t.Helper()
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "57014" || pe.Message != "canceling statement due to statement timeout" ||
					!strings.Contains(pe.Detail, "query_timeout_ms (300 ms)") {
					t.Fatalf("pg_sleep(5) with query_timeout_ms = 300: %v, want 57014 naming query_timeout_ms", err)
				}
			}
			start := time.Now()
			_, err := c.Exec(ctx, "select pg_sleep(5)", mode)
			check(err)
			t.Logf("cancelled after %v: %v (%s)", time.Since(start).Round(time.Millisecond), err, err.(*pgconn.PgError).Detail)
			if n := queryInt(t, ctx, c, "select 7"); n != 7 {
				t.Fatalf("after the timeout: %d", n)
			}
			// A statement shorter than the limit is left alone, also
			// when several follow each other for longer than it.
			for range 4 {
				if _, err := c.Exec(ctx, "select pg_sleep(0.1)", mode); err != nil {
					t.Fatalf("short statement: %v", err)
				}
			}
			if _, err := c.Exec(ctx, "begin"); err != nil {
				t.Fatal(err)
			}
			_, err = c.Exec(ctx, "select pg_sleep(5)", mode)
			check(err)
			if _, err := c.Exec(ctx, "select 1", mode); pgCode(err) != "25P02" {
				t.Fatalf("after the cancel inside a transaction: %v, want 25P02 (aborted)", err)
			}
			if _, err := c.Exec(ctx, "rollback"); err != nil {
				t.Fatal(err)
			}
			if n := queryInt(t, ctx, c, "select 8"); n != 8 {
				t.Fatalf("after rollback: %d", n)
			}
		})
	}
}

// waitClients waits until px serves n clients, failing after 5 s.
func waitClients(t *testing.T, px *kinetictest.Proxy, n int64, why string) time.Duration {
	t.Helper()
	start := time.Now()
	for px.Server.ClientCount() != n {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d clients after 5 s, want %d: %s", px.Server.ClientCount(), n, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestIdleTransactionTimeout: a client idle inside a transaction for
// idle_transaction_timeout_ms is closed with FATAL 25P03, and its server
// connection with it (the transaction rolls back: the row it inserted is
// not there). A client that keeps working inside its transaction, or that
// idles outside one, stays.
func TestIdleTransactionTimeout(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{ServerExtra: "idle_transaction_timeout_ms = 300"})
	table := uniqueIdent("idle_tx")
	setup := connect(t, ctx, px.AppDSN())
	if _, err := setup.Exec(ctx, "create table "+table+" (x int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setup.Exec(context.Background(), "drop table "+table) })

	busy := connect(t, ctx, px.AppDSN())
	if _, err := busy.Exec(ctx, "begin"); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		time.Sleep(100 * time.Millisecond)
		if _, err := busy.Exec(ctx, "select 1"); err != nil {
			t.Fatalf("a client working inside its transaction was closed: %v", err)
		}
	}
	if _, err := busy.Exec(ctx, "commit"); err != nil {
		t.Fatal(err)
	}

	c := connect(t, ctx, px.AppDSN())
	if _, err := c.Exec(ctx, "begin"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "insert into "+table+" values (1)"); err != nil {
		t.Fatal(err)
	}
	pid := queryInt(t, ctx, c, "select pg_backend_pid()")
	took := waitClients(t, px, 2, "the client idle in its transaction should be closed")
	waitGone(t, ctx, cl, pid, "the idle transaction's server connection should be closed")
	_, err := c.Exec(ctx, "select 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25P03" || pe.Severity != "FATAL" || !strings.Contains(pe.Detail, "idle_transaction_timeout_ms (300 ms)") {
		t.Fatalf("after idling in a transaction: %v, want FATAL 25P03 naming idle_transaction_timeout_ms", err)
	}
	t.Logf("closed %v after the last statement: %v", took.Round(time.Millisecond), err)
	if n := queryInt(t, ctx, setup, "select count(*) from "+table); n != 0 {
		t.Fatalf("%d rows of the timed-out transaction committed", n)
	}
	// setup and busy idled outside a transaction all along.
	if n := px.Server.ClientCount(); n != 2 {
		t.Fatalf("%d clients left, want the 2 idle outside a transaction", n)
	}
}

// TestClientIdleTimeout: a client idle (outside a transaction) for
// client_idle_timeout_ms is closed with FATAL 57P05; a client whose
// statement runs longer than that is not idle and gets its answer.
func TestClientIdleTimeout(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{ServerExtra: "client_idle_timeout_ms = 300"})
	c := connect(t, ctx, px.AppDSN())
	if _, err := c.Exec(ctx, "select pg_sleep(0.6)"); err != nil {
		t.Fatalf("a statement longer than client_idle_timeout_ms: %v", err)
	}
	took := waitClients(t, px, 0, "the idle client should be closed")
	_, err := c.Exec(ctx, "select 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57P05" || pe.Severity != "FATAL" || !strings.Contains(pe.Detail, "client_idle_timeout_ms (300 ms)") {
		t.Fatalf("after idling: %v, want FATAL 57P05 naming client_idle_timeout_ms", err)
	}
	t.Logf("closed %v after its last statement: %v", took.Round(time.Millisecond), err)
}

// TestClientLoginTimeoutTLS: a client silent after its TLS handshake gets
// the FATAL over TLS; one that stalls inside the handshake is closed
// without a byte (plaintext where it expects TLS records would garble its
// error; PostgreSQL closes silently too).
func TestClientLoginTimeoutTLS(t *testing.T) {
	cl := pgtest.Shared(t)
	cert, key := selfSigned(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "allow", TLSCert: cert, TLSKey: key,
		ServerExtra: "client_login_timeout_ms = 300"})
	sslRequest := func(t *testing.T) net.Conn {
		nc, err := net.DialTimeout("tcp", px.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		b, _ := (&pgproto3.SSLRequest{}).Encode(nil)
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
		var s [1]byte
		if _, err := io.ReadFull(nc, s[:]); err != nil || s[0] != 'S' {
			t.Fatalf("SSLRequest answered %q, %v", s[:], err)
		}
		return nc
	}
	t.Run("silent after the handshake", func(t *testing.T) {
		tc := tls.Client(sslRequest(t), &tls.Config{InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		er, took := readFatal(t, tc)
		if er.Code != "08P01" || !strings.Contains(er.Message, "client_login_timeout_ms (300 ms)") {
			t.Fatalf("got %s %q, want 08P01 naming client_login_timeout_ms", er.Code, er.Message)
		}
		t.Logf("FATAL %s over TLS after %v", er.Code, took.Round(time.Millisecond))
	})
	t.Run("stalled in the handshake", func(t *testing.T) {
		nc := sslRequest(t)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, err := io.ReadAll(nc)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the proxy kept a client stalled in its TLS handshake for 5 s")
		}
		if len(out) != 0 {
			t.Fatalf("the proxy wrote %q into a TLS handshake", out)
		}
	})
}
