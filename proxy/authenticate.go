package proxy

import (
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
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"

	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

const (
	scramMech     = "SCRAM-SHA-256"
	scramPlusMech = "SCRAM-SHA-256-PLUS"
	scramIters    = 4096 // PostgreSQL's scram_iterations default
)

// authenticate checks the client's password against its [[users]] entry.
// Plaintext and SCRAM verifier secrets use SCRAM-SHA-256 (with channel
// binding over TLS); md5 hashes use the md5 challenge. An unknown user runs
// a SCRAM exchange against mock credentials and fails exactly like a wrong
// password, so user names cannot be probed.
func (ss *session) authenticate() error {
	u, ok := ss.cfg.UserByName(ss.user)
	if ok {
		ss.userCfg = u
	}
	fail := fatalf(codeInvalidPassword, "password authentication failed for user %q", ss.user)
	if ok && isMD5Hash(u.Password) {
		if err := ss.md5Auth(u.Password[3:]); err != nil {
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
	body, err := ss.readAuthMessage()
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
	if body, err = ss.readAuthMessage(); err != nil {
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
	ss.authFinal = &pgproto3.AuthenticationSASLFinal{Data: []byte(final)}
	return nil
}

func (ss *session) md5Auth(hash string) error {
	var salt [4]byte
	rand.Read(salt[:])
	if err := ss.send(&pgproto3.AuthenticationMD5Password{Salt: salt}); err != nil {
		return errClientGone{err}
	}
	body, err := ss.readAuthMessage()
	if err != nil {
		return err
	}
	var pm pgproto3.PasswordMessage
	if err := pm.Decode(body); err != nil {
		return protocolViolation("malformed password message")
	}
	sum := md5.Sum(append([]byte(hash), salt[:]...))
	want := "md5" + hex.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(pm.Password), []byte(want)) != 1 {
		return fatalf(codeInvalidPassword, "password authentication failed for user %q", ss.user)
	}
	return nil
}

// readAuthMessage reads one 'p' message of the authentication exchange.
func (ss *session) readAuthMessage() ([]byte, error) {
	ss.w.Flush()
	h, err := wire.ReadHeader(ss.r)
	if err != nil {
		if errors.Is(err, wire.ErrBadLength) {
			return nil, protocolViolation("invalid message length")
		}
		return nil, errClientGone{err}
	}
	if h.Type != 'p' {
		return nil, protocolViolation("expected password response, got message type %d", h.Type)
	}
	if h.Len > wire.MaxSmallBodyLen {
		return nil, protocolViolation("invalid message length")
	}
	body, err := wire.ReadBody(ss.r, h.Len, nil)
	if err != nil {
		return nil, errClientGone{err}
	}
	return body, nil
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
		return parseVerifier(secret)
	}
	if c, ok := s.credentials.Load(secret); ok {
		return c.(scram.StoredCredentials), nil
	}
	// Like PostgreSQL: SASLprep the password when it is valid UTF-8 text,
	// use the raw bytes otherwise.
	client, err := scram.SHA256.NewClient("", secret, "")
	if err != nil {
		if client, err = scram.SHA256.NewClientUnprepped("", secret, ""); err != nil {
			return scram.StoredCredentials{}, err
		}
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	c := client.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: scramIters})
	s.credentials.Store(secret, c)
	return c, nil
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
