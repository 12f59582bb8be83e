package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pgbench 15 summaries, trimmed to the lines parseReport reads around.
const (
	oneScript = `transaction type: <builtin: select only>
scaling factor: 10
query mode: prepared
number of clients: 16
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 60000
number of failed transactions: 0 (0.000%)
latency average = 0.800 ms
initial connection time = 12.345 ms
tps = 20001.500000 (without initial connection time)
`
	twoScripts = `transaction type: multiple scripts
scaling factor: 10
query mode: simple
number of clients: 1
number of threads: 1
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 1000
number of failed transactions: 2 (0.200%)
latency average = 3.000 ms
initial connection time = 3.000 ms
tps = 333.300000 (without initial connection time)
SQL script 1: <builtin: select only>
 - weight: 9 (targets 90.0% of total)
 - 900 transactions (90.0% of total, tps = 300.000000)
 - number of failed transactions: 0 (0.000%)
 - latency average = 1.000 ms
SQL script 2: <builtin: simple update>
 - weight: 1 (targets 10.0% of total)
 - 100 transactions (10.0% of total, tps = 33.300000)
 - number of failed transactions: 2 (2.000%)
 - latency average = 20.000 ms
`
)

func TestParseReport(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		out                   string
		tps                   float64
		txns, queries, failed int64
		err                   string
	}{
		{name: "one script", out: oneScript, tps: 20001.5, txns: 60000, queries: 60000},
		{name: "select-only@9 + simple-update@1", out: twoScripts, tps: 333.3, txns: 1000, queries: 900 + 5*100, failed: 2},
		{name: "unknown script", out: strings.Replace(oneScript, "select only", "my script", 1), err: `unknown built-in script "my script"`},
		{name: "no tps", out: "pgbench: error: connection refused\n", err: "no tps line"},
		{name: "nothing done", out: "duration: 1 s\nnumber of transactions actually processed: 0\n", err: "no transactions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := parseReport(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "one script" && rep.connTime != 12345*time.Microsecond {
				t.Errorf("connTime = %v, want 12.345ms", rep.connTime)
			}
			if rep.tps != tc.tps || rep.txns != tc.txns || rep.queries != tc.queries || rep.failed != tc.failed {
				t.Errorf("got tps %v txns %d queries %d failed %d; want %v %d %d %d",
					rep.tps, rep.txns, rep.queries, rep.failed, tc.tps, tc.txns, tc.queries, tc.failed)
			}
		})
	}
}

func TestFirstError(t *testing.T) {
	stderr := `pgbench (15.18 (Debian 15.18-0+deb12u1))
pgbench: error: client 3 script 0 aborted in command 1 query 0: ERROR:  prepared statement "P_1" does not exist
pgbench: error: client 4 script 0 aborted in command 1 query 0: ERROR:  prepared statement "P_1" does not exist
pgbench: error: Run was aborted; the above results are incomplete.
`
	want := `client 3 script 0 aborted in command 1 query 0: ERROR: prepared statement "P_1" does not exist`
	if got := firstError(stderr); got != want {
		t.Errorf("firstError = %q, want %q", got, want)
	}
	if got := firstError("pgbench (15.18)\n"); got != "" {
		t.Errorf("firstError of a clean run = %q", got)
	}
}

func TestReadLatencies(t *testing.T) {
	dir := t.TempDir()
	// client_id transaction_no time(µs) script_no time_epoch time_us; one
	// file per thread.
	files := map[string]string{
		"tx.123":   "0 0 100 0 1700000000 1\n0 1 300 0 1700000000 2\n",
		"tx.123.1": "1 0 200 0 1700000000 3\n1 1 failed 0 1700000000 4\n1 2 400 1 1700000000 5\n",
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lat, err := readLatencies(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 4 {
		t.Fatalf("read %d latencies, want 4 (the failed line skipped): %v", len(lat), lat)
	}
	if p50, p99 := percentile(lat, 50), percentile(lat, 99); p50 != 200 || p99 != 400 {
		t.Errorf("p50 %v p99 %v, want 200 400", p50, p99)
	}
	if _, err := readLatencies(t.TempDir()); err == nil {
		t.Error("no log files: want an error")
	}
}

func TestPercentileMedian(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100..1, unsorted
	}
	for _, tc := range []struct{ p, want float64 }{{50, 50}, {99, 99}, {100, 100}, {0, 1}} {
		if got := percentile(xs, tc.p); got != tc.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if !math.IsNaN(median([]float64{1, math.NaN()})) || !math.IsNaN(median(nil)) {
		t.Error("median with NaN or of nothing is not NaN")
	}
}

func TestSummarize(t *testing.T) {
	ok := func(tps float64) result {
		return result{tps: tps, p50: tps / 10, p99: tps / 5, cpu100k: 1, rssMiB: 10, replica: 0.5}
	}
	s := summarize([]result{ok(300), ok(100), ok(200)})
	if !s.ok || s.tps != 200 || s.p50 != 20 || s.p99 != 40 || s.replica != 0.5 {
		t.Errorf("summary of three good rounds = %+v", s)
	}
	s = summarize([]result{ok(100), {err: "first"}, {err: "second"}})
	if s.ok || s.err != "first" || s.failedOf != "2/3" {
		t.Errorf("a failed round must fail the cell with the first error: %+v", s)
	}
}

func TestPickTargets(t *testing.T) {
	names := func(ts []target) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ flag, want, err string }{
		{flag: "all", want: "direct,direct-replicas,pgbouncer-session,pgbouncer-tx,pgpool,kineticd-session,kineticd-session-routed,kineticd-tx,kineticd-tx-routed"},
		{flag: "kineticd-tx,pgbouncer", want: "pgbouncer-session,pgbouncer-tx,kineticd-tx"},
		{flag: "pgpool, direct", want: "direct,pgpool"},
		{flag: "direct-replicas,kineticd-tx-routed", want: "direct-replicas,kineticd-tx-routed"},
		{flag: "direct,kineticd-session-routed-1,direct-one-replica", want: "direct,direct-one-replica,kineticd-session-routed-1"},
		{flag: "pgcat", err: `unknown target "pgcat"`},
	} {
		got, err := pickTargets(tc.flag)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("pickTargets(%q) err = %v, want %q", tc.flag, err, tc.err)
			}
			continue
		}
		if err != nil || names(got) != tc.want {
			t.Errorf("pickTargets(%q) = %s, %v; want %s", tc.flag, names(got), err, tc.want)
		}
	}
}

// splitCellReport is the report of one cell of targets (a -targets list)
// whose medians are TPS by name: direct targets without CPU, kineticd ones
// with the same CPU and RSS.
func splitCellReport(t *testing.T, list string, tps map[string]float64) string {
	t.Helper()
	targets, err := pickTargets(list)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]summary{}
	for name, v := range tps {
		s := summary{ok: true, tps: v, p50: 1, p99: 2, cpu100k: math.NaN()}
		if strings.HasPrefix(name, "kineticd") {
			s.cpu100k, s.rssMiB = 5, 10
		}
		sums[name] = s
	}
	var b strings.Builder
	writeCell(&b, cell{workload: allWorkloads[0], mode: "simple", clients: 16}, targets, sums)
	return b.String()
}

// TestWriteCellSplitCost: with direct and direct-replicas in a cell, the
// table shows what the split alone costs and a routed target's ratio to its
// unrouted one with that cost taken out. A target routed to one standby is
// compared with the direct target whose clients all go to that standby,
// the two-standby one with the direct target that splits them over both.
func TestWriteCellSplitCost(t *testing.T) {
	for _, tc := range []struct {
		list string
		tps  map[string]float64
		want []string
	}{{
		list: "direct,direct-replicas,kineticd-tx,kineticd-tx-routed",
		tps:  map[string]float64{"direct": 20000, "direct-replicas": 17000, "kineticd-tx": 10000, "kineticd-tx-routed": 8000},
		want: []string{
			"| direct-replicas / direct | 0.85× |",
			"| kineticd-tx-routed / kineticd-tx | 0.80× |",
			"| kineticd-tx-routed / direct-replicas | 0.47× |",
			"| (kineticd-tx-routed / kineticd-tx) ÷ (direct-replicas / direct) | 0.94× |",
		},
	}, {
		list: "direct,direct-replicas,direct-one-replica,kineticd-session,kineticd-session-routed,kineticd-session-routed-1",
		tps: map[string]float64{"direct": 20000, "direct-replicas": 16000, "direct-one-replica": 20000,
			"kineticd-session": 10000, "kineticd-session-routed": 8000, "kineticd-session-routed-1": 9500},
		want: []string{
			"| direct-replicas / direct | 0.80× |",
			"| direct-one-replica / direct | 1.00× |",
			"| kineticd-session-routed-1 / kineticd-session | 0.95× |",
			"| kineticd-session-routed-1 / direct-one-replica | 0.47× |",
			"| (kineticd-session-routed-1 / kineticd-session) ÷ (direct-one-replica / direct) | 0.95× |",
			"| (kineticd-session-routed / kineticd-session) ÷ (direct-replicas / direct) | 1.00× |",
		},
	}} {
		out := splitCellReport(t, tc.list, tc.tps)
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "(kineticd-tx / ") || strings.Contains(out, "(kineticd-session / ") {
			t.Errorf("an unrouted target got a split-cost row:\n%s", out)
		}
	}
}
