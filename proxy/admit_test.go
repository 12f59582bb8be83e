package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/config"
)

type staticConfig struct{ c *config.Config }

func (s staticConfig) Load() *config.Config { return s.c }

// testServer is a proxy whose route points at a closed port: everything up
// to authentication runs for real, no PostgreSQL needed.
func testServer(t testing.TB, loginTimeout time.Duration) *Server {
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
`)
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

func TestAdmitErrors(t *testing.T) {
	s := testServer(t, 2*time.Second)
	defer s.Close()
	for _, tc := range []struct {
		name string
		in   []byte
		code string
	}{
		{"huge startup length", []byte{0x7f, 0, 0, 0, 0, 3, 0, 0}, "08P01"},
		{"tiny startup length", []byte{0, 0, 0, 4}, "08P01"},
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
// the proxy must answer with an error or close, never panic or hang.
func FuzzAdmit(f *testing.F) {
	f.Add(startupPacket(map[string]string{"user": "app", "database": "app"}))
	f.Add([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f})
	f.Add([]byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add(append(startupPacket(map[string]string{"user": "app"}), 'p', 0, 0, 0, 30, 'S', 'C', 'R', 'A', 'M', '-', 'S', 'H', 'A', '-', '2', '5', '6', 0, 0, 0, 0, 8, 'n', ',', ',', 'n', '=', ',', 'r', '='))
	s := testServer(f, 100*time.Millisecond)
	defer s.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		runClient(t, s, in)
	})
}
