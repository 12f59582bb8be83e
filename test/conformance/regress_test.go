package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// PostgreSQL's own regression suite (src/test/regress, run by pg_regress
// with psql) is the widest outside judge of transparency there is: about
// 200 scripts exercising every statement kind, with reads right after the
// DDL and writes that made what they read. Its expected files are the
// PostgreSQL build's own; here each target's output is compared with the
// output of the same suite against the same server directly, so what
// differs is what kineticd changed.
const (
	regressDB       = "regression"
	regressPassword = "postgres" // the superuser's, for kineticd's [[users]]

	// envRegressTests, when set, is a space-separated list of tests to run
	// instead of parallel_schedule (e.g. "create_table insert select").
	envRegressTests = "KINETIC_CONFORMANCE_REGRESS_TESTS"

	// envRegressTargets, when set, is a comma-separated list of target
	// names to run through instead of regressTargets (e.g.
	// "transaction/off,transaction/routed", to look at what transaction
	// pooling changes).
	envRegressTargets = "KINETIC_CONFORMANCE_REGRESS_TARGETS"
)

// regressTargets are where the suite runs through kineticd: every
// target, transaction pooling too (temporary tables, cursors WITH HOLD,
// advisory locks and LISTEN pin a session there; what cannot follow a
// client is in regressAllowed).
var regressTargets = targets[1:]

// chosenRegressTargets is regressTargets, or the targets envRegressTargets
// names.
func chosenRegressTargets(t *testing.T) []target {
	list := os.Getenv(envRegressTargets)
	if list == "" {
		return regressTargets
	}
	var chosen []target
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(targets, func(tg target) bool { return tg.name == strings.TrimSpace(name) })
		if i < 1 {
			t.Fatalf("%s: %q is not a kineticd target (%v)", envRegressTargets, name, targets[1:])
		}
		chosen = append(chosen, targets[i])
	}
	return chosen
}

// TestPgRegress runs PostgreSQL's regression suite directly against a
// primary with two standbys, then through kineticd per regressTargets, and
// fails on every test whose output through kineticd differs from its
// output directly, unless regressAllowed explains it.
func TestPgRegress(t *testing.T) {
	skipUnlessEnabled(t)
	begin := time.Now()
	kinetictest.Binary(t)
	kineticd := sourceVersion()
	suite := regressSuite(t)

	c, ctx := conformanceCluster(t, 2)
	if err := c.Primary.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", pgtest.SuperUser, regressPassword)); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if dir := os.Getenv(envOut); dir != "" {
		out = filepath.Join(dir, "pg_regress")
	}
	// The servers (user postgres) write and read files under it (COPY
	// ... TO a file, lo_export): t.TempDir's directories are the test's
	// alone.
	for d := out; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(d, os.TempDir()) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}

	resetRegressDB(t, ctx, c)
	directDir := filepath.Join(out, "direct")
	direct := suite.run(t, ctx, directDir, c.Primary.Port, nil)
	if len(direct) == 0 {
		t.Fatal("pg_regress produced no output directly against PostgreSQL; the setup is broken")
	}
	var summary strings.Builder
	fmt.Fprintf(&summary, "%-16s %5d tests, %v\n", "direct", len(direct), suite.lastWall.Round(time.Second))
	for _, tg := range chosenRegressTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			resetRegressDB(t, ctx, c)
			px := startKineticd(t, ctx, c, tg, regressRoute)
			dir := filepath.Join(out, strings.ReplaceAll(tg.name, "/", "_"))
			got := suite.run(t, ctx, dir, portOf(px.Addr), []string{"PGPASSWORD=" + regressPassword})
			same, differ, allowedN := 0, 0, 0
			for _, name := range slices.Sorted(mapKeys(direct)) {
				want, ok := got[name]
				switch {
				case !ok:
					differ++
					t.Errorf("%s: no output through kineticd (%s)", name, tg.name)
				case bytes.Equal(direct[name], want):
					same++
				default:
					d := unifiedDiff(direct[name], want, 60)
					if used, ok := allowedRegress(tg.name, name, direct[name], want); ok {
						allowedN++
						var why []string
						for _, a := range used {
							why = append(why, a.why)
						}
						t.Logf("%s differs through kineticd (%s), allowed: %s\n%s", name, tg.name, strings.Join(why, "; "), d)
						continue
					}
					differ++
					t.Errorf("%s: output through kineticd (%s) differs from PostgreSQL's directly:\n%s", name, tg.name, d)
				}
			}
			fmt.Fprintf(&summary, "%-16s %5d same, %d allowed, %d differ, %v\n", tg.name, same, allowedN, differ, suite.lastWall.Round(time.Second))
		})
	}
	t.Logf("PostgreSQL %s regression suite through kineticd %s, %v in all:\n%s", suite.version, kineticd, time.Since(begin).Round(time.Second), summary.String())
}

// regressDiff is a difference of a test's output through kineticd that
// is allowed: on the targets named (all when nil), the hunks of the
// difference (diff -U5) that match hunk. A test's difference is allowed
// when there is one and every hunk of it is allowed by an entry of the
// test.
type regressDiff struct {
	test    string
	targets []string
	hunk    *regexp.Regexp
	why     string
}

var (
	routedTargets = []string{"session/routed", "transaction/routed"}
	txTargets     = []string{"transaction/off", "transaction/routed"}
)

// regressAllowed are the differences a client of a pooler sees by design
// (docs/behaviour.md); each is as narrow as one statement's output.
var regressAllowed = []regressDiff{
	{test: "guc", hunk: regexp.MustCompile(`LOAD 'plpgsql';  -- this will throw a warning`),
		why: "the pooled server connection has plpgsql loaded already (an earlier client's DO block): SET of a new plpgsql.* name is refused at once (as behind PgBouncer)"},
	{test: "plpgsql", hunk: regexp.MustCompile(`WARNING:  invalid configuration parameter name "plpgsql.extra_foo_warnings", removing it`),
		why: "the pooled server connection served guc.sql before, whose SET plpgsql.extra_foo_warnings left a placeholder (RESET ALL keeps placeholders): loading plpgsql there warns (as behind PgBouncer)"},
	{test: "privileges", targets: routedTargets, hunk: regexp.MustCompile(`ERROR:  relation "atest1" does not exist`),
		why: "psql's reconnect (\\c -) is a new session without the old one's token: its reads may run on a replica up to max_replica_lag_ms behind (docs/behaviour.md, Freshness), " +
			"and with 20 scripts at once on two cores a standby can be that far behind the table the old session made"},
	{test: "temp", targets: routedTargets, hunk: regexp.MustCompile(`\\c\n SELECT \* FROM temptest;\n-ERROR:  relation "temptest" does not exist`),
		why: "psql's reconnect (\\c) is a new session without the old one's token: its read may run on a replica that has not replayed the old session's DROP TABLE temptest yet " +
			"(docs/behaviour.md, Freshness; as privileges.sql)"},
	{test: "stats", hunk: regexp.MustCompile(`SELECT sessions > :db_stat_sessions`),
		why: "pg_stat_database.sessions counts server logins; psql's reconnect (\\c) reuses a pooled one"},
	{test: "temp", hunk: regexp.MustCompile(`PREPARE TRANSACTION 'twophase_search'`),
		why: "psql's reconnect (\\c) gets a pooled server connection whose temporary schema exists already, so current_schema() does not create it (as behind PgBouncer)"},
	{test: "sysviews", targets: routedTargets, hunk: regexp.MustCompile(`from pg_stat_wal_receiver`),
		why: "a read of the server's own state runs on the replica, which has a WAL receiver (docs/behaviour.md, allowed deviation (c))"},
	{test: "stats", targets: append(slices.Clone(routedTargets), "transaction/off"), hunk: regexp.MustCompile(`pg_stat_|pg_statio_`),
		why: "routed: a read of the cumulative statistics (pg_stat_user_tables, pg_stat_get_live_tuples) on a replica counts that server's activity, not the primary's " +
			"(docs/behaviour.md, allowed deviation (c)); whether the read runs there depends on the replica's replay at that moment. " +
			"Transaction pooling: a server process's statistics wait in that process until it flushes them (pg_stat_force_next_flush() flushes its own), " +
			"and the next transaction may run on another (as behind PgBouncer)"},
	{test: "prepare", targets: txTargets, hunk: regexp.MustCompile(`pg_prepared_statements|\| \{`),
		why: "in transaction pooling pg_prepared_statements is the pooled server connection's: other clients' statements, not yet the client's own until it uses them there (docs/behaviour.md; as behind PgBouncer)"},
	{test: "guc", targets: txTargets, hunk: regexp.MustCompile(`SELECT name FROM pg_prepared_statements`),
		why: "in transaction pooling pg_prepared_statements is the pooled server connection's (as prepare.sql)"},
	{test: "sysviews", targets: txTargets, hunk: regexp.MustCompile(`from pg_prepared_statements`),
		why: "in transaction pooling pg_prepared_statements is the pooled server connection's (as prepare.sql)"},
	{test: "constraints", targets: txTargets, hunk: regexp.MustCompile(`currval|!check failed`),
		why: "currval() is the state of the server process nextval() ran in (INSERT_TBL's default for z): in transaction pooling the next transaction may run in another, " +
			"where it is not yet defined (docs/behaviour.md; as behind PgBouncer); the rows those INSERTs did not add follow"},
	{test: "sequence", targets: txTargets, hunk: regexp.MustCompile(`currval|lastval`),
		why: "currval() and lastval() are the state of the server process nextval() ran in: in transaction pooling the next transaction may run in another (as constraints.sql)"},
	{test: "partition_prune", targets: txTargets, hunk: regexp.MustCompile(`(?m)^\+ERROR:  prepared statement "[a-z_0-9]+" does not exist\n\+CONTEXT:  PL/pgSQL function`),
		why: "a PL/pgSQL function EXECUTEs, in its dynamic SQL, a statement the client PREPAREd in an earlier transaction: in transaction pooling the proxy prepares a client's statement " +
			"where a statement of the client's names it, and the function's text is not one (docs/behaviour.md; PgBouncer keeps no SQL PREPARE across transactions)"},
	{test: "triggers", targets: txTargets, hunk: regexp.MustCompile(`tttest|ttdummy`),
		why: "regress.so's ttdummy keeps set_ttdummy()'s switch in a static variable of the server process: in transaction pooling the next transaction may run in another (as behind PgBouncer)"},
}

// allowedRegress returns the entries of regressAllowed that explain the
// difference between direct and got in test on target: every hunk of it
// is matched by one of them.
func allowedRegress(target, test string, direct, got []byte) ([]regressDiff, bool) {
	hunks := diffHunks(direct, got)
	if len(hunks) == 0 {
		return nil, false
	}
	var used []regressDiff
	for _, h := range hunks {
		i := slices.IndexFunc(regressAllowed, func(a regressDiff) bool {
			return a.test == test && (a.targets == nil || slices.Contains(a.targets, target)) && a.hunk.MatchString(h)
		})
		if i < 0 {
			return nil, false
		}
		if !slices.ContainsFunc(used, func(a regressDiff) bool { return a.hunk == regressAllowed[i].hunk }) {
			used = append(used, regressAllowed[i])
		}
	}
	return used, true
}

// regressRoute serves pg_regress: it connects to database postgres first
// and then runs every script in database regression, as the superuser.
var regressRoute = driverRoute{name: "regression", db: regressDB, users: []routeUser{{pgtest.SuperUser, regressPassword, regressPassword}}, poolSize: 60}

// pgRegress is the suite, as scripts/pg-regress.sh prepared it.
type pgRegress struct {
	dir      string // scripts/pg-regress.sh's directory
	version  string // the release the scripts come from
	tests    []string
	lastWall time.Duration
}

func regressSuite(t *testing.T) *pgRegress {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "pg-regress.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/pg-regress.sh: %v\n%s", err, stderr.String())
	}
	s := &pgRegress{dir: strings.TrimSpace(string(b))}
	v, err := os.ReadFile(filepath.Join(s.dir, "source-version"))
	if err != nil {
		t.Fatal(err)
	}
	s.version = strings.TrimSpace(string(v))
	if list := os.Getenv(envRegressTests); list != "" {
		s.tests = strings.Fields(list)
	}
	return s
}

// run runs the suite against port on 127.0.0.1 as the superuser, its
// output in dir, and returns each test's output (results/NAME.out).
// pg_regress's own verdicts (against the expected files) are not used.
func (s *pgRegress) run(t *testing.T, ctx context.Context, dir string, port int, env []string) map[string][]byte {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "results"), 0o777); err != nil {
		t.Fatal(err)
	}
	// The servers (user postgres) write COPY ... TO files into results/.
	for _, d := range []string{dir, filepath.Join(dir, "results")} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(s.dir, "regress")
	args := []string{
		"--inputdir=" + src, "--outputdir=" + dir,
		"--bindir=" + pgtest.DefaultBinDir, "--dlpath=" + filepath.Join(s.dir, "lib"),
		"--host=127.0.0.1", fmt.Sprintf("--port=%d", port), "--user=" + pgtest.SuperUser,
		"--dbname=" + regressDB, "--use-existing",
	}
	if len(s.tests) > 0 {
		args = append(args, s.tests...)
	} else {
		args = append(args, "--schedule="+filepath.Join(src, "parallel_schedule"))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.dir, "pg_regress"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	begin := time.Now()
	outb, err := cmd.CombinedOutput()
	s.lastWall = time.Since(begin)
	// pg_regress exits 1 when some output differs from the expected
	// files; only a run that produced nothing is broken.
	if err != nil {
		t.Logf("pg_regress (port %d): %v; its last lines:\n%s", port, err, tail(string(outb), 15))
	}
	res := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join(dir, "results", "*.out"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The scripts name files in the output directory, which differs
		// per target (COPY ... TO :'filename' and its errors).
		res[strings.TrimSuffix(filepath.Base(f), ".out")] = bytes.ReplaceAll(b, []byte(dir), []byte("@outputdir@"))
	}
	return res
}

// resetRegressDB gives every run a new database regression with the
// settings pg_regress gives the one it creates, and drops the roles an
// earlier run's scripts left behind.
func resetRegressDB(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	t.Helper()
	for _, sql := range []string{
		"DROP DATABASE IF EXISTS " + regressDB + " WITH (FORCE)",
		"CREATE DATABASE " + regressDB + " TEMPLATE template0",
		"ALTER DATABASE " + regressDB + " SET lc_messages TO 'C'; ALTER DATABASE " + regressDB + " SET lc_monetary TO 'C';" +
			"ALTER DATABASE " + regressDB + " SET lc_numeric TO 'C'; ALTER DATABASE " + regressDB + " SET lc_time TO 'C';" +
			"ALTER DATABASE " + regressDB + " SET bytea_output TO 'hex'; ALTER DATABASE " + regressDB + " SET timezone_abbreviations TO 'Default'",
		`DO $$DECLARE r name; BEGIN
			FOR r IN SELECT rolname FROM pg_roles WHERE rolname LIKE 'regress\_%' LOOP
				BEGIN EXECUTE format('DROP ROLE %I', r); EXCEPTION WHEN others THEN NULL; END;
			END LOOP; END$$`,
	} {
		if err := c.Primary.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

var hunkHeader = regexp.MustCompile(`^@@`)

// diffHunks are the hunks of diff -U5 a b.
func diffHunks(a, b []byte) []string {
	var hunks []string
	for _, l := range strings.Split(diffText(a, b, "-U5"), "\n") {
		switch {
		case hunkHeader.MatchString(l):
			hunks = append(hunks, "")
		case len(hunks) > 0:
			hunks[len(hunks)-1] += l + "\n"
		}
	}
	return hunks
}

// unifiedDiff is diff -u of a and b, at most max lines.
func unifiedDiff(a, b []byte, max int) string {
	lines := strings.Split(diffText(a, b, "-u"), "\n")
	if len(lines) > max {
		n := 0
		for _, l := range lines {
			if hunkHeader.MatchString(l) {
				n++
			}
		}
		lines = append(lines[:max], fmt.Sprintf("... (%d lines, %d hunks in all)", len(lines), n))
	}
	return strings.Join(lines, "\n")
}

// diffText runs diff with format (-u, -U5) on a and b.
func diffText(a, b []byte, format string) string {
	dir, err := os.MkdirTemp("", "regress-diff")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	fa, fb := filepath.Join(dir, "direct"), filepath.Join(dir, "kineticd")
	if err := os.WriteFile(fa, a, 0o600); err != nil {
		return err.Error()
	}
	if err := os.WriteFile(fb, b, 0o600); err != nil {
		return err.Error()
	}
	out, _ := exec.Command("diff", format, fa, fb).Output()
	return string(out)
}

// TestAllowedRegress: an allowed difference is allowed only where its
// statement's output differs, on its targets.
func TestAllowedRegress(t *testing.T) {
	var direct, got, more strings.Builder
	for i := range 40 {
		fmt.Fprintf(&direct, "SELECT %d;\n ?column? \n----------\n %d\n(1 row)\n\n", i, i)
	}
	base := direct.String()
	stat := "SELECT sessions > :db_stat_sessions FROM pg_stat_database;\n ?column? \n----------\n t\n(1 row)\n\n"
	direct.WriteString(stat)
	got.WriteString(base + strings.Replace(stat, " t\n", " f\n", 1))
	more.WriteString(strings.Replace(base, " 3\n", " 4\n", 1) + strings.Replace(stat, " t\n", " f\n", 1))
	d, g, m := []byte(direct.String()), []byte(got.String()), []byte(more.String())
	if _, ok := allowedRegress("session/off", "stats", d, g); !ok {
		t.Error("the sessions counter's difference is not allowed")
	}
	if _, ok := allowedRegress("session/off", "stats", d, m); ok {
		t.Error("a second difference elsewhere in the output is allowed with it")
	}
	if _, ok := allowedRegress("session/off", "other", d, g); ok {
		t.Error("allowed in another test")
	}
	if _, ok := allowedRegress("session/off", "sysviews", d, g); ok {
		t.Error("allowed by another test's entry")
	}
	// Two hunks, each explained by an entry of its own.
	live := "SELECT pg_stat_get_live_tuples(:oid);\n pg_stat_get_live_tuples \n-------------------------\n 1\n(1 row)\n\n"
	two := []byte(direct.String() + base + live)
	twoGot := []byte(base + strings.Replace(stat, " t\n", " f\n", 1) + base + strings.Replace(live, " 1\n", " 0\n", 1))
	if used, ok := allowedRegress("transaction/off", "stats", two, twoGot); !ok || len(used) != 2 {
		t.Errorf("two hunks of two allowed differences: allowed %v by %d entries", ok, len(used))
	}
	if _, ok := allowedRegress("session/off", "stats", two, twoGot); ok {
		t.Error("a hunk allowed on other targets only is allowed on session/off")
	}
	// A hunk as diff writes it: its lines begin with "+", "-" or " ".
	pp := "select explain_parallel_append('execute ab_q5 (33, 44, 55)');\n explain_parallel_append \n-------------------------\n Finalize Aggregate\n(1 row)\n\n"
	ppGot := "select explain_parallel_append('execute ab_q5 (33, 44, 55)');\nERROR:  prepared statement \"ab_q5\" does not exist\nCONTEXT:  PL/pgSQL function explain_parallel_append(text) line 5 at FOR over EXECUTE statement\n"
	if _, ok := allowedRegress("transaction/off", "partition_prune", []byte(base+pp+base), []byte(base+ppGot+base)); !ok {
		t.Error("partition_prune's dynamic EXECUTE of an earlier transaction's PREPARE is not allowed in transaction pooling")
	}
}
