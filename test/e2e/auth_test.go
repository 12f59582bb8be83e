package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/md5"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestWrongPasswordAndUnknownUser get PostgreSQL's own 28P01 wording; an
// unknown user is indistinguishable from a wrong password.
func TestWrongPasswordAndUnknownUser(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct{ user, pass string }{{"app", "wrong"}, {"nobody", "whatever"}, {"md5user", "wrong"}} {
		_, err := pgx.Connect(ctx, px.DSN(tc.user, tc.pass, "app"))
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "28P01" || pe.Severity != "FATAL" ||
			pe.Message != fmt.Sprintf("password authentication failed for user %q", tc.user) {
			t.Errorf("%s/%s: got %v", tc.user, tc.pass, err)
		}
	}
}

// TestUnknownDatabase gets 3D000 with PostgreSQL's wording.
func TestUnknownDatabase(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	_, err := pgx.Connect(ctx, px.DSN("app", "app-secret", "no_such_db"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "3D000" || pe.Message != `database "no_such_db" does not exist` {
		t.Fatalf("unknown database: %v", err)
	}
}

// TestSecretsInEveryForm: clients authenticate against plaintext, SCRAM
// verifier and md5-hash secrets; the proxy logs in to the server with the
// backend credentials (SCRAM for app, md5 for md5user).
func TestSecretsInEveryForm(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	verifier, err := cl.Primary.QueryString(ctx, "select rolpassword from pg_authid where rolname = 'app'")
	if err != nil || !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Fatalf("verifier of app: %q %v", verifier, err)
	}
	extra := fmt.Sprintf(`
[[users]]
name = "viaverifier"
password = %q
backend_user = "app"
backend_password = "app-secret"

[[users]]
name = "viamd5"
password = "md5%s"
backend_user = "md5user"
backend_password = "md5-secret"
`, verifier, md5hex("md5-secret"+"viamd5"))
	px := kinetictest.Start(t, cl, kinetictest.Params{Extra: extra})
	for _, tc := range []struct{ user, pass, serverUser string }{
		{"app", "app-secret", "app"},         // plaintext secret, SCRAM on both sides
		{"md5user", "md5-secret", "md5user"}, // plaintext secret, md5 towards the server
		{"viaverifier", "app-secret", "app"}, // SCRAM verifier secret
		{"viamd5", "md5-secret", "md5user"},  // md5 hash secret, md5 challenge to the client
	} {
		c, err := pgx.Connect(ctx, px.DSN(tc.user, tc.pass, "app"))
		if err != nil {
			t.Errorf("%s: %v", tc.user, err)
			continue
		}
		var who string
		if err := c.QueryRow(ctx, "select current_user").Scan(&who); err != nil || who != tc.serverUser {
			t.Errorf("%s: current_user = %q %v, want %q", tc.user, who, err, tc.serverUser)
		}
		c.Close(ctx)
		if _, err := pgx.Connect(ctx, px.DSN(tc.user, tc.pass+"x", "app")); pgCode(err) != "28P01" {
			t.Errorf("%s with a wrong password: %v", tc.user, err)
		}
	}
}

// TestTLS: tls_mode = require serves sslmode=require clients (SCRAM with
// channel binding over TLS) and refuses plaintext ones; allow serves both.
func TestTLS(t *testing.T) {
	cl := pgtest.Shared(t)
	cert, key := selfSigned(t)
	ctx := ctxT(t, 30*time.Second)

	px := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "require", TLSCert: cert, TLSKey: key})
	tlsDSN := strings.Replace(px.AppDSN(), "sslmode=disable", "sslmode=require", 1)
	c := connect(t, ctx, tlsDSN)
	if queryInt(t, ctx, c, "select 1") != 1 {
		t.Fatal("query over TLS failed")
	}
	if !isTLS(c.PgConn()) {
		t.Fatal("client connection is not TLS with sslmode=require")
	}
	cb := strings.Replace(px.AppDSN(), "sslmode=disable", "sslmode=require&channel_binding=require", 1)
	if c2, err := pgx.Connect(ctx, cb); err != nil {
		t.Fatalf("channel_binding=require: %v", err)
	} else {
		c2.Close(ctx)
	}
	_, err := pgx.Connect(ctx, px.AppDSN())
	if pgCode(err) != "28000" {
		t.Fatalf("plaintext client with tls_mode=require: %v, want 28000", err)
	}
	// libpq (psql) over TLS, with its default channel_binding=prefer.
	out, err := exec.CommandContext(ctx, pgtest.Bin("psql"), "-X", "-At", "-c", "select 'tls-ok'",
		strings.Replace(px.AppDSN(), "sslmode=disable", "sslmode=require", 1)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "tls-ok" {
		t.Fatalf("psql over TLS: %v\n%s", err, out)
	}

	allow := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "allow", TLSCert: cert, TLSKey: key})
	for _, mode := range []string{"disable", "require"} {
		c, err := pgx.Connect(ctx, strings.Replace(allow.AppDSN(), "sslmode=disable", "sslmode="+mode, 1))
		if err != nil {
			t.Fatalf("tls_mode=allow, sslmode=%s: %v", mode, err)
		}
		if isTLS(c.PgConn()) != (mode == "require") {
			t.Fatalf("tls_mode=allow, sslmode=%s: TLS = %v", mode, isTLS(c.PgConn()))
		}
		c.Close(ctx)
	}
}

func isTLS(c *pgconn.PgConn) bool {
	_, ok := c.Conn().(interface {
		Handshake() error
	})
	return ok
}

// selfSigned writes a throwaway certificate and key for 127.0.0.1.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	return certFile, keyFile
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
