package pool

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/internal/rawsock"
)

// bufSize is the read and write buffer of a server connection. 32 KiB holds
// many DataRows per syscall without making idle connections expensive.
const bufSize = 32 << 10

// Conn is one authenticated server connection, logged in by Dial
// (login.go). Reads and writes go through R and W; the caller that holds
// the Conn owns them.
type Conn struct {
	Addr string
	// PID and SecretKey identify the server process, for CancelRequest.
	PID       uint32
	SecretKey []byte
	// Params are the server's current ParameterStatus values. The holder
	// updates them as it relays ParameterStatus messages.
	Params map[string]string
	// Defaults are the ParameterStatus values the server sent at login:
	// what RESET and DISCARD ALL return the session to (the connection is
	// opened with no settings of a client's). Never modified.
	Defaults map[string]string

	R *bufio.Reader
	W *bufio.Writer

	// State is the holder's record of what the server session carries
	// (prepared statements, settings) for transaction pooling, where it
	// outlives one holder. The pool never reads it; a reset clears it.
	State any

	raw       net.Conn
	rc        syscall.RawConn // for alive, made on first use
	peek      func(fd uintptr) bool
	peekAlive bool
	pool      *Pool
	idleFrom  time.Time
	broken    bool
	born      time.Time // when the login finished (server_lifetime_ms)
	counted   bool      // counted in the Manager's limits until closed
}

// Dialer opens server connections.
type Dialer struct {
	// TLSMode is backend_tls_mode: disable, prefer or require.
	TLSMode string
	// ConnectTimeout bounds the TCP connect plus the startup handshake.
	ConnectTimeout time.Duration
}

// Credentials are what the proxy presents to the server.
type Credentials struct {
	User, Password, Database string
	// When Password is empty, a pass-through secret logs in instead
	// (scramkey.go): SCRAM, the ClientKey a client proved for a
	// verifier the server also holds; MD5, an "md5..." hash the server
	// also holds, answering md5 authentication. Either fails with a
	// PassThroughError when the server asks for something else.
	SCRAM *SCRAMSecret
	MD5   string
	// Params are extra startup parameters (e.g. "replication"). Normal pooled
	// connections carry none: client settings are applied after acquire so
	// that DISCARD ALL returns a connection to a neutral state.
	Params map[string]string
}

// ServerError is an error reported by the PostgreSQL server during connect
// (wrong backend password, missing database, too many connections...),
// decoded from its ErrorResponse. The proxy forwards it to the client as is.
type ServerError = pgconn.PgError

// SetDeadline sets the read and write deadline of the underlying socket.
func (c *Conn) SetDeadline(t time.Time) error { return c.raw.SetDeadline(t) }

// SetReadDeadline sets the read deadline of the underlying socket.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.raw.SetReadDeadline(t) }

// MarkBroken records that the connection must not be reused.
func (c *Conn) MarkBroken() { c.broken = true }

// Hijack hands the logged-in connection over to another protocol client
// (the rollout syncer's pgconn.Construct): its socket, at a message
// boundary with nothing of the server's read ahead. c must not be used
// afterwards, nor be in a pool.
func (c *Conn) Hijack() (net.Conn, error) {
	if n := c.R.Buffered(); n > 0 {
		return nil, fmt.Errorf("pool: %d bytes of the server's read ahead; the connection cannot be handed over", n)
	}
	if err := c.W.Flush(); err != nil {
		return nil, err
	}
	return c.raw, nil
}

// Close closes the socket. Prefer Pool.Release/Discard for pooled conns.
func (c *Conn) Close() error { return c.raw.Close() }

// alive reports whether an idle connection's socket is still open and has no
// unsolicited data waiting (a server that is shutting down sends a FATAL
// ErrorResponse before closing). It does not block.
func (c *Conn) alive() bool {
	if c.R.Buffered() > 0 {
		return false
	}
	if c.rc == nil {
		nc := c.raw
		if tc, ok := nc.(*tls.Conn); ok {
			nc = tc.NetConn()
		}
		sc, ok := nc.(syscall.Conn)
		if !ok {
			return true
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		c.rc = rc
		c.peek = c.peekFD
	}
	c.peekAlive = true
	return c.rc.Read(c.peek) == nil && c.peekAlive
}

// peekFD is alive's raw read: one non-blocking MSG_PEEK, which must find
// nothing (data would be a FATAL error before close; end of stream, a
// closed connection). It is bound to c once (Conn.peek) so a check
// allocates nothing.
func (c *Conn) peekFD(fd uintptr) bool {
	c.peekAlive = rawsock.PeekEmpty(fd)
	return true
}
