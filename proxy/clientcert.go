package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/pg-kinetic/pg-kinetic/config"
)

// TLS client certificates (docs/behaviour.md, "Client certificates"), the
// shape of PostgreSQL's pg_hba clientcert option and cert method:
//
//   - [server] tls_ca_file set: the handshake asks for a certificate and
//     refuses one that does not chain to the file's CAs (the client sees a
//     TLS alert, as with PostgreSQL's ssl_ca_file). A client may send none.
//   - tls_mode verify-ca: a client without a verified certificate is
//     refused after its StartupMessage, FATAL 28000 "connection requires a
//     valid client certificate"; then it authenticates as its user says.
//   - tls_mode verify-full: as verify-ca, and after authentication the
//     certificate's CN must be the user's certificate name (cert_cn, or the
//     user name): clientcert=verify-full.
//   - [[users]] auth = "cert": no password is asked for; the verified
//     certificate's CN must be the user's certificate name (the cert
//     method, which implies verify-full for that user).
//
// Only the Common Name identifies a client, as in PostgreSQL's default
// clientname=CN; the certificate's other fields are not read.

// clientTLSConfig is the client-side tls.Config of cfg, or nil when
// tls_mode is disable.
func clientTLSConfig(cfg *config.Config) (*tls.Config, error) {
	s := cfg.Server
	if s.TLSMode == config.TLSDisable || s.TLSMode == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading tls_cert_file/tls_key_file: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("loading tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("loading tls_ca_file %s: no PEM certificate in it", s.TLSCAFile)
		}
		// IfGiven, not Require: a client without a certificate gets a
		// FATAL it can read (checkClientCert) instead of a TLS alert, and
		// under allow/require a password user needs none.
		tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// peerCertificate records the client's certificate after a handshake. The
// handshake verified it against ClientCAs: with VerifyClientCertIfGiven a
// certificate that does not verify fails the handshake.
func (ss *session) peerCertificate(tc *tls.Conn) {
	if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 && len(st.VerifiedChains[0]) > 0 {
		ss.clientCert = st.VerifiedChains[0][0]
	}
}

// errNoClientCert is PostgreSQL's answer to a login that needs a
// certificate and has none (auth.c, ClientAuthentication).
func errNoClientCert() error {
	return fatalf(codeInvalidAuthorization, "connection requires a valid client certificate")
}

// checkClientCert applies tls_mode verify-ca/verify-full's first rule
// before authentication: the client presented a verified certificate.
func (ss *session) checkClientCert() error {
	if ss.cfg.Server.ClientCertRequired() && ss.clientCert == nil {
		return errNoClientCert()
	}
	return nil
}

// certAuth authenticates a [[users]] auth = "cert" user by its verified
// certificate: no password is asked for. A mismatch gets PostgreSQL's
// wording for the cert method; the names go to the log only.
func (ss *session) certAuth(u *config.User) error {
	if ss.clientCert == nil {
		return errNoClientCert()
	}
	return ss.matchCertName(u)
}

// verifyFull applies tls_mode = verify-full after a password user
// authenticated: its certificate must name it too.
func (ss *session) verifyFull() error {
	if ss.cfg.Server.TLSMode != config.TLSVerifyFull || ss.userCfg == nil || ss.userCfg.Auth == config.AuthCert {
		return nil // cert users were matched by certAuth
	}
	if ss.clientCert == nil {
		return errNoClientCert()
	}
	return ss.matchCertName(ss.userCfg)
}

func (ss *session) matchCertName(u *config.User) error {
	if cn := ss.clientCert.Subject.CommonName; cn != u.CertName() {
		// The wrapped cause reaches the log ("connection refused"), not
		// the client.
		return fmt.Errorf("%w (certificate CN %q, the user's certificate name is %q)",
			fatalf(codeInvalidAuthorization, "certificate authentication failed for user %q", ss.user), cn, u.CertName())
	}
	return nil
}

// checkAdminTLS applies [admin] require_tls before authentication, as a
// pg_hba hostssl line would: a console login without TLS is refused.
func (ss *session) checkAdminTLS() error {
	if ss.database == config.AdminDatabase && ss.cfg.Admin.RequireTLS && !ss.tls {
		return fatalf(codeInvalidAuthorization,
			"pg-kinetic: the admin console requires an SSL connection ([admin] require_tls = true); user %q", ss.user)
	}
	return nil
}
