package e2e

import (
	"context"
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
	"syscall"
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

// TestBackendTLS: backend_tls_mode encrypts the proxy's server connections
// (the server reports its own side of the link in pg_stat_ssl).
func TestBackendTLS(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	enableServerSSL(t, ctx, cl.Primary)
	for _, tc := range []struct {
		mode string
		want string
	}{{"disable", "f"}, {"prefer", "t"}, {"require", "t"}} {
		px := kinetictest.Start(t, cl, kinetictest.Params{BackendTLSMode: tc.mode})
		c := connect(t, ctx, px.AppDSN())
		var ssl bool
		if err := c.QueryRow(ctx, "select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ssl)[:1] != tc.want {
			t.Errorf("backend_tls_mode=%s: server connection ssl = %v", tc.mode, ssl)
		}
		c.Close(ctx)
	}
}

// enableServerSSL turns TLS on for s (certificate in its data directory,
// owned by the server's OS user), by reload. Other tests are unaffected:
// TLS stays optional for clients.
func enableServerSSL(t *testing.T, ctx context.Context, s *pgtest.Server) {
	t.Helper()
	cert, key := selfSigned(t)
	fi, err := os.Stat(s.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	for src, name := range map[string]string{cert: "kinetic-test.crt", key: "kinetic-test.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(s.DataDir, name)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dst, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		"alter system set ssl_cert_file = 'kinetic-test.crt'",
		"alter system set ssl_key_file = 'kinetic-test.key'",
		"alter system set ssl = on",
		"select pg_reload_conf()",
	} {
		if err := s.Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	for {
		v, err := s.QueryString(ctx, "show ssl")
		if err != nil {
			t.Fatal(err)
		}
		if v == "on" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("ssl did not turn on after reload")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
