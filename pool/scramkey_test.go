package pool

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// creds derives the stored credentials of password under salt and iters,
// as PostgreSQL stores a verifier.
func credsOf(t *testing.T, password, salt string, iters int) scram.StoredCredentials {
	t.Helper()
	client, err := scram.SHA256.NewClientUnprepped("", password, "")
	if err != nil {
		t.Fatal(err)
	}
	return client.GetStoredCredentials(scram.KeyFactors{Salt: salt, Iters: iters})
}

func secretOf(c scram.StoredCredentials) *SCRAMSecret {
	return NewSCRAMSecret([]byte(c.Salt), c.Iters, c.StoredKey, c.ServerKey)
}

// proveClientKey runs a SCRAM exchange between a password client and an
// xdg-go server holding c, recovers the ClientKey from the three messages
// as the proxy does, and returns it.
func proveClientKey(t *testing.T, password string, c scram.StoredCredentials, authzid string) []byte {
	t.Helper()
	srv, _ := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return c, nil })
	sconv := srv.NewConversation()
	client, _ := scram.SHA256.NewClientUnprepped("", password, authzid)
	cconv := client.NewConversation()
	c1, _ := cconv.Step("")
	s1, err := sconv.Step(c1)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := cconv.Step(s1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sconv.Step(c2); err != nil || !sconv.Valid() {
		t.Fatalf("server refused the client: %v", err)
	}
	key, err := RecoverClientKey(c1, s1, c2, c.StoredKey)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// The recovered key is RFC 5802's ClientKey = HMAC(SaltedPassword,
// "Client Key"), also with an authzid in the GS2 header; a proof made for
// other credentials is refused.
func TestRecoverClientKey(t *testing.T) {
	c := credsOf(t, "s3cret", "0123456789abcdef", 4096)
	for _, authzid := range []string{"", "some,one"} {
		key := proveClientKey(t, "s3cret", c, authzid)
		h := sha256.Sum256(key)
		if !hmac.Equal(h[:], c.StoredKey) {
			t.Fatalf("authzid %q: H(ClientKey) is not StoredKey", authzid)
		}
	}
	other := credsOf(t, "other", "0123456789abcdef", 4096)
	srv, _ := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return c, nil })
	sconv := srv.NewConversation()
	client, _ := scram.SHA256.NewClientUnprepped("", "s3cret", "")
	cconv := client.NewConversation()
	c1, _ := cconv.Step("")
	s1, _ := sconv.Step(c1)
	c2, _ := cconv.Step(s1)
	if _, err := RecoverClientKey(c1, s1, c2, other.StoredKey); err == nil {
		t.Fatal("a key recovered against another StoredKey was accepted")
	}
	for _, bad := range [][3]string{{"n,n=,r=x", s1, c2}, {c1, s1, "c=biws,r=x"}, {c1, s1, "c=biws,r=x,p=!!"}} {
		if _, err := RecoverClientKey(bad[0], bad[1], bad[2], c.StoredKey); err == nil {
			t.Errorf("malformed messages %q accepted", bad)
		}
	}
	if err := secretOf(c).SetClientKey(make([]byte, 32)); err == nil {
		t.Fatal("SetClientKey accepted a key that does not hash to StoredKey")
	}
}

// scramServerWith runs the server side of SCRAM-SHA-256 holding c; a
// refused proof gets PostgreSQL's 28P01.
func scramServerWith(be *pgproto3.Backend, c scram.StoredCredentials) error {
	srv, _ := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return c, nil })
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
		return nil // the client gave up (a verifier mismatch)
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

// A ClientKey proved by a client logs in to a server holding the same
// verifier, without the password.
func TestDialWithClientKey(t *testing.T) {
	c := credsOf(t, "s3cret", "0123456789abcdef", 4096)
	sec := secretOf(c)
	if err := sec.SetClientKey(proveClientKey(t, "s3cret", c, "")); err != nil {
		t.Fatal(err)
	}
	addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error { return scramServerWith(be, c) })
	conn, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", SCRAM: sec})
	checkLoggedIn(t, conn, err)
}

// A server whose verifier has another salt, or another iteration count,
// is refused before any proof is sent, with a PassThroughError saying
// backend_password is needed; so is a login before any client proved the
// verifier.
func TestDialWithClientKeyRefusals(t *testing.T) {
	c := credsOf(t, "s3cret", "0123456789abcdef", 4096)
	sec := secretOf(c)
	sec.SetClientKey(proveClientKey(t, "s3cret", c, ""))
	for name, server := range map[string]scram.StoredCredentials{
		"salt":       credsOf(t, "s3cret", "fedcba9876543210", 4096),
		"iterations": credsOf(t, "s3cret", "0123456789abcdef", 4097),
	} {
		addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error { return scramServerWith(be, server) })
		_, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", SCRAM: sec})
		var pt *PassThroughError
		if !errors.As(err, &pt) || !strings.Contains(pt.Reason, "verifier for this role differs") || !strings.Contains(pt.Reason, "backend_password") {
			t.Errorf("%s differs: %v", name, err)
		}
	}
	addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
		be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}})
		be.Flush()
		be.Receive()
		return nil
	})
	_, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", SCRAM: secretOf(c)})
	var pt *PassThroughError
	if !errors.As(err, &pt) || !strings.Contains(pt.Reason, "no client has authenticated") {
		t.Errorf("no key yet: %v", err)
	}
}

// A server asking for md5 gets the answer made from the stored hash,
// which is the answer the password would give; one asking for md5 or a
// cleartext password from a SCRAM secret gets nothing.
func TestDialWithMD5Hash(t *testing.T) {
	salt := [4]byte{9, 8, 7, 6}
	addr := fakeServer(t, func(be *pgproto3.Backend, sm *pgproto3.StartupMessage) error {
		be.Send(&pgproto3.AuthenticationMD5Password{Salt: salt})
		be.Flush()
		be.SetAuthType(pgproto3.AuthTypeMD5Password)
		m, err := be.Receive()
		if err != nil {
			return err
		}
		if pm, ok := m.(*pgproto3.PasswordMessage); !ok || pm.Password != md5Password("u", "s3cret", salt) {
			return errors.New("md5 answer not the password's")
		}
		return loggedIn(be)
	})
	hash := "md5" + strings.ToUpper(md5hex("s3cretu"))
	conn, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", MD5: hash})
	checkLoggedIn(t, conn, err)

	c := credsOf(t, "s3cret", "0123456789abcdef", 4096)
	for _, ask := range []pgproto3.BackendMessage{&pgproto3.AuthenticationMD5Password{Salt: salt}, &pgproto3.AuthenticationCleartextPassword{}} {
		addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
			be.Send(ask)
			be.Flush()
			be.Receive()
			return nil
		})
		_, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", SCRAM: secretOf(c)})
		var pt *PassThroughError
		if !errors.As(err, &pt) || !strings.Contains(pt.Reason, "set backend_password") {
			t.Errorf("%T: %v", ask, err)
		}
	}
	// An md5 hash answers md5 only: a server asking for SCRAM or a
	// cleartext password gets nothing, and the error names
	// backend_password.
	for _, ask := range []pgproto3.BackendMessage{&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}, &pgproto3.AuthenticationCleartextPassword{}} {
		addr := fakeServer(t, func(be *pgproto3.Backend, _ *pgproto3.StartupMessage) error {
			be.Send(ask)
			be.Flush()
			be.Receive()
			return nil
		})
		_, err := Dialer{}.Dial(context.Background(), addr, Credentials{User: "u", MD5: hash})
		var pt *PassThroughError
		if !errors.As(err, &pt) || !strings.Contains(pt.Reason, "set backend_password") {
			t.Errorf("md5 hash, server asks %T: %v", ask, err)
		}
	}
}

// Nothing prints a secret's keys.
func TestSCRAMSecretRedacted(t *testing.T) {
	sec := NewSCRAMSecret([]byte("salt"), 4096, make([]byte, 32), make([]byte, 32))
	cred := Credentials{User: "u", SCRAM: sec}
	for _, s := range []string{fmt.Sprintf("%v", cred), fmt.Sprintf("%+v", cred), fmt.Sprintf("%#v", cred), fmt.Sprint(sec)} {
		if !strings.Contains(s, "redacted") || strings.Contains(s, "4096") {
			t.Errorf("%q", s)
		}
	}
}
