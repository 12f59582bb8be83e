package main

import (
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestListenReusePort(t *testing.T) {
	first, err := listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if ln, err := listen(first.Addr().String(), false); err == nil {
		ln.Close()
		t.Fatal("a second listener without reuse_port bound the same address")
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a second listener without reuse_port: %v, want EADDRINUSE", err)
	}

	a, err := listen("127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := listen(a.Addr().String(), true)
	if err != nil {
		t.Fatalf("a second listener with reuse_port: %v", err)
	}
	defer b.Close()
	if c, err := listen(a.Addr().String(), false); err == nil {
		c.Close()
		t.Fatal("a listener without reuse_port joined a reuse_port group")
	}
}

// TestReusePortHandover is the kernel side of a restart, without kineticd
// around it: clients connect in a loop (each connection sends a byte and
// waits for it back) to an address served by listener a; b joins the
// address, a closes, b goes on alone. With net.ipv4.tcp_migrate_req = 1
// (set for the test when it is not, which needs root) no connection
// fails: those waiting in a's accept queue move to b. Without it some are
// reset (docs/operations.md has the figures).
func TestReusePortHandover(t *testing.T) {
	const path = migrateReqPath
	old := migrateReq()
	switch old {
	case "":
		t.Fatalf("this kernel has no %s (Linux 5.14+): reuse_port restarts reset queued connections", path)
	case "1":
	default:
		if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
			t.Fatalf("net.ipv4.tcp_migrate_req is %s and cannot be set to 1 for this test (%v): run it as root or set the sysctl", old, err)
		}
		t.Cleanup(func() {
			if err := os.WriteFile(path, []byte(old+"\n"), 0o644); err != nil {
				t.Errorf("restoring net.ipv4.tcp_migrate_req to %s: %v", old, err)
			}
		})
	}
	const handovers = 10
	var ok, failed, acceptedA, acceptedB atomic.Int64
	var firstErr atomic.Value
	for range handovers {
		a, err := listen("127.0.0.1:0", true)
		if err != nil {
			t.Fatal(err)
		}
		addr := a.Addr().String()
		var servers sync.WaitGroup
		servers.Add(1)
		go func() { defer servers.Done(); echo(a, &acceptedA) }()
		stop := make(chan struct{})
		var clients sync.WaitGroup
		for range 8 {
			clients.Add(1)
			go func() {
				defer clients.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := roundTrip(addr); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					} else {
						ok.Add(1)
					}
				}
			}()
		}
		time.Sleep(100 * time.Millisecond) // a serves alone
		b, err := listen(addr, true)
		if err != nil {
			t.Fatal(err)
		}
		servers.Add(1)
		go func() { defer servers.Done(); echo(b, &acceptedB) }()
		time.Sleep(100 * time.Millisecond) // both serve
		a.Close()
		time.Sleep(100 * time.Millisecond) // b serves alone
		close(stop)
		clients.Wait()
		b.Close()
		servers.Wait()
	}
	t.Logf("%d handovers: %d connections, %d failed (a accepted %d, b %d)",
		handovers, ok.Load()+failed.Load(), failed.Load(), acceptedA.Load(), acceptedB.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d connections failed across %d handovers with tcp_migrate_req = 1; first: %v", failed.Load(), handovers, firstErr.Load())
	}
	if acceptedA.Load() == 0 || acceptedB.Load() == 0 {
		t.Fatalf("a accepted %d connections and b %d: both must have served", acceptedA.Load(), acceptedB.Load())
	}
}

// echo accepts until ln closes; each connection gets its byte back.
func echo(ln net.Listener, accepted *atomic.Int64) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted.Add(1)
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 1)
			if _, err := c.Read(b); err == nil {
				c.Write(b)
			}
		}()
	}
}

func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		return err
	}
	if b[0] != 1 {
		return errors.New("wrong byte back: " + strings.TrimSpace(string(b)))
	}
	return nil
}
