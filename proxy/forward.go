package proxy

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/internal/wire"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// errInterrupted reports that the server reader was stopped by the session
// between two messages, leaving the server connection's stream intact.
var errInterrupted = errors.New("server reader interrupted at a message boundary")

// frontendLimit returns the body limit of a frontend message type in the
// relay phase, and false for a type a client may not send there. The limits
// are PostgreSQL's own.
func frontendLimit(t byte) (int, bool) {
	switch t {
	case 'Q', 'P', 'B', 'F', 'd':
		return wire.MaxLargeBodyLen, true
	case 'S', 'H', 'X', 'C', 'D', 'E', 'c', 'f':
		return wire.MaxSmallBodyLen, true
	}
	return 0, false
}

// serve relays the session until the client leaves, the server connection
// fails, or the session is killed; then it returns the server connection
// to its pool when the connection is provably idle, and closes it otherwise.
func (ss *session) serve() {
	ss.mu.Lock()
	srv, p := ss.server, ss.srvPool
	ss.mu.Unlock()

	readerDone := make(chan error, 1)
	go func() { readerDone <- ss.serverToClient(srv) }()

	atBoundary, err := ss.clientToServer(srv)
	var ce *clientError
	if errors.As(err, &ce) {
		ss.log.Info("closing client connection", zap.Error(err))
		ss.kill(ce)
	}

	// Stop the server reader; it leaves the stream intact only if it was
	// waiting for a message header.
	srv.SetReadDeadline(time.Now())
	rerr := <-readerDone
	srv.SetReadDeadline(time.Time{})

	ss.mu.Lock()
	idle := ss.idleLocked()
	pending := ss.pending
	ss.server, ss.srvPool = nil, nil
	ss.mu.Unlock()

	clean := atBoundary && idle && errors.Is(rerr, errInterrupted)
	if !clean && pending > 0 && !errors.Is(rerr, errServerGone) {
		// The client left mid-query: stop the query instead of letting it
		// run on a connection nobody reads.
		sendCancel(srv.Addr, srv.PID, srv.SecretKey, ss.srv.opts.connectTimeout)
	}
	ss.releaseServer(srv, p, clean)
	ss.kill(nil)
	if ss.counted {
		ss.srv.clients.Add(-1)
	}
}

// clientToServer relays client messages to srv until the client sends
// Terminate or fails. atBoundary is false when it stopped inside a message,
// which leaves the server connection unusable.
func (ss *session) clientToServer(srv *pool.Conn) (atBoundary bool, err error) {
	for {
		h, err := wire.ReadHeader(ss.r)
		if err != nil {
			if errors.Is(err, wire.ErrBadLength) {
				return true, protocolViolation("invalid message length")
			}
			return true, errClientGone{err}
		}
		limit, ok := frontendLimit(h.Type)
		if !ok {
			return true, protocolViolation("invalid frontend message type %d", h.Type)
		}
		if h.Len > limit {
			return true, protocolViolation("invalid message length")
		}
		if h.Type == 'X' {
			return true, nil
		}
		ss.mu.Lock()
		if ss.killed {
			ss.mu.Unlock()
			return true, nil
		}
		switch h.Type {
		case 'Q', 'F':
			ss.pending++
		case 'S':
			ss.pending++
			ss.unsynced = false
		case 'P', 'B', 'E', 'D', 'C':
			ss.unsynced = true
		}
		ss.mu.Unlock()

		if err := wire.WriteHeader(srv.W, h); err != nil {
			return false, errServerGone
		}
		if err := wire.Copy(srv.W, ss.r, h.Len); err != nil {
			var we *wire.WriteError
			if errors.As(err, &we) {
				return false, errServerGone
			}
			return false, errClientGone{err}
		}
		if ss.r.Buffered() == 0 {
			if err := srv.W.Flush(); err != nil {
				return false, errServerGone
			}
		}
	}
}

// errServerGone reports a failed server connection.
var errServerGone = errors.New("server connection lost")

// serverToClient relays server messages to the client. It tracks
// ReadyForQuery (pending count, transaction status) and ParameterStatus,
// and ends the session when the server connection fails.
func (ss *session) serverToClient(srv *pool.Conn) error {
	var body []byte
	sawFatal := false
	for {
		h, err := wire.ReadHeader(srv.R)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && srv.R.Buffered() == 0 {
				return errInterrupted
			}
			ss.serverFailed(srv, err, sawFatal)
			return errServerGone
		}
		closeNow := false
		ss.wmu.Lock()
		werr := wire.WriteHeader(ss.w, h)
		switch {
		case werr != nil:
		case h.Type == 'Z' || h.Type == 'S' || h.Type == 'E' && h.Len <= wire.MaxSmallBodyLen*100:
			if body, err = wire.ReadBody(srv.R, h.Len, body); err != nil {
				break
			}
			_, werr = ss.w.Write(body)
			switch h.Type {
			case 'Z':
				if len(body) == 1 {
					ss.mu.Lock()
					ss.pending--
					ss.tx = body[0]
					closeNow = ss.draining && ss.idleLocked()
					ss.mu.Unlock()
				}
			case 'S':
				var ps pgproto3.ParameterStatus
				if ps.Decode(body) == nil {
					srv.Params[ps.Name] = ps.Value
				}
			case 'E':
				sawFatal = isFatal(body)
			}
		default:
			err = wire.Copy(ss.w, srv.R, h.Len)
			var we *wire.WriteError
			if errors.As(err, &we) {
				werr, err = we.Err, nil
			}
		}
		if werr == nil && err == nil && srv.R.Buffered() == 0 {
			werr = ss.w.Flush()
		}
		ss.wmu.Unlock()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return err // interrupted mid-message: the stream is unusable
			}
			ss.serverFailed(srv, err, sawFatal)
			return errServerGone
		}
		if werr != nil {
			// The client is gone; the session goroutine sees it too.
			ss.conn.Close()
			return werr
		}
		if closeNow {
			ss.kill(fatalf(codeAdminShutdown, "terminating connection due to administrator command"))
			return errInterrupted
		}
	}
}

// serverFailed ends the session after its server connection failed. If
// the server already told the client why (a FATAL ErrorResponse, as for
// pg_terminate_backend), nothing is added.
func (ss *session) serverFailed(srv *pool.Conn, err error, toldClient bool) {
	srv.MarkBroken()
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		ss.log.Warn("server connection failed", zap.String("server", srv.Addr), zap.Error(err))
	}
	if toldClient {
		ss.kill(nil)
		return
	}
	ss.kill(&clientError{severity: "FATAL", code: codeConnectionFailure,
		message: "pg-kinetic: lost the connection to the server", detail: "server " + srv.Addr})
}

// isFatal reports whether an ErrorResponse body has severity FATAL or PANIC.
func isFatal(body []byte) bool {
	var e pgproto3.ErrorResponse
	if e.Decode(body) != nil {
		return false
	}
	return e.Severity == "FATAL" || e.Severity == "PANIC"
}
