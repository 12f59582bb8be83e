package freshness

import (
	"context"
	"sync"
	"time"
)

// PositionFunc reads the primary's current WAL position (at or after the
// end of every commit acknowledged before it was sent) on a connection
// of its own. It returns an error when the position cannot be known; it
// must never return a position read before it was called.
type PositionFunc func(ctx context.Context) (Token, error)

// Reader answers many sessions' requests for the primary's WAL position
// with few queries: a request is served by the first query sent after it
// was made, so every unit whose ReadyForQuery arrived before the request
// gets a position at or after its commit. At most one query is in flight;
// requests made while one is in flight wait for the next, which starts as
// soon as the current one ends and serves them all. No query runs while
// no request waits.
//
// A request that is in no hurry (RequestLater) waits up to the reader's
// delay for a query another request starts, or for Hurry; many of them
// are then served by one query, so sessions whose tokens nobody waits for
// cost at most one query per delay together.
type Reader struct {
	read  PositionFunc
	ctx   context.Context
	delay time.Duration

	mu       sync.Mutex
	inFlight bool
	next     *round               // the requests for the query after the one in flight
	later    []func(Token, error) // RequestLater's, not yet in a round
	armed    bool                 // a timer will Hurry the later requests
	queries  uint64               // queries sent, for metrics and tests
}

// round is one query and the requests it serves.
type round struct {
	waiters []func(Token, error)
}

// NewReader returns a Reader reading with read; ctx bounds its queries
// (cancel it to stop the reader: pending requests then get ctx's error).
func NewReader(ctx context.Context, read PositionFunc) *Reader {
	return &Reader{read: read, ctx: ctx, delay: DefaultReaderDelay}
}

// DefaultReaderDelay is how long a RequestLater waits at most before a
// query of its own serves it.
const DefaultReaderDelay = 10 * time.Millisecond

// SetDelay changes the reader's delay for later requests (tests).
func (r *Reader) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Request asks for a position read after this call. done is called once,
// from another goroutine, with the position or the error that prevented
// it; it must not block. Request never blocks.
func (r *Reader) Request(done func(Token, error)) {
	r.mu.Lock()
	r.enqueueLocked(done)
}

// RequestLater is Request for a position nobody waits for yet: it is
// served by the next query that some Request or Hurry starts, or by one
// of its own after the reader's delay. Either query is sent after this
// call. RequestLater never blocks.
func (r *Reader) RequestLater(done func(Token, error)) {
	r.mu.Lock()
	r.later = append(r.later, done)
	arm := !r.armed
	r.armed = true
	delay := r.delay
	r.mu.Unlock()
	if arm {
		time.AfterFunc(delay, func() {
			r.mu.Lock()
			r.armed = false
			r.mu.Unlock()
			r.Hurry()
		})
	}
}

// Hurry sends the requests made with RequestLater now (with the next
// query, when one is in flight).
func (r *Reader) Hurry() {
	r.mu.Lock()
	if len(r.later) == 0 {
		r.mu.Unlock()
		return
	}
	r.enqueueLocked(nil)
}

// enqueueLocked adds done (if not nil) and every later request to the
// next round, starts it if none is in flight, and unlocks r.mu.
func (r *Reader) enqueueLocked(done func(Token, error)) {
	if r.next == nil {
		r.next = &round{}
	}
	if done != nil {
		r.next.waiters = append(r.next.waiters, done)
	}
	r.next.waiters = append(r.next.waiters, r.later...)
	r.later = nil
	start := !r.inFlight
	var rd *round
	if start {
		r.inFlight = true
		rd, r.next = r.next, nil
	}
	r.mu.Unlock()
	if start {
		go r.run(rd)
	}
}

// Read is Request for callers that wait: the position read after the
// call, or ctx's error if ctx ends first.
func (r *Reader) Read(ctx context.Context) (Token, error) {
	type answer struct {
		tok Token
		err error
	}
	ch := make(chan answer, 1)
	r.Request(func(t Token, err error) { ch <- answer{t, err} })
	select {
	case a := <-ch:
		return a.tok, a.err
	case <-ctx.Done():
		return Token{}, ctx.Err()
	}
}

// Queries reports how many position queries the reader has sent.
func (r *Reader) Queries() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queries
}

// run sends queries while requests wait, one at a time.
func (r *Reader) run(rd *round) {
	for {
		r.mu.Lock()
		r.queries++
		r.mu.Unlock()
		var tok Token
		err := r.ctx.Err()
		if err == nil {
			tok, err = r.read(r.ctx)
		}
		for _, done := range rd.waiters {
			done(tok, err)
		}
		r.mu.Lock()
		if r.next == nil {
			r.inFlight = false
			r.mu.Unlock()
			return
		}
		rd, r.next = r.next, nil
		r.mu.Unlock()
	}
}
