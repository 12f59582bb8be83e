package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// runClientHalfClose sends in over a real loopback TCP connection, then
// closes the client's write side (EOF for the proxy, the way a client that
// gives up behaves) and returns everything the proxy wrote before it closed
// the connection. net.Pipe cannot half-close, so it cannot show EOF.
func runClientHalfClose(t *testing.T, s *Server, in []byte) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		s.handle(nc)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if len(in) > 0 {
		if _, err := c.Write(in); err != nil {
			t.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil && !isConnReset(err) {
		t.Fatalf("reading the proxy's answer: %v", err)
	}
	<-done
	return out
}

// isConnReset: a close with unread input makes the kernel reset the
// connection, which the client may see instead of EOF.
func isConnReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// A client that says goodbye (Terminate) or disconnects before or inside
// its startup packet gets no answer at all, as from PostgreSQL 15: there the
// cases below are logged ("incomplete startup packet", "invalid length of
// startup packet") and the connection is closed without a message. Checked
// against a real server in test/e2e TestStartupCloseLikePostgres.
func TestAdmitClosesSilentlyBeforeStartup(t *testing.T) {
	s := testServer(t, 2*time.Second)
	defer s.Close()
	terminate := []byte{'X', 0, 0, 0, 4}
	ssl := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	gss := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30}
	startup := startupPacket(map[string]string{"user": "app", "database": "app"})
	for _, tc := range []struct {
		name string
		in   []byte
		want []byte // the whole answer
	}{
		{"EOF before any byte", nil, nil},
		{"EOF inside the length word", []byte{0, 0}, nil},
		{"EOF inside the startup packet", startup[:len(startup)-3], nil},
		{"Terminate before the startup packet", terminate, nil},
		{"Terminate type byte alone", terminate[:1], nil},
		{"Terminate then a startup packet", append(append([]byte{}, terminate...), startup...), nil},
		{"EOF after SSLRequest", ssl, []byte{'N'}},
		{"EOF after GSSENCRequest", gss, []byte{'N'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := runClientHalfClose(t, s, tc.in); !bytes.Equal(out, tc.want) {
				t.Fatalf("proxy answered %q, want %q", out, tc.want)
			}
		})
	}
	// After the SSLRequest is declined the client continues in plaintext;
	// its Terminate there is still a goodbye before the startup packet.
	t.Run("Terminate after a declined SSLRequest", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if nc, err := ln.Accept(); err == nil {
				s.handle(nc)
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(ssl)
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil || b[0] != 'N' {
			t.Fatalf("SSLRequest answered %q, %v", b, err)
		}
		c.Write(terminate)
		out, _ := io.ReadAll(c)
		if len(out) != 0 {
			t.Fatalf("Terminate after SSLRequest answered %q, want nothing", out)
		}
		<-done
	})
}

// During authentication PostgreSQL 15 stays silent on EOF before the next
// message (psql does this before prompting for a password), but answers a
// Terminate with FATAL 08P01 ("expected SASL response, got message type
// 88"), and so does the proxy.
func TestAdmitEOFAndTerminateDuringAuthentication(t *testing.T) {
	s := testServer(t, 2*time.Second)
	defer s.Close()
	startup := startupPacket(map[string]string{"user": "app", "database": "app"})
	saslOnly := func(out []byte) bool {
		// One AuthenticationSASL message ('R', length, code 10, mechanisms).
		return len(out) > 9 && out[0] == 'R' && int(out[4])+1 == len(out) && out[8] == 10
	}
	t.Run("EOF", func(t *testing.T) {
		if out := runClientHalfClose(t, s, startup); !saslOnly(out) {
			t.Fatalf("proxy answered %q, want the SASL request and nothing else", out)
		}
	})
	t.Run("Terminate", func(t *testing.T) {
		out := runClientHalfClose(t, s, append(append([]byte{}, startup...), 'X', 0, 0, 0, 4))
		if e := errorIn(out); e == nil || e.Severity != "FATAL" || e.Code != "08P01" {
			t.Fatalf("proxy answered %q, want FATAL 08P01", out)
		}
	})
}
