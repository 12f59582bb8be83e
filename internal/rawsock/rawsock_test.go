package rawsock

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pair returns a wrapped client end and the plain server end of a loopback
// TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) did not wrap", c)
	}
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s
}

func TestWrapLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(pipe) = %T, want the pipe itself", got)
	}
	c, _ := pair(t)
	if tc, ok := TCP(c); !ok || tc != c.TCPConn {
		t.Fatal("TCP(*Conn) did not return the wrapped TCPConn")
	}
	if tc, ok := TCP(c.TCPConn); !ok || tc != c.TCPConn {
		t.Fatal("TCP(*net.TCPConn) did not return it")
	}
	if _, ok := TCP(a); ok {
		t.Fatal("TCP(pipe) reported a TCP connection")
	}
}

// A large transfer both ways at once goes through partial writes and
// waits for writability (the payload is far larger than the socket
// buffers) and arrives intact.
func TestLargeTransferBothWays(t *testing.T) {
	c, s := pair(t)
	payload := make([]byte, 8<<20)
	rand.Read(payload)

	var wg sync.WaitGroup
	var serverGot []byte
	var serverErr error
	wg.Add(2)
	go func() { // server echoes what it reads until EOF
		defer wg.Done()
		serverGot, serverErr = io.ReadAll(s)
	}()
	go func() {
		defer wg.Done()
		n, err := c.Write(payload)
		if err != nil || n != len(payload) {
			t.Errorf("Write = %d, %v; want %d, nil", n, err, len(payload))
		}
		c.CloseWrite()
	}()
	wg.Wait()
	if serverErr != nil || !bytes.Equal(serverGot, payload) {
		t.Fatalf("server read %d bytes (err %v), want the %d written", len(serverGot), serverErr, len(payload))
	}

	// And the other direction, read through the wrapper in small pieces.
	go func() {
		s.Write(payload)
		s.Close()
	}()
	var got bytes.Buffer
	buf := make([]byte, 1000)
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
	if !bytes.Equal(got.Bytes(), payload) {
		t.Fatalf("client read %d bytes, want the %d sent", got.Len(), len(payload))
	}
}

func TestReadDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline error %v is not a net.Error timeout", err)
	}
}

// Close from another goroutine wakes a blocked Read with net.ErrClosed.
func TestCloseWakesRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked 5 s after Close")
	}
}

// Writing to a connection the peer reset reports an error, not success.
func TestWriteAfterPeerResetFails(t *testing.T) {
	c, s := pair(t)
	s.(*net.TCPConn).SetLinger(0) // close with RST
	s.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("hello"))
		time.Sleep(5 * time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("error %v (%T) is not a write *net.OpError", err, err)
	}
}

func TestZeroLength(t *testing.T) {
	c, _ := pair(t)
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	if n, err := c.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) = %d, %v", n, err)
	}
}

func TestPeekEmpty(t *testing.T) {
	c, s := pair(t)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peek := func() (empty bool) {
		rc.Control(func(fd uintptr) { empty = PeekEmpty(fd) })
		return
	}
	if !peek() {
		t.Fatal("PeekEmpty on a silent connection = false")
	}
	s.Write([]byte("x"))
	deadline := time.Now().Add(5 * time.Second)
	for peek() {
		if time.Now().After(deadline) {
			t.Fatal("PeekEmpty still true 5 s after the peer wrote")
		}
		time.Sleep(time.Millisecond)
	}
	// The peek consumed nothing.
	buf := make([]byte, 4)
	if n, err := c.Read(buf); n != 1 || err != nil || buf[0] != 'x' {
		t.Fatalf("Read after peek = %d %q %v", n, buf[:n], err)
	}
}

// Reads and writes allocate nothing once the connection exists.
func TestNoAllocations(t *testing.T) {
	c, s := pair(t)
	go io.Copy(s, s) // echo
	msg := []byte("0123456789")
	buf := make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		c.Write(msg)
		n := 0
		for n < len(msg) {
			m, err := c.Read(buf[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per write+read round trip, want 0", allocs)
	}
}
