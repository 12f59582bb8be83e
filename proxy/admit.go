package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/internal/rawsock"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// Startup-phase request codes (the protocol "version" field).
const (
	codeCancelRequest = 80877102
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
)

// clientBufSize is the read and write buffer of a client connection.
const clientBufSize = 16 << 10

// handle runs one client connection from accept to close. Its frame and
// serve's stay small: an idle session's goroutine waits under them, and a
// stack that fits in 4 KiB is a third of what an idle client costs.
func (s *Server) handle(nc net.Conn) {
	ss := s.newSession(nc)
	s.track(ss)
	defer s.untrack(ss)
	defer nc.Close()
	defer ss.uncount()
	defer ss.leaveAffine()
	// The startup phase (TLS, SCRAM, the first server round trip) runs on
	// a goroutine of its own: its deep stack is freed when login ends
	// instead of staying with the session's long-lived goroutine.
	started := make(chan bool, 1)
	go func() { started <- ss.startContained() }()
	if <-started {
		ss.serve()
	}
}

func (s *Server) newSession(nc net.Conn) *session {
	if tc, ok := rawsock.TCP(nc); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	ss := &session{
		srv:       s,
		id:        s.nextID.Add(1),
		conn:      nc,
		r:         readerPool.Get().(*bufio.Reader),
		w:         writerPool.Get().(*bufio.Writer),
		cfg:       s.opts.Config.Load(),
		connected: time.Now(),
	}
	ss.mu.tx = 'I'
	ss.r.Reset(nc)
	ss.w.Reset(nc)
	// WithLazy: the fields are encoded when the session first logs, so a
	// quiet session carries no encoder of its own.
	ss.log = s.log.WithLazy(zap.Uint64("session", ss.id), zap.Stringer("client", nc.RemoteAddr()))
	return ss
}

func (ss *session) uncount() {
	if ss.counted {
		ss.srv.clients.Add(-1)
	}
}

// start runs the startup phase (admission, authentication, connection to
// the route) and reports whether the session goes on to relay.
func (ss *session) start() bool {
	nc := ss.conn
	nc.SetDeadline(ss.loginDeadline()) // timeouts.go
	isCancel, err := ss.admit()
	if isCancel || err == nil && ss.isKilled() {
		return false
	}
	if err == nil {
		err = ss.authenticate()
	}
	if err == nil {
		err = ss.verifyFull() // clientcert.go
	}
	if err == nil {
		err = ss.connect()
	}
	if errors.Is(err, errConsoleDone) {
		return false
	}
	if err != nil {
		ss.rejectStartup(ss.loginTimedOut(err))
		return false
	}
	ss.conn.SetDeadline(time.Time{})
	return true
}

// admit reads startup-phase packets until a StartupMessage: it answers
// SSLRequest per tls_mode (upgrading the connection), declines
// GSSENCRequest, and relays a CancelRequest (reporting isCancel).
func (ss *session) admit() (isCancel bool, err error) {
	var buf []byte
	for {
		body, err := wire.ReadStartup(ss.r, buf)
		if err != nil {
			return false, startupReadError(ss.r, err)
		}
		buf = body
		code := binary.BigEndian.Uint32(body[:4])
		switch code {
		case codeSSLRequest:
			if err := ss.answerSSL(); err != nil {
				return false, err
			}
		case codeGSSENCRequest:
			if ss.r.Buffered() > 0 {
				return false, protocolViolation("received unencrypted data after GSSAPI encryption request")
			}
			if _, err := ss.conn.Write([]byte{'N'}); err != nil {
				return false, errClientGone{err}
			}
		case codeCancelRequest:
			var cr pgproto3.CancelRequest
			if err := cr.Decode(body); err != nil {
				return true, nil // PostgreSQL drops malformed cancels silently
			}
			ss.srv.cancel(cancelKey{pid: cr.ProcessID, secret: binary.BigEndian.Uint32(padSecret(cr.SecretKey))})
			return true, nil
		default:
			return false, ss.readStartup(body)
		}
	}
}

// errTerminateBeforeStartup is a Terminate message read where a startup
// packet belongs: a client saying goodbye before it logged in.
var errTerminateBeforeStartup = errors.New("Terminate before the startup packet")

// errInvalidStartupLength is any other startup packet length outside
// 8..10004 (the length word counts itself; the packet after it is 4 to
// 10 000 bytes).
var errInvalidStartupLength = errors.New("invalid length of startup packet")

// startupReadError turns a failure to frame a startup-phase packet into what
// PostgreSQL 15 does (postmaster.c, ProcessStartupPacket): it closes the
// connection without a word. Nothing is sent to the client, whatever the
// bytes were; only the log says why.
//
//   - EOF before any byte: nothing is logged (service monitors and port
//     scanners do this all the time).
//   - EOF inside the length word or the packet: PostgreSQL logs
//     "incomplete startup packet" (a COMMERROR, which goes to the server log
//     only), we log it at debug level.
//   - A Terminate message ('X', length 4) where the packet belongs:
//     PostgreSQL reads 'X',0,0,0 as a length of 1476395008, logs "invalid
//     length of startup packet" and closes. We log it at debug level: it
//     is a goodbye.
//   - Any other length outside 8..10004: PostgreSQL logs "invalid length
//     of startup packet" and closes. We log it at info level with the
//     length (errInvalidStartupLength), like a refused connection: the
//     client is misconfigured or hostile, and it is not told.
//
// Errors wrapped in errClientGone are never answered (rejectStartup), and
// the connection is closed at once: nothing more is read.
func startupReadError(r *bufio.Reader, err error) error {
	switch {
	case errors.Is(err, wire.ErrBadLength):
		if b, _ := r.Peek(4); string(b) == "X\x00\x00\x00" {
			return errClientGone{errTerminateBeforeStartup}
		}
		return errClientGone{fmt.Errorf("%w (%v)", errInvalidStartupLength, err)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errClientGone{fmt.Errorf("incomplete startup packet: %w", err)}
	}
	return errClientGone{err}
}

func padSecret(b []byte) []byte {
	if len(b) >= 4 {
		return b
	}
	return append(make([]byte, 4-len(b)), b...)
}

// answerSSL replies to an SSLRequest and, when TLS is on, runs the handshake.
func (ss *session) answerSSL() error {
	if ss.tls {
		return protocolViolation("SSLRequest received on an encrypted connection")
	}
	// Bytes pipelined after SSLRequest would be read as plaintext by us but
	// were meant to be encrypted: refuse (CVE-2021-23214's class of bug).
	if ss.r.Buffered() > 0 {
		return protocolViolation("received unencrypted data after SSL request")
	}
	tcfg := ss.srv.tls.Load()
	if tcfg == nil || ss.cfg.Server.TLSMode == config.TLSDisable {
		if _, err := ss.conn.Write([]byte{'N'}); err != nil {
			return errClientGone{err}
		}
		return nil
	}
	if _, err := ss.conn.Write([]byte{'S'}); err != nil {
		return errClientGone{err}
	}
	tc := tls.Server(ss.conn, tcfg)
	if err := tc.Handshake(); err != nil {
		ss.log.Debug("client TLS handshake failed", zap.Error(err))
		return errClientGone{handshakeError{err}} // (not answered even on the login timeout)
	}
	ss.conn = tc
	ss.tls = true
	ss.peerCertificate(tc)
	if len(tcfg.Certificates) > 0 {
		ss.tlsLeaf = tcfg.Certificates[0].Leaf
	}
	ss.r.Reset(tc)
	ss.w.Reset(tc)
	return nil
}

// startup decodes the StartupMessage and checks what can be checked before
// authentication.
func (ss *session) readStartup(body []byte) error {
	var sm pgproto3.StartupMessage
	if err := sm.Decode(body); err != nil {
		major := binary.BigEndian.Uint32(body[:4]) >> 16
		if major != 3 {
			return protocolViolation("unsupported frontend protocol %d.%d: server supports 3.0 to 3.0",
				major, binary.BigEndian.Uint32(body[:4])&0xffff)
		}
		return protocolViolation("invalid startup packet layout: %v", err)
	}
	ss.startupParams = sm.Parameters
	_, ss.replication = sm.Parameters["replication"]
	ss.user = sm.Parameters["user"]
	if ss.user == "" {
		return fatalf(codeInvalidAuthorization, "no PostgreSQL user name specified in startup packet")
	}
	ss.database = sm.Parameters["database"]
	if ss.database == "" {
		ss.database = ss.user
	}
	var unsupported []string
	for k := range sm.Parameters {
		if strings.HasPrefix(k, "_pq_.") {
			unsupported = append(unsupported, k)
		}
	}
	if sm.ProtocolVersion != pgproto3.ProtocolVersion30 || len(unsupported) > 0 {
		// We speak 3.0 only; tell a newer client so it can downgrade.
		ss.send(&pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: unsupported})
	}
	if n := ss.srv.clients.Add(1); n > int64(ss.cfg.Server.MaxClientConn) && ss.cfg.Server.MaxClientConn > 0 {
		ss.counted = true
		return fatalf(codeTooManyConnections, "sorry, too many clients already")
	}
	ss.counted = true
	if ss.cfg.Server.RequiresTLS() && !ss.tls {
		return fatalf(codeInvalidAuthorization,
			"pg-kinetic: SSL connection is required for user %q, database %q (tls_mode = %s)", ss.user, ss.database, ss.cfg.Server.TLSMode)
	}
	if err := ss.checkClientCert(); err != nil {
		return err
	}
	if err := ss.checkAdminTLS(); err != nil {
		return err
	}
	for k, v := range sm.Parameters {
		if strings.EqualFold(k, "pg_kinetic.query_class") {
			ss.queryClass = v
		}
	}
	settings, err := startupSettings(sm.Parameters)
	if err != nil {
		return err
	}
	// pg_kinetic.* variables are the proxy's (SPEC §4): set at startup like
	// any other (also through options, -c pg_kinetic.query_class=...),
	// never sent to a server.
	for _, st := range settings {
		switch name := strings.ToLower(st.name); {
		case name == "pg_kinetic.query_class":
			ss.queryClass = st.value
		case strings.HasPrefix(name, "pg_kinetic."):
		default:
			ss.mu.settings.startup = append(ss.mu.settings.startup, st)
			ss.notePath(classify.Setting{Name: name, Value: st.value})
		}
	}
	return nil
}

// errClientGone wraps an I/O error on the client connection: there is
// nobody to send an ErrorResponse to.
type errClientGone struct{ err error }

func (e errClientGone) Error() string { return "client connection: " + e.err.Error() }
func (e errClientGone) Unwrap() error { return e.err }

// reject reports err to the client (unless it is gone) and logs it.
func (ss *session) rejectStartup(err error) {
	var gone errClientGone
	if errors.As(err, &gone) {
		switch {
		case errors.Is(err, errInvalidStartupLength):
			ss.log.Info("connection closed without an answer", zap.Error(err))
		case !errors.Is(err, io.EOF):
			ss.log.Debug("client left during startup", zap.Error(err))
		}
		return
	}
	ss.log.Info("connection refused", zap.String("user", ss.user), zap.String("database", ss.database), zap.Error(err))
	er := errorResponse(err)
	if er.Severity != "FATAL" {
		er.Severity, er.SeverityUnlocalized = "FATAL", "FATAL"
	}
	ss.send(er)
}

func (ss *session) String() string { return fmt.Sprintf("session %d", ss.id) }
