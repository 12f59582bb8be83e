package proxy

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"
)

// SQLSTATEs of the timeouts, PostgreSQL's own.
const (
	codeQueryCanceled            = "57014"
	codeIdleInTransactionTimeout = "25P03"
	codeIdleSessionTimeout       = "57P05"
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

// handshakeError is a failed client TLS handshake. It hides its cause
// from errors.Is, so that a handshake cut by client_login_timeout_ms is
// closed without the FATAL: plaintext bytes where the client expects TLS
// records would only garble its error (PostgreSQL closes silently too).
type handshakeError struct{ err error }

func (e handshakeError) Error() string { return "TLS handshake: " + e.err.Error() }

// sessionTimeouts is what the janitor (janitor.go) reads to apply
// query_timeout_ms, idle_transaction_timeout_ms and client_idle_timeout_ms
// to a session. Each is recorded only when the session's config sets the
// timeout that needs it.
type sessionTimeouts struct {
	// clientAt: unix nanoseconds of the client's last message header
	// (session goroutine; atomic, read by the janitor).
	clientAt atomic.Int64
	// Under session.mu:
	idleAt    time.Time // the last ReadyForQuery after which the server owed nothing
	unitAt    time.Time // when the unit now running on a server started
	cancelled time.Time // unitAt of the unit query_timeout_ms cancelled
}

// idleWatched reports whether the session's config times idle clients out.
func (ss *session) idleWatched() bool {
	return ss.cfg != nil && (ss.cfg.Server.ClientIdleTimeoutMS > 0 || ss.cfg.Server.IdleTransactionTimeoutMS > 0)
}

// queryTimed reports whether the session's config sets query_timeout_ms.
func (ss *session) queryTimed() bool { return ss.cfg != nil && ss.cfg.Server.QueryTimeoutMS > 0 }

// noteClientMessage records a message from the client (session goroutine).
func (ss *session) noteClientMessage() {
	if ss.idleWatched() {
		ss.mu.tmo.clientAt.Store(time.Now().UnixNano())
	}
}

// noteUnitSentLocked records that a unit was written to a server; the
// first one unanswered starts the query_timeout_ms clock. Callers hold
// ss.mu, after counting the unit in pending.
func (ss *session) noteUnitSentLocked() {
	if ss.mu.pending == 1 && ss.queryTimed() {
		ss.mu.tmo.unitAt = time.Now()
	}
}

// noteReadyLocked records a ReadyForQuery from l: the next pipelined unit
// starts its query_timeout_ms clock, or the session is idle from now.
// Callers hold ss.mu, after uncounting it from pending.
func (ss *session) noteReadyLocked(l *link) {
	l.queryTimedOut.Store(false)
	switch {
	case ss.mu.pending > 0 && ss.queryTimed():
		ss.mu.tmo.unitAt = time.Now()
	case ss.mu.pending == 0 && ss.idleWatched():
		ss.mu.tmo.idleAt = time.Now()
	}
}

// checkTimeouts applies the session's client timeouts at now (the
// janitor): a unit running longer than query_timeout_ms is cancelled on
// its server (once); a client idle past client_idle_timeout_ms, or inside
// a transaction past idle_transaction_timeout_ms, is closed with
// PostgreSQL's FATAL for its own idle_session_timeout (57P05) and
// idle_in_transaction_session_timeout (25P03). Closing a client inside a
// transaction closes its server connection, which rolls it back
// (detach).
func (ss *session) checkTimeouts(now time.Time) {
	if !ss.queryTimed() && !ss.idleWatched() {
		return
	}
	cs := &ss.cfg.Server
	ss.mu.Lock()
	if !ss.mu.started || ss.mu.killed || ss.mu.draining {
		ss.mu.Unlock() // still logging in, or ending anyway
		return
	}
	if ss.mu.pending > 0 {
		qt := cs.QueryTimeout()
		due := qt > 0 && !ss.mu.tmo.unitAt.IsZero() && now.Sub(ss.mu.tmo.unitAt) >= qt && !ss.mu.tmo.cancelled.Equal(ss.mu.tmo.unitAt)
		if due {
			ss.mu.tmo.cancelled = ss.mu.tmo.unitAt
		}
		unit := ss.mu.tmo.cancelled
		ss.mu.Unlock()
		if due {
			ss.log.Info("query_timeout_ms expired: cancelling the unit on its server", zap.Duration("query_timeout", qt))
			ss.srv.wg.Add(1)
			go func() {
				defer ss.srv.wg.Done()
				ss.cancelRunning(unit)
			}()
		}
		return
	}
	if ss.mu.unsynced {
		ss.mu.Unlock()
		return
	}
	since := ss.connected
	for _, t := range []time.Time{ss.mu.tmo.idleAt, time.Unix(0, ss.mu.tmo.clientAt.Load())} {
		if t.After(since) {
			since = t
		}
	}
	limit, inTx := cs.ClientIdleTimeout(), ss.mu.tx != 'I'
	if inTx {
		limit = cs.IdleTransactionTimeout()
	}
	ss.mu.Unlock()
	if limit <= 0 || now.Sub(since) < limit {
		return
	}
	var err *clientError
	if inTx {
		err = fatalf(codeIdleInTransactionTimeout, "terminating connection due to idle-in-transaction timeout")
		err.detail = fmt.Sprintf("pg-kinetic: idle in a transaction longer than idle_transaction_timeout_ms (%d ms); the transaction is rolled back", limit.Milliseconds())
	} else {
		err = fatalf(codeIdleSessionTimeout, "terminating connection due to idle-session timeout")
		err.detail = fmt.Sprintf("pg-kinetic: idle longer than client_idle_timeout_ms (%d ms)", limit.Milliseconds())
	}
	ss.log.Debug("closing an idle client", zap.Bool("in_transaction", inTx), zap.Duration("idle", now.Sub(since)))
	ss.killWithin(err, idleKillPatience)
}

// awaitTimeoutCancel holds l's ReadyForQuery (its reader, before relaying
// it) while query_timeout_ms's cancel is on its way to l's server: a
// client that has not seen the ReadyForQuery sends no next unit, and l
// does not go back to its pool, so a late cancel finds the server idle,
// where PostgreSQL ignores it, instead of stopping the next statement.
func (ss *session) awaitTimeoutCancel(l *link) {
	if !l.cancelling.Load() {
		return
	}
	ss.mu.Lock()
	for l.cancelling.Load() && !ss.mu.killed {
		ss.readers.Wait()
	}
	ss.mu.Unlock()
}

// queryTimeoutError rewrites the ErrorResponse body of the unit that
// query_timeout_ms cancelled: the server's "canceling statement due to
// user request" (57014) becomes PostgreSQL's statement_timeout message,
// with a DETAIL naming the proxy's limit. Other errors pass unchanged.
func (ss *session) queryTimeoutError(body []byte) []byte {
	var er pgproto3.ErrorResponse
	if er.Decode(body) != nil || er.Code != codeQueryCanceled {
		return body
	}
	er.Message = "canceling statement due to statement timeout"
	er.Detail = fmt.Sprintf("pg-kinetic: the statement ran longer than query_timeout_ms (%d ms) and was cancelled on the server",
		ss.cfg.Server.QueryTimeoutMS)
	msg, err := er.Encode(nil)
	if err != nil || len(msg) < 5 {
		return body
	}
	return msg[5:]
}
