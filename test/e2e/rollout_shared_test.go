package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// instance is one kineticd process of the shared-rollout test and its
// admin console connection.
type instance struct {
	name  string
	pr    *kinetictest.Process
	state string // its state_file
	admin *pgx.Conn
}

// rolloutRow is an instance's SHOW ROLLOUT row for route main.
type rolloutRow struct {
	stage                        string
	rolledBack, version, pending string
	sync                         string
}

func (in *instance) dial(t *testing.T, ctx context.Context) {
	t.Helper()
	c, err := pgx.Connect(ctx, kinetictest.DSN(in.pr.Addr, pgtest.AppUser, pgtest.AppPassword, "pgkinetic"))
	if err != nil {
		t.Fatalf("%s: admin console: %v", in.name, err)
	}
	in.admin = c
	t.Cleanup(func() { c.Close(context.Background()) })
}

// exec runs one admin command; the error is returned, not fatal, so that
// polls can retry.
func (in *instance) exec(ctx context.Context, cmd string) ([][]string, error) {
	rows, err := in.admin.Query(ctx, cmd, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals := rows.RawValues()
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = string(v)
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

func (in *instance) rollout(ctx context.Context) (rolloutRow, error) {
	return in.rolloutOf(ctx, "main")
}

// rolloutOf is the instance's SHOW ROLLOUT row for route.
func (in *instance) rolloutOf(ctx context.Context, route string) (rolloutRow, error) {
	rows, err := in.exec(ctx, "SHOW ROLLOUT")
	if err != nil {
		return rolloutRow{}, err
	}
	col := func(r []string, name string) string { return r[slices.Index(admin.RolloutColumns, name)] }
	for _, r := range rows {
		if r[0] == route {
			return rolloutRow{stage: col(r, "stage"), rolledBack: col(r, "rolled_back"), version: col(r, "version"),
				pending: col(r, "pending"), sync: col(r, "sync")}, nil
		}
	}
	return rolloutRow{}, fmt.Errorf("SHOW ROLLOUT has no row for route %s: %v", route, rows)
}

// awaitState polls every instance until each shows stage and rolled back
// as wanted, and returns how long each took from start; it fails the test
// when one has not after limit.
func awaitState(t *testing.T, ctx context.Context, ins []*instance, stage int, rolledBack bool, start time.Time, limit time.Duration) []time.Duration {
	t.Helper()
	want := rolloutRow{stage: fmt.Sprint(stage), rolledBack: map[bool]string{true: "t", false: "f"}[rolledBack]}
	took := make([]time.Duration, len(ins))
	left := len(ins)
	var last []rolloutRow = make([]rolloutRow, len(ins))
	for left > 0 {
		for i, in := range ins {
			if took[i] != 0 {
				continue
			}
			got, err := in.rollout(ctx)
			if err != nil {
				t.Fatalf("%s: SHOW ROLLOUT: %v", in.name, err)
			}
			last[i] = got
			if got.stage == want.stage && got.rolledBack == want.rolledBack {
				took[i] = max(time.Since(start), time.Nanosecond)
				left--
			}
		}
		if left > 0 && time.Since(start) > limit {
			t.Fatalf("stage %d rolled_back %t not on every instance after %v: %+v", stage, rolledBack, limit, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return took
}

// TestRolloutSharedAcrossInstances (issue 15, item 6): three kineticd
// processes of one route share its rollout state through the primary.
// 20 changes, ROUTING ROLLBACK and ROUTING STAGE n alternating on random
// instances, each reach all three within the 2 s contract. Then, with the
// primary stopped: a ROLLBACK on one instance and a STAGE n on another
// stay local (the third keeps the last state, and keeps it across a
// restart through state_file); when the primary is back all three
// converge on one version, rolled back: the rollback was not lost.
//
// A second route, priv, is on a database whose owner is not kineticd's
// role: kineticd may not create the table there and says so (SHOW
// ROLLOUT's sync column); once deploy/sql/pg_kinetic_rollout.sql has run,
// priv is shared like main. Last, a fourth instance's auto_rollback
// reaches the three.
func TestRolloutSharedAcrossInstances(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 180*time.Second)
	if err := cl.Primary.Exec(ctx, "CREATE DATABASE rolloutpriv"); err != nil {
		t.Fatal(err)
	}
	privRoute := fmt.Sprintf("\n[[routes]]\nname = \"priv\"\ndatabase = \"rolloutpriv\"\n[routes.primary]\naddress = %q\n", cl.Primary.Addr())
	dir := t.TempDir()
	var ins []*instance
	for _, name := range []string{"a", "b", "c"} {
		state := filepath.Join(dir, name+".json")
		pr := kinetictest.StartProcess(t, cl, kinetictest.Params{
			Replicas: addrs(cl.Standbys...), ReadRoutingMode: "prefer_replica", LogLevel: "info",
			Extra: classesTOML(state) + privRoute, RolloutShared: true,
		})
		in := &instance{name: name, pr: pr, state: state}
		in.dial(t, ctx)
		ins = append(ins, in)
	}
	// Every syncer in step with the primary before the first change;
	// priv's refused until the SQL file has run.
	awaitSync := func(route, want string) {
		t.Helper()
		for _, in := range ins {
			awaitCond(t, 30*time.Second, in.name+" "+route+" sync "+want, func() (bool, error) {
				r, err := in.rolloutOf(ctx, route)
				return strings.HasPrefix(r.sync, want), err
			})
		}
	}
	awaitSync("main", "synced")
	awaitSync("priv", "insufficient privilege")
	psql := exec.CommandContext(ctx, pgtest.Bin("psql"), "-X", "-q", "-v", "kinetic_user="+pgtest.AppUser,
		"-d", cl.Primary.DSN(pgtest.SuperUser, "", "rolloutpriv"), "-f", "../../deploy/sql/pg_kinetic_rollout.sql")
	if out, err := psql.CombinedOutput(); err != nil {
		t.Fatalf("psql -f deploy/sql/pg_kinetic_rollout.sql: %v\n%s", err, out)
	}
	awaitSync("priv", "synced") // (the retry after a refusal comes within 10 s)

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("instance choice seed %d", seed)
	stage := 0
	var worst time.Duration
	for i := range 20 {
		in := ins[rng.IntN(len(ins))]
		cmd, rb := "ROUTING ROLLBACK", true
		if i%2 == 1 {
			stage = 1 + rng.IntN(3)
			cmd, rb = fmt.Sprintf("ROUTING STAGE %d", stage), false
		}
		start := time.Now()
		if _, err := in.exec(ctx, cmd); err != nil {
			t.Fatalf("%s on %s: %v", cmd, in.name, err)
		}
		took := awaitState(t, ctx, ins, stage, rb, start, 2*time.Second)
		slowest := slices.Max(took)
		worst = max(worst, slowest)
		t.Logf("change %2d: %-18s on %s: seen by a/b/c after %v / %v / %v", i+1, cmd, in.name,
			took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond))
	}
	t.Logf("max propagation over 20 changes: %v (contract: 2 s)", worst.Round(time.Millisecond))

	// All three at one version, and the routing follows: SHOW ROUTES has
	// the stage's classes enabled.
	var version string
	for _, in := range ins {
		r, _ := in.rollout(ctx)
		if version == "" {
			version = r.version
		}
		if r.version != version || r.pending != "" {
			t.Fatalf("%s: version %s pending %q, want version %s and nothing pending", in.name, r.version, r.pending, version)
		}
		routes, err := in.exec(ctx, "SHOW ROUTES")
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range routes {
			if row[1] == "catalog_browse" && row[5] != "t" {
				t.Errorf("%s: SHOW ROUTES after STAGE %d: catalog_browse not enabled: %v", in.name, stage, row)
			}
		}
	}

	// The primary goes away.
	if err := cl.Primary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		awaitCond(t, 20*time.Second, in.name+" notices the primary is gone", func() (bool, error) {
			r, err := in.rollout(ctx)
			return r.sync == "primary unreachable", err
		})
	}
	a, b, c := ins[0], ins[1], ins[2]
	if _, err := a.exec(ctx, "ROUTING ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	other := 1 + stage%3 // a STAGE other than the current one
	if _, err := c.exec(ctx, fmt.Sprintf("ROUTING STAGE %d", other)); err != nil {
		t.Fatal(err)
	}
	check := func(in *instance, wantStage int, wantRB string, wantPending bool) {
		t.Helper()
		r, err := in.rollout(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.stage != fmt.Sprint(wantStage) || r.rolledBack != wantRB || (r.pending != "") != wantPending {
			t.Fatalf("%s with the primary down: %+v, want stage %d rolled_back %s pending %t", in.name, r, wantStage, wantRB, wantPending)
		}
	}
	// Each keeps what it knows for as long as the primary is away: a and
	// c their own change (pending), b the last shared state.
	for range 3 {
		check(a, stage, "t", true)
		check(b, stage, "f", false)
		check(c, other, "f", true)
		time.Sleep(500 * time.Millisecond)
	}
	// b restarts meanwhile: its state_file brings the last shared state
	// back (the config says stage 0).
	b.pr.Cmd.Process.Signal(syscall.SIGTERM)
	if err := b.pr.Wait(t, 20*time.Second); err != nil {
		t.Fatalf("b did not stop cleanly: %v", err)
	}
	b.admin.Close(ctx)
	b.pr = kinetictest.StartProcessFile(t, b.pr.Path, b.pr.Addr)
	b.dial(t, ctx)
	check(b, stage, "f", false)

	if err := cl.Primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Whichever of a's and c's changes reaches the primary first, the
	// rollback wins: all three roll back, at c's stage or at the old one.
	var final []rolloutRow
	awaitCond(t, 30*time.Second, "all three converge", func() (bool, error) {
		final = final[:0]
		for _, in := range ins {
			r, err := in.rollout(ctx)
			if err != nil {
				return false, err
			}
			final = append(final, r)
		}
		for _, r := range final {
			if r != final[0] || r.pending != "" || r.sync != "synced" {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("converged %v after the primary's start: %+v", time.Since(start).Round(time.Millisecond), final[0])
	if final[0].rolledBack != "t" || final[0].stage != fmt.Sprint(stage) && final[0].stage != fmt.Sprint(other) {
		t.Fatalf("converged on %+v, want rolled back at stage %d or %d", final[0], stage, other)
	}
	// priv (whose table came from the SQL file) converged the same way,
	// and its row says what the instances show.
	var privRow rolloutRow
	awaitCond(t, 30*time.Second, "priv converges", func() (bool, error) {
		for i, in := range ins {
			r, err := in.rolloutOf(ctx, "priv")
			if err != nil || r.pending != "" || r.sync != "synced" || i > 0 && r != privRow {
				return false, err
			}
			privRow = r
		}
		return true, nil
	})
	c2, err := pgx.Connect(ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, "rolloutpriv"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	var stageText, rbText, versionText string
	if err := c2.QueryRow(ctx, "SELECT stage::text, rolled_back::text, version::text FROM pgkinetic.rollout_state WHERE route = 'priv'").
		Scan(&stageText, &rbText, &versionText); err != nil {
		t.Fatalf("priv's row: %v", err)
	}
	if rbText != "true" || stageText != privRow.stage || versionText != privRow.version || privRow.rolledBack != "t" {
		t.Errorf("priv: row stage %s rolled_back %s version %s, instances %+v; want the same, rolled back", stageText, rbText, versionText, privRow)
	}

	// auto_rollback on one instance reaches the others: re-enable stage 1,
	// then start a fourth kineticd, d, with auto_rollback after 1 s and a
	// replica that never answers (every replica ineligible from the start).
	if _, err := a.exec(ctx, "ROUTING STAGE 1"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, ins, 1, false, time.Now(), 2*time.Second)
	d := kinetictest.StartProcess(t, cl, kinetictest.Params{
		Replicas: []string{kinetictest.FreeAddr(t)}, ReadRoutingMode: "prefer_replica", LogLevel: "info",
		Extra:         classesTOML(filepath.Join(dir, "d.json")) + "auto_rollback = true\nlag_slo_window_ms = 1000\n" + privRoute,
		RolloutShared: true,
	})
	start = time.Now()
	// (A guard, not a timing assertion: the 1 s window, the monitor's 1 s
	// tick, then the 2 s contract.)
	took := awaitState(t, ctx, ins, 1, true, start, 15*time.Second)
	t.Logf("d's auto_rollback seen by a/b/c %v / %v / %v after d started", took[0].Round(time.Millisecond),
		took[1].Round(time.Millisecond), took[2].Round(time.Millisecond))
	if !strings.Contains(d.Logs(), "AUTO ROLLBACK") {
		t.Errorf("d did not log its AUTO ROLLBACK:\n%s", d.Logs())
	}
}

// TestRolloutSharedLogin: the rollout syncer logs in to the primary as
// every server connection does (pool's login), not with pgconn's own:
//   - a first [[users]] entry whose plaintext password SASLprep changes
//     ("Ⅸ" is "IX" under NFKC, as PostgreSQL hashes it; pgconn's PRECIS
//     keeps it) syncs, where pgconn's login was refused with 28P01;
//   - a first entry holding only the server's SCRAM verifier (pass-through)
//     reports "no credentials yet" until a client of that user has logged
//     in, then syncs with the key recovered from that client's proof.
func TestRolloutSharedLogin(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: -1})
	ctx := ctxT(t, 2*time.Minute)
	start := func(t *testing.T, role, secret string) *instance {
		t.Helper()
		psql := exec.CommandContext(ctx, pgtest.Bin("psql"), "-X", "-q", "-v", "kinetic_user="+role,
			"-d", cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB), "-f", "../../deploy/sql/pg_kinetic_rollout.sql")
		if out, err := psql.CombinedOutput(); err != nil {
			t.Fatalf("psql -f deploy/sql/pg_kinetic_rollout.sql: %v\n%s", err, out)
		}
		first := fmt.Sprintf("[[users]]\nname = %q\npassword = %q\n\n[[users]]\nname = \"app\"", role, secret)
		toml := strings.Replace(kinetictest.TOML(cl, kinetictest.Params{RolloutShared: true, LogLevel: "info"}),
			"[[users]]\nname = \"app\"", first, 1)
		if !strings.Contains(toml, first) {
			t.Fatal("the role is not the first [[users]] entry")
		}
		in := &instance{name: role, pr: &kinetictest.Process{Addr: startTOML(t, toml)}}
		in.dial(t, ctx)
		return in
	}
	awaitSync := func(t *testing.T, in *instance, want string, limit time.Duration) {
		t.Helper()
		var last string
		awaitCond(t, limit, "SHOW ROLLOUT sync "+want, func() (bool, error) {
			r, err := in.rollout(ctx)
			last = r.sync
			return strings.HasPrefix(r.sync, want), err
		})
		t.Logf("sync: %s", last)
	}

	t.Run("saslprep", func(t *testing.T) {
		role := uniqueIdent("rollprep")
		password := "pass\u2168-" + role
		passThroughRole(t, ctx, cl, role, password) // a verifier on the server; kineticd gets the plaintext
		in := start(t, role, password)
		awaitSync(t, in, "synced", 20*time.Second)
	})

	t.Run("pass-through", func(t *testing.T) {
		role := uniqueIdent("rollpt")
		password := "pt-" + role
		verifier, _ := passThroughRole(t, ctx, cl, role, password)
		in := start(t, role, verifier)
		awaitSync(t, in, "no credentials yet", 20*time.Second)
		c := connect(t, ctx, kinetictest.DSN(in.pr.Addr, role, password, pgtest.AppDB))
		c.Close(ctx)
		awaitSync(t, in, "synced", 20*time.Second) // the retry after a refusal comes within 10 s
		if _, err := in.exec(ctx, "ROUTING STAGE 2"); err != nil {
			t.Fatal(err)
		}
		su := connect(t, ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
		defer su.Close(ctx)
		awaitCond(t, 5*time.Second, "stage 2 in the shared table", func() (bool, error) {
			var stage int
			err := su.QueryRow(ctx, "select stage from pgkinetic.rollout_state where route = 'main'").Scan(&stage)
			return stage == 2, err
		})
	})
}
