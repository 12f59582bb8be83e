package pool

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// A pool whose dialer cannot reach anything still enforces its size and
// timeout: these paths need no server.
func TestAcquireTimeoutWhenFull(t *testing.T) {
	p := New(Key{Addr: "127.0.0.1:1"}, Options{Size: 1, AcquireTimeout: 50 * time.Millisecond})
	p.slots <- struct{}{} // one connection on loan
	_, err := p.Acquire(context.Background())
	if !errors.Is(err, ErrPoolTimeout) {
		t.Fatalf("full pool: %v, want ErrPoolTimeout", err)
	}
	if st := p.Stats(); st.Waiting != 0 {
		t.Fatalf("waiting count after timeout: %+v", st)
	}
}

func TestDialFailureFreesTheSlot(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := New(Key{Addr: addr}, Options{Size: 1, Dialer: Dialer{ConnectTimeout: time.Second}})
	for i := 0; i < 3; i++ {
		if _, err := p.Acquire(context.Background()); err == nil {
			t.Fatal("dial to a closed port succeeded")
		}
	}
	if st := p.Stats(); st.Active != 0 || len(p.slots) != 0 {
		t.Fatalf("failed dials leaked slots: %+v, %d slots taken", st, len(p.slots))
	}
}

func TestManagerReplacesPoolWhenOptionsChange(t *testing.T) {
	m := NewManager()
	k := Key{Addr: "127.0.0.1:5432", User: "u", Database: "d"}
	a, _ := m.Get(k, Options{Size: 2})
	b, _ := m.Get(k, Options{Size: 2})
	if a != b {
		t.Fatal("same options made a new pool")
	}
	c, _ := m.Get(k, Options{Size: 5})
	if c == a || cap(c.slots) != 5 {
		t.Fatal("a new size did not make a new pool")
	}
	if !a.closed {
		t.Fatal("the retired pool is still open")
	}
	m.Close()
	if _, err := m.Get(k, Options{Size: 5}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}
