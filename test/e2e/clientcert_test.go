package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
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

// testCA is a throwaway certificate authority written to dir.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	file    string // the CA certificate, PEM
	dir     string
	serials int64
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, dir: t.TempDir(), serials: 1}
	ca.file = filepath.Join(ca.dir, "ca.crt")
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for cn signed by the CA and its key, for a
// client (or a server when server is set: 127.0.0.1 and localhost).
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serials++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serials), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(ca.dir, strings.ReplaceAll(cn, " ", "_")+"-"+big.NewInt(ca.serials).String())
	certFile, keyFile = base+".crt", base+".key"
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kd)
	return certFile, keyFile
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// certDSN is a DSN through px over TLS (sslmode=require: the proxy's own
// certificate is not checked), with a client certificate when certFile is
// set and a password when password is.
func certDSN(px *kinetictest.Proxy, user, password, db, certFile, keyFile string) string {
	u := url.URL{Scheme: "postgres", Host: px.Addr, Path: "/" + db, User: url.User(user)}
	if password != "" {
		u.User = url.UserPassword(user, password)
	}
	q := url.Values{"sslmode": {"require"}}
	if certFile != "" {
		q.Set("sslcert", certFile)
		q.Set("sslkey", keyFile)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// certUsers are the [[users]] of the client-certificate tests: svc logs in
// by certificate only (CN svc) and uses app's credentials on the servers;
// mapped's certificate name is "Mapped Service".
const certUsers = `
[[users]]
name = "svc"
auth = "cert"
backend_user = "app"
backend_password = "app-secret"

[[users]]
name = "mapped"
auth = "cert"
cert_cn = "Mapped Service"
backend_user = "app"
backend_password = "app-secret"
`

// loginAs connects and returns current_user on the server, or the error.
func loginAs(ctx context.Context, dsn string) (string, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	var who string
	err = c.QueryRow(ctx, "select current_user").Scan(&who)
	return who, err
}

// TestClientCertificates: tls_mode verify-full, verify-ca, require and
// allow with tls_ca_file, against real PostgreSQL through pgx: which
// certificates log in as which [[users]] entry, and what is refused with
// what.
func TestClientCertificates(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	ca, other := newTestCA(t, "kinetic test CA"), newTestCA(t, "another CA")
	srvCert, srvKey := ca.issue(t, "127.0.0.1", true)
	type pair struct{ cert, key string }
	var svc, app, mallory, mapped, mappedByName, foreign pair
	svc.cert, svc.key = ca.issue(t, "svc", false)
	app.cert, app.key = ca.issue(t, "app", false)
	mallory.cert, mallory.key = ca.issue(t, "mallory", false)
	mapped.cert, mapped.key = ca.issue(t, "Mapped Service", false)
	mappedByName.cert, mappedByName.key = ca.issue(t, "mapped", false)
	foreign.cert, foreign.key = other.issue(t, "svc", false)

	start := func(mode string) *kinetictest.Proxy {
		return kinetictest.Start(t, cl, kinetictest.Params{TLSMode: mode, TLSCert: srvCert, TLSKey: srvKey, TLSCA: ca.file, Extra: certUsers})
	}
	const (
		ok         = ""
		needCert   = "28000 connection requires a valid client certificate"
		certFailed = "28000 certificate authentication failed for user"
		needTLS    = "28000 pg-kinetic: SSL connection is required"
		badPass    = "28P01 password authentication failed"
		// A certificate of another CA: Go's TLS client (pgx) sends only a
		// certificate of one of the CAs the server names in its
		// CertificateRequest, so it sends none and is refused as without
		// one. libpq sends it anyway and the handshake refuses it
		// (TestClientCertificatesPsql).
		foreignCA = needCert
	)
	type login struct {
		name, user, password string
		cert                 pair
		plain                bool   // no TLS at all
		want                 string // ok, or the start of "CODE message"
		serverUser           string
	}
	for _, tc := range []struct {
		mode   string
		logins []login
	}{
		{"verify-full", []login{
			{"cert user, its certificate", "svc", "", svc, false, ok, "app"},
			{"cert user, mapped name", "mapped", "", mapped, false, ok, "app"},
			{"password user, its certificate and password", "app", "app-secret", app, false, ok, "app"},
			{"cert user, no certificate", "svc", "", pair{}, false, needCert, ""},
			{"cert user, certificate of another CA", "svc", "", foreign, false, foreignCA, ""},
			{"cert user, another user's certificate", "svc", "", mallory, false, certFailed, ""},
			{"mapped user, certificate CN equal to its user name", "mapped", "", mappedByName, false, certFailed, ""},
			{"password user, another user's certificate", "app", "app-secret", mallory, false, certFailed, ""},
			{"password user, its certificate, wrong password", "app", "wrong", app, false, badPass, ""},
			{"password user, no certificate", "app", "app-secret", pair{}, false, needCert, ""},
			{"no TLS", "app", "app-secret", pair{}, true, needTLS, ""},
		}},
		{"verify-ca", []login{
			{"password user, another user's certificate", "app", "app-secret", mallory, false, ok, "app"},
			{"cert user, its certificate", "svc", "", svc, false, ok, "app"},
			{"cert user, another user's certificate", "svc", "", mallory, false, certFailed, ""},
			{"password user, no certificate", "app", "app-secret", pair{}, false, needCert, ""},
			{"password user, certificate of another CA", "app", "app-secret", foreign, false, foreignCA, ""},
			{"password user, wrong password", "app", "wrong", app, false, badPass, ""},
			{"no TLS", "app", "app-secret", pair{}, true, needTLS, ""},
		}},
		{"require", []login{
			{"password user, no certificate", "app", "app-secret", pair{}, false, ok, "app"},
			{"cert user, its certificate", "svc", "", svc, false, ok, "app"},
			{"cert user, no certificate", "svc", "", pair{}, false, needCert, ""},
			{"cert user, another user's certificate", "svc", "", mallory, false, certFailed, ""},
			{"cert user, certificate of another CA", "svc", "", foreign, false, foreignCA, ""},
		}},
		{"allow", []login{
			{"cert user without TLS", "svc", "", pair{}, true, needCert, ""},
			{"cert user, its certificate", "svc", "", svc, false, ok, "app"},
			{"password user without TLS", "app", "app-secret", pair{}, true, ok, "app"},
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			px := start(tc.mode)
			for _, l := range tc.logins {
				dsn := certDSN(px, l.user, l.password, "app", l.cert.cert, l.cert.key)
				if l.plain {
					dsn = px.DSN(l.user, l.password, "app")
				}
				who, err := loginAs(ctx, dsn)
				switch got := describeLoginErr(err); {
				case l.want == ok && err != nil:
					t.Errorf("%s: %v, want a login", l.name, err)
				case l.want == ok && who != l.serverUser:
					t.Errorf("%s: current_user %q on the server, want %q", l.name, who, l.serverUser)
				case l.want != ok && !strings.HasPrefix(got, l.want):
					t.Errorf("%s: got %q, want %q", l.name, got, l.want)
				}
			}
		})
	}
}

// describeLoginErr renders a refused login as "CODE message" (a FATAL the
// proxy sent) or the error's text (anything else, such as a TLS alert).
func describeLoginErr(err error) string {
	if err == nil {
		return ""
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Severity != "FATAL" {
			return pe.Severity + " " + pe.Code + " " + pe.Message
		}
		return pe.Code + " " + pe.Message
	}
	return err.Error()
}

// TestClientCertificatesPsql: libpq's sslcert/sslkey log a cert user in
// through psql (no password prompt: -w fails instead of asking); the same
// psql without the certificate is refused with 28000, and with a
// certificate of another CA the TLS handshake itself fails.
func TestClientCertificatesPsql(t *testing.T) {
	psql := pgtest.Bin("psql")
	if _, err := os.Stat(psql); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("psql not installed (%v); CI is set, so this is a failure, not a skip", err)
		}
		t.Skipf("psql not installed: %v", err)
	}
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	ca := newTestCA(t, "kinetic test CA")
	srvCert, srvKey := ca.issue(t, "127.0.0.1", true)
	svcCert, svcKey := ca.issue(t, "svc", false)
	foreignCert, foreignKey := newTestCA(t, "another CA").issue(t, "svc", false)
	px := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "verify-full", TLSCert: srvCert, TLSKey: srvKey, TLSCA: ca.file, Extra: certUsers})
	run := func(dsn string) (string, error) {
		cmd := exec.CommandContext(ctx, psql, "-X", "-w", "-At", "-c", "select current_user", dsn)
		cmd.Env = append(os.Environ(), "PGPASSWORD=", "HOME="+t.TempDir()) // no ~/.postgresql certificates
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := run(certDSN(px, "svc", "", "app", svcCert, svcKey))
	if err != nil || out != "app" {
		t.Fatalf("psql with sslcert/sslkey as svc: %v\n%s", err, out)
	}
	out, err = run(certDSN(px, "svc", "", "app", "", ""))
	if err == nil || !strings.Contains(out, "connection requires a valid client certificate") {
		t.Fatalf("psql without a certificate: %v\n%s", err, out)
	}
	out, err = run(certDSN(px, "svc", "", "app", foreignCert, foreignKey))
	// "SSL error: tlsv1 alert unknown ca": refused inside the handshake.
	if err == nil || !strings.Contains(out, "SSL error") || !strings.Contains(out, "alert unknown ca") {
		t.Fatalf("psql with a certificate of another CA: %v\n%s", err, out)
	}
	t.Logf("psql with a certificate of another CA: %s", out)
}

// TestAdminConsoleRequireTLS: [admin] require_tls refuses a console login
// without TLS before authentication (28000, even with a wrong password) and
// serves it over TLS (SHOW CONFIG); the routes stay open to plaintext
// clients.
func TestAdminConsoleRequireTLS(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	ca := newTestCA(t, "kinetic test CA")
	cert, key := ca.issue(t, "127.0.0.1", true)
	px := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "allow", TLSCert: cert, TLSKey: key, TLSCA: ca.file,
		AdminRequireTLS: true, Extra: certUsers})
	const want = "28000 pg-kinetic: the admin console requires an SSL connection ([admin] require_tls = true)"
	for _, pass := range []string{pgtest.AppPassword, "wrong"} {
		_, err := pgx.Connect(ctx, px.DSN(pgtest.AppUser, pass, "pgkinetic"))
		if got := describeLoginErr(err); !strings.HasPrefix(got, want) {
			t.Errorf("console without TLS (password %q): %q, want %q", pass, got, want)
		}
	}
	c, err := pgx.Connect(ctx, certDSN(px, pgtest.AppUser, pgtest.AppPassword, "pgkinetic", "", ""))
	if err != nil {
		t.Fatalf("console over TLS: %v", err)
	}
	defer c.Close(context.Background())
	if !isTLS(c.PgConn()) {
		t.Fatal("console connection is not TLS")
	}
	// SHOW CONFIG over TLS: the console works and names its TLS settings;
	// a cert user's row shows its certificate name instead of a password.
	rows, err := c.Query(ctx, "SHOW CONFIG", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	conf := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		conf[k] = v
	}
	if rows.Err() != nil || conf["admin.require_tls"] != "true" || conf["server.tls_mode"] != "allow" ||
		conf["users.svc.auth"] != "cert cn=svc" || conf["users.app.password"] != "(redacted)" {
		t.Fatalf("SHOW CONFIG over TLS: %v %v", conf, rows.Err())
	}
	if who, err := loginAs(ctx, px.AppDSN()); err != nil || who != pgtest.AppUser {
		t.Fatalf("route without TLS under admin require_tls: %q %v", who, err)
	}
}

// TestCertUserWithoutAnySecret: a cert user with no backend_password logs
// in to the servers without a password, which works where the server does
// not ask for one (pgtest trusts the postgres role): a config with no
// secret of this user at all.
func TestCertUserWithoutAnySecret(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	ca := newTestCA(t, "kinetic test CA")
	srvCert, srvKey := ca.issue(t, "127.0.0.1", true)
	opsCert, opsKey := ca.issue(t, "ops", false)
	px := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "verify-full", TLSCert: srvCert, TLSKey: srvKey, TLSCA: ca.file,
		Extra: "\n[[users]]\nname = \"ops\"\nauth = \"cert\"\nbackend_user = \"postgres\"\n"})
	who, err := loginAs(ctx, certDSN(px, "ops", "", "app", opsCert, opsKey))
	if err != nil || who != "postgres" {
		t.Fatalf("cert user without backend_password: current_user %q, %v; want postgres", who, err)
	}
}
