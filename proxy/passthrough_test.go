package proxy

import (
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/xdg-go/scram"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
)

// TestBackendCredentials: what each kind of [[users]] secret presents to
// the servers. backend_password always wins; without it a verifier is its
// pass-through secret (one per verifier, shared by every user with it), an
// md5 hash answers md5, plaintext is itself.
func TestBackendCredentials(t *testing.T) {
	s := &Server{log: zap.NewNop()}
	v := testVerifier(t, "pw", "saltsaltsalt")
	md5 := "md5" + fmt.Sprintf("%032x", 7)
	for _, tc := range []struct {
		u               config.User
		user, pass, md5 string
		scram           bool
	}{
		{config.User{Name: "a", Password: "plain"}, "a", "plain", "", false},
		{config.User{Name: "a", Password: v}, "a", "", "", true},
		{config.User{Name: "a", Password: v, BackendUser: "b"}, "b", "", "", true},
		{config.User{Name: "a", Password: v, BackendPassword: "bp"}, "a", "bp", "", false},
		{config.User{Name: "a", Password: md5}, "a", "", md5, false},
		{config.User{Name: "a", Password: md5, BackendUser: "b", BackendPassword: "bp"}, "b", "bp", "", false},
	} {
		c := s.backendCredentials(&tc.u, "db")
		if c.User != tc.user || c.Password != tc.pass || c.MD5 != tc.md5 || (c.SCRAM != nil) != tc.scram || c.Database != "db" {
			t.Errorf("%+v: got user %q password %q md5 %q scram %v", tc.u, c.User, c.Password, c.MD5, c.SCRAM != nil)
		}
	}
	one := s.backendCredentials(&config.User{Name: "a", Password: v}, "db").SCRAM
	if two := s.backendCredentials(&config.User{Name: "z", Password: v}, "other").SCRAM; two != one {
		t.Error("one verifier has two secrets")
	}
	if three := s.backendCredentials(&config.User{Name: "a", Password: testVerifier(t, "pw", "othersalt")}, "db").SCRAM; three == one {
		t.Error("another verifier shares the secret")
	}
}

// TestRecordClientKey: a SCRAM exchange against a verifier secret leaves
// its ClientKey on the verifier's pass-through secret; one against a
// plaintext password's derived credentials records nothing.
func TestRecordClientKey(t *testing.T) {
	s := &Server{log: zap.NewNop()}
	v := testVerifier(t, "pw", "saltsaltsalt")
	creds, err := s.storedCredentials(v)
	if err != nil {
		t.Fatal(err)
	}
	sec := s.backendCredentials(&config.User{Name: "a", Password: v}, "db").SCRAM
	if sec.HasClientKey() {
		t.Fatal("a key before any exchange")
	}
	c1, s1, c2 := exchange(t, creds, "pw")
	s.recordClientKey(creds, c1, s1, c2)
	if !sec.HasClientKey() {
		t.Fatal("no key recorded after a verified exchange")
	}

	plainCreds, err := s.storedCredentials("plain")
	if err != nil {
		t.Fatal(err)
	}
	c1, s1, c2 = exchange(t, plainCreds, "plain")
	s.recordClientKey(plainCreds, c1, s1, c2)
	n := 0
	s.scramSecrets.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d pass-through secrets, want only the verifier's", n)
	}
}

// exchange runs a SCRAM exchange of password against creds and returns
// its three client/server messages.
func exchange(t *testing.T, creds scram.StoredCredentials, password string) (c1, s1, c2 string) {
	t.Helper()
	srv, _ := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return creds, nil })
	sconv := srv.NewConversation()
	client, _ := scram.SHA256.NewClientUnprepped("", password, "")
	cconv := client.NewConversation()
	c1, _ = cconv.Step("")
	s1, _ = sconv.Step(c1)
	c2, _ = cconv.Step(s1)
	if _, err := sconv.Step(c2); err != nil || !sconv.Valid() {
		t.Fatalf("exchange refused: %v", err)
	}
	return c1, s1, c2
}

func testVerifier(t *testing.T, password, salt string) string {
	t.Helper()
	client, _ := scram.SHA256.NewClientUnprepped("", password, "")
	c := client.GetStoredCredentials(scram.KeyFactors{Salt: salt, Iters: 4096})
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$4096:%s$%s:%s", enc([]byte(salt)), enc(c.StoredKey), enc(c.ServerKey))
}
