package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pgxModule is the module whose test suite runs; its version is the one
// this repository's go.mod requires.
const pgxModule = "github.com/jackc/pgx/v5"

// pgxPackages are the packages of pgx whose tests run, by the short name
// used in test keys ("pgconn.TestConnect") and their directory in the
// module.
var pgxPackages = []pkgDir{
	{"pgx", "."},
	{"pgconn", "pgconn"},
	{"pgproto3", "pgproto3"},
	{"pgxpool", "pgxpool"},
	{"stdlib", "stdlib"},
	{"pgtype", "pgtype"},
}

// suiteTimeout is each test binary's -test.timeout. It is a hang guard: the
// slowest package takes well under two minutes against PostgreSQL.
const suiteTimeout = 8 * time.Minute

// binary is one run of a compiled test binary of a driver.
type binary struct {
	pkg  string // "pgx", "pgconn", "pgproto3", "pq"; the tests' key prefix
	path string // the executable
	dir  string // the package's directory in the copied module (its tests' working directory)
	// env is added to the target's variables for this run (lib/pq's
	// PQTEST_BINARY_PARAMETERS); skip is its -test.skip; run, when set, is
	// its -test.run in place of the suite's (a test run on its own).
	env  []string
	skip string
	run  string
}

// pkgDir is one package of a driver's module whose tests run: its short
// name in test keys ("pgconn.TestConnect") and its directory in the module.
type pkgDir struct{ name, dir string }

// buildPgx builds pgx's test binaries at the version go.mod requires.
func buildPgx(t *testing.T) (version string, bins []binary) {
	t.Helper()
	out, err := exec.Command(goCommand(t), "list", "-m", "-f", "{{.Version}}", pgxModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", pgxModule, err)
	}
	version = strings.TrimSpace(string(out))
	return version, buildModule(t, pgxModule, version, pgxPackages)
}

// buildModule copies module@version's directory out of the read-only module
// cache (downloading it through the module proxy when it is not there) into
// a temporary directory and compiles the test binaries of pkgs there, once.
// It builds with -trimpath, so Go's build cache recognises the copy on later
// runs and a warm build takes a second or two.
func buildModule(t *testing.T, module, version string, pkgs []pkgDir) (bins []binary) {
	t.Helper()
	goBin := goCommand(t)
	cmd := exec.Command(goBin, "mod", "download", "-json", module+"@"+version)
	// (-mod=mod: a module this repository does not require, lib/pq, is
	// fetched all the same.)
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json %s@%s: %v %v %s", module, version, err, jerr, mod.Error)
	}

	src := filepath.Join(t.TempDir(), filepath.Base(module))
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		t.Fatalf("copying %s: %v", mod.Dir, err)
	}
	dropLocalReplaces(t, goBin, src)
	binDir := t.TempDir()
	args := []string{"test", "-c", "-trimpath", "-o", binDir + "/"}
	if len(pkgs) == 1 {
		args[len(args)-1] = filepath.Join(binDir, pkgs[0].name+".test")
	}
	for _, p := range pkgs {
		args = append(args, "./"+p.dir)
	}
	begin := time.Now()
	cmd = exec.Command(goBin, args...)
	cmd.Dir = src
	// The driver is its own main module here: no workspace, and none of
	// our flags (a -mod=vendor of the caller's would break it). Its
	// dependencies come through the module proxy on first use.
	// (-mod=mod: go.sum gains what a dropped replace leaves it without.)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false -mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), src, err, out)
	}
	t.Logf("built %s %s test binaries in %v", module, version, time.Since(begin).Round(time.Millisecond))
	for _, p := range pkgs {
		// go test -c -o DIR/ names each binary after its package's import
		// path without a major-version suffix: pgx.test, pgconn.test, ...
		bins = append(bins, binary{pkg: p.name, path: filepath.Join(binDir, p.name+".test"), dir: filepath.Join(src, p.dir)})
	}
	for _, b := range bins {
		if _, err := os.Stat(b.path); err != nil {
			t.Fatalf("go test -c did not produce %s: %v", b.path, err)
		}
	}
	return bins
}

func goCommand(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the drivers' tests: %v", err)
	}
	return goBin
}

// outcome is what became of one top-level test in one run.
type outcome string

const (
	pass outcome = "pass"
	fail outcome = "fail"
	skip outcome = "skip"
)

// testResult is one top-level test of one run.
type testResult struct {
	Key     string // "pgconn.TestConnect"
	Outcome outcome
	// Line is the first error line for a failure (or the skip reason for a
	// skip); "" for a pass.
	Line string
	// Output is the whole output of a failed test (its subtests
	// included), at most maxKeptLines from its end, for the report of a
	// failure nobody can rerun (a flake in CI).
	Output  []string
	Elapsed time.Duration
}

// maxKeptLines bounds testResult.Output.
const maxKeptLines = 120

// suiteRun is one test binary run against one target.
type suiteRun struct {
	Pkg   string
	Tests map[string]*testResult // by Key; top-level tests only
	// Broken says how the binary ended early ("" when it ran to the end):
	// a -test.timeout panic, another panic, a signal. Tests still running
	// then are failures carrying this.
	Broken string
	Wall   time.Duration

	running map[string]bool // keys the timeout panic listed as running
	ended   bool            // test2json reported the package's own pass or fail
}

// event is one line of go tool test2json's output.
type event struct {
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

// runSuite runs b through go tool test2json with env as its whole
// environment and returns its top-level tests. A binary that cannot be
// started at all is an error; one that fails, panics or times out is a
// result.
// When keep is not nil, the test2json stream is copied to it as well.
func runSuite(ctx context.Context, b binary, env []string, runPattern string, keep io.Writer) (*suiteRun, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	args := []string{"tool", "test2json", "-t", "-p", b.pkg, b.path,
		"-test.v=test2json", "-test.count=1", "-test.timeout=" + suiteTimeout.String()}
	if b.run != "" {
		runPattern = b.run
	}
	if runPattern != "" {
		args = append(args, "-test.run="+runPattern)
	}
	if b.skip != "" {
		args = append(args, "-test.skip="+b.skip)
	}
	// The outer deadline only guards against a binary that ignores its own
	// -test.timeout.
	ctx, cancel := context.WithTimeout(ctx, suiteTimeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = b.dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", b.path, err)
	}
	var events io.Reader = stdout
	if keep != nil {
		events = io.TeeReader(stdout, keep)
	}
	run := parseEvents(b.pkg, events)
	waitErr := cmd.Wait()
	run.Wall = time.Since(begin)
	if run.Broken == "" && !run.ended {
		// Neither a timeout nor a panic, and no final result for the
		// package: os.Exit in a test, a signal, or the outer deadline.
		why := "the binary exited early"
		if ctx.Err() != nil {
			why = "the binary was killed after " + (suiteTimeout + 2*time.Minute).String()
		}
		if waitErr != nil {
			why += ": " + waitErr.Error()
		}
		if st := oneLine(tail(stderr.String(), 3)); st != "" {
			why += " (" + st + ")"
		}
		run.Broken = why
	}
	if len(run.Tests) == 0 && waitErr != nil {
		return run, fmt.Errorf("%s ran no test: %v\n%s", b.path, waitErr, tail(stderr.String(), 20))
	}
	finishRunning(run)
	return run, nil
}

// Lines of the test binary's own output that say how it ended early.
var (
	timeoutRE = regexp.MustCompile(`^panic: test timed out after (\S+)`)
	panicRE   = regexp.MustCompile(`^(panic|fatal error): `)
	// After a timeout panic: "\trunning tests:" then "\t\tTestX/sub (8m0s)".
	runningRE = regexp.MustCompile(`^\t\t(\S+) \(\S+\)$`)
)

// parseEvents reads test2json events of package pkg and records each
// top-level test's outcome and first error line. Subtests count only
// through their parent; their output is the parent's output. Tests that
// never reach pass, fail or skip are left without an outcome for
// finishRunning. How a binary ends early shows up in output lines,
// attributed to whichever test ran last (a -test.timeout panic, with the
// list of running tests) or to none.
func parseEvents(pkg string, r io.Reader) *suiteRun {
	run := &suiteRun{Pkg: pkg, Tests: map[string]*testResult{}, running: map[string]bool{}}
	output := map[string][]string{}
	inRunning := false
	watch := func(line string) {
		switch {
		case inRunning:
			if m := runningRE.FindStringSubmatch(line); m != nil {
				top, _, _ := strings.Cut(m[1], "/")
				run.running[pkg+"."+top] = true
				return
			}
			inRunning = false
		case run.Broken != "":
		case timeoutRE.MatchString(line):
			run.Broken = strings.TrimPrefix(line, "panic: ")
		case panicRE.MatchString(line):
			run.Broken = line
		}
		if strings.TrimSpace(line) == "running tests:" && strings.HasPrefix(run.Broken, "test timed out") {
			inRunning = true
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // not an event (test2json passes some lines through)
		}
		line := strings.TrimRight(ev.Output, "\n")
		if ev.Action == "output" {
			watch(line)
		}
		if ev.Test == "" {
			if ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip" {
				run.ended = true
			}
			continue
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		key := pkg + "." + top
		res := run.Tests[key]
		if res == nil {
			res = &testResult{Key: key}
			run.Tests[key] = res
		}
		switch ev.Action {
		case "output":
			output[key] = append(output[key], line)
		case "pass", "fail", "skip":
			if ev.Test != top {
				continue // a subtest
			}
			res.Outcome = outcome(ev.Action)
			res.Elapsed = time.Duration(ev.Elapsed * float64(time.Second))
			switch res.Outcome {
			case fail:
				res.Line = firstErrorLine(output[key])
				res.Output = lastLines(output[key], maxKeptLines)
			case skip:
				res.Line = skipLine(output[key])
			}
		}
	}
	for key, res := range run.Tests {
		if res.Outcome == "" {
			res.Line = firstErrorLine(output[key])
			res.Output = lastLines(output[key], maxKeptLines)
		}
	}
	return run
}

// finishRunning turns tests that never ended into failures: those the
// timeout panic names were still running; the others (paused parallel
// tests, or all of them after a crash) never finished.
func finishRunning(run *suiteRun) {
	for key, res := range run.Tests {
		if res.Outcome != "" {
			continue
		}
		res.Outcome = fail
		last := res.Line
		switch {
		case run.running[key]:
			res.Line = "still running at the timeout (" + run.Broken + ")"
		case run.Broken != "":
			res.Line = "did not finish: the binary ended early (" + run.Broken + ")"
		default:
			res.Line = "did not finish: the binary ended without a result for it"
		}
		if last != "" && !strings.Contains(last, run.Broken) {
			res.Line += "; its last error: " + last
		}
	}
}

// Shapes of error lines in go test output.
var (
	// "    conn_test.go:123: message" (t.Error, t.Fatal, testify's header).
	locRE = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: ?(.*)$`)
	// testify's report is rows of "\tLabel:   \ttext" with continuation
	// rows "\t         \ttext".
	testifyRowRE  = regexp.MustCompile(`^\s*\t([A-Za-z][A-Za-z ]*):\s*\t(.*)$`)
	testifyContRE = regexp.MustCompile(`^\s*\t\s+\t(.*)$`)
)

// firstErrorLine picks the line a person wants from a failed test's
// output: testify's "Error:" text (with its continuation rows and its
// "Messages:" row), else the first file:line message,
// else a panic, else the first line that is not test2json bookkeeping.
func firstErrorLine(lines []string) string {
	for i, l := range lines {
		m := testifyRowRE.FindStringSubmatch(l)
		if m == nil || m[1] != "Error" {
			continue
		}
		msg := strings.TrimSpace(m[2])
		var messages string
		for _, next := range lines[i+1:] {
			if c := testifyContRE.FindStringSubmatch(next); c != nil {
				msg += " " + strings.TrimSpace(c[1])
				continue
			}
			r := testifyRowRE.FindStringSubmatch(next)
			if r == nil {
				break // the end of this report
			}
			if r[1] == "Messages" {
				messages = strings.TrimSpace(r[2])
			}
		}
		if messages != "" {
			msg += " (" + messages + ")"
		}
		return oneLine(msg)
	}
	for _, l := range lines {
		if m := locRE.FindStringSubmatch(l); m != nil && strings.TrimSpace(m[1]) != "" {
			return oneLine(strings.TrimSpace(m[1]))
		}
	}
	for _, l := range lines {
		if panicRE.MatchString(strings.TrimSpace(l)) {
			return oneLine(strings.TrimSpace(l))
		}
	}
	for _, l := range lines {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- ") {
			continue
		}
		return oneLine(s)
	}
	return ""
}

// skipLine is the reason a test gave for skipping.
func skipLine(lines []string) string {
	for _, l := range lines {
		if m := locRE.FindStringSubmatch(l); m != nil {
			return oneLine(strings.TrimSpace(m[1]))
		}
	}
	return ""
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

// lastLines is the last n of lines (a copy).
func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return append([]string(nil), lines...)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dropLocalReplaces removes from the go.mod in dir the replace directives
// that point into the module's own repository (bun's pgdriver replaces bun
// with ../..): a module taken from the module proxy has no such
// directories, so the required version is used, as for any importer.
func dropLocalReplaces(t *testing.T, goBin, dir string) {
	t.Helper()
	cmd := exec.Command(goBin, "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var mod struct {
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	for _, r := range mod.Replace {
		if !strings.HasPrefix(r.New.Path, ".") {
			continue
		}
		old := r.Old.Path
		if r.Old.Version != "" {
			old += "@" + r.Old.Version
		}
		cmd := exec.Command(goBin, "mod", "edit", "-dropreplace", old)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go mod edit -dropreplace %s in %s: %v\n%s", old, dir, err, out)
		}
	}
}
