package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// auth_query: a client user that is not in [[users]], connecting to a route
// with auth_user set, authenticates against the secret the route's primary
// holds for it, fetched with the route's auth_query (the user name bound to
// $1) over a connection logged in with auth_user's backend credentials.
//
//   - The secret is a SCRAM-SHA-256 verifier or an md5 hash; it then drives
//     the client's authentication exactly like a [[users]] password of that
//     kind (lookupUser makes a config.User of it, with no backend_password:
//     the server login uses what the client proved, never a plaintext).
//     A plaintext or malformed secret is refused (logged) and counts as no
//     secret.
//   - No row, or a NULL secret: the client runs the mock SCRAM exchange of
//     an unknown user and fails like a wrong password (28P01).
//   - Secrets are cached per (route, user) for auth_cache_ttl_ms. A lookup
//     that fails (the primary is down, none is elected, the query fails)
//     uses the cached secret whatever its age, so users seen before keep
//     logging in while the primary is down; a user never seen fails with
//     FATAL 08006 naming the primary as unavailable for the lookup.
//   - A login that fails against a cached secret may mean a changed
//     password: md5 looks the secret up again at once and, if it changed,
//     compares the client's answer with the new one; a SCRAM exchange
//     cannot be re-run, so the entry is marked stale and the next login
//     looks it up again.
//   - Concurrent logins of one user on one route share one lookup
//     (singleflight). A lookup dials its own connection (pool.Dialer, as
//     the volatility lookups do) and closes it: lookups are one per user
//     per TTL, not per login.

// authLookupTimeout bounds the auth_query itself, once connected.
const authLookupTimeout = 5 * time.Second

// authKey names a cached secret: the route, and the client's user name.
type authKey struct{ route, user string }

// authEntry is one fetched secret. source is the auth_user and auth_query
// that fetched it (authSource): after a reload that changes them the
// entry is not used. stale marks an entry a login failed against: it is
// looked up again before its next use, and used only if that fails.
type authEntry struct {
	secret  string
	source  string
	fetched time.Time
	stale   bool
}

// authResult is what a login gets from authSecrets.get.
type authResult struct {
	secret string
	found  bool
	// cached: the secret was not looked up for this login (a fresh cache
	// hit, or the lookup failed and an older secret stood in); a failed
	// login against it may be a changed password.
	cached bool
	// lookupErr: the lookup failed and the cached secret stood in.
	lookupErr error
}

// authFetch looks up one user's secret. found is false when the primary
// has no usable secret for it (no row, NULL). haveCached says a cached
// secret would stand in if the lookup failed: then a primary its health
// probes find unreachable is not dialled (a down primary costs cached
// users no dial timeout; a user never seen still gets a real try).
type authFetch func(haveCached bool) (secret string, found bool, err error)

// authSecrets is the Server's cache of auth_query secrets. It outlives
// reloads (a reload that keeps a route keeps its users' secrets, which
// matters while the primary is down). Entries exist only for users the
// primary had a secret for, so their number is bounded by its roles.
type authSecrets struct {
	// now is the clock (nil: time.Now); tests set it.
	now    func() time.Time
	flight singleflight.Group
	// waiting counts logins inside get (tests wait on it).
	waiting atomic.Int32

	mu struct {
		sync.Mutex
		entries  map[authKey]authEntry
		lastWarn time.Time // of the last "using a cached secret" log line
	}
}

func (a *authSecrets) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

func (a *authSecrets) entry(key authKey, source string) (authEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.mu.entries[key]
	return e, ok && e.source == source
}

// get returns the secret of key: the cached one while it is younger than
// ttl and not stale (unless refresh), else the one fetch finds, which
// replaces it. Logins of the same key share one fetch; one that started
// waiting before another's fetch ended takes that answer. When fetch
// fails, the cached secret of any age stands in (result.lookupErr says
// so); without one, get returns fetch's error.
//
// Worked example, ttl 60 s: a login at 0 s fetches; one at 30 s uses the
// cache (cached); at 90 s it fetches again, and if the primary is down
// then, the 0 s secret stands in (cached, lookupErr set). A failed SCRAM
// login at 30 s calls invalidate: the login at 31 s fetches again.
func (a *authSecrets) get(key authKey, source string, ttl time.Duration, refresh bool, fetch authFetch) (authResult, error) {
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	start := a.clock()
	if e, ok := a.entry(key, source); ok && !refresh && !e.stale && start.Sub(e.fetched) < ttl {
		return authResult{secret: e.secret, found: true, cached: true}, nil
	}
	type answer struct {
		secret string
		found  bool
	}
	v, err, _ := a.flight.Do(key.route+"\x00"+key.user, func() (any, error) {
		// A lookup that ended after this login began is fresh enough,
		// unless the login asks for one made after a failure (refresh).
		if e, ok := a.entry(key, source); ok && !refresh && !e.stale && !e.fetched.Before(start) {
			return answer{e.secret, true}, nil
		}
		_, haveCached := a.entry(key, source)
		secret, found, err := fetch(haveCached)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if found {
			if a.mu.entries == nil {
				a.mu.entries = map[authKey]authEntry{}
			}
			a.mu.entries[key] = authEntry{secret: secret, source: source, fetched: a.clock()}
		} else {
			delete(a.mu.entries, key) // the role is gone, or has no password now
		}
		return answer{secret, found}, nil
	})
	if err != nil {
		if e, ok := a.entry(key, source); ok {
			return authResult{secret: e.secret, found: true, cached: true, lookupErr: err}, nil
		}
		return authResult{}, err
	}
	ans := v.(answer)
	return authResult{secret: ans.secret, found: ans.found}, nil
}

// invalidate marks key's entry stale if it still holds secret: a login
// failed against it, so the next one looks it up again (and uses it
// only if that lookup fails).
func (a *authSecrets) invalidate(key authKey, secret string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.mu.entries[key]; ok && e.secret == secret {
		e.stale = true
		a.mu.entries[key] = e
	}
}

// warnCached reports whether a "using a cached secret" line may be logged
// now: at most one every 10 s, however many logins ride out a down
// primary.
func (a *authSecrets) warnCached() bool {
	now := a.clock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.mu.lastWarn) < 10*time.Second {
		return false
	}
	a.mu.lastWarn = now
	return true
}

// authSource identifies what fetched a route's secrets.
func authSource(rt *config.Route) string {
	return rt.AuthUser + "\x00" + rt.AuthQuery
}

// authLookupError is a lookup that could not give an answer. unavailable:
// the primary could not be asked (unreachable, none elected, shutting
// down or starting up); otherwise the lookup itself is wrong (auth_user
// refused, auth_query failed or returned an unexpected shape), which the
// log says and the client does not see.
type authLookupError struct {
	unavailable bool
	primary     string
	err         error
}

func (e *authLookupError) Error() string {
	if e.primary == "" {
		return e.err.Error()
	}
	return "primary " + e.primary + ": " + e.err.Error()
}

func (e *authLookupError) Unwrap() error { return e.err }

// userLookup is the auth_query state of one login: what lookupUser found.
type userLookup struct {
	route *config.Route
	key   authKey
	res   authResult
}

// lookupUser is authenticate's step for a user not in [[users]]: on a
// route with auth_user, the user's secret from the route's primary (or
// the cache). It returns the user to authenticate against (nil when the
// primary has no secret for it: the mock exchange follows) and the
// lookup, or nil, nil, nil when the route has no auth_user (or there is no
// such route). An unavailable primary with nothing cached is FATAL 08006;
// a lookup that fails otherwise is FATAL 28000 (the cause is logged).
func (ss *session) lookupUser() (*config.User, *userLookup, error) {
	rt, ok := ss.cfg.RouteByDatabase(ss.database)
	if !ok || rt.AuthUser == "" {
		return nil, nil, nil
	}
	lk := &userLookup{route: rt, key: authKey{rt.Name, ss.user}}
	res, err := ss.srv.auth.get(lk.key, authSource(rt), rt.AuthCacheTTL(), false, ss.fetchSecret(rt))
	if err != nil {
		return nil, nil, ss.lookupFailed(rt, err)
	}
	if res.lookupErr != nil && ss.srv.auth.warnCached() {
		ss.log.Warn("auth_query lookup failed; a cached secret is used (further such lines for 10 s are not logged)",
			zap.String("route", rt.Name), zap.String("user", ss.user), zap.Error(res.lookupErr))
	}
	lk.res = res
	if !res.found {
		return nil, lk, nil
	}
	return lk.user(res.secret), lk, nil
}

// user is the [[users]]-like entry a fetched secret makes: no
// backend_user, no backend_password.
func (lk *userLookup) user(secret string) *config.User {
	return &config.User{Name: lk.key.user, Password: secret}
}

// lookupLoginFailed is called when a SCRAM exchange failed with err: if
// the client's proof did not match a cached secret (28P01), the entry is
// marked stale so the next login looks it up again; the exchange itself
// cannot be run again.
func (ss *session) lookupLoginFailed(lk *userLookup, err error) {
	var ce *clientError
	if lk != nil && lk.res.found && lk.res.cached && errors.As(err, &ce) && ce.code == codeInvalidPassword {
		ss.srv.auth.invalidate(lk.key, lk.res.secret)
	}
}

// refetchMD5 is md5's second chance after a failed comparison against a
// cached secret: the secret is looked up again, and returned when it is a
// different md5 hash the same answer can be compared with (the password
// changed). A SCRAM verifier in its place stays cached for the next login.
func (ss *session) refetchMD5(lk *userLookup) (string, bool) {
	if lk == nil || !lk.res.found || !lk.res.cached || lk.res.lookupErr != nil {
		return "", false // looked up for this login already, or the primary cannot be asked
	}
	res, err := ss.srv.auth.get(lk.key, authSource(lk.route), lk.route.AuthCacheTTL(), true, ss.fetchSecret(lk.route))
	if err != nil || !res.found || res.cached || res.secret == lk.res.secret || !isMD5Hash(res.secret) {
		return "", false
	}
	return res.secret, true
}

// lookupFailed is what a client whose lookup failed with nothing cached is
// told.
func (ss *session) lookupFailed(rt *config.Route, err error) error {
	var le *authLookupError
	if errors.As(err, &le) && le.unavailable {
		ss.log.Warn("auth_query lookup: the primary is unavailable and no secret is cached",
			zap.String("route", rt.Name), zap.String("user", ss.user), zap.Error(err))
		return &clientError{severity: "FATAL", code: codeConnectionFailure,
			message: "pg-kinetic: the primary of route " + quoteIdent(rt.Name) + " is unavailable for the auth_query lookup of user " + quoteIdent(ss.user),
			detail:  le.Error()}
	}
	ss.log.Warn("auth_query lookup failed", zap.String("route", rt.Name), zap.String("user", ss.user), zap.Error(err))
	return fatalf(codeInvalidAuthorization, "pg-kinetic: the auth_query lookup of route %s failed (see kineticd's log)", quoteIdent(rt.Name))
}

// fetchSecret returns the fetch of the session's user on rt's primary.
func (ss *session) fetchSecret(rt *config.Route) authFetch {
	cfg, user := ss.cfg, ss.user
	return func(haveCached bool) (string, bool, error) {
		secret, found, err := ss.srv.fetchSecret(cfg, rt, user, haveCached)
		if err == nil && !found && secret != "" {
			ss.log.Warn("auth_query returned a secret that is neither a SCRAM-SHA-256 verifier nor an md5 hash; the login fails",
				zap.String("route", rt.Name), zap.String("user", user))
			secret = ""
		}
		return secret, found, err
	}
}

// fetchSecret runs rt's auth_query for user on rt's primary (the elected
// one with follow_failover), logged in with auth_user's backend
// credentials. It returns found false, and secret "", for no row or a
// NULL secret; found false with the unusable secret for one that is
// neither a verifier nor an md5 hash. With haveCached (authFetch), a
// primary whose last health verdict is unreachable is not dialled.
func (s *Server) fetchSecret(cfg *config.Config, rt *config.Route, user string, haveCached bool) (secret string, found bool, err error) {
	au, ok := cfg.UserByName(rt.AuthUser)
	if !ok {
		return "", false, &authLookupError{err: fmt.Errorf("auth_user %q is not a [[users]] name", rt.AuthUser)}
	}
	cur := rt
	if c, ok := s.opts.Config.Load().RouteByName(rt.Name); ok && c.Database == rt.Database {
		cur = c // the primary's address of the config in force (a switchover), as connect does
	}
	snap := s.snapshotOf(cur.Name)
	addr, why := primaryOf(cur, snap)
	if addr == "" {
		return "", false, &authLookupError{unavailable: true, err: errors.New(why)}
	}
	if snap != nil && haveCached {
		if v, have := snap.Get(addr); have && !v.Reachable {
			return "", false, &authLookupError{unavailable: true, primary: addr, err: fmt.Errorf("its health probe failed: %s", v.Err)}
		}
	}
	// auth_user logs in as its own sessions do: backend_password, a
	// plaintext password, the md5 hash, or pass-through (passthrough.go).
	cred := s.backendCredentials(au, rt.BackendDB())
	cred.Params = map[string]string{"application_name": "kineticd auth_query"}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.connectTimeout+authLookupTimeout)
	defer cancel()
	conn, err := s.gatedDial(ctx, cur, addr, pool.Dialer{TLSMode: cfg.Server.BackendTLSMode, ConnectTimeout: s.opts.connectTimeout}, cred)
	if err != nil {
		return "", false, &authLookupError{unavailable: unavailable(err), primary: addr, err: err}
	}
	defer conn.Terminate(time.Second)
	qctx, qcancel := context.WithTimeout(ctx, authLookupTimeout)
	defer qcancel()
	rows, err := conn.QueryParams(qctx, rt.AuthQuery, user)
	if err != nil {
		return "", false, &authLookupError{unavailable: unavailable(err), primary: addr, err: fmt.Errorf("auth_query: %w", err)}
	}
	switch {
	case len(rows) == 0:
		return "", false, nil
	case len(rows) > 1:
		return "", false, &authLookupError{primary: addr, err: fmt.Errorf("auth_query returned %d rows for one user", len(rows))}
	case len(rows[0]) < 2:
		return "", false, &authLookupError{primary: addr, err: fmt.Errorf("auth_query returned %d columns; want the user name and its secret", len(rows[0]))}
	case rows[0][1] == nil:
		return "", false, nil
	}
	secret = string(rows[0][1])
	return secret, usableSecret(secret), nil
}

// usableSecret reports whether a fetched secret is one kineticd
// authenticates against: a well-formed SCRAM-SHA-256 verifier or an md5
// hash. Never a plaintext password.
func usableSecret(secret string) bool {
	switch config.PasswordKind(secret) {
	case config.PasswordMD5:
		return true
	case config.PasswordSCRAMSHA256:
		_, err := config.ParseSCRAMVerifier(secret)
		return err == nil
	}
	return false
}

// unavailable reports whether a lookup's error means the primary could
// not be asked: anything but a server's ErrorResponse (a network error, a
// timeout, a connection closed mid-answer), or a server refusal of class
// 08 (connection), 53 (too many connections) or 57 (shutting down,
// starting up, in recovery). A refusal of auth_user's login, an
// auth_user kineticd cannot log in as (pass-through without a key), or an
// error of auth_query is a configuration problem, not an unavailable
// primary.
func unavailable(err error) bool {
	var pt *pool.PassThroughError
	if errors.As(err, &pt) {
		return false
	}
	var pe *pool.ServerError
	if !errors.As(err, &pe) {
		return true
	}
	return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") || strings.HasPrefix(pe.Code, "57")
}
