package proxy

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/admin"
)

// PAUSE and RESUME (SPEC §8, PgBouncer's words): a paused route holds the
// next unit of every session of it that is idle (no transaction, nothing
// owed), so a switchover can happen with nothing in flight; sessions in a
// transaction finish it first, and PAUSE returns once none is left.
// RESUME releases the units held. The state survives a reload (it is the
// operator's, not the config's).
type pauses struct {
	mu     sync.Mutex
	routes map[string]chan struct{} // paused route -> closed by RESUME
}

// held is the channel RESUME closes for route, nil when it is not paused.
func (p *pauses) held(route string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.routes[route]
}

// pauseRoutes names the routes PAUSE/RESUME route means: one, or every
// route of the config in force ("").
func (s *Server) pauseRoutes(route string) ([]string, error) {
	cfg := s.opts.Config.Load()
	if route != "" {
		if _, ok := cfg.RouteByName(route); !ok {
			return nil, &admin.Error{Code: "42704", Message: fmt.Sprintf("route %q does not exist", route)}
		}
		return []string{route}, nil
	}
	var names []string
	for _, rt := range cfg.Routes {
		names = append(names, rt.Name)
	}
	return names, nil
}

// pause holds new units of the routes route names and waits until no
// session of them has a transaction or an answer in flight.
func (s *Server) pause(route string) error {
	names, err := s.pauseRoutes(route)
	if err != nil {
		return err
	}
	s.pauses.mu.Lock()
	if s.pauses.routes == nil {
		s.pauses.routes = map[string]chan struct{}{}
	}
	chans := map[string]chan struct{}{}
	for _, n := range names {
		if s.pauses.routes[n] == nil {
			s.pauses.routes[n] = make(chan struct{})
		}
		chans[n] = s.pauses.routes[n]
	}
	s.pauses.mu.Unlock()
	s.log.Warn("PAUSE: new units held until RESUME", zap.Strings("routes", names))
	start := time.Now()
	for {
		busy := 0
		for _, ss := range s.sessionList() {
			ss.mu.Lock()
			if ss.mu.started && slices.Contains(names, ss.mu.routeName) && !ss.idleLocked() && !ss.mu.killed {
				busy++
			}
			ss.mu.Unlock()
		}
		if busy == 0 {
			s.log.Info("PAUSE: no transaction in flight", zap.Strings("routes", names), zap.Duration("waited", time.Since(start)))
			return nil
		}
		for n, ch := range chans {
			if s.pauses.held(n) != ch {
				return &admin.Error{Code: admin.CodeObjectNotInPrerequisiteState,
					Message: fmt.Sprintf("route %q was resumed while PAUSE waited for %d sessions", n, busy)}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resume releases the units held for the routes route names (a route not
// paused is left as it is).
func (s *Server) resume(route string) error {
	names, err := s.pauseRoutes(route)
	if err != nil {
		return err
	}
	s.pauses.mu.Lock()
	defer s.pauses.mu.Unlock()
	for _, n := range names {
		if ch := s.pauses.routes[n]; ch != nil {
			close(ch)
			delete(s.pauses.routes, n)
		}
	}
	s.log.Warn("RESUME: held units released", zap.Strings("routes", names))
	return nil
}

// awaitResume holds the session's next unit while its route is paused
// and the session is idle (a session in a transaction goes on, so that
// PAUSE can complete). It reports whether the session was killed meanwhile.
func (ss *session) awaitResume() (killed bool) {
	if ss.srv == nil || ss.route == nil {
		return false
	}
	for {
		ch := ss.srv.pauses.held(ss.route.Name)
		if ch == nil {
			return false
		}
		ss.mu.Lock()
		idle := ss.idleLocked()
		ss.mu.Unlock()
		if !idle {
			return false
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		if ss.isKilled() {
			return true
		}
	}
}
