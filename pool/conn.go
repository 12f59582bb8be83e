package pool

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/internal/rawsock"
)

// bufSize is the read and write buffer of a server connection. 32 KiB holds
// many DataRows per syscall without making idle connections expensive.
const bufSize = 32 << 10

// Conn is one authenticated server connection, taken over from pgconn after
// the startup handshake. Reads and writes go through R and W; the caller that
// holds the Conn owns them.
type Conn struct {
	Addr string
	// PID and SecretKey identify the server process, for CancelRequest.
	PID       uint32
	SecretKey []byte
	// Params are the server's current ParameterStatus values. The holder
	// updates them as it relays ParameterStatus messages.
	Params map[string]string

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
	// Params are extra startup parameters (e.g. "replication"). Normal pooled
	// connections carry none: client settings are applied after acquire so
	// that DISCARD ALL returns a connection to a neutral state.
	Params map[string]string
}

// ServerError is an error reported by the PostgreSQL server during connect
// (wrong backend password, missing database, too many connections...). The
// proxy forwards it to the client as is.
type ServerError = pgconn.PgError

// Dial connects to addr and completes the PostgreSQL startup handshake.
func (d Dialer) Dial(ctx context.Context, addr string, cred Credentials) (*Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w", addr, err)
	}
	sslmode := d.TLSMode
	if sslmode == "" {
		sslmode = "disable"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("server address %q: bad port", addr)
	}
	// Host and port go into the connection string so that pgconn derives
	// its TLS attempts (require: TLS only; prefer: TLS, then plaintext)
	// for this TCP address. sslmode=require/prefer encrypt without
	// verifying the server certificate, like libpq.
	connString := fmt.Sprintf("host='%s' port=%s sslmode=%s", host, port, sslmode)
	cfg, err := pgconn.ParseConfigWithOptions(connString, pgconn.ParseConfigOptions{})
	if err != nil {
		return nil, err
	}
	// Environment variables (PGAPPNAME, PGOPTIONS, ...) must not leak into
	// server sessions: the client's own startup parameters are applied later.
	cfg.RuntimeParams = map[string]string{}
	for k, v := range cred.Params {
		cfg.RuntimeParams[k] = v
	}
	cfg.User, cfg.Password, cfg.Database = cred.User, cred.Password, cred.Database
	// The socket under pgconn (and under TLS when there is TLS) does its
	// reads and writes with rawsock: see that package for why.
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return rawsock.Wrap(c), nil
	}
	if d.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.ConnectTimeout)
		defer cancel()
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, unwrapServerError(err)
	}
	if err := pc.SyncConn(ctx); err != nil {
		pc.Close(context.Background())
		return nil, err
	}
	hc, err := pc.Hijack()
	if err != nil {
		pc.Close(context.Background())
		return nil, err
	}
	params := make(map[string]string, len(hc.ParameterStatuses))
	for k, v := range hc.ParameterStatuses {
		params[k] = v
	}
	return &Conn{
		Addr:      addr,
		PID:       hc.PID,
		SecretKey: hc.SecretKey,
		Params:    params,
		R:         bufio.NewReaderSize(hc.Conn, bufSize),
		W:         bufio.NewWriterSize(hc.Conn, bufSize),
		raw:       hc.Conn,
	}, nil
}

// unwrapServerError returns the server's own *pgconn.PgError when connect
// failed because the server said no, so the proxy can forward it verbatim.
func unwrapServerError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	return err
}

// SetDeadline sets the read and write deadline of the underlying socket.
func (c *Conn) SetDeadline(t time.Time) error { return c.raw.SetDeadline(t) }

// SetReadDeadline sets the read deadline of the underlying socket.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.raw.SetReadDeadline(t) }

// MarkBroken records that the connection must not be reused.
func (c *Conn) MarkBroken() { c.broken = true }

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
