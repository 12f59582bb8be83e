package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestClientCertProblems: the keys of TLS client-certificate authentication
// (tls_mode verify-ca/verify-full, tls_ca_file, [[users]] auth and cert_cn,
// [admin] require_tls) and what validation says about each.
func TestClientCertProblems(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir, "server")
	writeKeyPair(t, dir, "ca")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt")
	server := func(mode string, more ...string) []string {
		return append([]string{"[server]", fmt.Sprintf("tls_mode = %q", mode),
			fmt.Sprintf("tls_cert_file = %q", cert), fmt.Sprintf("tls_key_file = %q", key)}, more...)
	}
	caLine := fmt.Sprintf("tls_ca_file = %q", ca)
	lines := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	certUser := []string{"[[users]]", `name = "svc"`, `auth = "cert"`, `backend_user = "app"`, `backend_password = "app-secret"`}
	tests := []struct {
		name  string
		lines []string
		tail  []string
		want  []want
	}{
		{"verify-full with a CA", server("verify-full", caLine), tail, nil},
		{"verify-ca with a CA", server("verify-ca", caLine), tail, nil},
		{"verify-ca needs tls_ca_file", server("verify-ca"), tail,
			[]want{{1, "server.tls_ca_file", `required when tls_mode is "verify-ca"`}}},
		{"verify-full needs tls_ca_file", server("verify-full"), tail,
			[]want{{1, "server.tls_ca_file", `required when tls_mode is "verify-full"`}}},
		{"tls_ca_file not found", server("verify-ca", `tls_ca_file = "/nonexistent/ca.crt"`), tail,
			[]want{{5, "server.tls_ca_file", `file "/nonexistent/ca.crt" not found`}}},
		{"tls_ca_file not PEM", server("require", fmt.Sprintf("tls_ca_file = %q", garbage)), tail,
			[]want{{5, "server.tls_ca_file", "holds no PEM certificate"}}},
		{"tls_ca_file is a directory", server("verify-full", fmt.Sprintf("tls_ca_file = %q", dir)), tail,
			[]want{{5, "server.tls_ca_file", "is a directory"}}},
		{"tls_ca_file ignored when disabled", []string{"[server]", `tls_ca_file = "/nonexistent/ca.crt"`}, tail, nil},
		{"unknown tls_mode word", []string{"[server]", `tls_mode = "verify"`}, tail,
			[]want{{2, "server.tls_mode", `want one of "disable", "allow", "require", "verify-ca", "verify-full"`}}},

		{"cert user with require and a CA", lines(server("require", caLine), certUser), lines(routesTail), nil},
		{"cert user with verify-full", lines(server("verify-full", caLine), certUser, []string{`cert_cn = "svc.example"`}), tail, nil},
		{"cert user with a password", lines(server("require", caLine), certUser, []string{`password = "x"`}), routesTail,
			[]want{{11, "users[0].password", `must be empty when auth = "cert"`}}},
		{"cert user without TLS", certUser, routesTail,
			[]want{{3, "users[0].auth", `"cert" needs [server] tls_mode other than "disable"`}}},
		{"cert user without a CA", lines(server("allow"), certUser), routesTail,
			[]want{{7, "users[0].auth", `"cert" needs [server] tls_ca_file`}}},
		{"cert user with a hashed backend_password", lines(server("require", caLine),
			[]string{"[[users]]", `name = "svc"`, `auth = "cert"`, `backend_password = "md5` + "0123456789abcdef0123456789abcdef" + `"`}), routesTail,
			[]want{{9, "users[0].backend_password", "must be the plaintext password, not an MD5 hash"}}},
		{"unknown auth word", []string{"[[users]]", `name = "svc"`, `auth = "trust"`}, routesTail,
			[]want{{3, "users[0].auth", `unknown value "trust"; want one of "password", "cert"`}}},
		{"password user still needs a password", []string{"[[users]]", `name = "svc"`, `auth = "password"`}, routesTail,
			[]want{{1, "users[0].password", "required"}}},
		{"cert_cn on a password user without verify-full", lines(server("verify-ca", caLine),
			[]string{"[[users]]", `name = "app"`, `password = "x"`, `cert_cn = "app.example"`}), routesTail,
			[]want{{9, "users[0].cert_cn", `has no effect: it applies to auth = "cert" users and to tls_mode = "verify-full"`}}},
		{"cert_cn on a password user under verify-full", lines(server("verify-full", caLine),
			[]string{"[[users]]", `name = "app"`, `password = "x"`, `cert_cn = "app.example"`}), routesTail, nil},

		{"admin require_tls with TLS", lines(server("require"), []string{"[admin]", "require_tls = true"}), tail, nil},
		{"admin require_tls without TLS", []string{"[admin]", "require_tls = true"}, tail,
			[]want{{2, "admin.require_tls", `needs [server] tls_mode other than "disable"`}}},
		{"admin require_tls not a boolean", lines(server("require"), []string{"[admin]", `require_tls = "yes"`}), tail,
			[]want{{6, "admin.require_tls", "must be a boolean"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(testFile, []byte(withTail(tt.tail, tt.lines...)))
			if tt.want != nil {
				checkProblems(t, err, tt.want)
				return
			}
			if err != nil {
				t.Fatalf("unexpected problems:\n%v", err)
			}
			if c.Server.ClientCertRequired() != (c.Server.TLSMode == TLSVerifyCA || c.Server.TLSMode == TLSVerifyFull) ||
				c.Server.RequiresTLS() != (c.Server.TLSMode != TLSDisable && c.Server.TLSMode != TLSAllow) {
				t.Errorf("tls_mode %q: RequiresTLS %v, ClientCertRequired %v", c.Server.TLSMode, c.Server.RequiresTLS(), c.Server.ClientCertRequired())
			}
		})
	}
}

// TestCertUserDefaults: a [[users]] entry without auth is a password user;
// a cert user's certificate name defaults to its user name and its server
// credentials are its backend_* keys only (it has no password to fall back
// on); tls_ca_file is resolved like the other TLS files.
func TestCertUserDefaults(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir, "server")
	writeKeyPair(t, dir, "ca")
	text := doc(
		"[server]", `tls_mode = "verify-full"`, `tls_cert_file = "server.crt"`, `tls_key_file = "server.key"`, `tls_ca_file = "ca.crt"`,
		"[admin]", `users = ["svc"]`, "require_tls = true",
		"[[users]]", `name = "app"`, `password = "secret"`,
		"[[users]]", `name = "svc"`, `auth = "cert"`, `backend_user = "app"`, `backend_password = "secret"`,
		"[[users]]", `name = "mapped"`, `auth = "cert"`, `cert_cn = "Mapped Service"`,
	) + doc(routesTail...)
	c, err := Parse(filepath.Join(dir, "k.toml"), []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.TLSCAFile != filepath.Join(dir, "ca.crt") {
		t.Errorf("tls_ca_file = %q, want it resolved against the config's directory", c.Server.TLSCAFile)
	}
	if !c.Admin.RequireTLS {
		t.Error("admin.require_tls = true parsed as false")
	}
	app, _ := c.UserByName("app")
	svc, _ := c.UserByName("svc")
	mapped, _ := c.UserByName("mapped")
	if app.Auth != AuthPassword || svc.Auth != AuthCert {
		t.Errorf("auth = %q, %q; want password (the default), cert", app.Auth, svc.Auth)
	}
	if svc.CertName() != "svc" || mapped.CertName() != "Mapped Service" {
		t.Errorf("CertName = %q, %q", svc.CertName(), mapped.CertName())
	}
	if u, p := svc.Backend(); u != "app" || p != "secret" {
		t.Errorf("svc Backend() = %q, %q", u, p)
	}
	if u, p := mapped.Backend(); u != "mapped" || p != "" {
		t.Errorf("mapped Backend() = %q, %q; want its own name and no password", u, p)
	}
	if d := Defaults(); d.Admin.RequireTLS {
		t.Error("admin.require_tls defaults to true")
	}
}
