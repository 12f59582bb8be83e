package proxy

import (
	"bufio"
	"sync"
	"time"

	"github.com/pg-kinetic/pg-kinetic/internal/rawsock"
)

// Client buffers are lent, not owned: an idle client connection (most of
// them, with thousands of clients in transaction pooling) holds no read or
// write buffer, only its socket, its goroutine and its session record.

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, clientBufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, clientBufSize) }}
)

// startIdleIO enables buffer lending for a plain TCP client (a TLS
// connection keeps decrypted bytes of its own, so its buffers stay).
func (ss *session) startIdleIO() {
	tc, ok := rawsock.TCP(ss.conn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	// Under wmu: kill, on another goroutine, flushes the write buffer
	// (flushOut reads idleIO) while holding it.
	ss.wmu.Lock()
	ss.rc, ss.peekFn, ss.idleIO = rc, ss.peek, true
	ss.wmu.Unlock()
}

// out is the client write buffer, borrowed when needed. Callers hold wmu.
func (ss *session) out() *bufio.Writer {
	if ss.w == nil {
		ss.w = writerPool.Get().(*bufio.Writer)
		ss.w.Reset(ss.conn)
	}
	return ss.w
}

// flushOut flushes the client write buffer and, when it is lent, gives it
// back. Callers hold wmu.
func (ss *session) flushOut() error {
	if ss.w == nil {
		return nil
	}
	err := ss.w.Flush()
	if err == nil && ss.idleIO {
		ss.w.Reset(nil)
		writerPool.Put(ss.w)
		ss.w = nil
	}
	return err
}

// awaitClient returns the read buffer while it is empty and blocks until
// the client sends something (or goes away), then borrows one again. It
// costs no extra syscall on the usual path: the readiness check replaces
// the read that would have found nothing. A held retryable read
// (retry.go) is settled before it returns, and when its replica fails
// during the wait.
func (ss *session) awaitClient() error {
	for {
		if !ss.idleIO || ss.r.Buffered() > 0 {
			return ss.settleHeld()
		}
		ss.lendReader()
		var err error
		woken := false
		if !ss.held.active {
			err = ss.rc.Read(ss.peekFn) // the frames under this wait stay small
		} else {
			raceWait(func(w *RaceWindows) time.Duration { return w.BeforeHeldWait })
			if ss.watchHeld() {
				err = ss.rc.Read(ss.peekFn)
				woken = ss.unwatchHeld()
			} else {
				woken = true // its replica failed already
			}
		}
		ss.borrowReader()
		if err := ss.settleHeld(); err != nil {
			return err
		}
		switch {
		case woken:
			continue // and wait for the client
		case err != nil:
			return errClientGone{err}
		}
		return nil
	}
}

//go:noinline
func (ss *session) lendReader() {
	ss.r.Reset(nil)
	readerPool.Put(ss.r)
	ss.r = nil
	ss.peekWoke = false
}

//go:noinline
func (ss *session) borrowReader() {
	ss.r = readerPool.Get().(*bufio.Reader)
	ss.r.Reset(ss.conn)
}

// peek is awaitClient's raw read: done once readiness was signalled, or
// when a non-blocking MSG_PEEK finds data, end of stream or an error (the
// read that follows reports them).
func (ss *session) peek(fd uintptr) bool {
	if ss.peekWoke {
		return true
	}
	if rawsock.PeekEmpty(fd) {
		ss.peekWoke = true
		return false
	}
	return true
}
