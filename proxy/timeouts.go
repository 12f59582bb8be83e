package proxy

import (
	"errors"
	"os"
	"time"
)

// Timeouts of [server] that end a client (docs/behaviour.md, "Timeouts
// and limits"): client_login_timeout_ms here; query_timeout_ms,
// idle_transaction_timeout_ms and client_idle_timeout_ms below.

// loginTimeout is client_login_timeout_ms (0: none), or the Server's
// testing override.
func (ss *session) loginTimeout() time.Duration {
	if d := ss.srv.opts.loginTimeout; d > 0 {
		return d
	}
	return ss.cfg.Server.ClientLoginTimeout()
}

// loginDeadline is when the client's startup must be done; the zero time
// is none.
func (ss *session) loginDeadline() time.Time {
	if d := ss.loginTimeout(); d > 0 {
		return time.Now().Add(d)
	}
	return time.Time{}
}

// loginTimedOut turns a startup that failed on the login deadline into
// FATAL 08P01 naming client_login_timeout_ms (PgBouncer's answer to
// client_login_timeout), with a second to write it; other errors pass.
func (ss *session) loginTimedOut(err error) error {
	d := ss.loginTimeout()
	if d <= 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	ss.conn.SetDeadline(time.Now().Add(time.Second))
	return protocolViolation("pg-kinetic: client_login_timeout_ms (%d ms) expired before the client logged in", d.Milliseconds())
}
