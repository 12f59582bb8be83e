package pool

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// Pass-through logins: kineticd logs in to a server without the password,
// with what a client proved during its own SCRAM exchange with kineticd.
//
// A SCRAM-SHA-256 verifier holds StoredKey = H(ClientKey) and ServerKey.
// A client that authenticates against it sends ClientProof = ClientKey XOR
// HMAC(StoredKey, AuthMessage), so kineticd learns ClientKey (and checks
// H(ClientKey) = StoredKey). ClientKey is all a SCRAM client needs: towards
// a server holding the same verifier (same salt and iteration count, hence
// the same keys) kineticd sends ClientKey XOR HMAC(H(ClientKey),
// AuthMessage) and checks the server's signature with ServerKey. Every
// client that proves the same verifier has the same ClientKey, so the key
// is kept per verifier (SCRAMSecret), not per client.

// SCRAMSecret is one SCRAM-SHA-256 verifier's keys and, once a client has
// proved it, its ClientKey. The verifier's fields are immutable; the
// ClientKey is set once (SetClientKey) and then read by every login that
// uses the secret. It is safe for concurrent use. The key lives only in
// memory; String and GoString never show it.
type SCRAMSecret struct {
	salt      []byte
	iters     int
	storedKey []byte
	serverKey []byte

	clientKey atomic.Pointer[[]byte] // nil until a client proved the verifier
}

// NewSCRAMSecret returns the secret of a verifier with no ClientKey yet.
func NewSCRAMSecret(salt []byte, iterations int, storedKey, serverKey []byte) *SCRAMSecret {
	return &SCRAMSecret{salt: slices.Clone(salt), iters: iterations,
		storedKey: slices.Clone(storedKey), serverKey: slices.Clone(serverKey)}
}

// SetClientKey records a ClientKey recovered from a client's proof. It
// fails, and records nothing, unless H(clientKey) is the verifier's
// StoredKey.
func (s *SCRAMSecret) SetClientKey(clientKey []byte) error {
	h := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(h[:], s.storedKey) != 1 {
		return errors.New("the ClientKey does not match the verifier's StoredKey")
	}
	if s.clientKey.Load() == nil {
		k := slices.Clone(clientKey)
		s.clientKey.CompareAndSwap(nil, &k)
	}
	return nil
}

// HasClientKey reports whether a client has proved the verifier yet.
func (s *SCRAMSecret) HasClientKey() bool { return s.clientKey.Load() != nil }

// String never shows the keys.
func (s *SCRAMSecret) String() string { return "SCRAM-SHA-256 secret (redacted)" }

// GoString never shows the keys.
func (s *SCRAMSecret) GoString() string { return s.String() }

// PassThroughError is a login that the pass-through secret cannot make:
// the server asks for something other than what a ClientKey or an md5
// hash answers, or holds a different verifier, or no client has proved
// the verifier yet. The proxy reports it as 28P01; Reason says why, in
// words for the client's DETAIL (no secret in it).
type PassThroughError struct {
	User   string
	Reason string
}

func (e *PassThroughError) Error() string {
	return fmt.Sprintf("cannot log in to the server as %q without a password: %s", e.User, e.Reason)
}

// RecoverClientKey returns the ClientKey of a SCRAM exchange that a server
// conversation has verified, from the client's first message (with its
// GS2 header), the server's first message and the client's final message:
// ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage), the
// AuthMessage made as RFC 5802 says (client-first-message-bare,
// server-first-message, client-final-message-without-proof). It fails
// unless H(ClientKey) = storedKey.
func RecoverClientKey(clientFirst, serverFirst, clientFinal string, storedKey []byte) ([]byte, error) {
	// The GS2 header is "cbind-flag,[a=authzid]," and neither part holds
	// a comma (a comma in authzid is sent as "=2C").
	i := strings.IndexByte(clientFirst, ',')
	j := -1
	if i >= 0 {
		j = strings.IndexByte(clientFirst[i+1:], ',')
	}
	if j < 0 {
		return nil, errors.New("malformed client-first-message")
	}
	bare := clientFirst[i+1+j+1:]
	// The proof is the last attribute and base64 holds no comma.
	k := strings.LastIndexByte(clientFinal, ',')
	if k < 0 || !strings.HasPrefix(clientFinal[k+1:], "p=") {
		return nil, errors.New("malformed client-final-message")
	}
	proof, err := base64.StdEncoding.DecodeString(clientFinal[k+3:])
	if err != nil || len(proof) != sha256.Size {
		return nil, errors.New("malformed client proof")
	}
	auth := bare + "," + serverFirst + "," + clientFinal[:k]
	key := xor(proof, hmacSHA256(storedKey, auth))
	h := sha256.Sum256(key)
	if subtle.ConstantTimeCompare(h[:], storedKey) != 1 {
		return nil, errors.New("the recovered ClientKey does not match the StoredKey")
	}
	return key, nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func xor(a, b []byte) []byte {
	out := make([]byte, len(a))
	for i := range a {
		out[i] = a[i] ^ b[i]
	}
	return out
}

// md5HashAnswer is md5 authentication's answer made from the stored hash
// ("md5" + hex(md5(password || user))) instead of the password: the
// server computes md5(hash-hex || salt) from the very same hash.
func md5HashAnswer(hash string, salt [4]byte) string {
	sum := md5.Sum(append([]byte(strings.ToLower(hash[3:])), salt[:]...))
	return "md5" + hex.EncodeToString(sum[:])
}

// scramKeyLogin is the client side of one SCRAM-SHA-256 exchange made
// with a ClientKey instead of a password. It plays the part of scramLogin
// (same message order: SASLInitialResponse, then Continue, then Final).
type scramKeyLogin struct {
	user      string
	secret    *SCRAMSecret
	clientKey []byte
	gs2       string // GS2 header sent in the client-first-message
	cbData    []byte // channel binding data (SCRAM-SHA-256-PLUS), else nil
	nonce     string // client nonce
	bare      string // client-first-message-bare
	serverSig []byte // expected server signature, set after Continue
	next      uint32
	done      bool
}

// startSCRAMKey sends SASLInitialResponse for a pass-through login, with
// channel binding chosen as startSCRAM chooses it.
func startSCRAMKey(c *Conn, user string, secret *SCRAMSecret, mechs []string, state *tls.ConnectionState) (*scramKeyLogin, error) {
	if !slices.Contains(mechs, "SCRAM-SHA-256") {
		return nil, fmt.Errorf("server offers no SASL mechanism kineticd supports (%s)", strings.Join(mechs, ", "))
	}
	ck := secret.clientKey.Load()
	if ck == nil {
		return nil, &PassThroughError{User: user, Reason: "no client has authenticated with SCRAM against this user's verifier since kineticd started, so kineticd has no key to log in with; set backend_password"}
	}
	s := &scramKeyLogin{user: user, secret: secret, clientKey: *ck, gs2: "n,,", next: authSASLContinue}
	mech := "SCRAM-SHA-256"
	if state != nil {
		s.gs2 = "y,,"
		if slices.Contains(mechs, "SCRAM-SHA-256-PLUS") {
			if cb, err := scram.NewTLSServerEndpointBinding(state); err == nil {
				mech, s.gs2, s.cbData = "SCRAM-SHA-256-PLUS", "p=tls-server-end-point,,", cb.Data
			}
		}
	}
	var n [18]byte
	rand.Read(n[:])
	s.nonce = base64.StdEncoding.EncodeToString(n[:])
	// PostgreSQL takes the user from the startup packet; the SCRAM user
	// name is sent empty, like libpq.
	s.bare = "n=,r=" + s.nonce
	if err := c.send(&pgproto3.SASLInitialResponse{AuthMechanism: mech, Data: []byte(s.gs2 + s.bare)}); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *scramKeyLogin) step(c *Conn, code uint32, data []byte) error {
	if code != s.next {
		return fmt.Errorf("server sent SASL message %d out of order in the SCRAM exchange", code)
	}
	if code == authSASLContinue {
		final, err := s.clientFinal(string(data))
		if err != nil {
			return err
		}
		s.next = authSASLFinal
		return c.send(&pgproto3.SASLResponse{Data: []byte(final)})
	}
	msg := string(data)
	if e, ok := strings.CutPrefix(msg, "e="); ok {
		return fmt.Errorf("SCRAM exchange with the server: the server says %q", e)
	}
	v, ok := strings.CutPrefix(msg, "v=")
	if ok {
		v, _, _ = strings.Cut(v, ",")
	}
	sig, err := base64.StdEncoding.DecodeString(v)
	if !ok || err != nil {
		return errors.New("SCRAM exchange with the server: malformed server-final-message")
	}
	if !hmac.Equal(sig, s.serverSig) {
		return errors.New("SCRAM exchange with the server: the server's signature does not match")
	}
	s.next, s.done = 0, true
	return nil
}

// clientFinal answers the server-first-message "r=NONCE,s=SALT,i=ITERS"
// with the client-final-message, after checking that the server's salt
// and iteration count are the verifier's: with others the server holds a
// different verifier and the ClientKey cannot prove it.
func (s *scramKeyLogin) clientFinal(serverFirst string) (string, error) {
	var nonce, salt64, iters string
	for _, f := range strings.Split(serverFirst, ",") {
		switch {
		case strings.HasPrefix(f, "r="):
			nonce = f[2:]
		case strings.HasPrefix(f, "s="):
			salt64 = f[2:]
		case strings.HasPrefix(f, "i="):
			iters = f[2:]
		case strings.HasPrefix(f, "m="):
			return "", errors.New("SCRAM exchange with the server: the server requires an extension kineticd does not support")
		}
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	n, err2 := strconv.Atoi(iters)
	if nonce == "" || salt64 == "" || err != nil || err2 != nil {
		return "", errors.New("SCRAM exchange with the server: malformed server-first-message")
	}
	if !strings.HasPrefix(nonce, s.nonce) || len(nonce) == len(s.nonce) {
		return "", errors.New("SCRAM exchange with the server: the server's nonce does not extend kineticd's")
	}
	if n != s.secret.iters || !bytes.Equal(salt, s.secret.salt) {
		return "", &PassThroughError{User: s.user, Reason: "the server's SCRAM verifier for this role differs from the one kineticd authenticated the client against " +
			"(another salt or iteration count), so the client's key cannot log in; set backend_password, or give kineticd the server's verifier"}
	}
	cbind := base64.StdEncoding.EncodeToString(append([]byte(s.gs2), s.cbData...))
	withoutProof := "c=" + cbind + ",r=" + nonce
	auth := s.bare + "," + serverFirst + "," + withoutProof
	proof := xor(s.clientKey, hmacSHA256(s.secret.storedKey, auth))
	s.serverSig = hmacSHA256(s.secret.serverKey, auth)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}
