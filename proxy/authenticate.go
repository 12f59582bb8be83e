package proxy

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

const (
	scramMech     = "SCRAM-SHA-256"
	scramPlusMech = "SCRAM-SHA-256-PLUS"
	scramIters    = 4096 // PostgreSQL's scram_iterations default
)

// Limits on the length word (which counts itself) of a client's
// authentication message, as PostgreSQL's pq_getmessage applies them.
const (
	maxSASLMessageLen     = 1024  // PG_MAX_SASL_MESSAGE_LENGTH, auth-sasl.c
	maxPasswordMessageLen = 65535 // PG_MAX_AUTH_TOKEN_LENGTH, auth.h
)

// authenticate checks the client's password against its [[users]] entry.
// Plaintext and SCRAM verifier secrets use SCRAM-SHA-256 (with channel
// binding over TLS); md5 hashes use the md5 challenge. An unknown user runs
// a SCRAM exchange against mock credentials and fails exactly like a wrong
// password, so user names cannot be probed.
func (ss *session) authenticate() error {
	u, ok := ss.cfg.UserByName(ss.user)
	var lk *userLookup
	if !ok {
		// auth_query: the route's primary may hold the user's secret
		// (authquery.go).
		var err error
		if u, lk, err = ss.lookupUser(); err != nil {
			return err
		}
		ok = u != nil
	}
	if ok {
		ss.userCfg = u
	}
	if ok && u.Auth == config.AuthCert {
		return ss.certAuth(u) // clientcert.go: no password
	}
	fail := fatalf(codeInvalidPassword, "password authentication failed for user %q", ss.user)
	if ok && isMD5Hash(u.Password) {
		if err := ss.md5Auth(u.Password[3:], lk); err != nil {
			return err
		}
		return nil
	}
	var creds scram.StoredCredentials
	if ok {
		c, err := ss.srv.storedCredentials(u.Password)
		if err != nil {
			return fail
		}
		creds = c
	} else {
		creds = ss.srv.mockCredentials(ss.user)
	}
	if err := ss.scramAuth(creds); err != nil {
		ss.lookupLoginFailed(lk, err)
		return err
	}
	if !ok {
		return fail
	}
	return nil
}

func (ss *session) scramAuth(creds scram.StoredCredentials) error {
	fail := fatalf(codeInvalidPassword, "password authentication failed for user %q", ss.user)
	srv, err := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return creds, nil })
	if err != nil {
		return err
	}
	mechs := []string{scramMech}
	conv := srv.NewConversation()
	if leaf := ss.tlsLeaf; leaf != nil {
		// tls-server-end-point binds to our own certificate; the library
		// reads it from the peer side of a connection state.
		state := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
		if cb, err := scram.NewTLSServerEndpointBinding(&state); err == nil {
			mechs = []string{scramPlusMech, scramMech}
			conv = srv.NewConversationWithChannelBinding(cb)
		}
	}
	if err := ss.send(&pgproto3.AuthenticationSASL{AuthMechanisms: mechs}); err != nil {
		return errClientGone{err}
	}
	body, err := ss.readAuthMessage(true)
	if err != nil {
		return err
	}
	var init pgproto3.SASLInitialResponse
	if err := init.Decode(body); err != nil {
		return protocolViolation("malformed SASLInitialResponse message")
	}
	if init.AuthMechanism != scramMech && !(init.AuthMechanism == scramPlusMech && len(mechs) == 2) {
		return protocolViolation("client selected an invalid SASL authentication mechanism")
	}
	first, err := conv.Step(string(init.Data))
	if err != nil {
		return fail
	}
	if err := ss.send(&pgproto3.AuthenticationSASLContinue{Data: []byte(first)}); err != nil {
		return errClientGone{err}
	}
	if body, err = ss.readAuthMessage(true); err != nil {
		return err
	}
	var resp pgproto3.SASLResponse
	if err := resp.Decode(body); err != nil {
		return protocolViolation("malformed SASLResponse message")
	}
	final, err := conv.Step(string(resp.Data))
	if err != nil || !conv.Valid() {
		return fail
	}
	ss.srv.recordClientKey(creds, string(init.Data), first, string(resp.Data))
	ss.authFinal = &pgproto3.AuthenticationSASLFinal{Data: []byte(final)}
	return nil
}

// md5Auth runs the md5 challenge against hash (the hex digits of an md5
// secret). lk is the auth_query lookup that gave hash, or nil.
func (ss *session) md5Auth(hash string, lk *userLookup) error {
	var salt [4]byte
	rand.Read(salt[:])
	if err := ss.send(&pgproto3.AuthenticationMD5Password{Salt: salt}); err != nil {
		return errClientGone{err}
	}
	body, err := ss.readAuthMessage(false)
	if err != nil {
		return err
	}
	// PostgreSQL's recv_password_packet: one NUL-terminated string filling
	// the body, and not an empty one. An empty body (length word 4) has no
	// NUL: IndexByte's -1 equals len(body)-1 there, so it is refused
	// first (it crashed kineticd: FuzzAuthExchange).
	if len(body) == 0 || bytes.IndexByte(body, 0) != len(body)-1 {
		return protocolViolation("invalid password packet size")
	}
	if len(body) == 1 {
		return fatalf(codeInvalidPassword, "empty password returned by client")
	}
	if !md5Matches(hash, salt, body[:len(body)-1]) {
		// A cached auth_query hash may predate a password change: the
		// same answer is compared with the primary's current hash.
		if newer, ok := ss.refetchMD5(lk); ok && md5Matches(newer[3:], salt, body[:len(body)-1]) {
			ss.userCfg = lk.user(newer)
			return nil
		}
		return fatalf(codeInvalidPassword, "password authentication failed for user %q", ss.user)
	}
	return nil
}

// md5Matches reports whether answer is md5 authentication's answer for
// the hash's hex digits and salt.
func md5Matches(hash string, salt [4]byte, answer []byte) bool {
	sum := md5.Sum(append([]byte(hash), salt[:]...))
	want := "md5" + hex.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare(answer, []byte(want)) == 1
}

// readAuthMessage reads one 'p' message of the authentication exchange,
// a SASL message when sasl is set and an md5 password message otherwise,
// answering what PostgreSQL 15 answers (auth-sasl.c CheckSASLAuth, auth.c
// recv_password_packet; both read with pq_getmessage):
//
//   - EOF before the message: no answer (psql does this before prompting
//     for a password).
//   - Another message type: FATAL 08P01 "expected SASL response, got
//     message type %d" ("expected password response, …" for md5).
//   - EOF inside the message, or a length word outside 4..1024 (SASL) or
//     4..65535 (md5): in a SASL exchange the login fails, FATAL 28P01
//     "password authentication failed for user …"; with md5, no answer.
//     PostgreSQL logs the cause ("incomplete message from client",
//     "invalid message length"); so do we.
func (ss *session) readAuthMessage(sasl bool) ([]byte, error) {
	ss.w.Flush()
	typ, err := ss.r.Peek(1)
	if err != nil {
		return nil, errClientGone{err}
	}
	if typ[0] != 'p' {
		if sasl {
			return nil, protocolViolation("expected SASL response, got message type %d", typ[0])
		}
		return nil, protocolViolation("expected password response, got message type %d", typ[0])
	}
	limit := maxPasswordMessageLen
	if sasl {
		limit = maxSASLMessageLen
	}
	h, err := wire.ReadHeader(ss.r)
	if err == nil && h.Len > limit-4 {
		err = wire.ErrBadLength
	}
	var body []byte
	if err == nil {
		if body, err = wire.ReadBody(ss.r, h.Len, nil); err == nil {
			return body, nil
		}
	}
	switch {
	case errors.Is(err, wire.ErrBadLength):
		err = fmt.Errorf("invalid message length %d", h.Len+4)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("incomplete message from client")
	default:
		return nil, errClientGone{err}
	}
	if !sasl {
		return nil, errClientGone{err}
	}
	return nil, fmt.Errorf("%w (%v)", fatalf(codeInvalidPassword, "password authentication failed for user %q", ss.user), err)
}

func isMD5Hash(s string) bool {
	if len(s) != 35 || !strings.HasPrefix(s, "md5") {
		return false
	}
	_, err := hex.DecodeString(s[3:])
	return err == nil
}

// storedCredentials turns a [[users]] password (plaintext or a
// "SCRAM-SHA-256$iter:salt$stored:server" verifier) into SCRAM credentials.
// PBKDF2 runs once per secret per process (cached on the Server), not once
// per login.
func (s *Server) storedCredentials(secret string) (scram.StoredCredentials, error) {
	if strings.HasPrefix(secret, "SCRAM-SHA-256$") {
		c, err := parseVerifier(secret)
		if err == nil {
			s.scramSecret(c) // where scramAuth records the client's key (passthrough.go)
		}
		return c, err
	}
	if c, ok := s.credentials.Load(secret); ok {
		return c.(scram.StoredCredentials), nil
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	c, err := plaintextCredentials(secret, scram.KeyFactors{Salt: string(salt), Iters: scramIters})
	if err != nil {
		return scram.StoredCredentials{}, err
	}
	s.credentials.Store(secret, c)
	return c, nil
}

// plaintextCredentials derives SCRAM credentials from a plaintext password
// as PostgreSQL does when it stores a verifier (pg_be_scram_build_secret):
// from pool.SCRAMPassword(password), PostgreSQL's own SASLprep (the raw
// password when that fails), so a client that prepares the password as
// libpq does proves it knows it. xdg-go's NewClient would apply textbook
// SASLprep, which differs (U+200B, U+0340, a lone soft hyphen); hence
// NewClientUnprepped. A verifier secret needs none of this: PostgreSQL
// prepared the password when it made the verifier.
func plaintextCredentials(password string, kf scram.KeyFactors) (scram.StoredCredentials, error) {
	client, err := scram.SHA256.NewClientUnprepped("", pool.SCRAMPassword(password), "")
	if err != nil {
		return scram.StoredCredentials{}, err
	}
	return client.GetStoredCredentialsWithError(kf)
}

// parseVerifier reads PostgreSQL's SCRAM verifier format.
func parseVerifier(v string) (scram.StoredCredentials, error) {
	var c scram.StoredCredentials
	parts := strings.Split(v, "$")
	if len(parts) != 3 {
		return c, errors.New("malformed SCRAM verifier")
	}
	is := strings.SplitN(parts[1], ":", 2)
	ks := strings.SplitN(parts[2], ":", 2)
	if len(is) != 2 || len(ks) != 2 {
		return c, errors.New("malformed SCRAM verifier")
	}
	iters, err := strconv.Atoi(is[0])
	if err != nil || iters < 1 {
		return c, errors.New("malformed SCRAM verifier iterations")
	}
	salt, err1 := base64.StdEncoding.DecodeString(is[1])
	stored, err2 := base64.StdEncoding.DecodeString(ks[0])
	server, err3 := base64.StdEncoding.DecodeString(ks[1])
	if err := errors.Join(err1, err2, err3); err != nil {
		return c, fmt.Errorf("malformed SCRAM verifier: %w", err)
	}
	c.KeyFactors = scram.KeyFactors{Salt: string(salt), Iters: iters}
	c.StoredKey, c.ServerKey = stored, server
	return c, nil
}

// mockCredentials are stable for one user name within a process (salted
// with the Server's random mockNonce), as PostgreSQL's mock authentication.
func (s *Server) mockCredentials(user string) scram.StoredCredentials {
	h := sha256.Sum256(append(append([]byte{}, s.mockNonce[:]...), user...))
	k := sha256.Sum256(h[:])
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(h[:16]), Iters: scramIters},
		StoredKey:  k[:], ServerKey: k[:],
	}
}
