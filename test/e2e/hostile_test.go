package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// rawClient is a hand-driven protocol client for malformed input.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	fe *pgproto3.Frontend
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, fe: pgproto3.NewFrontend(bufio.NewReader(nc), nc)}
}

// login authenticates as app with SCRAM, using pgconn's own SCRAM code via
// a tiny exchange: simplest is to run the handshake with pgproto3 and
// xdg-go through startupAs.
func (c *rawClient) login() {
	c.t.Helper()
	if err := startupAs(c.nc, c.fe, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, pgproto3.ProtocolVersion30); err != nil {
		c.t.Fatal(err)
	}
}

// expectError reads until an ErrorResponse and returns it; io errors
// mean the proxy closed the connection.
func (c *rawClient) expectError() (*pgproto3.ErrorResponse, error) {
	for {
		m, err := c.fe.Receive()
		if err != nil {
			return nil, err
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			cp := *e
			return &cp, nil
		}
	}
}

// expectClosed asserts the proxy closes the connection (after any
// messages).
func (c *rawClient) expectClosed() {
	c.t.Helper()
	for {
		if _, err := c.fe.Receive(); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
				return
			}
			c.t.Fatalf("expected the proxy to close the connection, got %v", err)
		}
	}
}

// expectClosedSilently asserts the proxy closes the connection within d
// without sending a byte.
func (c *rawClient) expectClosedSilently(d time.Duration) {
	c.t.Helper()
	start := time.Now()
	c.nc.SetReadDeadline(start.Add(d))
	out, err := io.ReadAll(c.nc)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		c.t.Fatalf("connection still open after %v (answered %q)", d, out)
	case err != nil && !isReset(err):
		c.t.Fatalf("reading: %v", err)
	case len(out) > 0:
		c.t.Fatalf("proxy answered %q, want nothing", out)
	}
	c.t.Logf("closed without an answer after %v", time.Since(start).Round(time.Microsecond))
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestMalformedClientsDoNotDisturbOthers throws garbage at the proxy from
// several clients while a well-behaved client runs queries throughout; the
// bad clients get 08P01 errors or are dropped (invalid startup lengths
// without a word, as by PostgreSQL), the good one never notices.
func TestMalformedClientsDoNotDisturbOthers(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 8})
	ctx := ctxT(t, 60*time.Second)

	good := connect(t, ctx, px.AppDSN())
	stop := make(chan struct{})
	var goodQueries atomic.Int64
	var goodErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var n int
			if err := good.QueryRow(ctx, "select $1::int", i).Scan(&n); err != nil || n != i {
				goodErr = fmt.Errorf("good client query %d: %d %v", i, n, err)
				return
			}
			goodQueries.Add(1)
		}
	}()

	// An invalid startup packet length closes the connection at once,
	// without an answer, as PostgreSQL 15 does; the proxy allocates nothing
	// for the claimed size and does not wait for it (nor for the login
	// timeout) with the client's side still open.
	t.Run("startup length too large", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.nc.Write([]byte{0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0})
		c.expectClosedSilently(2 * time.Second)
	})
	t.Run("startup length too small", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.nc.Write([]byte{0, 0, 0, 4})
		c.expectClosedSilently(2 * time.Second)
	})
	t.Run("startup garbage", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.nc.Write([]byte{0, 0, 0, 16, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8})
		e, err := c.expectError()
		if err != nil || e.Code != "08P01" {
			t.Fatalf("got %v %v, want 08P01", e, err)
		}
		c.expectClosed()
	})
	t.Run("startup truncated then disconnect", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.nc.Write([]byte{0, 0, 0, 40, 0, 3, 0, 0, 'u', 's'})
		c.nc.Close()
	})
	t.Run("startup without user", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"database": "app"}})
		c.fe.Flush()
		e, err := c.expectError()
		if err != nil || e.Code != "28000" {
			t.Fatalf("got %v %v, want 28000", e, err)
		}
	})
	t.Run("unsupported protocol major version", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		pkt := make([]byte, 8)
		binary.BigEndian.PutUint32(pkt, 8)
		binary.BigEndian.PutUint32(pkt[4:], 2<<16)
		c.nc.Write(pkt)
		e, err := c.expectError()
		if err != nil || e.Code != "08P01" {
			t.Fatalf("got %v %v, want 08P01", e, err)
		}
	})
	t.Run("invalid message type after login", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.login()
		c.nc.Write([]byte{'!', 0, 0, 0, 4})
		e, err := c.expectError()
		if err != nil || e.Code != "08P01" || e.Message != "invalid frontend message type 33" {
			t.Fatalf("got %v %v", e, err)
		}
		c.expectClosed()
	})
	t.Run("oversized message after login", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.login()
		c.nc.Write([]byte{'Q', 0x7f, 0xff, 0xff, 0xff})
		e, err := c.expectError()
		if err != nil || e.Code != "08P01" || e.Message != "invalid message length" {
			t.Fatalf("got %v %v", e, err)
		}
		c.expectClosed()
	})
	t.Run("oversized control message", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.login()
		c.nc.Write([]byte{'S', 0, 1, 0, 0})
		e, err := c.expectError()
		if err != nil || e.Code != "08P01" {
			t.Fatalf("got %v %v", e, err)
		}
	})
	t.Run("disconnect mid-message", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.login()
		c.nc.Write([]byte{'Q', 0, 0, 0, 100, 's', 'e', 'l'})
		c.nc.Close()
	})
	t.Run("disconnect mid-query cancels it", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		c.login()
		c.fe.Send(&pgproto3.Query{String: "select pg_sleep(60) /* hostile-disconnect */"})
		c.fe.Flush()
		waitQuery(t, ctx, cl, "hostile-disconnect", 1)
		c.nc.Close()
		waitQuery(t, ctx, cl, "hostile-disconnect", 0)
	})
	t.Run("protocol 3.2 is negotiated down", func(t *testing.T) {
		c := dialRaw(t, px.Addr)
		if err := startupAs(c.nc, c.fe, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB, pgproto3.ProtocolVersion32); err != nil {
			t.Fatal(err)
		}
		c.fe.Send(&pgproto3.Query{String: "select 1"})
		c.fe.Flush()
		for {
			m, err := c.fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
			if e, ok := m.(*pgproto3.ErrorResponse); ok {
				t.Fatal(e.Message)
			}
		}
	})
	t.Run("SSLRequest and GSSENCRequest declined", func(t *testing.T) {
		for _, code := range []uint32{80877103, 80877104} {
			c := dialRaw(t, px.Addr)
			pkt := make([]byte, 8)
			binary.BigEndian.PutUint32(pkt, 8)
			binary.BigEndian.PutUint32(pkt[4:], code)
			c.nc.Write(pkt)
			var b [1]byte
			if _, err := io.ReadFull(c.nc, b[:]); err != nil || b[0] != 'N' {
				t.Fatalf("request %d: answer %q %v, want N", code, b[0], err)
			}
			c.login() // the connection continues in plaintext
		}
	})

	close(stop)
	wg.Wait()
	if goodErr != nil {
		t.Fatal(goodErr)
	}
	if goodQueries.Load() == 0 {
		t.Fatal("the good client ran no queries")
	}
	t.Logf("the good client ran %d queries, all correct, while malformed clients were handled", goodQueries.Load())
}

// TestTerminateInsideTransactionRollsBack: a client that leaves with an
// open transaction must not hand that transaction to the next client.
func TestTerminateInsideTransactionRollsBack(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1})
	ctx := ctxT(t, 30*time.Second)
	setup := connect(t, ctx, px.AppDSN())
	if _, err := setup.Exec(ctx, "create table term_tx (x int)"); err != nil {
		t.Fatal(err)
	}
	setup.Close(ctx)
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists term_tx") })

	a := connect(t, ctx, px.AppDSN())
	if _, err := a.Exec(ctx, "begin"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "insert into term_tx values (1)"); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx) // sends Terminate with the transaction open

	b := connect(t, ctx, px.AppDSN())
	if b.PgConn().TxStatus() != 'I' {
		t.Fatalf("next client starts in transaction state %q", b.PgConn().TxStatus())
	}
	if n := queryInt(t, ctx, b, "select count(*) from term_tx"); n != 0 {
		t.Fatalf("the abandoned transaction's row is visible: %d", n)
	}
	if _, err := b.Exec(ctx, "commit"); err != nil {
		t.Fatal(err) // a COMMIT outside a transaction only warns
	}
	var _ pgx.Tx
}

func waitQuery(t *testing.T, ctx context.Context, cl *pgtest.Cluster, marker string, want int) {
	t.Helper()
	for {
		s, err := cl.Primary.QueryString(ctx, fmt.Sprintf(
			"select count(*) from pg_stat_activity where state = 'active' and query like '%%%s%%' and pid <> pg_backend_pid()", marker))
		if err != nil {
			t.Fatal(err)
		}
		if s == fmt.Sprint(want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d active queries marked %q: last count %s", want, marker, s)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
