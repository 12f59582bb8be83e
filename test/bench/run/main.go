// Command run benchmarks kineticd side by side with PgBouncer, pgpool-II and
// a direct connection, with pgbench against a real PostgreSQL 15 primary and
// streaming replica (test/pgtest). It is `make bench`, not part of make test;
// test/bench/README.md says what it measures and how to read the tables.
//
//	go run ./test/bench/run -seconds 3 -rounds 1 -clients 1,16 -modes simple,prepared
//
// Every run starts its proxy afresh (sized for the run's clients), warms it
// up, runs pgbench, samples the proxy's CPU and RSS, and stops it, so runs
// share nothing but the servers. Cells run their targets interleaved, round
// after round, so drift hits all of them alike. Everything started — servers,
// proxies, temp dirs — is stopped and removed on exit, on error and on
// Ctrl-C.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/bench/internal/benchutil"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// options are the command line.
type options struct {
	targets   []target
	workloads []workload
	modes     []string
	clients   []int
	seconds   int
	warmup    int
	rounds    int
	standbys  int
	scale     int
	sampling  float64
	out       string
	kineticd  string
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	targets := fs.String("targets", "all", "comma-separated targets: direct, direct-replicas (the clients split over the standbys, no proxy), direct-one-replica (the same pgbench processes at the first standby; by name only), pgbouncer (both pool modes), pgbouncer-session, pgbouncer-tx, pgpool, kineticd (all three), kineticd-session, kineticd-tx, kineticd-tx-routed; kineticd-session-routed-1 and kineticd-tx-routed-1 (routed to the first standby only; by name only); or all")
	workloads := fs.String("workloads", "select,mix", "comma-separated workloads: select (pgbench -S), mix (select-only@9 + simple-update@1)")
	modes := fs.String("modes", "simple,extended,prepared", "comma-separated pgbench -M query modes")
	clients := fs.String("clients", "1,16,256", "comma-separated client counts")
	var o options
	fs.IntVar(&o.seconds, "seconds", 10, "measured pgbench duration of each run (-T)")
	fs.IntVar(&o.warmup, "warmup", 20, "unmeasured pgbench transactions per client before each run (-t), so every client's server connection is open (0: none)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per cell; the tables show the median")
	fs.IntVar(&o.standbys, "standbys", 2, "streaming replicas; routed targets read from all of them")
	fs.IntVar(&o.scale, "scale", 10, "pgbench -i scale factor")
	fs.Float64Var(&o.sampling, "sampling-rate", 1, "pgbench --sampling-rate of the per-transaction latency log (0 < r <= 1)")
	fs.StringVar(&o.out, "out", "", "also write the markdown report to this file")
	fs.StringVar(&o.kineticd, "kineticd", "bin/kineticd", "kineticd binary (make build)")
	before := fs.String("kineticd-before", "", "another kineticd binary (an earlier build): every kineticd target runs once more with it, as NAME-before, interleaved in the same rounds")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.targets, err = pickTargets(*targets); err != nil {
		return o, err
	}
	if *before != "" {
		abs, err := filepath.Abs(*before)
		if err != nil {
			return o, err
		}
		var with []target
		for _, t := range o.targets {
			with = append(with, t)
			if t.kind == "kineticd" {
				b := t
				b.name, b.bin = t.name+"-before", abs
				with = append(with, b)
			}
		}
		o.targets = with
	}
	for _, name := range splitList(*workloads) {
		i := slices.IndexFunc(allWorkloads, func(w workload) bool { return w.name == name })
		if i < 0 {
			return o, fmt.Errorf("-workloads: unknown workload %q (want select, mix)", name)
		}
		o.workloads = append(o.workloads, allWorkloads[i])
	}
	for _, m := range splitList(*modes) {
		if !slices.Contains([]string{"simple", "extended", "prepared"}, m) {
			return o, fmt.Errorf("-modes: unknown pgbench query mode %q (want simple, extended, prepared)", m)
		}
		o.modes = append(o.modes, m)
	}
	for _, s := range splitList(*clients) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return o, fmt.Errorf("-clients: %q is not a positive number", s)
		}
		o.clients = append(o.clients, n)
	}
	switch {
	case len(o.workloads) == 0 || len(o.modes) == 0 || len(o.clients) == 0:
		return o, errors.New("-workloads, -modes and -clients must each name at least one")
	case o.seconds < 1 || o.rounds < 1 || o.scale < 1 || o.warmup < 0 || o.standbys < 1:
		return o, errors.New("-seconds, -rounds and -scale must be at least 1, -warmup at least 0")
	case !(o.sampling > 0 && o.sampling <= 1):
		return o, errors.New("-sampling-rate must be in (0, 1]")
	case slices.Max(o.clients) > 1000:
		return o, errors.New("-clients: at most 1000 (the servers' max_connections is sized for that)")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// pickTargets resolves -targets, keeping the canonical order.
func pickTargets(list string) ([]target, error) {
	want := map[string]bool{}
	for _, name := range splitList(list) {
		n := 0
		for _, t := range allTargets {
			if t.name == name || !t.optIn && (name == "all" || t.kind == name && !t.spread) {
				want[t.name] = true
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("-targets: unknown target %q", name)
		}
	}
	var out []target
	for _, t := range allTargets {
		if want[t.name] {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-targets names none")
	}
	return out, nil
}

func run(ctx context.Context, o options) (err error) {
	kineticd, err := filepath.Abs(o.kineticd)
	if err != nil {
		return err
	}
	need := map[string]string{}
	for _, t := range o.targets {
		switch t.kind {
		case "pgbouncer":
			need[benchutil.PgbouncerBin] = "run scripts/install-bench-deps.sh (apt-get install pgbouncer)"
		case "pgpool":
			need[pgpoolBin] = "run scripts/install-bench-deps.sh (apt-get install pgpool2)"
		case "kineticd":
			need[kineticd] = "run make build, or pass -kineticd"
		}
	}
	need[pgtest.Bin("pgbench")] = "run scripts/install-deps.sh (postgresql-15)"
	for bin, hint := range need {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s is missing: %s", bin, hint)
		}
	}

	// Proxies get a directory each under one temp dir, which the postgres
	// user must be able to enter.
	dir, err := os.MkdirTemp("", "kinetic-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	b, err := newBench(dir, kineticd)
	if err != nil {
		return err
	}

	maxClients := slices.Max(o.clients)
	// Room for the run's clients twice over (pgpool holds a connection per
	// child on the primary and on the replica; a stopped proxy's backends
	// take a moment to go) plus superuser and replication slots.
	maxConn := max(300, 2*maxClients+50)
	fmt.Fprintf(os.Stderr, "bench: starting PostgreSQL 15 primary + %d streaming replicas (max_connections = %d)\n", o.standbys, maxConn)
	b.cluster, err = pgtest.Start(ctx, pgtest.Options{Standbys: o.standbys,
		Conf: fmt.Sprintf("max_connections = %d\nshared_preload_libraries = 'pg_stat_statements'", maxConn)})
	if err != nil {
		return err
	}
	if err := b.cluster.Primary.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}
	defer func() {
		if cerr := b.cluster.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	fmt.Fprintf(os.Stderr, "bench: pgbench -i -s %d\n", o.scale)
	if err := initPgbench(ctx, b.cluster.Primary.Addr(), o.scale); err != nil {
		return err
	}
	if err := b.settle(ctx); err != nil {
		return err
	}
	if b.authLine, err = benchutil.AuthFileLine(ctx, b.cluster.Primary); err != nil {
		return err
	}

	var report bytes.Buffer
	writeHeader(&report, o, kineticd, maxConn)
	fmt.Print(report.String())
	ticks := clockTicks()
	var cells []cell
	for _, w := range o.workloads {
		for _, m := range o.modes {
			for _, c := range o.clients {
				cells = append(cells, cell{w, m, c})
			}
		}
	}
	for i, c := range cells {
		results := map[string][]result{}
		for round := 1; round <= o.rounds; round++ {
			for _, t := range o.targets {
				r, err := b.runOnce(ctx, o, c, t, ticks)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", c, t.name, err)
				}
				fmt.Fprintf(os.Stderr, "bench: [%d/%d] %s, round %d/%d, %-18s %s\n",
					i+1, len(cells), c, round, o.rounds, t.name, progressLine(r))
				results[t.name] = append(results[t.name], r)
			}
		}
		sums := map[string]summary{}
		for _, t := range o.targets {
			sums[t.name] = summarize(results[t.name])
		}
		var sec bytes.Buffer
		writeCell(&sec, c, o.targets, sums)
		fmt.Print(sec.String())
		report.Write(sec.Bytes())
		// Rewritten after every cell: an interrupted run keeps what it has.
		if o.out != "" {
			if err := writeOut(o.out, report.Bytes()); err != nil {
				return err
			}
		}
	}
	if o.out != "" {
		fmt.Fprintf(os.Stderr, "bench: report written to %s\n", o.out)
	}
	return nil
}

// settle gets the servers to a steady state before the first measured run,
// which would otherwise pay alone for what pgbench -i left behind: the
// replica catches up, a checkpoint writes the dirty pages, and a few seconds
// of select-only on each server fill its caches.
func (b *bench) settle(ctx context.Context) error {
	if err := b.cluster.WaitReplicated(ctx); err != nil {
		return err
	}
	if err := b.cluster.Primary.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	for _, s := range append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...) {
		warm := benchRun{addr: s.Addr(), db: pgtest.AppDB, workload: allWorkloads[0], mode: "simple", clients: 2, seconds: 3}
		if _, err := warm.run(ctx); err != nil {
			return fmt.Errorf("warming %s: %w", s.Name, err)
		}
	}
	return nil
}

func writeOut(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func progressLine(r result) string {
	if r.err != "" {
		return "FAILED: " + r.err
	}
	var per []string
	for _, x := range r.servers {
		per = append(per, pct(x))
	}
	return fmt.Sprintf("%8.0f tps  p50 %.3f ms  p99 %.3f ms  cpu %s s/100k q  rss %s MiB  pss %s MiB  replica %s  (primary/standbys %s)",
		r.tps, r.p50, r.p99, num(r.cpu100k, 2), num(r.rssMiB, 1), num(r.pssMiB, 1), pct(r.replica), strings.Join(per, "/"))
}

// machineSample is the machine's CPU ticks (/proc/stat) and the
// PostgreSQL servers' (every process under each postmaster) at one moment.
type machineSample struct {
	ok                     bool
	busy, steal, total, pg int64
}

// machine samples the CPU counters runOnce compares; ok is false when
// one could not be read (a server restarting, say).
func (b *bench) machine() machineSample {
	var m machineSample
	var err error
	if m.busy, m.steal, m.total, err = machineTicks(); err != nil {
		return m
	}
	for _, s := range append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...) {
		pid := s.PID()
		if pid == 0 {
			return m
		}
		_, ticks, err := tree(pid)
		if err != nil {
			return m
		}
		m.pg += ticks
	}
	m.ok = true
	return m
}

// steadyRates is what the PostgreSQL servers' processes and the proxy's
// did per second in the middle of a measured run: context switches, and
// the proxy's read and write calls.
type steadyRates struct {
	ok                      bool
	pgCS, proxySys, proxyCS float64
}

// steadyRates samples the counters a second and a half into a measured
// run of seconds and a second and a half before its end, while every
// backend of the run is alive (an exited process takes its counts with
// it). Not ok for runs shorter than 4 s or when a sample failed.
func (b *bench) steadyRates(ctx context.Context, in *instance, seconds int) steadyRates {
	if seconds < 4 {
		return steadyRates{}
	}
	sample := func() (pgCS, pxSys, pxCS int64, ok bool) {
		for _, s := range append([]*pgtest.Server{b.cluster.Primary}, b.cluster.Standbys...) {
			pids, _, err := tree(s.PID())
			if err != nil {
				return 0, 0, 0, false
			}
			_, cs := switches(pids) // (PostgreSQL's recv and send are not read and write calls)
			pgCS += cs
		}
		if in.proc != nil {
			pids, _, err := tree(in.proc.pid())
			if err != nil {
				return 0, 0, 0, false
			}
			pxSys, pxCS = switches(pids)
		}
		return pgCS, pxSys, pxCS, true
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	const margin = 1500 * time.Millisecond
	if !wait(margin) {
		return steadyRates{}
	}
	t0 := time.Now()
	a0, b0, c0, ok0 := sample()
	if !wait(time.Duration(seconds)*time.Second - 2*margin) {
		return steadyRates{}
	}
	a1, b1, c1, ok1 := sample()
	dt := time.Since(t0).Seconds()
	if !ok0 || !ok1 || dt <= 0 {
		return steadyRates{}
	}
	return steadyRates{ok: true, pgCS: float64(a1-a0) / dt, proxySys: float64(b1-b0) / dt, proxyCS: float64(c1-c0) / dt}
}

// runOnce runs one cell against one target: fresh proxy, warm-up, measured
// pgbench with CPU and RSS sampled around it, stop, and the replica's share
// read from the servers' transaction counters. A pgbench or proxy failure is
// the result (FAILED with its first error line); only trouble with the
// benchmark itself (servers, temp files, Ctrl-C) is an error.
func (b *bench) runOnce(ctx context.Context, o options, c cell, t target, ticks int64) (result, error) {
	var in *instance
	// A failed run is a result; the table keeps pgbench's first error line
	// and stderr gets the proxy's last words.
	fail := func(err error) (result, error) {
		if ctx.Err() != nil {
			return result{}, context.Cause(ctx)
		}
		if in != nil && in.proc != nil {
			if log := strings.TrimSpace(pgtest.LogTail(in.proc.logFile, 10)); log != "" {
				fmt.Fprintf(os.Stderr, "bench: %s failed (%v); tail of its log:\n%s\n", t.name, err, log)
			}
		}
		line, more, _ := strings.Cut(err.Error(), "\n")
		if more != "" {
			fmt.Fprintf(os.Stderr, "bench: %s failed:\n%v\n", t.name, err)
		}
		return result{err: line}, nil
	}
	if err := b.waitDrained(ctx); err != nil {
		return result{}, err
	}
	before, err := b.xacts(ctx)
	if err != nil {
		return result{}, err
	}
	in, err = b.start(ctx, t, c.clients)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s did not start: %v\n", t.name, err)
		return fail(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			in.stop()
		}
	}()
	logDir, err := os.MkdirTemp(b.dir, "pgbench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(logDir)
	br := benchRun{addr: in.addr, db: t.db, workload: c.workload, mode: c.mode, clients: c.clients}
	extra := 0 // seconds added to the measured run's -T
	if o.warmup > 0 {
		warm := br
		warm.txPerClient = o.warmup
		wrep, err := warm.runOn(ctx, in)
		if err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
		// pgbench's -T clock starts before its clients connect, and
		// connecting hundreds of them can take seconds on a busy machine:
		// the measured run gets that much longer, so that about -seconds of
		// transactions are measured (TPS excludes connection time anyway).
		extra = int(math.Ceil(wrep.connTime.Seconds()))
	}
	var u0 procUsage
	if in.proc != nil {
		if u0, err = treeUsage(in.proc.pid()); err != nil {
			return fail(fmt.Errorf("%s died: %v", t.name, err))
		}
	}
	br.seconds, br.sampling, br.logDir = o.seconds+extra, o.sampling, logDir
	if err := b.resetStatements(ctx); err != nil {
		return result{}, err
	}
	m0 := b.machine()
	steady := make(chan steadyRates, 1)
	go func() { steady <- b.steadyRates(ctx, in, br.seconds) }()
	rep, err := br.runOn(ctx, in)
	if err != nil {
		return fail(err)
	}
	m1 := b.machine()
	rates := <-steady
	own, client, err := b.statementCounts(ctx)
	if err != nil {
		return result{}, err
	}
	r := result{tps: rep.tps, p50: rep.p50, p99: rep.p99, failed: rep.failed, cpu100k: math.NaN(), rssMiB: math.NaN(), pssMiB: math.NaN(),
		own: own, client: client}
	proxyTicks := int64(-1) // (no proxy)
	if in.proc != nil {
		u1, err := treeUsage(in.proc.pid())
		if err != nil {
			return fail(fmt.Errorf("%s died during the run: %v", t.name, err))
		}
		proxyTicks = u1.ticks - u0.ticks
		if rep.queries > 0 {
			r.cpu100k = float64(proxyTicks) / float64(ticks) / float64(rep.queries) * 1e5
		}
		r.rssMiB = float64(u1.rssKiB) / 1024
		r.pssMiB = float64(u1.pssKiB) / 1024
	}
	r.busy, r.steal, r.pgUS, r.proxyUS, r.restUS = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if m0.ok && m1.ok && m1.total > m0.total && rep.queries > 0 {
		all := float64(m1.total - m0.total)
		r.busy, r.steal = float64(m1.busy-m0.busy)/all, float64(m1.steal-m0.steal)/all
		us := func(t int64) float64 { return float64(t) / float64(ticks) / float64(rep.queries) * 1e6 }
		r.pgUS = us(m1.pg - m0.pg)
		rest := m1.busy - m0.busy - (m1.pg - m0.pg)
		if proxyTicks >= 0 {
			r.proxyUS = us(proxyTicks)
			rest -= proxyTicks
		}
		r.restUS = us(rest)
	}
	r.pgCS, r.proxySys, r.proxyCS = math.NaN(), math.NaN(), math.NaN()
	if rates.ok && rep.txns > 0 && rep.tps > 0 {
		qps := float64(rep.queries) / float64(rep.txns) * rep.tps
		r.pgCS = rates.pgCS / qps
		if in.proc != nil {
			r.proxySys, r.proxyCS = rates.proxySys/qps, rates.proxyCS/qps
		}
	}
	stopped = true
	if err := in.stop(); err != nil {
		return result{}, fmt.Errorf("stop %s: %w", t.name, err)
	}
	// Backends flush their statistics when they exit.
	if err := b.waitDrained(ctx); err != nil {
		return result{}, err
	}
	r.replica = math.NaN()
	if after, err := b.xacts(ctx); err == nil {
		var total, replica int64
		for i := range after {
			d := after[i] - before[i]
			total += d
			if i > 0 {
				replica += d
			}
		}
		if total > 0 {
			r.replica = float64(replica) / float64(total)
			for i := range after {
				r.servers = append(r.servers, float64(after[i]-before[i])/float64(total))
			}
		}
	}
	return r, nil
}

// writeHeader says what ran where, so a table can be read on its own.
func writeHeader(w *bytes.Buffer, o options, kineticd string, maxConn int) {
	version := func(bin string, args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			return "?"
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	names := make([]string, len(o.targets))
	for i, t := range o.targets {
		names[i] = t.name
	}
	fmt.Fprintf(w, "## kineticd side-by-side benchmark\n\n")
	fmt.Fprintf(w, "%s · %d CPUs · %s · %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(),
		version(pgtest.Bin("pgbench"), "--version"), version(pgtest.Bin("postgres"), "--version"))
	seen := map[string]bool{}
	for _, t := range o.targets {
		if seen[t.kind] {
			continue
		}
		seen[t.kind] = true
		switch t.kind {
		case "pgbouncer":
			fmt.Fprintf(w, "- pgbouncer: %s\n", version(benchutil.PgbouncerBin, "--version"))
		case "pgpool":
			fmt.Fprintf(w, "- pgpool: %s\n", version(pgpoolBin, "--version"))
		case "kineticd":
			fmt.Fprintf(w, "- kineticd: %s (%s)\n", version(kineticd, "--version"), kineticd)
		}
	}
	fmt.Fprintf(w, "\nTargets %s. Primary + %d streaming replicas (PostgreSQL 15, fsync off, max_connections = %d), pgbench scale %d. "+
		"Each run: %d s measured after a warm-up of %d transactions per client, `-j min(2, clients)`; median of %d round(s), targets interleaved per round. "+
		"Proxies are started afresh for every run with pools of clients + 4 server connections (PgBouncer default_pool_size, "+
		"pgpool num_init_children, kineticd routes.pool.size); "+
		"the measured -T also covers the time pgbench took to connect its clients in the warm-up. See test/bench/README.md for the columns.\n\n",
		strings.Join(names, ", "), o.standbys, maxConn, o.scale, o.seconds, o.warmup, o.rounds)
}
