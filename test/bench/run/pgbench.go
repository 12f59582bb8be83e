package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// workload is a pgbench transaction mix.
type workload struct {
	name string
	desc string
	args []string // pgbench script options
}

var allWorkloads = []workload{
	{"select", "pgbench -S (select-only)", []string{"-b", "select-only"}},
	{"mix", "read/write mix: -b select-only@9 -b simple-update@1", []string{"-b", "select-only@9", "-b", "simple-update@1"}},
	{"tpcb", "pgbench tpcb-like (writes and reads)", []string{"-b", "tpcb-like"}},
}

// statementsPerTx counts the statements of pgbench's built-in scripts, as
// pgbench names them in its report ("<builtin: select only>"). BEGIN and END
// are statements a proxy forwards like any other.
var statementsPerTx = map[string]int{
	"select only":     1, // SELECT
	"simple update":   5, // BEGIN, UPDATE, SELECT, INSERT, END
	"TPC-B (sort of)": 7, // BEGIN, 3 UPDATEs, SELECT, INSERT, END
}

// benchRun is one pgbench invocation against one target.
type benchRun struct {
	addr     string // host:port
	db       string
	workload workload
	mode     string // -M
	clients  int
	threads  int // -j; 0: min(2, clients)
	// Either seconds (-T) or txPerClient (-t).
	seconds     int
	txPerClient int
	sampling    float64 // --sampling-rate; 1 logs every transaction
	logDir      string  // per-transaction logs go here (nothing when empty)
}

// pgbenchReport is what one pgbench run measured.
type pgbenchReport struct {
	tps      float64 // without initial connection time
	txns     int64
	queries  int64         // txns × statements per transaction, per script
	failed   int64         // "number of failed transactions"
	connTime time.Duration // "initial connection time"
	p50, p99 float64       // ms, from the per-transaction log
	samples  int
}

// hangGrace is how long pgbench may run past its -T duration; txRunLimit is
// how long a -t run may take.
const (
	hangGrace  = 30 * time.Second
	txRunLimit = 3 * time.Minute
)

// errPgbench is a run pgbench did not complete cleanly; its message is
// pgbench's first error line.
type errPgbench struct{ line string }

func (e *errPgbench) Error() string { return e.line }

// pgbenchEnv is the environment pgbench runs with: ours without libpq
// variables, plus the app user's password.
func pgbenchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, "PGPASSWORD="+pgtest.AppPassword, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
}

func hostPort(addr string) []string {
	host, port, _ := strings.Cut(addr, ":")
	return []string{"-h", host, "-p", port, "-U", pgtest.AppUser}
}

// pgbenchCmd builds a pgbench command in its own process group, killed with
// this process.
func pgbenchCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, pgtest.Bin("pgbench"), args...)
	cmd.Env = pgbenchEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// initPgbench creates the pgbench tables at scale on the server at addr.
func initPgbench(ctx context.Context, addr string, scale int) error {
	args := append([]string{"-i", "-q", "-s", strconv.Itoa(scale)}, hostPort(addr)...)
	out, err := pgbenchCmd(ctx, append(args, pgtest.AppDB)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench -i: %w\n%s", err, out)
	}
	return nil
}

// run runs pgbench; a run that pgbench reports as failed (a client aborted,
// a connection refused) returns *errPgbench with the first error line.
func (r benchRun) run(ctx context.Context) (pgbenchReport, error) {
	threads := r.threads
	if threads == 0 {
		threads = min(2, r.clients)
	}
	args := []string{"-n", "-M", r.mode, "-c", strconv.Itoa(r.clients), "-j", strconv.Itoa(threads)}
	// A proxy that stops answering must not hang the benchmark: pgbench
	// ends -T seconds after it started connecting its clients; -t runs get
	// a generous fixed limit.
	limit := time.Duration(r.seconds)*time.Second + hangGrace
	if r.txPerClient > 0 {
		args = append(args, "-t", strconv.Itoa(r.txPerClient))
		limit = txRunLimit
	} else {
		args = append(args, "-T", strconv.Itoa(r.seconds))
	}
	if r.logDir != "" {
		args = append(args, "-l", "--log-prefix="+filepath.Join(r.logDir, "tx"))
		if r.sampling < 1 {
			args = append(args, "--sampling-rate="+strconv.FormatFloat(r.sampling, 'f', -1, 64))
		}
	}
	args = append(args, r.workload.args...)
	args = append(args, hostPort(r.addr)...)
	args = append(args, r.db)
	ctx, cancel := context.WithTimeoutCause(ctx, limit,
		fmt.Errorf("pgbench hung: still running after %v, killed (a proxy stopped answering)", limit))
	defer cancel()
	cmd := pgbenchCmd(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if ctx.Err() != nil && runErr != nil {
		return pgbenchReport{}, &errPgbench{context.Cause(ctx).Error()}
	}
	if line := firstError(stderr.String()); line != "" || runErr != nil {
		if line == "" {
			line = fmt.Sprintf("pgbench: %v", runErr)
		}
		return pgbenchReport{}, &errPgbench{line}
	}
	rep, err := parseReport(stdout.String())
	if err != nil {
		return rep, fmt.Errorf("%w\n%s", err, stdout.String())
	}
	if r.logDir != "" {
		lat, err := readLatencies(r.logDir)
		if err != nil {
			return rep, err
		}
		rep.samples = len(lat)
		rep.p50 = percentile(lat, 50) / 1000
		rep.p99 = percentile(lat, 99) / 1000
	}
	return rep, nil
}

// runSpread runs r against every address at once, the clients split as
// evenly as they go (the first addresses get one more), and adds up what
// the runs measured; latency percentiles are over all their transactions.
// The pgbench processes share the threads one pgbench would have (one each
// when there are more addresses), so the control differs from direct in
// where the clients go, not in how many pgbench threads compete for the
// CPUs. Each run logs to its own directory under r.logDir.
func (r benchRun) runSpread(ctx context.Context, addrs []string) (pgbenchReport, error) {
	n := min(len(addrs), r.clients)
	type out struct {
		rep pgbenchReport
		err error
	}
	outs := make([]out, n)
	var wg sync.WaitGroup
	for i := range n {
		one := r
		one.addr = addrs[i]
		one.clients = r.clients / n
		if i < r.clients%n {
			one.clients++
		}
		one.threads = max(1, min(2, r.clients)/n)
		if r.logDir != "" {
			one.logDir = filepath.Join(r.logDir, strconv.Itoa(i))
			if err := os.Mkdir(one.logDir, 0o755); err != nil {
				return pgbenchReport{}, err
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i].rep, outs[i].err = one.run(ctx)
		}()
	}
	wg.Wait()
	var sum pgbenchReport
	for _, o := range outs {
		if o.err != nil {
			return pgbenchReport{}, o.err
		}
		sum.tps += o.rep.tps
		sum.txns += o.rep.txns
		sum.queries += o.rep.queries
		sum.failed += o.rep.failed
		sum.connTime = max(sum.connTime, o.rep.connTime)
	}
	if r.logDir != "" {
		var lat []float64
		for i := range n {
			l, err := readLatencies(filepath.Join(r.logDir, strconv.Itoa(i)))
			if err != nil {
				return pgbenchReport{}, err
			}
			lat = append(lat, l...)
		}
		sum.samples = len(lat)
		sum.p50 = percentile(lat, 50) / 1000
		sum.p99 = percentile(lat, 99) / 1000
	}
	return sum, nil
}

// firstError returns pgbench's first error line on stderr, without the
// "pgbench: error: " prefix, or "".
func firstError(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if _, rest, ok := strings.Cut(line, "error: "); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	return ""
}

var (
	reTPS      = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	reTxns     = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`) // "N" or "N/M" with -t
	reFailed   = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	reConnTime = regexp.MustCompile(`(?m)^initial connection time = ([0-9.]+) ms`)
	reOneType  = regexp.MustCompile(`(?m)^transaction type: <builtin: (.+)>$`)
	reScript   = regexp.MustCompile(`(?m)^SQL script \d+: <builtin: (.+)>$`)
	reScriptTx = regexp.MustCompile(`(?m)^ - (\d+) transactions \(`)
)

// parseReport reads pgbench's summary. Queries are counted per built-in
// script: with several scripts pgbench reports each one's transactions.
func parseReport(out string) (pgbenchReport, error) {
	var rep pgbenchReport
	// pgbench stops its summary before the tps line when no transaction
	// completed.
	if m := reTxns.FindStringSubmatch(out); m != nil && m[1] == "0" {
		return rep, errors.New("pgbench processed no transactions (did connecting the clients take the whole -T? raise -seconds)")
	}
	m := reTPS.FindStringSubmatch(out)
	if m == nil {
		return rep, errors.New("pgbench printed no tps line")
	}
	rep.tps, _ = strconv.ParseFloat(m[1], 64)
	if m = reTxns.FindStringSubmatch(out); m == nil {
		return rep, errors.New("pgbench printed no transaction count")
	}
	rep.txns, _ = strconv.ParseInt(m[1], 10, 64)
	if m = reFailed.FindStringSubmatch(out); m != nil {
		rep.failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m = reConnTime.FindStringSubmatch(out); m != nil {
		ms, _ := strconv.ParseFloat(m[1], 64)
		rep.connTime = time.Duration(ms * float64(time.Millisecond))
	}
	if m = reOneType.FindStringSubmatch(out); m != nil {
		n, ok := statementsPerTx[m[1]]
		if !ok {
			return rep, fmt.Errorf("unknown built-in script %q", m[1])
		}
		rep.queries = rep.txns * int64(n)
		return rep, nil
	}
	// Several scripts: each "SQL script N: <builtin: NAME>" header is
	// followed by its " - K transactions (" line.
	heads := reScript.FindAllStringSubmatchIndex(out, -1)
	if len(heads) == 0 {
		return rep, errors.New("pgbench printed neither a transaction type nor per-script sections")
	}
	for i, h := range heads {
		name := out[h[2]:h[3]]
		end := len(out)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		tx := reScriptTx.FindStringSubmatch(out[h[1]:end])
		if tx == nil {
			return rep, fmt.Errorf("no transaction count for script %q", name)
		}
		n, ok := statementsPerTx[name]
		if !ok {
			return rep, fmt.Errorf("unknown built-in script %q", name)
		}
		k, _ := strconv.ParseInt(tx[1], 10, 64)
		rep.queries += k * int64(n)
	}
	return rep, nil
}

// readLatencies reads the third column (transaction time, µs) of every
// pgbench per-transaction log in dir (one file per thread).
func readLatencies(dir string) ([]float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "tx.*"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no pgbench transaction logs in %s", dir)
	}
	var lat []float64
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			// "failed" or "skipped" instead of a time: not a latency.
			if us, err := strconv.ParseFloat(fields[2], 64); err == nil {
				lat = append(lat, us)
			}
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return lat, nil
}

// percentile returns the nearest-rank p-th percentile of xs (sorting xs),
// NaN for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := int(math.Ceil(p / 100 * float64(len(xs))))
	return xs[min(max(rank, 1), len(xs))-1]
}

// runOn runs r against instance in: its address, or all of its addresses
// at once (direct-replicas).
func (r benchRun) runOn(ctx context.Context, in *instance) (pgbenchReport, error) {
	if len(in.addrs) > 0 {
		return r.runSpread(ctx, in.addrs)
	}
	r.addr = in.addr
	return r.run(ctx)
}
