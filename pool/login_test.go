package pool

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// fakeServer accepts one connection on loopback and runs script on it
// with a pgproto3.Backend after reading the StartupMessage (declining any
// SSLRequest before it, counted in sslRequests). Its error, if any, fails
// the test.
func fakeServer(t *testing.T, script func(be *pgproto3.Backend, startup *pgproto3.StartupMessage) error) string {
	return fakeServerCounting(t, new(atomic.Int32), script)
}

func fakeServerCounting(t *testing.T, sslRequests *atomic.Int32, script func(be *pgproto3.Backend, startup *pgproto3.StartupMessage) error) string {
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
		m, err := be.ReceiveStartupMessage()
		for err == nil {
			if _, ok := m.(*pgproto3.SSLRequest); !ok {
				break
			}
			sslRequests.Add(1)
			nc.Write([]byte{'N'}) // no TLS here: go on in plaintext
			m, err = be.ReceiveStartupMessage()
		}
		if err != nil {
			done <- err
			return
		}
		sm, ok := m.(*pgproto3.StartupMessage)
		if !ok {
			done <- errors.New("expected a StartupMessage")
			return
		}
		done <- script(be, sm)
	}()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("fake server: %v", err)
		}
	})
	return ln.Addr().String()
}

// loggedIn ends a login the way PostgreSQL does, then sends a NoticeResponse
// in the same write: Dial must leave it buffered in Conn.R.
func loggedIn(be *pgproto3.Backend) error {
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.0"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 4242, SecretKey: []byte{1, 2, 3, 4}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	be.Send(&pgproto3.NoticeResponse{Severity: "NOTICE", Message: "after login"})
	if err := be.Flush(); err != nil {
		return err
	}
	_, err := be.Receive() // until the client closes
	if err != nil {
		return nil
	}
	return errors.New("client sent something after login")
}

func checkLoggedIn(t *testing.T, c *Conn, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PID != 4242 || string(c.SecretKey) != "\x01\x02\x03\x04" || c.Params["server_version"] != "15.0" {
		t.Fatalf("login state: pid %d key %v params %v", c.PID, c.SecretKey, c.Params)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := c.R.Peek(1)
	if err != nil || b[0] != 'N' {
		t.Fatalf("the message after ReadyForQuery: %q %v", b, err)
	}
}

const trickyPassword = "pass\u2168\u00a0word" // NFKC: "passIX word"

func TestDialCleartextSendsTheRawPassword(t *testing.T) {
	addr := fakeServer(t, func(be *pgproto3.Backend, sm *pgproto3.StartupMessage) error {
		if sm.Parameters["user"] != "u" || sm.Parameters["database"] != "d" || sm.Parameters["replication"] != "true" {
			return errors.New("startup parameters: " + strings.Join([]string{sm.Parameters["user"], sm.Parameters["database"], sm.Parameters["replication"]}, ","))
		}
		be.Send(&pgproto3.AuthenticationCleartextPassword{})
		be.Flush()
		be.SetAuthType(pgproto3.AuthTypeCleartextPassword)
		m, err := be.Receive()
		if err != nil {
			return err
		}
		if pm, ok := m.(*pgproto3.PasswordMessage); !ok || pm.Password != trickyPassword {
			return errors.New("cleartext password not sent as is")
		}
		return loggedIn(be)
	})
	c, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", Password: trickyPassword, Database: "d", Params: map[string]string{"replication": "true"}})
	checkLoggedIn(t, c, err)
}

func TestDialMD5HashesTheRawPassword(t *testing.T) {
	salt := [4]byte{9, 8, 7, 6}
	addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
		be.Send(&pgproto3.AuthenticationMD5Password{Salt: salt})
		be.Flush()
		be.SetAuthType(pgproto3.AuthTypeMD5Password)
		m, err := be.Receive()
		if err != nil {
			return err
		}
		// md5(md5(password || user) || salt), computed here independently.
		want := "md5" + md5hex(md5hex(trickyPassword+"u")+string(salt[:]))
		if pm, ok := m.(*pgproto3.PasswordMessage); !ok || pm.Password != want {
			return errors.New("md5 answer not made from the raw password")
		}
		return loggedIn(be)
	})
	c, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", Password: trickyPassword})
	checkLoggedIn(t, c, err)
}

// scramServer runs the server side of SCRAM-SHA-256 with credentials
// derived from secret exactly (no preparation of its own).
func scramServer(be *pgproto3.Backend, secret string) error {
	client, _ := scram.SHA256.NewClientUnprepped("", secret, "")
	creds := client.GetStoredCredentials(scram.KeyFactors{Salt: "0123456789abcdef", Iters: 4096})
	srv, _ := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return creds, nil })
	conv := srv.NewConversation()
	be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}})
	be.Flush()
	be.SetAuthType(pgproto3.AuthTypeSASL)
	m, err := be.Receive()
	if err != nil {
		return err
	}
	init, ok := m.(*pgproto3.SASLInitialResponse)
	if !ok || init.AuthMechanism != "SCRAM-SHA-256" || !strings.HasPrefix(string(init.Data), "n,,n=,r=") {
		return errors.New("bad SASLInitialResponse")
	}
	first, err := conv.Step(string(init.Data))
	if err != nil {
		return err
	}
	be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte(first)})
	be.Flush()
	be.SetAuthType(pgproto3.AuthTypeSASLContinue)
	if m, err = be.Receive(); err != nil {
		return err
	}
	resp, ok := m.(*pgproto3.SASLResponse)
	if !ok {
		return errors.New("expected SASLResponse")
	}
	final, err := conv.Step(string(resp.Data))
	if err != nil || !conv.Valid() {
		be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "u"`})
		be.Flush()
		return nil
	}
	be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte(final)})
	return loggedIn(be)
}

// A server that stored the verifier of PostgreSQL's SASLprep of the
// password accepts the login; one whose verifier was made from the raw
// password (which PostgreSQL never does for a password SASLprep accepts)
// refuses it with its own error, returned as a *ServerError.
func TestDialSCRAMUsesPostgresSASLprep(t *testing.T) {
	addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
		return scramServer(be, "passIX word")
	})
	c, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", Password: trickyPassword})
	checkLoggedIn(t, c, err)

	addr = fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
		return scramServer(be, trickyPassword)
	})
	_, err = Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", Password: trickyPassword})
	var se *ServerError
	if !errors.As(err, &se) || se.Code != "28P01" {
		t.Fatalf("login against a raw-password verifier: %v, want the server's 28P01", err)
	}
}

// The connect timeout bounds a server that accepts and then says nothing.
func TestDialTimesOutOnASilentServer(t *testing.T) {
	addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
		be.Receive() // until the client gives up
		return nil
	})
	start := time.Now()
	_, err := Dialer{ConnectTimeout: 200 * time.Millisecond}.Dial(context.Background(), addr, Credentials{User: "u"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("silent server: %v after %v", err, time.Since(start))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		t.Fatalf("a timeout reported as a server error: %v", err)
	}
}

// require refuses a server that declines TLS; the fake server answers
// SSLRequest 'N' (it reads it as a startup packet with the SSL code).
func TestDialRequireRefusesPlaintext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		be := pgproto3.NewBackend(nc, nc)
		if m, err := be.ReceiveStartupMessage(); err == nil {
			if _, ok := m.(*pgproto3.SSLRequest); ok {
				nc.Write([]byte{'N'})
			}
		}
		be.ReceiveStartupMessage() // until the client closes
	}()
	_, err = Dialer{TLSMode: "require", ConnectTimeout: 5 * time.Second}.Dial(context.Background(), ln.Addr().String(), Credentials{User: "u"})
	if !errors.Is(err, errTLSRefused) {
		t.Fatalf("require against a server without TLS: %v", err)
	}
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// prefer goes on in plaintext, on the same connection, when the server
// declines TLS (as libpq does).
func TestDialPreferContinuesInPlaintext(t *testing.T) {
	var ssl atomic.Int32
	addr := fakeServerCounting(t, &ssl, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
		be.Send(&pgproto3.AuthenticationCleartextPassword{})
		be.Flush()
		be.SetAuthType(pgproto3.AuthTypeCleartextPassword)
		if _, err := be.Receive(); err != nil {
			return err
		}
		return loggedIn(be)
	})
	c, err := Dialer{TLSMode: "prefer", ConnectTimeout: 5 * time.Second}.Dial(context.Background(), addr, Credentials{User: "u", Password: "p"})
	checkLoggedIn(t, c, err)
	if ssl.Load() != 1 {
		t.Fatalf("%d SSLRequests, want 1", ssl.Load())
	}
}
