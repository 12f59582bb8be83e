package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

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
