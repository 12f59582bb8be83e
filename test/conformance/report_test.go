package conformance

import (
	"os"
	"strings"
	"testing"
)

// The tests in this file check the run's own logic and need no database;
// they run in every go test ./... . testdata/*.json is go tool test2json's
// output of small test binaries: failures.json (testify and t.Fatal
// failures, a failing subtest, a skip), timeout.json (-test.timeout=1s
// with a hung subtest, a paused parallel test, and tests that never
// started), exit.json (a test calling os.Exit).

func parseFile(t *testing.T, name string) *suiteRun {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run := parseEvents("hang", f)
	finishRunning(run)
	return run
}

func TestParseEventsFailures(t *testing.T) {
	run := parseFile(t, "failures.json")
	want := map[string]struct {
		outcome outcome
		line    string
	}{
		"hang.TestE": {fail, `Received unexpected error: ERROR: prepared statement "" does not exist (SQLSTATE 26000) (ctx 3)`},
		"hang.TestF": {fail, "Not equal: expected: 1 actual : 2"},
		"hang.TestG": {skip, "no env"},
		"hang.TestH": {fail, "plain fatal"},
	}
	if len(run.Tests) != len(want) {
		t.Errorf("got %d top-level tests, want %d: %v", len(run.Tests), len(want), run.Tests)
	}
	for k, w := range want {
		got := run.Tests[k]
		if got == nil {
			t.Errorf("%s missing", k)
			continue
		}
		if got.Outcome != w.outcome || got.Line != w.line {
			t.Errorf("%s = %s %q, want %s %q", k, got.Outcome, got.Line, w.outcome, w.line)
		}
	}
	if run.Broken != "" || !run.ended {
		t.Errorf("a binary that ran to the end: Broken %q, ended %v", run.Broken, run.ended)
	}
}

func TestParseEventsTimeout(t *testing.T) {
	run := parseFile(t, "timeout.json")
	if run.Broken != "test timed out after 1s" {
		t.Errorf("Broken = %q", run.Broken)
	}
	// TestB was running (the panic lists it and its subtest); TestA had
	// started and paused (parallel); TestC and TestD never started, so
	// they are absent and judge counts them as not run.
	if r := run.Tests["hang.TestB"]; r == nil || r.Outcome != fail || !strings.HasPrefix(r.Line, "still running at the timeout (test timed out after 1s)") {
		t.Errorf("TestB = %+v", r)
	}
	if r := run.Tests["hang.TestA"]; r == nil || r.Outcome != fail || !strings.HasPrefix(r.Line, "did not finish: the binary ended early") {
		t.Errorf("TestA = %+v", r)
	}
	for _, k := range []string{"hang.TestC", "hang.TestD"} {
		if r := run.Tests[k]; r != nil {
			t.Errorf("%s = %+v, want absent", k, r)
		}
	}
}

func TestParseEventsExit(t *testing.T) {
	run := parseFile(t, "exit.json")
	if run.ended {
		t.Error("a binary that called os.Exit counts as ended")
	}
	if r := run.Tests["hang.TestA"]; r == nil || r.Outcome != pass {
		t.Errorf("TestA = %+v", r)
	}
	if r := run.Tests["hang.TestB"]; r == nil || r.Outcome != fail {
		t.Errorf("TestB = %+v", r)
	}
}

// TestJudge: the pass rule with its worked examples.
func TestJudge(t *testing.T) {
	res := func(o outcome, line string) *testResult { return &testResult{Outcome: o, Line: line} }
	direct := map[string]*testResult{
		"p.TestPass":     res(pass, ""),
		"p.TestBroken":   res(pass, ""),
		"p.TestAllowed":  res(pass, ""),
		"p.TestOpen":     res(pass, ""),
		"p.TestFixed":    res(pass, ""),
		"p.TestSkipped":  res(pass, ""),
		"p.TestNotRun":   res(pass, ""),
		"p.TestNoEnv":    res(skip, "no env"),
		"p.TestFlaky":    res(fail, "timing"),
		"p.TestAllowedB": res(pass, ""),
	}
	got := map[string]*testResult{
		"p.TestPass":     res(pass, ""),
		"p.TestBroken":   res(fail, "boom"),
		"p.TestAllowed":  res(fail, "57014 expected"),
		"p.TestOpen":     res(fail, "out of step"),
		"p.TestFixed":    res(pass, ""),
		"p.TestSkipped":  res(skip, "crdb"),
		"p.TestNoEnv":    res(skip, "no env"),
		"p.TestFlaky":    res(pass, ""),
		"p.TestAllowedB": res(fail, "pid"),
	}
	allowedT := []deviation{
		{"*/routed", "p.TestAllowed", "a"},
		{"transaction/*", "p.TestAllowedB", "b"}, // does not match session/routed
	}
	openT := []deviation{
		{"*/*", "p.TestOpen", "open defect"},
		{"session/*", "p.TestFixed", "fixed since"},
	}
	rep := judge("session/routed", direct, got, allowedT, openT)
	want := map[string]verdict{
		"p.TestPass":     vPassed,
		"p.TestBroken":   vFailed,
		"p.TestAllowed":  vAllowed,
		"p.TestOpen":     vOpen,
		"p.TestFixed":    vPassed,
		"p.TestSkipped":  vFailed, // skipped here, passed directly
		"p.TestNotRun":   vFailed, // the binary ended before it
		"p.TestNoEnv":    vSkipped,
		"p.TestFlaky":    vSkipped, // failed directly: not compared
		"p.TestAllowedB": vFailed,
	}
	for _, j := range rep.Tests {
		if want[j.Key] != j.Verdict {
			t.Errorf("%s: %s, want %s (%s)", j.Key, j.Verdict, want[j.Key], j.Line)
		}
		delete(want, j.Key)
	}
	if len(want) != 0 {
		t.Errorf("not judged: %v", want)
	}
	if len(rep.NowPassing) != 1 || rep.NowPassing[0].Test != "p.TestFixed" {
		t.Errorf("NowPassing = %v, want the p.TestFixed entry", rep.NowPassing)
	}
	out := table([]*targetReport{rep})
	for _, s := range []string{"FAIL    p.TestBroken: boom", "open    p.TestOpen: out of step", "allowed p.TestAllowed"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

// TestTables: every entry names a known target pattern and a reason, and
// no (target, test) is both allowed and open.
func TestTables(t *testing.T) {
	for _, table := range [][]deviation{allowed, knownOpen} {
		for _, d := range table {
			matched := false
			for _, tg := range targets[1:] {
				if _, ok := match([]deviation{d}, tg.name, d.Test); ok {
					matched = true
					if _, ok := match(allowed, tg.name, d.Test); ok {
						if _, ok := match(knownOpen, tg.name, d.Test); ok {
							t.Errorf("%s on %s is both allowed and knownOpen", d.Test, tg.name)
						}
					}
				}
			}
			if !matched {
				t.Errorf("%+v matches no kineticd target", d)
			}
			if d.Why == "" || !strings.Contains(d.Test, ".Test") {
				t.Errorf("%+v: needs a package-qualified test name and a reason", d)
			}
		}
	}
}

// TestTimingPanic: only a listed panic of a listed package runs its binary
// again; a timeout, another panic or another package's does not.
func TestTimingPanic(t *testing.T) {
	for _, c := range []struct {
		pkg, broken string
		rerun       bool
	}{
		{"pq-binary", "panic: wantEvent: timeout [recovered, repanicked]", true},
		{"pq", "panic: wantEvent: timeout", true},
		{"pq", "test timed out after 8m0s", false},
		{"pq", "panic: runtime error: index out of range [3] with length 3", false},
		{"pq", "", false},
		{"pgconn", "panic: wantEvent: timeout", false},
	} {
		if got := timingPanic(c.pkg, c.broken) != ""; got != c.rerun {
			t.Errorf("timingPanic(%q, %q): rerun %v, want %v", c.pkg, c.broken, got, c.rerun)
		}
	}
}
