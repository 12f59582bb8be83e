package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
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
type rollout struct {
	mu         sync.Mutex
	stage      int
	rolledBack bool
	path       string
	overridden bool // an operator command or a state file set the state
}

type rolloutFile struct {
	Stage      int  `json:"stage"`
	RolledBack bool `json:"rolled_back"`
}

// loadRollout reads the state file when it exists, else takes the config.
func loadRollout(cfg *config.Config, log *zap.Logger) (*rollout, error) {
	r := &rollout{stage: cfg.Rollout.Stage, path: cfg.Rollout.StateFile}
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
	log.Info("rollout state restored", zap.String("state_file", r.path), zap.Int("stage", r.stage), zap.Bool("rolled_back", r.rolledBack))
	return r, nil
}

func (r *rollout) get() (stage int, rolledBack bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stage, r.rolledBack
}

// set changes the state and writes it atomically (temp file + rename)
// before it takes effect; a failed write changes nothing.
func (r *rollout) set(stage int, rolledBack bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path != "" {
		b, _ := json.Marshal(rolloutFile{Stage: stage, RolledBack: rolledBack})
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
	}
	r.stage, r.rolledBack, r.overridden = stage, rolledBack, true
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
