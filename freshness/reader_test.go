package freshness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakePrimary is a PositionFunc whose queries block until released; each
// answers the number of the query (1, 2, ...) as its LSN, and the number
// of queries started before it as their start order.
type fakePrimary struct {
	started  atomic.Int64
	inFlight atomic.Int64
	maxIn    atomic.Int64
	release  chan struct{}
}

func (f *fakePrimary) read(ctx context.Context) (Token, error) {
	n := f.started.Add(1)
	if in := f.inFlight.Add(1); in > f.maxIn.Load() {
		f.maxIn.Store(in)
	}
	defer f.inFlight.Add(-1)
	select {
	case <-f.release:
	case <-ctx.Done():
		return Token{}, ctx.Err()
	}
	return Token{Timeline: 1, LSN: LSN(n)}, nil
}

func TestReaderServesRequestsWithTheNextQuery(t *testing.T) {
	f := &fakePrimary{release: make(chan struct{})}
	r := NewReader(context.Background(), f.read)
	got := make(chan Token, 3)
	r.Request(func(tok Token, err error) { got <- tok })
	waitFor(t, func() bool { return f.started.Load() == 1 })
	// Made while query 1 is in flight: both must get query 2, which can
	// only have been sent after them.
	r.Request(func(tok Token, err error) { got <- tok })
	r.Request(func(tok Token, err error) { got <- tok })
	f.release <- struct{}{}
	if tok := <-got; tok.LSN != 1 {
		t.Fatalf("first request got query %d, want 1", tok.LSN)
	}
	waitFor(t, func() bool { return f.started.Load() == 2 })
	f.release <- struct{}{}
	for i := 0; i < 2; i++ {
		if tok := <-got; tok.LSN != 2 {
			t.Fatalf("a request made during query 1 got query %d, want 2", tok.LSN)
		}
	}
	// Nothing waits: no third query.
	time.Sleep(20 * time.Millisecond)
	if n := f.started.Load(); n != 2 || r.Queries() != 2 {
		t.Fatalf("%d queries started (reader counts %d), want 2", n, r.Queries())
	}
}

// TestReaderBatchesConcurrentRequests: requests that arrive while a query
// runs are all served by the one query after it. The first query is held
// until every request was made (so the schedule cannot serve them one by
// one); the rest are then answered by very few queries.
func TestReaderBatchesConcurrentRequests(t *testing.T) {
	f := &fakePrimary{release: make(chan struct{})}
	r := NewReader(context.Background(), f.read)
	const n = 2000
	var wg sync.WaitGroup
	var asked atomic.Int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := f.started.Load()
			asked.Add(1)
			tok, err := r.Read(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			// Served by a query started after the request: its number
			// exceeds every query started before.
			if int64(tok.LSN) <= before {
				t.Errorf("request after query %d served by query %d", before, tok.LSN)
			}
		}()
	}
	for asked.Load() < n {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // (from asked to queued in Read)
	close(f.release)
	wg.Wait()
	if m := f.maxIn.Load(); m != 1 {
		t.Fatalf("%d queries in flight at once, want at most 1", m)
	}
	if q := f.started.Load(); q > 10 {
		t.Fatalf("%d queries for %d requests: not batched", q, n)
	}
	t.Logf("%d queries for %d requests", f.started.Load(), n)
}

// TestReaderLaterRequests: requests in no hurry are served together, by
// the next query a Request or Hurry starts, or by one of their own after
// the delay; never by a query sent before them.
func TestReaderLaterRequests(t *testing.T) {
	f := &fakePrimary{release: make(chan struct{})}
	close(f.release)
	r := NewReader(context.Background(), f.read)
	r.SetDelay(time.Hour)
	got := make(chan Token, 10)
	for range 5 {
		r.RequestLater(func(tok Token, err error) { got <- tok })
	}
	time.Sleep(20 * time.Millisecond)
	if n := f.started.Load(); n != 0 {
		t.Fatalf("%d queries for later requests before anyone hurried, want 0", n)
	}
	// A Request starts a query that serves them all.
	r.Request(func(tok Token, err error) { got <- tok })
	for range 6 {
		if tok := <-got; tok.LSN != 1 {
			t.Fatalf("served by query %d, want 1", tok.LSN)
		}
	}
	// Hurry sends them at once.
	r.RequestLater(func(tok Token, err error) { got <- tok })
	r.RequestLater(func(tok Token, err error) { got <- tok })
	r.Hurry()
	for range 2 {
		if tok := <-got; tok.LSN != 2 {
			t.Fatalf("hurried requests served by query %d, want 2", tok.LSN)
		}
	}
	r.Hurry() // nothing waits: no query
	// The delay sends them without help, one query for all.
	r2 := NewReader(context.Background(), f.read)
	r2.SetDelay(30 * time.Millisecond)
	before := f.started.Load()
	start := time.Now()
	for range 4 {
		r2.RequestLater(func(tok Token, err error) { got <- tok })
	}
	for range 4 {
		if tok := <-got; int64(tok.LSN) != before+1 {
			t.Fatalf("delayed requests served by query %d, want %d", tok.LSN, before+1)
		}
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Fatalf("served after %v, before the delay", waited)
	}
	if n := f.started.Load(); n != before+1 {
		t.Fatalf("%d queries for the delayed requests, want 1", n-before)
	}
}

func TestReaderErrorsReachEveryWaiter(t *testing.T) {
	boom := errors.New("connection lost")
	r := NewReader(context.Background(), func(context.Context) (Token, error) { return Token{}, boom })
	for i := 0; i < 3; i++ {
		if _, err := r.Read(context.Background()); !errors.Is(err, boom) {
			t.Fatalf("read %d: %v, want %v", i, err, boom)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakePrimary{release: make(chan struct{})}
	r = NewReader(ctx, f.read)
	done := make(chan error, 1)
	r.Request(func(_ Token, err error) { done <- err })
	waitFor(t, func() bool { return f.started.Load() == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stopped reader left its request waiting")
	}
	// A stopped reader answers at once, with the error.
	if _, err := r.Read(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("read on a stopped reader: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
