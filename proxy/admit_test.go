package proxy

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

type staticConfig struct{ c *config.Config }

func (s staticConfig) Load() *config.Config { return s.c }

// testServer is a proxy whose route points at a closed port: everything up
// to authentication runs for real, no PostgreSQL needed. Its users are app
// (plaintext password "app-secret") and md5app (the md5 hash of password
// "md5-secret").
func testServer(t testing.TB, loginTimeout time.Duration) *Server {
	t.Helper()
	return newTestServer(t, loginTimeout, fmt.Sprintf(`
[[users]]
name = "md5app"
password = %q
backend_password = "unused"
`, md5Hash("md5-secret", "md5app")))
}

// testServerWith is testServer with more [[users]].
func testServerWith(t testing.TB, users string) *Server {
	t.Helper()
	return newTestServer(t, 2*time.Second, users)
}

func md5Hash(password, user string) string {
	sum := md5.Sum([]byte(password + user))
	return "md5" + hex.EncodeToString(sum[:])
}

func newTestServer(t testing.TB, loginTimeout time.Duration, users string) *Server {
	t.Helper()
	data := []byte(`
[server]
listen = "127.0.0.1:0"
[metrics]
listen = ""
[admin]
users = ["app"]
[[users]]
name = "app"
password = "app-secret"
[[routes]]
name = "main"
database = "app"
[routes.primary]
address = "127.0.0.1:1"
` + users)
	cfg, err := config.Parse("test.toml", data)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: staticConfig{cfg}, loginTimeout: loginTimeout, connectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runClient feeds in to one proxied connection and returns everything the
// proxy answered before it closed the connection.
func runClient(t testing.TB, s *Server, in []byte) []byte {
	client, proxySide := net.Pipe()
	done := make(chan struct{})
	go func() { s.handle(proxySide); close(done) }()
	go func() { client.Write(in) }()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	out, _ := io.ReadAll(client)
	client.Close()
	<-done
	return out
}

func startupPacket(params map[string]string) []byte {
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: params}).Encode(nil)
	return b
}

// errorIn decodes the first ErrorResponse in a stream of backend messages.
func errorIn(out []byte) *pgproto3.ErrorResponse {
	for len(out) >= 5 {
		if out[0] == 'N' && len(out) == 1 {
			return nil
		}
		n := int(binary.BigEndian.Uint32(out[1:5])) + 1
		if n > len(out) || n < 5 {
			return nil
		}
		if out[0] == 'E' {
			var e pgproto3.ErrorResponse
			if e.Decode(out[5:n]) == nil {
				return &e
			}
		}
		out = out[n:]
	}
	return nil
}

// TestAdmitErrors: what the proxy answers before authentication ends.
// Invalid startup packet lengths get no answer at all, as from PostgreSQL
// (TestAdmitInvalidStartupLengthClosesAtOnce).
func TestAdmitErrors(t *testing.T) {
	s := testServer(t, 2*time.Second)
	defer s.Close()
	for _, tc := range []struct {
		name string
		in   []byte
		code string
	}{
		{"no user", startupPacket(map[string]string{"database": "app"}), "28000"},
		{"protocol 2", []byte{0, 0, 0, 8, 0, 2, 0, 0}, "08P01"},
		{"unknown user gets the SCRAM challenge, then fails", append(startupPacket(map[string]string{"user": "nobody"}), 'p', 0, 0, 0, 4), "08P01"},
		{"md5 reply to SCRAM", append(startupPacket(map[string]string{"user": "app"}), 'p', 0, 0, 0, 8, 'm', 'd', '5', 0), "08P01"},
		{"not a password message", append(startupPacket(map[string]string{"user": "app"}), 'Q', 0, 0, 0, 4), "08P01"},
	} {
		e := errorIn(runClient(t, s, tc.in))
		if e == nil || e.Code != tc.code || e.Severity != "FATAL" {
			t.Errorf("%s: got %+v, want FATAL %s", tc.name, e, tc.code)
		}
	}
}

// plaintextCredentials derives from a plaintext [[users]] password exactly
// the verifier PostgreSQL 15 stores for it (CREATE ROLE … PASSWORD, with
// password_encryption = scram-sha-256; the verifiers below were read from
// pg_authid). With xdg-go's textbook SASLprep (scram.NewClient) the first
// three differed, and psql could not log in through kineticd with them.
func TestPlaintextCredentialsMatchPostgres(t *testing.T) {
	for _, tc := range []struct{ password, verifier string }{
		{"pa\u200bss-word", "SCRAM-SHA-256$4096:1NnNAv88yV8dwDplBaut0w==$4v4BmtxOBCC2+72lB747tzsDlEmRyvwmXRKKruHqn34=:ggZrmuRnpgFIKXHYctcWuUHeWR+u78U1rh/RUgwHtJg="},
		{"pa\u0340ss-word", "SCRAM-SHA-256$4096:153af28dVCPn9tDVMJLONg==$ID4WiBuTHi90fE0NZoWb1U6Di2WND6e/hyDFpwcuS/4=:mNjkpGcEPo1aiZfrnt770FlRxXtZ6qUYIfe/4xovgpQ="},
		{"\u00ad", "SCRAM-SHA-256$4096:JVHF7PhhD7g9MVuOTRVJDA==$qMOqEWWzGpzs+YxN2KvUJSxFRXtVuqnsS89KVt1aq7s=:RIVlHsruh/U3d98yW+nnI+2VToOlGM3uHz1QxD8GqzE="},
		{"pass\u2168word", "SCRAM-SHA-256$4096:Vj+vOA4lzi2ujANZyt00Cg==$I5IKBDpWWAb3tfVbIO9TdLnMT8JZyufK/Zx5AYjtDfM=:+pIQa0YTO+ezWss+9ztK+OZp/i2mXEjIFzWMaS78aVw="},
		{"app-secret", "SCRAM-SHA-256$4096:3C6j+WQNDNqBtjsdvrHFFQ==$0j+/NRjkxWao2P+d/nFUdyX7PxXYZRGryUn7vj523eg=:U4nkbBpY2iK0SZ/5daSI/m685sxjDen/82BhIt2OHuc="},
		{"a\tb", "SCRAM-SHA-256$4096:nsXNEHDH5FXUMGtLLL4p9w==$kCitX48ObZBcQ3xYAJk0tDya3mybJLYCfKRAVJ7Sxs4=:s3cklFm3SaK1u3XxVqazzu9ZBp5lNNEOJpiusexHpyg="},
	} {
		want, err := parseVerifier(tc.verifier)
		if err != nil {
			t.Fatal(err)
		}
		got, err := plaintextCredentials(tc.password, want.KeyFactors)
		if err != nil {
			t.Fatalf("%+q: %v", tc.password, err)
		}
		if !bytes.Equal(got.StoredKey, want.StoredKey) || !bytes.Equal(got.ServerKey, want.ServerKey) {
			t.Errorf("%+q: credentials differ from PostgreSQL's verifier", tc.password)
		}
	}
}

// A client that prepares its password as libpq does (pool.SCRAMPassword)
// gets past authentication, against a plaintext secret and against the
// verifier PostgreSQL made of the same password; a wrong password gets
// 28P01.
func TestSCRAMLoginWithPreparedPassword(t *testing.T) {
	const password = "pa\u200bss-word"
	s := testServerWith(t, fmt.Sprintf(`
[[users]]
name = "plain"
password = %q
[[users]]
name = "verifier"
password = %q
backend_password = "unused"
`, password, "SCRAM-SHA-256$4096:1NnNAv88yV8dwDplBaut0w==$4v4BmtxOBCC2+72lB747tzsDlEmRyvwmXRKKruHqn34=:ggZrmuRnpgFIKXHYctcWuUHeWR+u78U1rh/RUgwHtJg="))
	defer s.Close()
	for _, user := range []string{"plain", "verifier"} {
		for _, tc := range []struct {
			password string
			ok       bool
		}{{password, true}, {"pass-word", false}} {
			e := scramLogin(t, s, user, tc.password)
			if tc.ok && (e == nil || e.Code != codeConnectionFailure) || !tc.ok && (e == nil || e.Code != codeInvalidPassword) {
				t.Errorf("%s with %+q: %+v, want ok=%v", user, tc.password, e, tc.ok)
			}
		}
	}
}

// scramLogin runs a client's SCRAM exchange with s as user, the password
// prepared as libpq prepares it, and returns the proxy's ErrorResponse. The
// proxy holds its AuthenticationSASLFinal back until it has a server
// connection; the route's server is a closed port, so a client that
// authenticated gets 08006, one that did not 28P01.
func scramLogin(t *testing.T, s *Server, user, password string) *pgproto3.ErrorResponse {
	t.Helper()
	client, proxySide := net.Pipe()
	defer client.Close()
	done := make(chan struct{})
	go func() { s.handle(proxySide); close(done) }()
	defer func() { client.Close(); <-done }()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	fe := pgproto3.NewFrontend(client, client)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": user, "database": "app"}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	sc, err := scram.SHA256.NewClientUnprepped("", pool.SCRAMPassword(password), "")
	if err != nil {
		t.Fatal(err)
	}
	conv := sc.NewConversation()
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		switch m := m.(type) {
		case *pgproto3.AuthenticationSASL:
			first, _ := conv.Step("")
			fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: scramMech, Data: []byte(first)})
		case *pgproto3.AuthenticationSASLContinue:
			final, err := conv.Step(string(m.Data))
			if err != nil {
				t.Fatalf("%s: %v", user, err)
			}
			fe.Send(&pgproto3.SASLResponse{Data: []byte(final)})
		case *pgproto3.ErrorResponse:
			cp := *m
			return &cp
		default:
			t.Fatalf("%s: unexpected %T", user, m)
		}
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSSLRequestDeclinedWhenTLSDisabled(t *testing.T) {
	s := testServer(t, 2*time.Second)
	defer s.Close()
	ssl := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	out := runClient(t, s, ssl)
	if !bytes.HasPrefix(out, []byte{'N'}) {
		t.Fatalf("SSLRequest answered %q, want N", out)
	}
	// Pipelined plaintext after SSLRequest is refused.
	out = runClient(t, s, append(ssl, startupPacket(map[string]string{"user": "app"})...))
	if e := errorIn(out); e == nil || e.Code != "08P01" {
		t.Fatalf("data pipelined after SSLRequest: %q", out)
	}
}

// FuzzAdmit feeds arbitrary bytes to the startup and authentication phase:
// the proxy must answer with an error or close, never panic (not even a
// panic contained to the session, FATAL XX000) or hang.
func FuzzAdmit(f *testing.F) {
	f.Add(startupPacket(map[string]string{"user": "app", "database": "app"}))
	f.Add([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f})
	f.Add([]byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add(append(startupPacket(map[string]string{"user": "app"}), 'p', 0, 0, 0, 30, 'S', 'C', 'R', 'A', 'M', '-', 'S', 'H', 'A', '-', '2', '5', '6', 0, 0, 0, 0, 8, 'n', ',', ',', 'n', '=', ',', 'r', '='))
	s := testServer(f, 100*time.Millisecond)
	defer s.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		out := runClient(t, s, in)
		// XX000 is a panic contained to the session (contain.go): a bug.
		if e := errorIn(out); e != nil && e.Code == "XX000" {
			t.Fatalf("%q: %s", in, e.Message)
		}
	})
}
