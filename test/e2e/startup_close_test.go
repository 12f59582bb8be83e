package e2e

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestStartupCloseLikePostgres sends the same bytes to PostgreSQL and to
// kineticd, closes the write side (EOF), and compares what each answered
// before closing. PostgreSQL 15 (postmaster.c ProcessStartupPacket) closes
// silently on EOF before or inside the startup packet, on any invalid
// startup packet length, and on a Terminate where the packet belongs (read
// as an invalid length), logging only. In authentication it says nothing on
// EOF before a message and answers another message type with FATAL 08P01;
// a SCRAM message (auth-sasl.c) cut short by EOF or with an invalid length
// fails the login (FATAL 28P01), an md5 password message (auth.c
// recv_password_packet) closes silently.
//
// The cluster is its own: the shared one may have TLS turned on by
// TestBackendTLS, and then PostgreSQL accepts the SSLRequest that kineticd
// (tls_mode = "disable") declines.
func TestStartupCloseLikePostgres(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: -1})
	// md5hash's secret is an md5 hash, so kineticd challenges it with md5,
	// as PostgreSQL does md5user (pg_hba.conf md5, an md5 verifier).
	px := kinetictest.Start(t, cl, kinetictest.Params{Extra: fmt.Sprintf(
		"\n[[users]]\nname = \"md5hash\"\npassword = %q\nbackend_user = %q\nbackend_password = %q\n",
		md5Secret(pgtest.MD5Password, "md5hash"), pgtest.MD5User, pgtest.MD5Password)})
	terminate := []byte{'X', 0, 0, 0, 4}
	ssl := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	startupOf := func(user string) []byte {
		b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
			Parameters: map[string]string{"user": user, "database": pgtest.AppDB}}).Encode(nil)
		return b
	}
	startup := startupOf(pgtest.AppUser)
	sasl, _ := (&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256",
		Data: []byte("n,,n=,r=abcdefghijklmnopqrstuvwx")}).Encode(nil)
	saslResp, _ := (&pgproto3.SASLResponse{Data: []byte("c=biws,r=abcdefghijklmnopqrstuvwx,p=cHJvb2Y=")}).Encode(nil)
	password, _ := (&pgproto3.PasswordMessage{Password: "md5" + strings.Repeat("0", 32)}).Encode(nil)
	query := []byte{'Q', 0, 0, 0, 5, 0}
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }

	for _, tc := range []struct {
		name string
		in   []byte
		// md5: the client is md5user on PostgreSQL and md5hash on
		// kineticd, and in starts after the startup packet.
		md5 bool
	}{
		{name: "EOF before any byte"},
		{name: "EOF inside the length word", in: []byte{0, 0, 0}},
		{name: "EOF inside the startup packet", in: startup[:len(startup)-4]},
		{name: "Terminate before the startup packet", in: terminate},
		{name: "Terminate after a declined SSLRequest", in: cat(ssl, terminate)},
		{name: "EOF after a declined SSLRequest", in: ssl},
		{name: "startup length too large", in: []byte{0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0}},
		{name: "startup length 10005", in: cat([]byte{0, 0, 0x27, 0x15}, startup[4:])},
		{name: "startup length 4", in: []byte{0, 0, 0, 4}},
		{name: "startup length 7", in: []byte{0, 0, 0, 7, 0, 3, 0}},
		{name: "startup length negative", in: []byte{0xff, 0xff, 0xff, 0xf0, 0, 3, 0, 0}},
		{name: "invalid startup length after a declined SSLRequest", in: cat(ssl, []byte{0, 0, 0, 2})},
		{name: "EOF in authentication before a message", in: startup},
		{name: "EOF in authentication after SASLInitialResponse", in: cat(startup, sasl)},
		{name: "Terminate in authentication", in: cat(startup, terminate)},
		{name: "Query in authentication", in: cat(startup, query)},
		{name: "Terminate in authentication after SASLInitialResponse", in: cat(startup, sasl, terminate)},
		{name: "EOF inside an authentication message", in: cat(startup, []byte{'p', 0, 0})},
		{name: "EOF inside a SASLInitialResponse", in: cat(startup, sasl[:len(sasl)-3])},
		{name: "EOF inside a SASLResponse", in: cat(startup, sasl, saslResp[:len(saslResp)-3])},
		{name: "SASL message length too large", in: cat(startup, []byte{'p', 0, 1, 0, 0})},
		{name: "SASL message length 1028", in: cat(startup, []byte{'p', 0, 0, 4, 4}, make([]byte, 1024))},
		{name: "SASL message length 1024", in: cat(startup, []byte{'p', 0, 0, 4, 0}, make([]byte, 1020))},
		{name: "SASL message length 3", in: cat(startup, []byte{'p', 0, 0, 0, 3})},
		{name: "md5: EOF before a message", md5: true},
		{name: "md5: Terminate", md5: true, in: terminate},
		{name: "md5: Query", md5: true, in: query},
		{name: "md5: EOF inside the length word", md5: true, in: []byte{'p', 0, 0}},
		{name: "md5: EOF inside the password message", md5: true, in: password[:len(password)-3]},
		{name: "md5: message length too large", md5: true, in: []byte{'p', 0, 1, 0, 1}},
		{name: "md5: message length 65535", md5: true, in: cat([]byte{'p', 0, 0, 0xff, 0xff}, bytes.Repeat([]byte{'x'}, 65530), []byte{0})},
		{name: "md5: message length 3", md5: true, in: []byte{'p', 0, 0, 0, 3}},
		{name: "md5: wrong password", md5: true, in: password},
		{name: "md5: two strings in the password message", md5: true, in: []byte{'p', 0, 0, 0, 10, 'm', 'd', '5', 0, 'x', 0}},
		{name: "md5: empty password", md5: true, in: []byte{'p', 0, 0, 0, 5, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pgIn, kinIn := tc.in, tc.in
			if tc.md5 {
				pgIn, kinIn = cat(startupOf(pgtest.MD5User), tc.in), cat(startupOf("md5hash"), tc.in)
			}
			pre, rest := splitSSL(pgIn, ssl)
			want := describeAnswer(t, halfCloseExchange(t, cl.Primary.Addr(), pre, rest))
			pre, rest = splitSSL(kinIn, ssl)
			got := describeAnswer(t, halfCloseExchange(t, px.Addr, pre, rest))
			if tc.md5 {
				// The user name in "password authentication failed for
				// user ..." is the client's own.
				for i := range got {
					got[i] = strings.ReplaceAll(got[i], `"md5hash"`, `"`+pgtest.MD5User+`"`)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("answers differ\nPostgreSQL: %q\nkineticd:   %q", want, got)
			}
			t.Logf("both answered %q", want)
		})
	}
}

// splitSSL separates a leading SSLRequest, which is answered before the
// rest is read and so must be sent alone.
func splitSSL(in, ssl []byte) (pre, rest []byte) {
	if len(in) >= len(ssl) && string(in[:len(ssl)]) == string(ssl) {
		return ssl, in[len(ssl):]
	}
	return nil, in
}

// md5Secret is PostgreSQL's md5 verifier of password for user.
func md5Secret(password, user string) string {
	sum := md5.Sum([]byte(password + user))
	return "md5" + hex.EncodeToString(sum[:])
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
