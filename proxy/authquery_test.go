package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/pool"
)

// fakeClock is a settable clock for authSecrets.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakePrimary answers fetches from a settable secret, or fails.
type fakePrimary struct {
	secret string // "" = no row
	down   bool
	calls  int
	have   bool // haveCached of the last fetch
}

var errDown = &authLookupError{unavailable: true, primary: "p:1", err: errors.New("connection refused")}

func (p *fakePrimary) fetch(haveCached bool) (string, bool, error) {
	p.calls++
	p.have = haveCached
	if p.down {
		return "", false, errDown
	}
	return p.secret, p.secret != "", nil
}

// TestAuthSecretsCache walks one user's cache entry through its life with
// a TTL of 60 s: each step is a login (get) or an event, and says what the
// login gets and whether the primary was asked.
func TestAuthSecretsCache(t *testing.T) {
	const ttl = 60 * time.Second
	clk := &fakeClock{t: time.Unix(1000, 0)}
	a := &authSecrets{now: clk.now}
	p := &fakePrimary{secret: "md5aaaa"}
	key := authKey{"main", "alice"}
	const src = "auth\x00q"
	type step struct {
		name    string
		before  func()
		src     string // "" = src
		refresh bool
		secret  string // want; "" = not found
		cached  bool
		stale   bool // lookupErr set
		err     bool
		asked   bool // the primary was asked
		have    bool // and told a cached secret would stand in
	}
	steps := []step{
		{name: "first login fetches", secret: "md5aaaa", asked: true, have: false},
		{name: "within the TTL the cache answers", before: func() { clk.advance(30 * time.Second) }, secret: "md5aaaa", cached: true},
		{name: "a refresh asks even within the TTL", refresh: true, secret: "md5aaaa", asked: true, have: true},
		{name: "password changed: the cache still answers within the TTL", before: func() { p.secret = "md5bbbb"; clk.advance(59 * time.Second) }, secret: "md5aaaa", cached: true},
		{name: "TTL over: fetched again", before: func() { clk.advance(time.Second) }, secret: "md5bbbb", asked: true, have: true},
		{name: "primary down within the TTL: cache, primary not asked", before: func() { p.down = true; clk.advance(time.Second) }, secret: "md5bbbb", cached: true},
		{name: "primary down after the TTL: the old secret stands in", before: func() { clk.advance(10 * time.Minute) }, secret: "md5bbbb", cached: true, stale: true, asked: true, have: true},
		{name: "invalidated, primary down: the stale secret stands in", before: func() { a.invalidate(key, "md5bbbb") }, secret: "md5bbbb", cached: true, stale: true, asked: true, have: true},
		{name: "invalidated, primary up: fetched", before: func() { p.down = false; p.secret = "md5cccc" }, secret: "md5cccc", asked: true, have: true},
		{name: "invalidating another secret changes nothing", before: func() { a.invalidate(key, "md5bbbb") }, secret: "md5cccc", cached: true},
		{name: "another auth_user or auth_query does not use the entry", src: "other\x00q", secret: "md5cccc", asked: true},
		{name: "role dropped: not found", before: func() { p.secret = "" }, refresh: true, src: "other\x00q", secret: "", asked: true, have: true},
		{name: "and nothing stands in for it once the primary is down", before: func() { p.down = true }, src: "other\x00q", err: true, asked: true},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		source := src
		if s.src != "" {
			source = s.src
		}
		calls := p.calls
		res, err := a.get(key, source, ttl, s.refresh, p.fetch)
		asked := p.calls > calls
		switch {
		case s.err:
			var le *authLookupError
			if !errors.As(err, &le) || !le.unavailable {
				t.Fatalf("%s: err %v, want the unavailable lookup error", s.name, err)
			}
		case err != nil:
			t.Fatalf("%s: %v", s.name, err)
		case res.secret != s.secret || res.found != (s.secret != "") || res.cached != s.cached || (res.lookupErr != nil) != s.stale:
			t.Fatalf("%s: got %+v, want secret %q cached %v stale %v", s.name, res, s.secret, s.cached, s.stale)
		}
		if asked != s.asked {
			t.Fatalf("%s: primary asked %v, want %v", s.name, asked, s.asked)
		}
		if asked && p.have != s.have {
			t.Fatalf("%s: fetch told haveCached %v, want %v", s.name, p.have, s.have)
		}
	}
}

// TestAuthSecretsTTLZero: with auth_cache_ttl_ms 0 every login asks the
// primary; the cache serves only while the primary cannot be asked.
func TestAuthSecretsTTLZero(t *testing.T) {
	a := &authSecrets{}
	p := &fakePrimary{secret: "md5aaaa"}
	key := authKey{"main", "bob"}
	for i := 0; i < 3; i++ {
		if res, err := a.get(key, "s", 0, false, p.fetch); err != nil || res.cached || res.secret != "md5aaaa" {
			t.Fatalf("login %d: %+v %v", i, res, err)
		}
	}
	if p.calls != 3 {
		t.Fatalf("%d lookups for 3 logins, want 3", p.calls)
	}
	p.down = true
	if res, err := a.get(key, "s", 0, false, p.fetch); err != nil || !res.cached || res.lookupErr == nil || res.secret != "md5aaaa" {
		t.Fatalf("primary down: %+v %v", res, err)
	}
}

// TestAuthSecretsSharedLookup: logins of one user arriving together make
// one lookup and all get its answer; another user's lookup is its own.
func TestAuthSecretsSharedLookup(t *testing.T) {
	a := &authSecrets{}
	const n = 20
	var calls atomic.Int32
	fetch := func(bool) (string, bool, error) {
		calls.Add(1)
		// Hold the lookup until every login is inside get: each either
		// joined this lookup or will find its answer in the cache.
		deadline := time.Now().Add(10 * time.Second)
		for a.waiting.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return "md5shared", true, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := a.get(authKey{"main", "carol"}, "s", time.Minute, false, fetch)
			if err == nil && res.secret != "md5shared" {
				err = fmt.Errorf("got %+v", res)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d lookups for %d concurrent logins, want 1", c, n)
	}
	other := &fakePrimary{secret: "md5dave"}
	if res, err := a.get(authKey{"main", "dave"}, "s", time.Minute, false, other.fetch); err != nil || res.secret != "md5dave" || other.calls != 1 {
		t.Fatalf("another user: %+v %v, %d lookups", res, err, other.calls)
	}
}

func TestUsableSecret(t *testing.T) {
	for _, tc := range []struct {
		secret string
		ok     bool
	}{
		{"md5" + "0123456789abcdef0123456789abcdef", true},
		{"SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0$" + b64of(32) + ":" + b64of(32), true},
		{"SCRAM-SHA-256$4096:c2FsdA==$short:short", false},
		{"md5" + "0123", false},
		{"plaintext-password", false},
		{"", false},
	} {
		if got := usableSecret(tc.secret); got != tc.ok {
			t.Errorf("usableSecret(%q) = %v, want %v", tc.secret, got, tc.ok)
		}
	}
}

func b64of(n int) string {
	const a = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // base64 of zero bytes
	return a[:(n+2)/3*4-1] + "="
}

// TestUnavailable: what counts as a primary that could not be asked (the
// cache stands in; never seen: 08006) and what is a lookup's own failure.
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{fmt.Errorf("%w (i/o timeout)", context.DeadlineExceeded), true},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{&pgconn.PgError{Severity: "FATAL", Code: "53300"}, true},
		{&pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"}, false},
		{fmt.Errorf("auth_query: %w", &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for view pg_shadow"}), false},
		{&pgconn.PgError{Severity: "FATAL", Code: "3D000"}, false},
		{fmt.Errorf("login: %w", &pool.PassThroughError{User: "kinetic_auth", Reason: "no client has proved the verifier yet"}), false},
	} {
		if got := unavailable(tc.err); got != tc.want {
			t.Errorf("unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
