package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
)

// rollout is the routing state operators change at run time (SPEC §6):
// the current stage and whether routing is rolled back to primary-only.
// It starts from [rollout] stage; ROUTING STAGE n / ROUTING ROLLBACK (and
// auto_rollback) change it and, with state_file set, persist it, so it
// survives reload and restart. A state file that exists wins over the
// config's stage.
//
// With [rollout] shared (the default) each route also has a shared view
// (routeRollout): the state its primary's pgkinetic.rollout_state row
// holds, kept in step by a syncer per route (rollout_shared.go). A
// route's state in force is its unsynced local change if any, else the
// row last seen, else the process-wide state above (no row yet).
//
// Every method is safe for concurrent use. mu guards everything; the
// state file is written under it (local file I/O, so that a change is on
// disk before it takes effect), never network I/O.
type rollout struct {
	mu         sync.Mutex
	stage      int
	rolledBack bool
	path       string
	overridden bool // an operator command or a state file set the state
	shared     bool // [rollout] shared
	// routes holds the shared view of each route ever synced or changed
	// while shared, by route name (kept in the state file).
	routes map[string]*routeRollout
	seq    uint64 // numbers local changes (localChange.seq)
}

type rolloutFile struct {
	Stage      int                      `json:"stage"`
	RolledBack bool                     `json:"rolled_back"`
	Routes     map[string]*routeRollout `json:"routes,omitempty"`
}

// loadRollout reads the state file when it exists, else takes the config.
func loadRollout(cfg *config.Config, log *zap.Logger) (*rollout, error) {
	r := &rollout{stage: cfg.Rollout.Stage, path: cfg.Rollout.StateFile, shared: cfg.Rollout.Shared,
		routes: map[string]*routeRollout{}}
	if r.path == "" {
		return r, nil
	}
	b, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rollout.state_file %s: %w", r.path, err)
	}
	var f rolloutFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("rollout.state_file %s: %w", r.path, err)
	}
	r.stage, r.rolledBack, r.overridden = f.Stage, f.RolledBack, true
	for name, v := range f.Routes {
		if v == nil || v.Known.Version < 0 || v.Known.Stage < 0 || v.Pending != nil && v.Pending.Stage < 0 {
			return nil, fmt.Errorf("rollout.state_file %s: bad entry for route %q", r.path, name)
		}
		if v.Pending != nil {
			r.seq++
			v.Pending.seq = r.seq
		}
		r.routes[name] = v
	}
	log.Info("rollout state restored", zap.String("state_file", r.path), zap.Int("stage", r.stage), zap.Bool("rolled_back", r.rolledBack),
		zap.Int("shared_routes", len(r.routes)))
	return r, nil
}

// get is the state in force for route.
func (r *rollout) get(route string) (stage int, rolledBack bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.inForceLocked(route)
	return st.Stage, st.RolledBack
}

func (r *rollout) inForceLocked(route string) rolloutState {
	if v := r.routes[route]; r.shared && v != nil {
		if v.Pending != nil {
			return v.Pending.rolloutState
		}
		if v.Known.Version > 0 {
			return v.Known.rolloutState
		}
	}
	return rolloutState{Stage: r.stage, RolledBack: r.rolledBack}
}

// rollback is ROUTING ROLLBACK (and auto_rollback): every route of routes
// (the config's, shared or not) keeps its stage and is rolled back.
func (r *rollout) rollback(routes []string) error {
	return r.change(routes, func(cur rolloutState) rolloutState { return rolloutState{Stage: cur.Stage, RolledBack: true} })
}

// setStage is ROUTING STAGE n: every route at stage n, not rolled back.
func (r *rollout) setStage(routes []string, n int) error {
	return r.change(routes, func(rolloutState) rolloutState { return rolloutState{Stage: n} })
}

// change applies an operator's change to the process-wide state and, when
// shared, as a pending local change of every route, written to the state
// file before it takes effect; a failed write changes nothing.
func (r *rollout) change(routes []string, f func(rolloutState) rolloutState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	global := f(rolloutState{Stage: r.stage, RolledBack: r.rolledBack})
	next := map[string]*routeRollout{}
	if r.shared {
		for _, name := range routes {
			v := routeRollout{}
			if old := r.routes[name]; old != nil {
				v = *old
			}
			r.seq++
			v.Pending = &localChange{rolloutState: f(r.inForceLocked(name)), Base: v.Known.Version, seq: r.seq}
			next[name] = &v
		}
	}
	file := rolloutFile{Stage: global.Stage, RolledBack: global.RolledBack, Routes: maps.Clone(r.routes)}
	maps.Copy(file.Routes, next)
	if err := r.writeLocked(file); err != nil {
		return err
	}
	r.stage, r.rolledBack, r.overridden = global.Stage, global.RolledBack, true
	r.routes = file.Routes
	return nil
}

// writeLocked writes f to the state file atomically (temp file + rename).
func (r *rollout) writeLocked(f rolloutFile) error {
	if r.path == "" {
		return nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(r.path), ".kineticd-rollout-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(b, '\n'))
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), r.path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// reloaded applies a new config: its [rollout] stage takes effect unless an
// operator command (or a state file) has set the state, which then wins
// until the process ends (or, with state_file, for good).
func (r *rollout) reloaded(cfg *config.Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path == "" && cfg.Rollout.StateFile != "" {
		r.path = cfg.Rollout.StateFile
	}
	r.shared = cfg.Rollout.Shared
	if !r.overridden {
		r.stage = cfg.Rollout.Stage
	}
}

// classPolicy is how a read of one query class may be routed right now.
type classPolicy struct {
	name     string // "" = no class (metrics label "default")
	primary  bool   // must run on the primary
	reason   string // why (class_primary_only, class_not_enabled, rollback)
	staleOK  bool   // replica_tolerates_staleness: lag budget only
	fallback string // effective fallback_policy
	label    bool   // label_staleness
}

// resolveClass decides a read's class policy (pure given its inputs).
// name is the declared class ("" for none: the route's
// default_query_class applies; "" there means the route's own policy).
func resolveClass(rt *config.Route, name string, stage int, rolledBack bool) (classPolicy, error) {
	p := classPolicy{name: name, fallback: rt.ReadRouting.FallbackPolicy}
	if name == "" {
		name = rt.ReadRouting.DefaultQueryClass
	}
	if rolledBack {
		p.primary, p.reason = true, reasonRollback
	}
	if name == "" {
		return p, nil
	}
	qc, ok := rt.QueryClass(name)
	if !ok {
		return p, fmt.Errorf("unknown query class %q", name)
	}
	p.fallback = rt.EffectiveFallbackPolicy(qc)
	p.label = qc.LabelStaleness
	switch {
	case p.primary:
	case qc.Routing == config.ClassPrimaryOnly || config.AlwaysPrimaryOnly(qc.Name):
		p.primary, p.reason = true, reasonClassPrimaryOnly
	case qc.Stage > stage:
		p.primary, p.reason = true, reasonClassNotEnabled
	case qc.Routing == config.ClassReplicaToleratesStaleness:
		p.staleOK = true
	}
	return p, nil
}

// routeNames lists the routes of the config in force, in config order.
func (s *Server) routeNames() []string {
	cfg := s.opts.Config.Load()
	names := make([]string, 0, len(cfg.Routes))
	for _, rt := range cfg.Routes {
		names = append(names, rt.Name)
	}
	return names
}
