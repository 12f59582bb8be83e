package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/internal/rawsock"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// ConfigSource yields the configuration in force. A session reads it once
// when it starts and keeps that snapshot; a reload affects new sessions,
// except for the address of the session's route's primary, which its next
// primary connection takes from the config in force (primaryAddr: a
// planned switchover).
type ConfigSource interface {
	Load() *config.Config
}

// Options build a Server.
type Options struct {
	Config  ConfigSource // required
	Logger  *zap.Logger  // nil = no logging
	Version string
	// Metrics receives the proxy's metrics (nil: kept but not exported).
	Metrics *admin.Metrics
	// Reload, when set, is what the admin console's RELOAD runs (the same
	// path as SIGHUP: validate, swap, Server.Reload).
	Reload func() error

	// loginTimeout, when set, replaces client_login_timeout_ms (tests).
	loginTimeout time.Duration
	// connectTimeout bounds dialling a server (default 10 s).
	connectTimeout time.Duration
}

// Server accepts client connections and relays them to PostgreSQL servers.
type Server struct {
	opts  Options
	log   *zap.Logger
	pools *pool.Manager
	tls   atomic.Pointer[tls.Config]

	credentials sync.Map // plaintext secret -> derived scram.StoredCredentials
	mockNonce   [32]byte // salts mock SCRAM credentials of unknown users

	// scramSecrets: verifier (secretKey) -> *pool.SCRAMSecret, the
	// ClientKey its clients proved, for pass-through (passthrough.go).
	scramSecrets sync.Map

	// auth holds auth_query secrets by (route, user) (authquery.go).
	auth authSecrets

	routing atomic.Pointer[routing] // the route runtimes of the config in force (replicas.go)
	// terminations counts units that called pg_terminate_backend: a
	// session-pooled session whose reads go to replicas checks its own
	// primary backend is still there before its next unit (syncPrimary).
	terminations atomic.Uint64
	rollout      *rollout       // stage and rollback state (SPEC §6)
	syncers      rolloutSyncers // share it through each route's primary (rollout_sync.go)
	instance     string         // this kineticd in pgkinetic.rollout_state.changed_by
	metrics      *admin.Metrics
	stopMon      context.CancelFunc
	backoff      backoffs
	observed     sync.Map     // replica address -> observedReplay: replay position read on demand
	affine       affineCounts // sessions whose read-your-writes reads stay on each replica (affinity.go)
	pauses       pauses       // PAUSE/RESUME (pause.go)

	clients atomic.Int64 // sessions counted against max_client_conn
	nextID  atomic.Uint64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{}
	cancels   map[cancelKey]*session
	draining  bool
	wg        sync.WaitGroup // every goroutine the server starts

	// Link readers of transaction pooling, kept for the next unit instead
	// of a goroutine per unit (link.go: attach).
	readers     chan readerJob
	idleReaders atomic.Int32
	readersDone chan struct{}
	stopReaders sync.Once
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("proxy: server closed")

// New builds a Server. It loads TLS material when the config asks for it.
func New(opts Options) (*Server, error) {
	if opts.Config == nil {
		return nil, errors.New("proxy: Options.Config is required")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.connectTimeout == 0 {
		opts.connectTimeout = 10 * time.Second
	}
	s := &Server{
		readers:     make(chan readerJob),
		readersDone: make(chan struct{}),
		opts:        opts,
		log:         opts.Logger,
		pools:       pool.NewManager(),
		listeners:   map[net.Listener]struct{}{},
		sessions:    map[*session]struct{}{},
		cancels:     map[cancelKey]*session{},
	}
	rand.Read(s.mockNonce[:])
	ro, err := loadRollout(opts.Config.Load(), opts.Logger)
	if err != nil {
		return nil, err
	}
	s.rollout = ro
	s.syncers.srv = s
	s.instance = instanceName()
	s.metrics = opts.Metrics
	if s.metrics == nil {
		s.metrics = admin.NewMetrics()
	}
	s.metrics.SetClientCounter(s.clients.Load)
	s.backoff.state = map[string]backoffState{}
	if err := s.Reload(); err != nil {
		s.syncers.close()
		s.routing.Swap(nil).close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopMon = cancel
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.monitor(ctx)
	}()
	go func() {
		defer s.wg.Done()
		s.janitor(ctx) // janitor.go
	}()
	s.registerDialMetrics()
	return s, nil
}

// Reload re-reads what the server derives from the configuration (TLS
// certificates). Call it after the ConfigSource swapped in a new config.
func (s *Server) Reload() error {
	cfg := s.opts.Config.Load()
	// (Concurrent reloads are not expected: the admin console and SIGHUP
	// run them one at a time.)
	if old := s.routing.Swap(newRouting(cfg, s.log, s.abandonReads, s.routing.Load(), s.backendCredentials)); old != nil {
		old.close()
	}
	if s.rollout != nil {
		s.rollout.reloaded(cfg)
		s.syncers.reconcile(cfg)
	}
	s.declareSeries(cfg)            // series.go: the route's labelled series exist at 0
	tc, err := clientTLSConfig(cfg) // clientcert.go
	if err != nil {
		return err
	}
	s.tls.Store(tc)
	return nil
}

// Serve accepts connections on ln until Shutdown or Close. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if draining {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				backoff = min(max(backoff*2, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c = rawsock.Wrap(c)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

// Shutdown stops accepting, lets sessions finish their transaction or
// in-flight query, and closes each one when it is idle. When ctx ends, the
// remaining sessions are closed. Pools are closed last.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for ln := range s.listeners {
		ln.Close()
	}
	sessions := s.sessionListLocked()
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.drain()
	}
	s.stopMon()
	s.syncers.close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.closeSessions()
		<-done
	}
	s.closeRouting()
	return err
}

// Close closes listeners and every session at once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.draining = true
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.stopMon()
	s.syncers.close()
	s.closeSessions()
	s.wg.Wait()
	s.closeRouting()
	return nil
}

// closeRouting stops health checks and closes pools and catalog
// connections once no session uses them.
func (s *Server) closeRouting() {
	s.stopReaders.Do(func() { close(s.readersDone) })
	s.pools.Close()
	if r := s.routing.Swap(nil); r != nil {
		r.close()
	}
}

func (s *Server) closeSessions() {
	for _, ss := range s.sessionList() {
		ss.kill(fatalf(codeAdminShutdown, "terminating connection due to administrator command"))
	}
}

// sessionList is every session, also those still starting up.
func (s *Server) sessionList() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionListLocked()
}

func (s *Server) sessionListLocked() []*session {
	sessions := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	return sessions
}

// track registers a session so Shutdown can reach it.
func (s *Server) track(ss *session) {
	s.mu.Lock()
	s.sessions[ss] = struct{}{}
	draining := s.draining
	s.mu.Unlock()
	if draining {
		ss.drain()
	}
}

func (s *Server) untrack(ss *session) {
	s.mu.Lock()
	delete(s.sessions, ss)
	if ss.key != (cancelKey{}) && s.cancels[ss.key] == ss {
		delete(s.cancels, ss.key)
	}
	s.mu.Unlock()
}

// Metrics is the registry-backed metrics the server records into.
func (s *Server) Metrics() *admin.Metrics { return s.metrics }

// ClientCount is the number of client connections currently open.
func (s *Server) ClientCount() int64 { return s.clients.Load() }
