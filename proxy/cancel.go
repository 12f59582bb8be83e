package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/pool"
)

// cancelKey is the BackendKeyData a client was given. In session pooling the
// process ID is the real PID of the primary server process the session is
// bound to (so pg_backend_pid() and pg_terminate_backend() mean what users
// expect); the secret is always the proxy's own, never the server's.
type cancelKey struct{ pid, secret uint32 }

// registerCancelKey issues the session's key for pid.
func (s *Server) registerCancelKey(ss *session, pid uint32) cancelKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var b [4]byte
		rand.Read(b[:])
		k := cancelKey{pid: pid, secret: binary.BigEndian.Uint32(b[:])}
		if _, taken := s.cancels[k]; !taken && k.secret != 0 {
			s.cancels[k] = ss
			return k
		}
	}
}

// cancel relays a client's CancelRequest to the server currently serving the
// session with that key. Unknown keys are ignored, as PostgreSQL does.
func (s *Server) cancel(k cancelKey) {
	s.mu.Lock()
	ss := s.cancels[k]
	s.mu.Unlock()
	if ss == nil {
		s.log.Debug("cancel request for unknown key", zap.Uint32("pid", k.pid))
		return
	}
	ss.cancelRunning(time.Time{})
}

// cancelRunning sends a CancelRequest to the server running the session's
// unit, if one runs. A timedOut unit (its tmo.unitAt) is query_timeout_ms's
// cancel: it is sent only while that unit still runs, the error it causes
// names the limit (queryTimeoutError), and the link's ReadyForQuery waits
// until it is delivered (awaitTimeoutCancel), so it cannot reach the
// client's next unit.
func (ss *session) cancelRunning(timedOut time.Time) {
	ss.mu.Lock()
	l := ss.mu.cur
	if l == nil {
		l = ss.mu.primary
	}
	stale := !timedOut.IsZero() && (ss.mu.pending == 0 || !ss.mu.tmo.unitAt.Equal(timedOut))
	idle := l == nil || stale || ss.txPool && ss.idleLocked()
	if timedOut.IsZero() && ss.mu.queueCancel != nil && (idle || !ss.runsOnLocked(l)) {
		// Nothing runs, and the unit the client waits on waits for a
		// server connection: it fails with 57014 and never runs (as
		// PostgreSQL would have cancelled it running), instead of
		// running later for a client that gave up on it.
		ss.mu.queueCancel(errQueuedCancel)
		ss.mu.Unlock()
		return
	}
	if idle || !l.claimLocked() {
		// Nothing runs for the session (in transaction pooling its last
		// connection may serve another client by now: a cancel there
		// would stop that client's statement).
		ss.mu.Unlock()
		return
	}
	// The claim keeps the connection from going back to its pool (and to
	// another session) until the cancel has been delivered.
	if !timedOut.IsZero() {
		l.queryTimedOut.Store(true)
		l.cancelling.Store(true)
	}
	ss.mu.Unlock()
	defer ss.unclaim(l)
	ss.sendCancelOn(l)
	ss.mu.Lock()
	// The backend that ran the cancelled statement is not handed to
	// another client: it is closed when released. Directly, a driver
	// that cancels usually closes its connection next (pgx does) and the
	// backend ends; pooled, its idle pg_stat_activity row would go on
	// showing the cancelled statement until someone reused it.
	l.cancelled = true
	if !timedOut.IsZero() {
		l.cancelling.Store(false)
		ss.readers.Broadcast() // awaitTimeoutCancel
	}
	ss.mu.Unlock()
}

// runsOnLocked reports whether a unit of the session is in flight on l:
// written and not yet answered, or an open batch (no Sync yet) there.
// Callers hold ss.mu.
func (ss *session) runsOnLocked(l *link) bool {
	return l.batches > l.rfqs || l == ss.mu.cur && ss.mu.unsynced
}

// sendCancelOn sends a CancelRequest for l's server backend; the caller
// holds a claim on l, so its connection serves no other session meanwhile.
func (ss *session) sendCancelOn(l *link) {
	srv := l.conn
	if err := sendCancel(srv.Addr, srv.PID, srv.SecretKey, ss.srv.opts.connectTimeout); err != nil {
		ss.log.Warn("relaying cancel request failed", zap.String("server", srv.Addr), zap.Error(err))
	}
}

// errQueuedCancel ends a unit's wait for a server connection: its
// client's CancelRequest arrived during the wait (cancelRunning).
var errQueuedCancel = errors.New("canceled by the client while waiting for a server connection")

// queryCanceled is what a unit cancelled before it ran is answered with:
// PostgreSQL's own words for a cancelled statement.
func queryCanceled() *pgproto3.ErrorResponse {
	return errorf(codeQueryCanceled, "canceling statement due to user request")
}

// acquireConn takes a connection from p for the session's next unit. A
// CancelRequest of the client during the wait ends it with
// errQueuedCancel.
func (ss *session) acquireConn(p *pool.Pool) (*pool.Conn, error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ss.mu.Lock()
	ss.mu.queueCancel = cancel
	ss.mu.Unlock()
	c, err := p.Acquire(ctx)
	ss.mu.Lock()
	ss.mu.queueCancel = nil
	ss.mu.Unlock()
	if err != nil && errors.Is(context.Cause(ctx), errQueuedCancel) {
		return nil, errQueuedCancel
	}
	return c, err
}

// sendCancel opens a plain connection to addr and sends a CancelRequest.
// PostgreSQL accepts cancel requests without TLS and without pg_hba checks.
func sendCancel(addr string, pid uint32, secret []byte, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	buf, err := (&pgproto3.CancelRequest{ProcessID: pid, SecretKey: secret}).Encode(nil)
	if err != nil {
		return err
	}
	if _, err := c.Write(buf); err != nil {
		return err
	}
	// The server closes the connection when done; wait for that so the
	// cancel has been delivered before we report success.
	var one [1]byte
	c.Read(one[:])
	return nil
}
