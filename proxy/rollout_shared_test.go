package proxy

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
)

func st(stage int, rb bool) rolloutState { return rolloutState{Stage: stage, RolledBack: rb} }

func row(stage int, rb bool, version int64) sharedState {
	return sharedState{rolloutState: st(stage, rb), Version: version}
}

func pending(stage int, rb bool, base int64) *localChange {
	return &localChange{rolloutState: st(stage, rb), Base: base, seq: 1}
}

// TestPlanSync: one row per case of the conflict rule (rollout_shared.go).
func TestPlanSync(t *testing.T) {
	tests := []struct {
		name    string
		view    routeRollout
		row     sharedState
		haveRow bool
		want    syncPlan
	}{
		{"nothing known, no row: keep the local state",
			routeRollout{}, sharedState{}, false, syncPlan{action: syncNothing}},
		{"a state known, the row gone: keep the last state known",
			routeRollout{Known: row(2, false, 5)}, sharedState{}, false, syncPlan{action: syncNothing}},
		{"row as known: nothing",
			routeRollout{Known: row(2, false, 5)}, row(2, false, 5), true, syncPlan{action: syncNothing}},
		{"another instance changed it: adopt",
			routeRollout{Known: row(2, false, 5)}, row(3, false, 6), true, syncPlan{action: syncAdopt}},
		{"another instance rolled back: adopt",
			routeRollout{Known: row(2, false, 5)}, row(2, true, 6), true, syncPlan{action: syncAdopt}},
		{"first row ever hears of sharing: adopt whatever version",
			routeRollout{}, row(1, false, 9), true, syncPlan{action: syncAdopt}},
		{"table recreated (version went down): the row still wins",
			routeRollout{Known: row(2, true, 40)}, row(0, false, 1), true, syncPlan{action: syncAdopt}},
		{"first change ever, no row: insert",
			routeRollout{Pending: pending(1, false, 0)}, sharedState{}, false,
			syncPlan{action: syncWrite, write: st(1, false), expect: 0}},
		{"a known row, then the row gone: insert the pending change",
			routeRollout{Known: row(2, false, 5), Pending: pending(2, true, 5)}, sharedState{}, false,
			syncPlan{action: syncWrite, write: st(2, true), expect: 0}},
		{"local ROLLBACK, row unchanged: compare-and-set on its base",
			routeRollout{Known: row(2, false, 5), Pending: pending(2, true, 5)}, row(2, false, 5), true,
			syncPlan{action: syncWrite, write: st(2, true), expect: 5}},
		{"local STAGE 3, row unchanged: compare-and-set on its base",
			routeRollout{Known: row(2, true, 5), Pending: pending(3, false, 5)}, row(2, true, 5), true,
			syncPlan{action: syncWrite, write: st(3, false), expect: 5}},
		{"local STAGE 3, row moved on to a rollback: the row wins, the stage is dropped",
			routeRollout{Known: row(2, false, 5), Pending: pending(3, false, 5)}, row(1, true, 7), true,
			syncPlan{action: syncAdopt, dropped: true}},
		{"local STAGE 3, row moved on to STAGE 1: the row wins (version, not clock)",
			routeRollout{Known: row(2, false, 5), Pending: pending(3, false, 5)}, row(1, false, 7), true,
			syncPlan{action: syncAdopt, dropped: true}},
		{"local STAGE 3, row moved on to the same state: adopt, nothing dropped",
			routeRollout{Known: row(2, false, 5), Pending: pending(3, false, 5)}, row(3, false, 6), true,
			syncPlan{action: syncAdopt}},
		{"local ROLLBACK, row moved on to a re-enable: the rollback is written on top",
			routeRollout{Known: row(2, true, 5), Pending: pending(2, true, 5)}, row(3, false, 7), true,
			syncPlan{action: syncWrite, write: st(3, true), expect: 7}},
		{"local ROLLBACK, row moved on and rolled back too: adopt",
			routeRollout{Known: row(2, false, 5), Pending: pending(2, true, 5)}, row(4, true, 8), true,
			syncPlan{action: syncAdopt, dropped: true}},
		{"own write landed but its answer was lost: the row equals the change, adopt",
			routeRollout{Known: row(2, false, 5), Pending: pending(2, true, 5)}, row(2, true, 6), true,
			syncPlan{action: syncAdopt}},
		{"local ROLLBACK based on a newer version than the row (table restored from backup): written on top",
			routeRollout{Known: row(2, false, 9), Pending: pending(2, true, 9)}, row(2, false, 3), true,
			syncPlan{action: syncWrite, write: st(2, true), expect: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := planSync(tt.view, tt.row, tt.haveRow); got != tt.want {
				t.Errorf("planSync = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func sharedCfg(stateFile string, shared bool) *config.Config {
	cfg := config.Defaults()
	cfg.Rollout.StateFile = stateFile
	cfg.Rollout.Shared = shared
	return &cfg
}

// TestRolloutSharedView: a local change is pending on every route until
// written; the state in force follows pending, then the row; a newer
// local change made during a write stays pending, rebased; the state file
// carries all of it across a restart.
func TestRolloutSharedView(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rollout.json")
	cfg := sharedCfg(path, true)
	cfg.Rollout.Stage = 1
	r, err := loadRollout(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	routes := []string{"a", "b"}
	if s, rb := r.get("a"); s != 1 || rb {
		t.Fatalf("before any change: %d %t, want the config's stage 1", s, rb)
	}
	// Another instance's row for a arrives: a follows it, b does not.
	if err := r.adopt("a", row(2, false, 4), 0); err != nil {
		t.Fatal(err)
	}
	if s, rb := r.get("a"); s != 2 || rb {
		t.Fatalf("a after the row: %d %t, want 2 false", s, rb)
	}
	if s, _ := r.get("b"); s != 1 {
		t.Fatalf("b without a row: stage %d, want 1", s)
	}
	// ROLLBACK: pending on both, each keeping its own stage.
	if err := r.rollback(routes); err != nil {
		t.Fatal(err)
	}
	va, _ := r.view("a")
	vb, _ := r.view("b")
	if va.Pending == nil || va.Pending.rolloutState != st(2, true) || va.Pending.Base != 4 {
		t.Fatalf("a pending = %+v, want stage 2 rolled back on base 4", va.Pending)
	}
	if vb.Pending == nil || vb.Pending.rolloutState != st(1, true) || vb.Pending.Base != 0 {
		t.Fatalf("b pending = %+v, want stage 1 rolled back on base 0", vb.Pending)
	}
	if _, rb := r.get("b"); !rb {
		t.Fatal("b not rolled back while its change is pending")
	}
	// A STAGE 3 made while a's rollback is being written stays pending
	// after the write lands, rebased on the written version.
	seq := va.Pending.seq
	if err := r.setStage(routes, 3); err != nil {
		t.Fatal(err)
	}
	if err := r.written("a", st(2, true), 5, seq); err != nil {
		t.Fatal(err)
	}
	va, _ = r.view("a")
	if va.Known != row(2, true, 5) || va.Pending == nil || va.Pending.rolloutState != st(3, false) || va.Pending.Base != 5 {
		t.Fatalf("a after the write = %+v pending %+v, want known 2,rb@5 and STAGE 3 pending on 5", va.Known, va.Pending)
	}
	if s, rb := r.get("a"); s != 3 || rb {
		t.Fatalf("a in force = %d %t, want the newer local STAGE 3", s, rb)
	}
	// Restart: the file restores the rows known and the changes pending.
	r2, err := loadRollout(sharedCfg(path, true), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	va2, _ := r2.view("a")
	if va2.Known != va.Known || va2.Pending == nil || va2.Pending.rolloutState != st(3, false) || va2.Pending.Base != 5 {
		t.Fatalf("after restart a = %+v pending %+v", va2.Known, va2.Pending)
	}
	// The write of the restored change settles it.
	if err := r2.written("a", st(3, false), 6, va2.Pending.seq); err != nil {
		t.Fatal(err)
	}
	if va3, _ := r2.view("a"); va3.Pending != nil || va3.Known != row(3, false, 6) {
		t.Fatalf("after the write a = %+v pending %+v", va3.Known, va3.Pending)
	}
	// shared = false: the shared views are ignored, the process-wide
	// state (STAGE 3) is in force.
	r3, err := loadRollout(sharedCfg(path, false), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := r3.adopt("b", row(0, true, 9), 0); err != nil {
		t.Fatal(err)
	}
	if s, rb := r3.get("b"); s != 3 || rb {
		t.Fatalf("not shared: b = %d %t, want the process-wide 3 false", s, rb)
	}
}

// TestRolloutStateFileCompatible: a state file written before sharing
// (no routes) still loads; a corrupt route entry is refused.
func TestRolloutStateFileCompatible(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	os.WriteFile(old, []byte(`{"stage":2,"rolled_back":true}`+"\n"), 0o600)
	r, err := loadRollout(sharedCfg(old, true), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if s, rb := r.get("main"); s != 2 || !rb {
		t.Fatalf("old file: %d %t, want 2 true", s, rb)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"stage":0,"routes":{"main":{"known":{"stage":-1,"version":3}}}}`), 0o600)
	if _, err := loadRollout(sharedCfg(bad, true), zap.NewNop()); err == nil {
		t.Fatal("a negative stage in the state file was accepted")
	}
}

// TestRolloutSyncerOwned: with the route's primary unreachable the syncer
// says so, a local ROLLBACK applies at once and stays pending, a reload
// with shared = false stops the syncer, and Close leaves no goroutine.
func TestRolloutSyncerOwned(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	cfg, err := config.Parse("test.toml", []byte(`
[metrics]
listen = ""
[[users]]
name = "app"
password = "app-secret"
[[routes]]
name = "main"
database = "app"
[routes.primary]
address = "127.0.0.1:1"
`))
	if err != nil {
		t.Fatal(err)
	}
	var cs swapConfig
	cs.p.Store(cfg)
	s, err := New(Options{Config: &cs, connectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := consoleSource{s: s}
	rolloutRow := func() admin.RolloutRow {
		rows := src.Rollout()
		if len(rows) != 1 || rows[0].Route != "main" {
			t.Fatalf("SHOW ROLLOUT = %+v, want one row for main", rows)
		}
		return rows[0]
	}
	deadline := time.Now().Add(10 * time.Second)
	for rolloutRow().Sync != "primary unreachable" {
		if time.Now().After(deadline) {
			t.Fatalf("sync status %q, want primary unreachable", rolloutRow().Sync)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := src.RoutingRollback(); err != nil {
		t.Fatal(err)
	}
	if r := rolloutRow(); !r.RolledBack || !r.Shared || r.Pending != "stage=0 rolled_back=true base_version=0" {
		t.Fatalf("after ROLLBACK with the primary down: %+v", r)
	}
	// shared = false: the syncer stops; the process-wide state (rolled
	// back) stays in force.
	off := *cfg
	off.Rollout.Shared = false
	cs.p.Store(&off)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := rolloutRow(); !r.RolledBack || r.Shared || r.Sync != "" {
		t.Fatalf("after a reload with shared = false: %+v", r)
	}
	s.Close()
	goleak.VerifyNone(t, ignore)
}

// swapConfig is a ConfigSource a test swaps (as a reload does).
type swapConfig struct{ p atomic.Pointer[config.Config] }

func (c *swapConfig) Load() *config.Config { return c.p.Load() }
