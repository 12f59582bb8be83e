package pool

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// loginServer is a fake PostgreSQL that accepts any number of logins,
// each taking delay, and answers every Query with an empty success. It
// counts the logins in progress at once.
type loginServer struct {
	addr              string
	inLogin, maxLogin atomic.Int32
	logins            atomic.Int32
}

func startLoginServer(t *testing.T, delay time.Duration) *loginServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &loginServer{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				s.serve(nc, delay)
			}()
		}
	}()
	return s
}

func (s *loginServer) serve(nc net.Conn, delay time.Duration) {
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(nc, nc)
	if _, err := be.ReceiveStartupMessage(); err != nil {
		return
	}
	n := s.inLogin.Add(1)
	for m := s.maxLogin.Load(); n > m && !s.maxLogin.CompareAndSwap(m, n); m = s.maxLogin.Load() {
	}
	time.Sleep(delay) // the login's work on a real server
	s.inLogin.Add(-1)
	s.logins.Add(1)
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		if _, ok := m.(*pgproto3.Query); ok {
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("DISCARD ALL")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if be.Flush() != nil {
				return
			}
		}
	}
}

func limitedOpts(lim Limits) Options {
	return Options{Size: 10, AcquireTimeout: 200 * time.Millisecond, Dialer: Dialer{ConnectTimeout: 5 * time.Second}, Limits: lim}
}

// max_db_connections counts every user's pool of a server: at the limit a
// second user waits and times out with ErrLimitTimeout (an
// ErrPoolTimeout), and gets the room once the first connection closes.
func TestLimitsMaxDBAcrossUsers(t *testing.T) {
	s := startLoginServer(t, 0)
	m := NewManager()
	defer m.Close()
	opts := limitedOpts(Limits{MaxDB: 1, MaxDials: 4})
	p1, _ := m.Get(Key{Addr: s.addr, User: "u1", Database: "d"}, opts)
	p2, _ := m.Get(Key{Addr: s.addr, User: "u2", Database: "d"}, opts)
	other, _ := m.Get(Key{Addr: s.addr, User: "u2", Database: "other"}, opts)
	c1, err := p1.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Acquire(context.Background()); !errors.Is(err, ErrLimitTimeout) || !errors.Is(err, ErrPoolTimeout) {
		t.Fatalf("second connection at max_db_connections = 1: %v, want ErrLimitTimeout", err)
	}
	// Another database of the same server is counted apart.
	c3, err := other.Acquire(context.Background())
	if err != nil {
		t.Fatalf("another database: %v", err)
	}
	other.Release(c3)
	p1.Discard(c1)
	c2, err := p2.Acquire(context.Background())
	if err != nil {
		t.Fatalf("after the first connection closed: %v", err)
	}
	p2.Release(c2)
}

// At max_db_connections an idle connection of another user's pool is
// closed to make room for a waiting caller.
func TestLimitsEvictIdleOfOtherPool(t *testing.T) {
	s := startLoginServer(t, 0)
	m := NewManager()
	defer m.Close()
	opts := limitedOpts(Limits{MaxDB: 1, MaxDials: 4})
	p1, _ := m.Get(Key{Addr: s.addr, User: "u1", Database: "d"}, opts)
	p2, _ := m.Get(Key{Addr: s.addr, User: "u2", Database: "d"}, opts)
	c1, err := p1.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p1.Release(c1)
	if st := p1.Stats(); st.Idle != 1 {
		t.Fatalf("p1 %+v, want one idle connection", st)
	}
	c2, err := p2.Acquire(context.Background())
	if err != nil {
		t.Fatalf("u2 with u1's idle connection holding max_db_connections = 1: %v", err)
	}
	if st := p1.Stats(); st.Idle != 0 {
		t.Fatalf("p1 %+v after eviction, want no idle connection", st)
	}
	p2.Release(c2)
}

// max_user_connections counts one user across databases of a server.
func TestLimitsMaxUserAcrossDatabases(t *testing.T) {
	s := startLoginServer(t, 0)
	m := NewManager()
	defer m.Close()
	opts := limitedOpts(Limits{MaxUser: 1, MaxDials: 4})
	a, _ := m.Get(Key{Addr: s.addr, User: "u", Database: "a"}, opts)
	b, _ := m.Get(Key{Addr: s.addr, User: "u", Database: "b"}, opts)
	v, _ := m.Get(Key{Addr: s.addr, User: "v", Database: "b"}, opts)
	c, err := a.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(c)
	if _, err := b.Acquire(context.Background()); !errors.Is(err, ErrLimitTimeout) {
		t.Fatalf("u's second connection, other database: %v, want ErrLimitTimeout", err)
	}
	cv, err := v.Acquire(context.Background())
	if err != nil {
		t.Fatalf("another user: %v", err)
	}
	v.Release(cv)
}

// MaxDials bounds the logins in progress to a server; the callers beyond
// it wait and all get a connection.
func TestLimitsDialGate(t *testing.T) {
	s := startLoginServer(t, 30*time.Millisecond)
	m := NewManager()
	defer m.Close()
	opts := limitedOpts(Limits{MaxDials: 3})
	opts.Size, opts.AcquireTimeout = 20, 10*time.Second
	p, _ := m.Get(Key{Addr: s.addr, User: "u", Database: "d"}, opts)
	var wg sync.WaitGroup
	var failed atomic.Int32
	conns := make(chan *Conn, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := p.Acquire(context.Background())
			if err != nil {
				failed.Add(1)
				return
			}
			conns <- c
		}()
	}
	wg.Wait()
	close(conns)
	for c := range conns {
		p.Release(c)
	}
	if failed.Load() != 0 || s.logins.Load() != 20 {
		t.Fatalf("%d acquires failed, %d logins; want 0 and 20", failed.Load(), s.logins.Load())
	}
	if got, st := s.maxLogin.Load(), m.DialStats(); got > 3 || st.Peak > 3 || st.Peak < 1 || st.InProgress != 0 {
		t.Fatalf("at most %d logins at once on the server, dial stats %+v; want <= 3", got, st)
	}
}

// Manager.Dial, a login outside the pools (the proxy's own lookups),
// goes through the same dial gate as the pools' logins to that server:
// together they make at most MaxDials at once, and every one succeeds.
func TestManagerDialSharesTheGate(t *testing.T) {
	s := startLoginServer(t, 30*time.Millisecond)
	m := NewManager()
	defer m.Close()
	opts := limitedOpts(Limits{MaxDials: 3})
	opts.Size, opts.AcquireTimeout = 10, 10*time.Second
	key := Key{Addr: s.addr, User: "u", Database: "d"}
	p, _ := m.Get(key, opts)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 20 {
		wg.Go(func() {
			if i%2 == 0 {
				c, err := p.Acquire(context.Background())
				if err != nil {
					failed.Add(1)
					return
				}
				p.Release(c)
				return
			}
			c, err := m.Dial(context.Background(), Key{Addr: s.addr, User: "lookup", Database: "d"}, 3, opts.Dialer, Credentials{User: "lookup", Database: "d"})
			if err != nil {
				failed.Add(1)
				return
			}
			c.Close()
		})
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d logins failed", failed.Load())
	}
	if got, st := s.maxLogin.Load(), m.DialStats(); got > 3 || st.Peak > 3 || st.InProgress != 0 {
		t.Fatalf("at most %d logins at once on the server, dial stats %+v; want <= 3", got, st)
	}
	if s.logins.Load() < 11 {
		t.Fatalf("%d logins; want the 10 of Dial and at least one of the pool", s.logins.Load())
	}
}

// Sweep closes idle connections past IdleTimeout or Lifetime and frees
// their room under the limits.
func TestSweep(t *testing.T) {
	s := startLoginServer(t, 0)
	m := NewManager()
	defer m.Close()
	opts := limitedOpts(Limits{MaxDB: 1, MaxDials: 1})
	opts.IdleTimeout = time.Minute
	p, _ := m.Get(Key{Addr: s.addr, User: "u", Database: "d"}, opts)
	c, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(c)
	p.Sweep(time.Now())
	if st := p.Stats(); st.Idle != 1 {
		t.Fatalf("swept a connection idle for less than IdleTimeout: %+v", st)
	}
	p.Sweep(time.Now().Add(time.Minute))
	if st := p.Stats(); st.Idle != 0 {
		t.Fatalf("kept a connection idle past IdleTimeout: %+v", st)
	}
	c, err = p.Acquire(context.Background()) // the room is free again
	if err != nil {
		t.Fatal(err)
	}
	p.Release(c)
}

// A login slower than the caller's wait goes on after the caller gave up
// (its acquire timeout): the caller gets an error that is not
// ErrPoolTimeout (the pool had room; the server was slow), the login
// finishes, and its connection joins the idle ones, where the next
// caller finds it without a login of its own. Before, the login was
// abandoned with its caller, and a server slower than the wait never
// logged anyone in (the soak's collapse).
func TestLoginOutlivesItsCaller(t *testing.T) {
	s := startLoginServer(t, 400*time.Millisecond)
	m := NewManager()
	defer m.Close()
	p, _ := m.Get(Key{Addr: s.addr, User: "u", Database: "d"}, limitedOpts(Limits{MaxDials: 2}))
	_, err := p.Acquire(context.Background()) // AcquireTimeout 200 ms
	var goesOn *loginGoesOn
	if err == nil || errors.Is(err, ErrPoolTimeout) || !errors.As(err, &goesOn) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire during a 400 ms login with a 200 ms wait: %v; want a login still in progress", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Idle != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the login that went on never joined the pool: %+v, %d logins", p.Stats(), s.logins.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := p.Stats(); st.Active != 0 || m.DialStats().InProgress != 0 {
		t.Fatalf("after the adopted login: %+v, dial stats %+v; want nothing active or dialling", st, m.DialStats())
	}
	c, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := s.logins.Load(); n != 1 {
		t.Fatalf("%d logins; want the adopted connection reused (1)", n)
	}
	p.Release(c)
}
