package pool

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"

	"github.com/pg-kinetic/pg-kinetic/internal/rawsock"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// Server logins are done here rather than by pgconn because pgconn
// normalises SCRAM passwords its own way (PRECIS OpaqueString, NFC), not
// PostgreSQL's (SASLprep, NFKC, raw bytes when SASLprep fails): a password
// such as "pass\u2168" works with psql but failed through pgconn with 28P01.
// pgconn chooses the method from the server's request and has no hook for
// the password it hashes, so the handshake is ours: a StartupMessage, then
// cleartext, md5 (raw password bytes) or SCRAM-SHA-256[-PLUS] (SCRAMPassword,
// xdg-go/scram) as the server asks, up to ReadyForQuery.

const (
	sslRequestCode = 80877103
	// maxLoginBodyLen bounds a message body during login (an ErrorResponse
	// or ParameterStatus is far smaller).
	maxLoginBodyLen = 1 << 20
)

// Authentication request codes (AuthenticationXxx messages).
const (
	authOK           = 0
	authCleartext    = 3
	authMD5          = 5
	authSASL         = 10
	authSASLContinue = 11
	authSASLFinal    = 12
)

// errTLSRefused is a require-mode server that answered SSLRequest with 'N'.
var errTLSRefused = errors.New("server refused TLS connection")

// tlsAttempt is how the connection was set up, so that a prefer-mode login
// that failed over TLS can be tried again in plaintext.
type tlsAttempt struct {
	handshakeFailed bool // the server accepted SSLRequest, the handshake failed
	used            bool // the login ran over TLS
}

// Dial connects to addr and completes the PostgreSQL startup handshake. A
// server's refusal (wrong password, unknown database, too many
// connections...) is returned as its *ServerError.
func (d Dialer) Dial(ctx context.Context, addr string, cred Credentials) (*Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w", addr, err)
	}
	if !isPort(port) {
		return nil, fmt.Errorf("server address %q: bad port", addr)
	}
	if d.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.ConnectTimeout)
		defer cancel()
	}
	switch d.TLSMode {
	case "", "disable":
		c, _, err := dialLogin(ctx, addr, host, cred, tlsOff)
		return c, err
	case "require":
		c, _, err := dialLogin(ctx, addr, host, cred, tlsRequired)
		return c, err
	case "prefer":
		// As libpq's sslmode=prefer: TLS if the server agrees, plaintext
		// on the same connection if it says 'N'; a new plaintext
		// connection if the TLS handshake fails or the server refuses
		// the login over TLS for another reason than the credentials or
		// the database (pg_hba.conf may allow only hostnossl).
		c, at, err := dialLogin(ctx, addr, host, cred, tlsPreferred)
		if err == nil || ctx.Err() != nil || !(at.handshakeFailed || at.used && retryWithoutTLS(err)) {
			return c, err
		}
		c, _, err2 := dialLogin(ctx, addr, host, cred, tlsOff)
		if err2 != nil {
			return nil, errors.Join(err, err2)
		}
		return c, nil
	}
	return nil, fmt.Errorf("backend TLS mode %q is not one of disable, prefer, require", d.TLSMode)
}

func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// retryWithoutTLS: a prefer-mode login refused over TLS is tried again in
// plaintext unless the refusal would be the same (pgconn's rule, kept).
func retryWithoutTLS(err error) bool {
	var pt *PassThroughError
	if errors.As(err, &pt) {
		return false // the secret, not the channel
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code {
	case "28P01", "3D000", "42501": // wrong password, no database, no CONNECT privilege
		return false
	}
	return true
}

type tlsWant int

const (
	tlsOff tlsWant = iota
	tlsPreferred
	tlsRequired
)

// dialLogin opens one TCP connection to addr, negotiates TLS per want and
// logs in. The context bounds all of it: its deadline is the socket's, and
// its cancellation interrupts any read or write in progress.
func dialLogin(ctx context.Context, addr, host string, cred Credentials, want tlsWant) (*Conn, tlsAttempt, error) {
	var at tlsAttempt
	nd := net.Dialer{KeepAlive: 5 * time.Minute} // pgconn's default
	tcp, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, at, err
	}
	raw := rawsock.Wrap(tcp)
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	c, err := negotiateAndLogin(raw, host, cred, want, &at)
	if !stop() && err == nil {
		err = ctx.Err() // cancelled just as the login ended: the deadline is spoiled
	}
	if err != nil {
		raw.Close()
		return nil, at, contextError(ctx, err)
	}
	raw.SetDeadline(time.Time{})
	c.Addr = addr
	return c, at, nil
}

// contextError reports a login that failed because its context ended as
// that (errors.Is(err, context.DeadlineExceeded)), with the I/O error that
// showed it. The socket's deadline is the context's, so the I/O timeout
// may come a moment before the context's own timer.
func contextError(ctx context.Context, err error) error {
	if isServerError(err) {
		return err
	}
	cerr := ctx.Err()
	var ne net.Error
	if _, ok := ctx.Deadline(); ok && cerr == nil && errors.As(err, &ne) && ne.Timeout() {
		cerr = context.DeadlineExceeded
	}
	if cerr == nil {
		return err
	}
	return fmt.Errorf("%w (%v)", cerr, err)
}

func isServerError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

func negotiateAndLogin(raw net.Conn, host string, cred Credentials, want tlsWant, at *tlsAttempt) (*Conn, error) {
	nc := raw
	var state *tls.ConnectionState
	if want != tlsOff {
		var req [8]byte
		binary.BigEndian.PutUint32(req[0:], 8)
		binary.BigEndian.PutUint32(req[4:], sslRequestCode)
		if _, err := raw.Write(req[:]); err != nil {
			return nil, err
		}
		var answer [1]byte
		if _, err := io.ReadFull(raw, answer[:]); err != nil {
			return nil, fmt.Errorf("reading the answer to SSLRequest: %w", err)
		}
		switch answer[0] {
		case 'S':
			// Encrypted, not authenticated: the certificate is not verified
			// (libpq's sslmode=require/prefer).
			tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: host})
			if err := tc.Handshake(); err != nil {
				at.handshakeFailed = true
				return nil, fmt.Errorf("TLS handshake: %w", err)
			}
			st := tc.ConnectionState()
			nc, state, at.used = tc, &st, true
		case 'N':
			if want == tlsRequired {
				return nil, errTLSRefused
			}
		default:
			// An ErrorResponse here is a pre-3.0 server or something else.
			return nil, fmt.Errorf("unexpected answer %q to SSLRequest", answer[0])
		}
	}
	c := &Conn{
		R:   bufio.NewReaderSize(nc, bufSize),
		W:   bufio.NewWriterSize(nc, bufSize),
		raw: nc,
	}
	if err := login(c, cred, state); err != nil {
		return nil, err
	}
	return c, nil
}

// login sends the StartupMessage on c and answers the server's
// authentication requests until ReadyForQuery, recording the
// ParameterStatus values and BackendKeyData on c. Bytes the server sends
// after ReadyForQuery stay buffered in c.R. state is the TLS state of the
// connection (nil in plaintext), for SCRAM channel binding.
func login(c *Conn, cred Credentials, state *tls.ConnectionState) error {
	params := map[string]string{}
	for k, v := range cred.Params {
		params[k] = v
	}
	params["user"] = cred.User
	if cred.Database != "" {
		params["database"] = cred.Database
	}
	if err := c.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: params}); err != nil {
		return err
	}
	c.Params = map[string]string{}
	var sasl saslLogin
	authenticated := false
	var buf []byte
	for {
		typ, body, err := c.readLoginMessage(buf)
		if err != nil {
			return err
		}
		buf = body
		switch typ {
		case 'R':
			if len(body) < 4 {
				return errors.New("malformed authentication request from the server")
			}
			code := binary.BigEndian.Uint32(body)
			switch code {
			case authOK:
				if sasl != nil && !sasl.finished() {
					return errors.New("server accepted the SCRAM login before proving it knows the password")
				}
				authenticated = true
			case authCleartext:
				if err = cred.needsPassword("a cleartext password"); err == nil {
					err = c.send(&pgproto3.PasswordMessage{Password: cred.Password})
				}
			case authMD5:
				var m pgproto3.AuthenticationMD5Password
				if err = m.Decode(body); err != nil {
					break
				}
				if cred.Password == "" && cred.MD5 != "" {
					err = c.send(&pgproto3.PasswordMessage{Password: md5HashAnswer(cred.MD5, m.Salt)})
				} else if err = cred.needsPassword("md5 authentication"); err == nil {
					err = c.send(&pgproto3.PasswordMessage{Password: md5Password(cred.User, cred.Password, m.Salt)})
				}
			case authSASL:
				var m pgproto3.AuthenticationSASL
				if err = m.Decode(body); err != nil {
					break
				}
				if cred.Password == "" && cred.SCRAM != nil {
					sasl, err = startSCRAMKey(c, cred.User, cred.SCRAM, m.AuthMechanisms, state)
				} else if err = cred.needsPassword("SCRAM-SHA-256 authentication"); err == nil {
					sasl, err = startSCRAM(c, cred.Password, m.AuthMechanisms, state)
				}
			case authSASLContinue, authSASLFinal:
				if sasl == nil {
					return fmt.Errorf("server sent SASL message %d outside a SASL exchange", code)
				}
				err = sasl.step(c, code, body[4:])
			default:
				return fmt.Errorf("server asks for an authentication method kineticd does not support (request %d)", code)
			}
			if err != nil {
				return err
			}
		case 'S':
			var ps pgproto3.ParameterStatus
			if err := ps.Decode(body); err != nil {
				return fmt.Errorf("malformed ParameterStatus from the server: %w", err)
			}
			c.Params[ps.Name] = ps.Value
			if c.Defaults == nil {
				c.Defaults = map[string]string{}
			}
			c.Defaults[ps.Name] = ps.Value
		case 'K':
			var kd pgproto3.BackendKeyData
			if err := kd.Decode(body); err != nil {
				return fmt.Errorf("malformed BackendKeyData from the server: %w", err)
			}
			c.PID, c.SecretKey = kd.ProcessID, slices.Clone(kd.SecretKey)
		case 'E':
			var e pgproto3.ErrorResponse
			if err := e.Decode(body); err != nil {
				return fmt.Errorf("malformed ErrorResponse from the server: %w", err)
			}
			return pgconn.ErrorResponseToPgError(&e)
		case 'N', 'v':
			// NoticeResponse; NegotiateProtocolVersion (we ask for 3.0 and
			// send no _pq_ options, so at most an echo of that).
		case 'Z':
			if !authenticated {
				return errors.New("server sent ReadyForQuery before AuthenticationOk")
			}
			return nil
		default:
			return fmt.Errorf("unexpected message %q from the server during login", typ)
		}
	}
}

func (c *Conn) send(m wire.Encoder) error {
	b, err := m.Encode(c.W.AvailableBuffer())
	if err != nil {
		return err
	}
	if _, err := c.W.Write(b); err != nil {
		return err
	}
	return c.W.Flush()
}

func (c *Conn) readLoginMessage(buf []byte) (byte, []byte, error) {
	h, err := wire.ReadHeader(c.R)
	if err != nil {
		return 0, nil, fmt.Errorf("reading from the server during login: %w", err)
	}
	if h.Len > maxLoginBodyLen {
		return 0, nil, fmt.Errorf("server sent a %d-byte message during login", h.Len)
	}
	body, err := wire.ReadBody(c.R, h.Len, buf)
	if err != nil {
		return 0, nil, fmt.Errorf("reading from the server during login: %w", err)
	}
	return h.Type, body, nil
}

// md5Password is md5 authentication's answer: the raw password bytes, never
// normalised (PostgreSQL's md5 verifier is md5(password || user)).
func md5Password(user, password string, salt [4]byte) string {
	inner := md5.Sum([]byte(password + user))
	h := hex.EncodeToString(inner[:])
	outer := md5.Sum(append([]byte(h), salt[:]...))
	return "md5" + hex.EncodeToString(outer[:])
}

// needsPassword fails with a PassThroughError when the server asks for
// method and cred has only a pass-through secret that cannot answer it.
// Credentials with neither a password nor a secret send the empty
// password as they always did.
func (cred *Credentials) needsPassword(method string) error {
	var have string
	switch {
	case cred.Password != "":
		return nil
	case cred.SCRAM != nil:
		have = "the client's SCRAM key (the [[users]] secret is a SCRAM verifier)"
	case cred.MD5 != "":
		have = "an md5 hash (the [[users]] secret)"
	default:
		return nil
	}
	return &PassThroughError{User: cred.User, Reason: "the server asks for " + method + " and kineticd holds only " + have + "; set backend_password"}
}

// saslLogin is a SCRAM exchange in progress: scramLogin (a password) or
// scramKeyLogin (a pass-through ClientKey).
type saslLogin interface {
	step(c *Conn, code uint32, data []byte) error
	// finished reports whether the server's signature was verified.
	finished() bool
}

func (s *scramLogin) finished() bool    { return s.done }
func (s *scramKeyLogin) finished() bool { return s.done }

// scramLogin is the client side of one SCRAM-SHA-256 exchange: after
// SASLInitialResponse it expects AuthenticationSASLContinue, then
// AuthenticationSASLFinal, then AuthenticationOk.
type scramLogin struct {
	conv *scram.ClientConversation
	next uint32 // the SASL message expected next: authSASLContinue, authSASLFinal, or 0 when done
	done bool   // the server's signature was verified
}

// startSCRAM picks the mechanism and sends SASLInitialResponse. Over TLS
// with a server that offers SCRAM-SHA-256-PLUS it binds the exchange to
// the server's certificate (tls-server-end-point), as pgconn and libpq do
// by default; over TLS without PLUS it says it could have ("y").
func startSCRAM(c *Conn, password string, mechs []string, state *tls.ConnectionState) (*scramLogin, error) {
	if !slices.Contains(mechs, "SCRAM-SHA-256") {
		return nil, fmt.Errorf("server offers no SASL mechanism kineticd supports (%s)", strings.Join(mechs, ", "))
	}
	// PostgreSQL takes the user from the startup packet; the SCRAM user
	// name is sent empty, like libpq. The password is prepared here, so
	// the library must not prepare it again. PostgreSQL 16 lets servers
	// use fewer than 4096 iterations (scram_iterations); so does pgconn.
	client, err := scram.SHA256.NewClientUnprepped("", SCRAMPassword(password), "")
	if err != nil {
		return nil, err
	}
	client.WithMinIterations(1)
	mech, conv := "SCRAM-SHA-256", client.NewConversation()
	if state != nil {
		conv = client.NewConversationAdvertisingChannelBinding()
		if slices.Contains(mechs, "SCRAM-SHA-256-PLUS") {
			if cb, err := scram.NewTLSServerEndpointBinding(state); err == nil {
				mech, conv = "SCRAM-SHA-256-PLUS", client.NewConversationWithChannelBinding(cb)
			}
		}
	}
	first, err := conv.Step("")
	if err != nil {
		return nil, err
	}
	if err := c.send(&pgproto3.SASLInitialResponse{AuthMechanism: mech, Data: []byte(first)}); err != nil {
		return nil, err
	}
	return &scramLogin{conv: conv, next: authSASLContinue}, nil
}

func (s *scramLogin) step(c *Conn, code uint32, data []byte) error {
	if code != s.next {
		return fmt.Errorf("server sent SASL message %d out of order in the SCRAM exchange", code)
	}
	out, err := s.conv.Step(string(data))
	if err != nil {
		return fmt.Errorf("SCRAM exchange with the server: %w", err)
	}
	if code == authSASLContinue {
		s.next = authSASLFinal
		return c.send(&pgproto3.SASLResponse{Data: []byte(out)})
	}
	if !s.conv.Valid() {
		return errors.New("SCRAM exchange with the server: the server's signature does not match")
	}
	s.next, s.done = 0, true
	return nil
}
