// Package rawsock gives the proxy's TCP sockets (client and server side) a
// Read and Write that make their system calls without telling the Go
// scheduler about them.
//
// Why a package: both proxy (client sockets) and pool (server sockets) need
// it, and it is the one place that uses syscall.RawSyscall.
//
// A net.TCPConn read or write goes through syscall.Syscall, which marks the
// goroutine's P as "in a system call". The runtime's monitor thread takes
// such a P away from a call that lasts longer than about 20 µs and hands it
// to another thread; on a loopback socket a write often lasts that long,
// because the kernel delivers the data and wakes the reader in the writer's
// time slice. Under pgbench that hand-off happened for a large share of the
// writes: futex wake-ups and context switches that cost more CPU than the
// proxy's own work (docs/performance.md has the figures). The sockets are
// non-blocking, so a call never waits; waiting for readiness still goes
// through Go's netpoller (syscall.RawConn), so deadlines, Close and
// goroutine parking behave exactly as for a net.TCPConn.
package rawsock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// maxRW bounds one read or write call, as internal/poll does.
const maxRW = 1 << 30

// Conn is a *net.TCPConn with Read and Write replaced. Every other method
// (deadlines, addresses, Close, SyscallConn, keepalive settings) is the
// TCPConn's own.
type Conn struct {
	*net.TCPConn
	r, w half
}

// half is the state of one direction. Its callback is bound once, so a
// call allocates nothing. Reads are serialized by r.mu, writes by w.mu; a
// read and a write may run at the same time.
type half struct {
	mu    sync.Mutex
	b     []byte
	n     int
	errno syscall.Errno
	fn    func(uintptr) bool             // readFD or writeFD
	wait  func(func(uintptr) bool) error // the RawConn's Read or Write
}

// run gives b to the callback through the RawConn, which calls it again
// after each readiness wait until it reports done.
func (h *half) run(b []byte) (int, syscall.Errno, error) {
	h.mu.Lock()
	h.b, h.n, h.errno = b, 0, 0
	err := h.wait(h.fn)
	n, errno := h.n, h.errno
	h.b = nil
	h.mu.Unlock()
	return n, errno, err
}

// Wrap returns c as a *Conn when it is a *net.TCPConn, and c unchanged
// otherwise (a Unix socket, a test pipe, an already wrapped Conn).
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	x := &Conn{TCPConn: tc}
	x.r.fn, x.r.wait = x.readFD, rc.Read
	x.w.fn, x.w.wait = x.writeFD, rc.Write
	return x
}

// Read reads up to len(b) bytes. It returns io.EOF at the end of the
// stream, like net.Conn.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) > maxRW {
		b = b[:maxRW]
	}
	n, errno, err := c.r.run(b)
	switch {
	case err != nil: // closed, deadline exceeded: already a *net.OpError
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) readFD(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.r.b[0])), uintptr(len(c.r.b)))
		switch e {
		case 0:
			c.r.n = int(r)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for readiness in the netpoller, then again
		default:
			c.r.errno = e
			return true
		}
	}
}

// Write writes all of b unless an error stops it, like net.Conn.
func (c *Conn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, errno, err := c.w.run(b)
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

func (c *Conn) writeFD(fd uintptr) bool {
	for c.w.n < len(c.w.b) {
		p := c.w.b[c.w.n:]
		if len(p) > maxRW {
			p = p[:maxRW]
		}
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			c.w.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the send buffer is full: wait until writable
		default:
			c.w.errno = e
			return true
		}
	}
	return true
}

func (c *Conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// Unwrap returns the TCP connection under c, for callers that need the
// concrete type.
func (c *Conn) Unwrap() *net.TCPConn { return c.TCPConn }

// TCP returns the *net.TCPConn behind nc: nc itself or the one a *Conn
// wraps.
func TCP(nc net.Conn) (*net.TCPConn, bool) {
	switch c := nc.(type) {
	case *net.TCPConn:
		return c, true
	case *Conn:
		return c.TCPConn, true
	}
	return nil, false
}

// PeekEmpty reports whether a non-blocking MSG_PEEK on fd finds nothing to
// read yet (EAGAIN). Data, end of stream and errors all report false: the
// read that follows sees them. Meant for a syscall.RawConn.Read callback.
func PeekEmpty(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return e == syscall.EAGAIN
		}
	}
}
