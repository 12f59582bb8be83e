package conformance

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// deviation is a (target, test) pair that may fail on a kineticd target.
// Target is a path.Match pattern over target names ("*/routed",
// "transaction/*", "*/*"); Test is a key such as "pgconn.TestConnect".
type deviation struct {
	Target string
	Test   string
	Why    string
}

// match returns the first deviation in table for target and test.
func match(table []deviation, target, test string) (deviation, bool) {
	for _, d := range table {
		if ok, _ := path.Match(d.Target, target); ok && d.Test == test {
			return d, true
		}
	}
	return deviation{}, false
}

// verdict is how a kineticd target's test counts.
type verdict string

const (
	vPassed  verdict = "passed"
	vFailed  verdict = "failed"  // passed directly, not here, in neither table: the run fails
	vAllowed verdict = "allowed" // in allowed
	vOpen    verdict = "open"    // in knownOpen: an open defect, not a permitted deviation
	vSkipped verdict = "skipped" // did not pass directly, so not compared
)

// judged is one test of one target.
type judged struct {
	Key     string
	Verdict verdict
	Line    string    // first error line (or skip reason) on the target
	Entry   deviation // the allowed or knownOpen entry, for vAllowed and vOpen
}

// targetReport is the judged tests of one target.
type targetReport struct {
	Target string
	Tests  []judged // sorted by Key
	Wall   time.Duration
	Broken []string // "pkg: how the binary ended early"
	// NowPassing are knownOpen (and allowed) entries for this target whose
	// test passed: candidates for removal from the table.
	NowPassing []deviation
}

func (r *targetReport) count(v verdict) int {
	n := 0
	for _, j := range r.Tests {
		if j.Verdict == v {
			n++
		}
	}
	return n
}

// judge compares a kineticd target's results with the direct baseline.
// Every test that passed directly must pass on the target; one that
// failed, skipped or did not run there is allowed or open when a table
// says so, and failed otherwise. Tests that did not pass directly are
// skipped (not compared). Worked examples are in TestJudge.
func judge(target string, direct, got map[string]*testResult, allowed, knownOpen []deviation) *targetReport {
	rep := &targetReport{Target: target}
	keys := map[string]bool{}
	for k := range direct {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	for _, k := range slices.Sorted(mapKeys(keys)) {
		d, g := direct[k], got[k]
		if d == nil || d.Outcome != pass {
			rep.Tests = append(rep.Tests, judged{Key: k, Verdict: vSkipped})
			continue
		}
		j := judged{Key: k}
		switch {
		case g != nil && g.Outcome == pass:
			j.Verdict = vPassed
			for _, table := range [][]deviation{allowed, knownOpen} {
				if e, ok := match(table, target, k); ok {
					rep.NowPassing = append(rep.NowPassing, e)
				}
			}
		default:
			switch {
			case g == nil:
				j.Line = "did not run (its test binary ended before it started)"
			case g.Outcome == skip:
				j.Line = "skipped here, passed directly: " + g.Line
			default:
				j.Line = g.Line
			}
			j.Verdict = vFailed
			if e, ok := match(allowed, target, k); ok {
				j.Verdict, j.Entry = vAllowed, e
			} else if e, ok := match(knownOpen, target, k); ok {
				j.Verdict, j.Entry = vOpen, e
			}
		}
		rep.Tests = append(rep.Tests, j)
	}
	return rep
}

// directReport is the baseline as a report: its passes, failures and skips.
func directReport(direct map[string]*testResult) *targetReport {
	rep := &targetReport{Target: "direct"}
	for _, k := range slices.Sorted(mapKeys(direct)) {
		r := direct[k]
		v := map[outcome]verdict{pass: vPassed, fail: vFailed, skip: vSkipped}[r.Outcome]
		rep.Tests = append(rep.Tests, judged{Key: k, Verdict: v, Line: r.Line})
	}
	return rep
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// table renders target × passed / failed / allowed / open / skipped, then
// every test that did not pass per kineticd target with its first error
// line.
func table(reps []*targetReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %7s %7s %8s %5s %8s %9s\n", "target", "passed", "failed", "allowed", "open", "skipped", "wall")
	for _, r := range reps {
		allowed, open := fmt.Sprint(r.count(vAllowed)), fmt.Sprint(r.count(vOpen))
		if r.Target == "direct" {
			allowed, open = "-", "-"
		}
		fmt.Fprintf(&b, "%-20s %7d %7d %8s %5s %8d %9v\n", r.Target, r.count(vPassed), r.count(vFailed), allowed, open, r.count(vSkipped), r.Wall.Round(time.Second))
	}
	for _, r := range reps {
		var lines []string
		for _, j := range r.Tests {
			switch {
			case j.Verdict == vFailed:
				lines = append(lines, fmt.Sprintf("  FAIL    %s: %s", j.Key, j.Line))
			case j.Verdict == vOpen:
				lines = append(lines, fmt.Sprintf("  open    %s: %s  [known: %s]", j.Key, j.Line, j.Entry.Why))
			case j.Verdict == vAllowed:
				lines = append(lines, fmt.Sprintf("  allowed %s: %s  [%s]", j.Key, j.Line, j.Entry.Why))
			case j.Verdict == vSkipped && r.Target == "direct":
				// What the environment leaves out (TLS, unix sockets...).
				lines = append(lines, fmt.Sprintf("  skip    %s: %s", j.Key, j.Line))
			}
		}
		for _, br := range r.Broken {
			lines = append(lines, "  binary  "+br)
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s:\n%s\n", r.Target, strings.Join(lines, "\n"))
	}
	return b.String()
}
