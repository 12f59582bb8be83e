package proxy

import (
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"
)

// Panics. A bug that panics in a goroutine of one session (its startup,
// its relay loop, one of its server readers) ends that session only: the
// goroutine recovers, logs the panic with its stack, and the session
// closes as if its client had left: the client gets FATAL XX000 when it
// can still be told, and the session's server connections are closed
// rather than pooled (their state is unknown). Without this, Go ends the
// whole process, and every client with it, at the first such bug.
//
// What it cannot undo: a panic while the goroutine held the session's
// lock leaves the session's other goroutines waiting for it (that session
// only hangs until its connections time out). Shared state (pools,
// metrics) is only ever changed under its own locks, taken and released
// inside one function, so the rest of the process carries on.

// internalError is what a client whose session panicked is told.
var internalError = &clientError{severity: "FATAL", code: "XX000",
	message: "pg-kinetic: internal error; this session is closed (the proxy's log has the details)"}

// contained logs a recovered panic r of the session's goroutine where.
func (ss *session) contained(where string, r any) {
	ss.log.Error("internal error: a panic ended one session", zap.String("in", where),
		zap.String("panic", fmt.Sprint(r)), zap.Stack("stack"))
}

// relayContained is clientToServer with a panic in it confined to this session.
func (ss *session) relayContained() (atBoundary bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			ss.contained("relay", r)
			atBoundary, err = false, internalError
		}
	}()
	return ss.clientToServer()
}

// startContained is start with a panic in it confined to this session.
func (ss *session) startContained() (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ss.contained("startup", r)
			ss.kill(internalError)
			ok = false
		}
	}()
	return ss.start()
}

// readContained is serverToClient with a panic in it confined to this
// session: the server connection is closed, and so is the client's, so
// the session's goroutine ends too (nothing will answer its units).
func (ss *session) readContained(l *link) (err error) {
	defer func() {
		if r := recover(); r != nil {
			ss.contained("server reader", r)
			l.conn.Close()
			ss.conn.Close()
			err = fmt.Errorf("pg-kinetic: internal error in the reader of server %s", l.addr)
		}
	}()
	return ss.serverToClient(l)
}

// failpoints make a session's goroutines panic, for the tests of the
// containment above (contain_test.go); zero, and one atomic load per
// message, in production.
var failpoints struct {
	relay  atomic.Uint32 // a client message of this type panics the relay loop
	reader atomic.Uint32 // a server message of this type panics its reader
}

// failpoint panics when fp is set to typ.
func failpoint(fp *atomic.Uint32, typ byte, where string) {
	if v := fp.Load(); v != 0 && byte(v) == typ {
		panic("failpoint: " + where)
	}
}
