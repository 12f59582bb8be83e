package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// newChecksEnabled reports whether the checks waiting on a fix in a file
// other than the test's own run (KINETIC_COMPAT_NEW=1, as in test/compat).
func newChecksEnabled() bool { return os.Getenv("KINETIC_COMPAT_NEW") == "1" }

// TestStartupCloseLikePostgres sends the same bytes to PostgreSQL and to
// kineticd, closes the write side (EOF), and compares what each answered
// before closing. PostgreSQL 15 (postmaster.c ProcessStartupPacket) closes
// silently on EOF before or inside the startup packet and on a Terminate
// where the packet belongs (read as an invalid length, logged only); in
// authentication (auth.c, auth-sasl.c) it says nothing on EOF before a
// message and answers a Terminate with FATAL 08P01.
//
// The cluster is its own: the shared one may have TLS turned on by
// TestBackendTLS, and then PostgreSQL accepts the SSLRequest that kineticd
// (tls_mode = "disable") declines.
func TestStartupCloseLikePostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: -1})
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	terminate := []byte{'X', 0, 0, 0, 4}
	ssl := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": pgtest.AppUser, "database": pgtest.AppDB}}).Encode(nil)
	sasl, _ := (&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256",
		Data: []byte("n,,n=,r=abcdefghijklmnopqrstuvwx")}).Encode(nil)
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }

	for _, tc := range []struct {
		name string
		in   []byte
		// gated: the comparison fails on a difference whose fix is in
		// proxy/authenticate.go, not in this change.
		gated string
	}{
		{name: "EOF before any byte"},
		{name: "EOF inside the length word", in: []byte{0, 0, 0}},
		{name: "EOF inside the startup packet", in: startup[:len(startup)-4]},
		{name: "Terminate before the startup packet", in: terminate},
		{name: "Terminate after a declined SSLRequest", in: cat(ssl, terminate)},
		{name: "EOF after a declined SSLRequest", in: ssl},
		{name: "EOF in authentication before a message", in: startup},
		{name: "EOF in authentication after SASLInitialResponse", in: cat(startup, sasl)},
		{name: "Terminate in authentication", in: cat(startup, terminate),
			gated: `message text: PostgreSQL says "expected SASL response, got message type 88" in a SASL exchange, kineticd "expected password response, …"`},
		{name: "Terminate in authentication after SASLInitialResponse", in: cat(startup, sasl, terminate),
			gated: `message text: PostgreSQL says "expected SASL response, got message type 88" in a SASL exchange, kineticd "expected password response, …"`},
		{name: "EOF inside an authentication message", in: cat(startup, []byte{'p', 0, 0}),
			gated: `PostgreSQL answers FATAL 28P01 "password authentication failed" when a SASL message is cut short by EOF; kineticd closes silently`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// SSLRequest is answered before the rest is read: send it alone.
			pre, rest := []byte(nil), tc.in
			if len(tc.in) >= 8 && string(tc.in[:8]) == string(ssl) {
				pre, rest = ssl, tc.in[8:]
			}
			want := describeAnswer(t, halfCloseExchange(t, cl.Primary.Addr(), pre, rest))
			got := describeAnswer(t, halfCloseExchange(t, px.Addr, pre, rest))
			if slices.Equal(got, want) {
				return
			}
			if tc.gated != "" && !newChecksEnabled() {
				t.Skipf("known difference (set KINETIC_COMPAT_NEW=1 to check): %s\nPostgreSQL: %q\nkineticd:   %q", tc.gated, want, got)
			}
			t.Fatalf("answers differ\nPostgreSQL: %q\nkineticd:   %q", want, got)
		})
	}
}

// halfCloseExchange connects to addr, sends pre and waits for its one-byte
// answer (an SSLRequest's), sends in, closes the write side and returns
// every byte the server sent until it closed the connection.
func halfCloseExchange(t *testing.T, addr string, pre, in []byte) []byte {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	var out []byte
	if len(pre) > 0 {
		nc.Write(pre)
		b := make([]byte, 1)
		if _, err := io.ReadFull(nc, b); err != nil {
			t.Fatalf("%s: answer to the first packet: %v", addr, err)
		}
		out = append(out, b...)
	}
	if len(in) > 0 {
		if _, err := nc.Write(in); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
	}
	nc.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(nc)
	var ne *net.OpError
	if err != nil && (!errors.As(err, &ne) || ne.Timeout()) {
		t.Fatalf("%s: reading the answer: %v", addr, err)
	}
	return append(out, rest...)
}

// describeAnswer renders a server's answer as one line per message with
// what may not differ: message type, authentication request code, and an
// ErrorResponse's severity, SQLSTATE and message (not the source location
// fields, nor SCRAM nonces and salts).
func describeAnswer(t *testing.T, b []byte) []string {
	t.Helper()
	var lines []string
	if len(b) > 0 && (b[0] == 'N' || b[0] == 'S') && (len(b) == 1 || b[1] != 0) {
		lines, b = append(lines, "SSLRequest answered "+string(b[:1])), b[1:]
	}
	for len(b) > 0 {
		if len(b) < 5 {
			return append(lines, fmt.Sprintf("truncated message %q", b))
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || 1+n > len(b) {
			return append(lines, fmt.Sprintf("truncated message %q", b))
		}
		typ, body := b[0], b[5:1+n]
		b = b[1+n:]
		switch typ {
		case 'R':
			lines = append(lines, fmt.Sprintf("Authentication %d", binary.BigEndian.Uint32(body)))
		case 'E':
			var e pgproto3.ErrorResponse
			if err := e.Decode(body); err != nil {
				t.Fatalf("undecodable ErrorResponse %q: %v", body, err)
			}
			lines = append(lines, strings.Join([]string{"ErrorResponse", e.Severity, e.Code, e.Message}, " "))
		default:
			lines = append(lines, fmt.Sprintf("message %q", typ))
		}
	}
	return lines
}
