package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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

// A startup packet length outside 8..10004 closes the connection at once
// and without a word, as PostgreSQL 15 does (it logs "invalid length of
// startup packet"). The client keeps its side open: the proxy must not wait
// for more bytes or for the login timeout (a minute here) before closing.
// Checked against a real server in test/e2e TestStartupCloseLikePostgres.
func TestAdmitInvalidStartupLengthClosesAtOnce(t *testing.T) {
	s := testServer(t, time.Minute)
	defer s.Close()
	ssl := []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"length 2^31-1", []byte{0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0}},
		{"length 0x7f000000", []byte{0x7f, 0, 0, 0, 0, 3, 0, 0}},
		{"length 10005", []byte{0, 0, 0x27, 0x15, 0, 3, 0, 0}},
		{"length 7", []byte{0, 0, 0, 7, 0, 3, 0}},
		{"length 4", []byte{0, 0, 0, 4}},
		{"length 0", []byte{0, 0, 0, 0}},
		{"negative length", []byte{0xff, 0xff, 0xff, 0xff, 0, 3, 0, 0}},
		{"garbage text", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"after a declined SSLRequest", append(append([]byte{}, ssl...), 0, 0, 0, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			start := time.Now()
			c.SetDeadline(start.Add(5 * time.Second))
			in := tc.in
			if bytes.HasPrefix(in, ssl) {
				c.Write(ssl)
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err != nil || b[0] != 'N' {
					t.Fatalf("SSLRequest answered %q, %v", b, err)
				}
				in = in[len(ssl):]
			}
			if _, err := c.Write(in); err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %v (answered %q so far)", time.Since(start).Round(time.Millisecond), out)
			}
			if err != nil && !isConnReset(err) {
				t.Fatal(err)
			}
			if len(out) != 0 {
				t.Fatalf("proxy answered %q, want nothing", out)
			}
			<-done
		})
	}
}

// During authentication PostgreSQL 15 stays silent on EOF before the next
// message (psql does this before prompting for a password) and answers
// another message type with FATAL 08P01. A SASL message cut short by EOF,
// or with a length word outside 4..1024, fails the login (FATAL 28P01); an
// md5 password message in that state (length outside 4..65535) closes the
// connection silently. The proxy does the same; checked against a real
// server in test/e2e TestStartupCloseLikePostgres.
func TestAdmitEOFAndTerminateDuringAuthentication(t *testing.T) {
	s := testServer(t, 2*time.Second)
	defer s.Close()
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	startup := startupPacket(map[string]string{"user": "app", "database": "app"})
	md5Startup := startupPacket(map[string]string{"user": "md5app", "database": "app"})
	terminate := []byte{'X', 0, 0, 0, 4}
	sasl := []byte{'p', 0, 0, 0, 30, 'S', 'C', 'R', 'A', 'M', '-', 'S', 'H', 'A', '-', '2', '5', '6', 0, 0, 0, 0, 8, 'n', ',', ',', 'n', '=', ',', 'r', '='}
	const failed = `FATAL 28P01 password authentication failed for user "app"`
	for _, tc := range []struct {
		name string
		in   []byte
		// want: the authentication request the proxy sends (10 SASL, 5
		// md5), then the ErrorResponse ("" for none) before it closes.
		request byte
		want    string
	}{
		{"EOF", startup, 10, ""},
		{"Terminate", cat(startup, terminate), 10, "FATAL 08P01 expected SASL response, got message type 88"},
		{"Query", cat(startup, []byte{'Q', 0, 0, 0, 5, 0}), 10, "FATAL 08P01 expected SASL response, got message type 81"},
		{"type byte, then EOF", cat(startup, []byte{'p'}), 10, failed},
		{"EOF inside the length word", cat(startup, []byte{'p', 0, 0}), 10, failed},
		{"EOF inside SASLInitialResponse", cat(startup, sasl[:20]), 10, failed},
		{"SASL length 3", cat(startup, []byte{'p', 0, 0, 0, 3}), 10, failed},
		{"SASL length 1025", cat(startup, []byte{'p', 0, 0, 4, 1}, make([]byte, 1021)), 10, failed},
		{"SASL length 1024 is read", cat(startup, []byte{'p', 0, 0, 4, 0}, make([]byte, 1020)), 10,
			"FATAL 08P01 client selected an invalid SASL authentication mechanism"},
		{"SASL length 2^31-1", cat(startup, []byte{'p', 0x7f, 0xff, 0xff, 0xff}), 10, failed},
		{"md5: EOF", md5Startup, 5, ""},
		{"md5: Terminate", cat(md5Startup, terminate), 5, "FATAL 08P01 expected password response, got message type 88"},
		{"md5: EOF inside the message", cat(md5Startup, []byte{'p', 0, 0, 0, 40, 'm', 'd'}), 5, ""},
		{"md5: length 3", cat(md5Startup, []byte{'p', 0, 0, 0, 3}), 5, ""},
		{"md5: length 65536", cat(md5Startup, []byte{'p', 0, 1, 0, 0}), 5, ""},
		{"md5: wrong password", cat(md5Startup, []byte{'p', 0, 0, 0, 9, 'm', 'd', '5', 'x', 0}), 5, `FATAL 28P01 password authentication failed for user "md5app"`},
		{"md5: two strings", cat(md5Startup, []byte{'p', 0, 0, 0, 10, 'm', 'd', '5', 0, 'x', 0}), 5, "FATAL 08P01 invalid password packet size"},
		{"md5: empty password", cat(md5Startup, []byte{'p', 0, 0, 0, 5, 0}), 5, "FATAL 28P01 empty password returned by client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runClientHalfClose(t, s, tc.in)
			// The authentication request: 'R', length, code.
			if len(out) < 9 || out[0] != 'R' || out[8] != tc.request {
				t.Fatalf("proxy answered %q, want authentication request %d first", out, tc.request)
			}
			n := int(binary.BigEndian.Uint32(out[1:5])) + 1
			rest := out[n:]
			got := ""
			if e := errorIn(rest); e != nil {
				got = e.Severity + " " + e.Code + " " + e.Message
			} else if len(rest) > 0 {
				got = fmt.Sprintf("%q", rest)
			}
			if got != tc.want {
				t.Fatalf("after the request the proxy answered %s, want %q", got, tc.want)
			}
		})
	}
}
