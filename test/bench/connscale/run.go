package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/bench/internal/benchutil"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// result is what a run measured. Stages that did not run leave their
// fields zero; print shows what there is.
type result struct {
	o       options
	version string

	before   procStats // after the warm-up, no client connected
	dial     dialResult
	idle     procStats // with the clients connected and idle
	haveIdle bool

	load       loadResult
	haveLoad   bool
	loadCPU    time.Duration // kineticd's utime+stime during the load
	clientCPU  time.Duration // this process's during the load
	afterLoad  procStats
	idleOK     int
	idleTotal  int
	idleErr    error
	logLines   []string // kineticd's warnings and errors
	haveChecks bool
}

// run does the whole measurement. Whatever it started is stopped and
// removed before it returns, on error and when ctx ends (Ctrl-C) too.
func run(ctx context.Context, o options) (res *result, err error) {
	bin, err := filepath.Abs(o.kineticd)
	if err != nil {
		return nil, err
	}
	if o.target == "kineticd" {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%w (run make build first, or pass -kineticd)", err)
		}
	}
	dir, err := os.MkdirTemp("", "connscale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	progress("starting a PostgreSQL 15 primary")
	cl, err := pgtest.Start(ctx, pgtest.Options{Standbys: -1,
		Conf: fmt.Sprintf("max_connections = %d\n", max(300, o.poolSize+50))})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := cl.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	progress("pgbench -i -s 1")
	if err := pgbenchInit(ctx, cl); err != nil {
		return nil, err
	}

	addr, err := benchutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	var k *proxy
	version := ""
	if o.target == "pgbouncer" {
		version = pgbouncerVersion()
		progress("starting %s (pool_mode %s, pool size %d, max_client_conn %d)", version, o.poolMode, o.poolSize, o.maxClientConn)
		k, err = startPgbouncer(ctx, cl, dir, addr, o)
	} else {
		cfgPath := filepath.Join(dir, "kineticd.toml")
		cfg := kinetictest.TOML(cl, kinetictest.Params{Listen: addr, PoolMode: o.poolMode, PoolSize: o.poolSize,
			MaxClientConn: o.maxClientConn, AcquireTimeout: o.acquireTimeout, LogLevel: "warn"})
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		version = kineticdVersion(bin)
		progress("starting %s (pool_mode %s, pool size %d, max_client_conn %d)", bin, o.poolMode, o.poolSize, o.maxClientConn)
		k, err = startProxy(ctx, "kineticd", []string{bin, "--config", cfgPath}, nil, addr, filepath.Join(dir, "kineticd.log"))
	}
	if err != nil {
		return nil, err
	}
	res = &result{o: o, version: version}
	defer func() {
		if serr := k.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	dsn := kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB) + "&connect_timeout=60"
	// alive turns a proxy crash into the error of the step that saw it.
	alive := func(step string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if k.exited() {
			return fmt.Errorf("%s exited during %s: %v\n%s", k.name, step, k.err, k.logTail(30))
		}
		return nil
	}

	// settled waits -settle after step, then reads the proxy's /proc figures.
	settled := func(step string) (procStats, error) {
		if err := sleep(ctx, o.settle); err != nil {
			return procStats{}, err
		}
		if err := alive(step); err != nil {
			return procStats{}, err
		}
		return k.stats()
	}

	// 1. Warm-up, then the baseline.
	progress("warm-up: %d clients for %v", o.active, o.warmup)
	warm := dialAll(ctx, dsn, o.active, o.dialConcurrency, 1)
	if len(warm.conns) < o.active {
		closeAll(warm.conns)
		if err := alive("the warm-up"); err != nil {
			return res, err
		}
		return res, fmt.Errorf("warm-up: %d of %d clients connected: %v", len(warm.conns), o.active, warm.errs)
	}
	wl := runLoad(ctx, warm.conns, o.warmup, o.protocol)
	closeAll(warm.conns)
	if wl.firstErr != nil {
		return res, fmt.Errorf("warm-up load: %d errors, first: %w", wl.errors, wl.firstErr)
	}
	if res.before, err = settled("the warm-up"); err != nil {
		return res, err
	}

	// 2. Many idle clients.
	progress("opening %d clients, %d at a time", o.clients, o.dialConcurrency)
	res.dial = dialAll(ctx, dsn, o.clients, o.dialConcurrency, o.maxDialFailures)
	conns := res.dial.conns
	defer func() {
		progress("closing %d clients", len(conns))
		closeAll(conns)
	}()
	progress("%d connected, %d failed in %v; idle for %v", len(conns), res.dial.failed, res.dial.duration.Round(time.Millisecond), o.settle)
	if res.idle, err = settled("the connection phase"); err != nil {
		return res, err
	}
	res.haveIdle = true

	// 3. Load on a few of them.
	active := min(o.active, len(conns))
	if active > 0 {
		progress("load: %d clients for %v, %d idle", active, o.load, len(conns)-active)
		cpu0, self0 := res.idle.cpu, selfCPU()
		res.load = runLoad(ctx, conns[:active], o.load, o.protocol)
		res.clientCPU = selfCPU() - self0
		if err := alive("the load"); err != nil {
			return res, err
		}
		if res.afterLoad, err = k.stats(); err != nil {
			return res, err
		}
		res.loadCPU = res.afterLoad.cpu - cpu0
		res.haveLoad = true
	}

	// 4. The idle ones still work.
	progress("checking the %d idle clients", len(conns)-active)
	res.idleTotal = len(conns) - active
	res.idleOK, res.idleErr = checkIdle(ctx, conns[active:])
	if err := alive("the idle check"); err != nil {
		return res, err
	}
	res.logLines = k.logLines()
	res.haveChecks = true

	var problems []string
	if n := len(conns); n < o.clients {
		problems = append(problems, fmt.Sprintf("only %d of %d clients connected", n, o.clients))
	}
	if res.load.errors > 0 {
		problems = append(problems, fmt.Sprintf("%d queries failed under load", res.load.errors))
	}
	if res.idleOK < res.idleTotal {
		problems = append(problems, fmt.Sprintf("%d of %d idle clients did not answer", res.idleTotal-res.idleOK, res.idleTotal))
	}
	if len(problems) > 0 {
		return res, errors.New(strings.Join(problems, "; "))
	}
	return res, nil
}

// pgbenchInit loads pgbench's tables at scale 1 on the primary, as the app
// user.
func pgbenchInit(ctx context.Context, cl *pgtest.Cluster) error {
	cmd := exec.CommandContext(ctx, pgtest.Bin("pgbench"), "-i", "-s", "1", "-q",
		"-h", "127.0.0.1", "-p", strconv.Itoa(cl.Primary.Port), "-U", pgtest.AppUser, pgtest.AppDB)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pgtest.AppPassword)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i: %w\n%s", err, out)
	}
	return nil
}

func kineticdVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "connscale: "+format+"\n", args...)
}

// print writes the markdown table, then what went wrong.
func (r *result) print(w io.Writer) {
	o := r.o
	fmt.Fprintf(w, "\n### connscale: %s, pool_mode %s, pool size %d, %d clients\n\n", r.version, o.poolMode, o.poolSize, o.clients)
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	row := func(name, format string, args ...any) {
		fmt.Fprintf(w, "| %s | %s |\n", name, fmt.Sprintf(format, args...))
	}
	t := o.target
	row(t+" RSS after warm-up, no clients", "%s", kib(r.before.rssKiB))
	if !r.haveIdle {
		return
	}
	n := len(r.dial.conns)
	row("clients connected", "%d of %d in %.1f s (%.0f/s, %d at a time)", n, o.clients, r.dial.duration.Seconds(),
		float64(n)/r.dial.duration.Seconds(), o.dialConcurrency)
	row(t+" RSS with the clients idle", "%s (peak %s)", kib(r.idle.rssKiB), kib(r.idle.hwmKiB))
	if n > 0 {
		note := ""
		if o.poolMode == "session" {
			note = ", each with its own server connection (session mode)"
		}
		row("**RSS per idle client**", "**%.1f KiB** ((%d − %d KiB) / %d%s)", float64(r.idle.rssKiB-r.before.rssKiB)/float64(n),
			r.idle.rssKiB, r.before.rssKiB, n, note)
	}
	row(t+" open fds / threads", "%d / %d before, %d / %d with the clients", r.before.fds, r.before.threads, r.idle.fds, r.idle.threads)
	if r.haveLoad {
		l := r.load
		secs := l.elapsed.Seconds()
		row("load", "%d active clients (%d simple, %d extended) for %.1f s, %d idle", l.all.clients, l.simple.clients,
			l.extended.clients, secs, n-l.all.clients)
		row("**TPS, active clients**", "**%.0f**", float64(len(l.all.latencies))/secs)
		if l.simple.clients > 0 && l.extended.clients > 0 {
			row("TPS simple (literal) / extended ($1)", "%.0f / %.0f", float64(len(l.simple.latencies))/secs,
				float64(len(l.extended.latencies))/secs)
		}
		for _, p := range []struct {
			name string
			s    protoStats
		}{{"all", l.all}, {"simple", l.simple}, {"extended", l.extended}} {
			if p.s.clients == 0 {
				continue
			}
			row("latency p50 / p99, "+p.name, "%s / %s", ms(p.s.percentile(0.50)), ms(p.s.percentile(0.99)))
		}
		row("queries failed", "%d (connections lost: %d)", l.errors, l.broken)
		q := len(l.all.latencies)
		perQuery := time.Duration(0)
		if q > 0 {
			perQuery = r.loadCPU / time.Duration(q)
		}
		row("**"+t+" CPU during the load**", "**%.2f s** (%.0f%% of one core, %.1f µs per query)", r.loadCPU.Seconds(),
			100*r.loadCPU.Seconds()/secs, float64(perQuery)/float64(time.Microsecond))
		row("load generator CPU (this process)", "%.2f s", r.clientCPU.Seconds())
		row(t+" RSS after the load", "%s (peak %s)", kib(r.afterLoad.rssKiB), kib(r.afterLoad.hwmKiB))
	}
	if r.haveChecks {
		row("idle clients answering after the load", "%d of %d", r.idleOK, r.idleTotal)
		level := ""
		if t == "kineticd" {
			level = " (warn and above)"
		}
		row(t+" log lines"+level, "%d", len(r.logLines))
	}
	fmt.Fprintln(w)
	if r.dial.failed > 0 {
		fmt.Fprintf(w, "%d connections failed", r.dial.failed)
		if r.dial.stopped {
			fmt.Fprintf(w, " (stopped opening at -max-dial-failures %d; those in flight finished)", o.maxDialFailures)
		}
		fmt.Fprintln(w, ":")
		for msg, c := range r.dial.errs {
			fmt.Fprintf(w, "- %d× %s\n", c, msg)
		}
	}
	if r.load.firstErr != nil {
		fmt.Fprintf(w, "first query error under load: %v\n", r.load.firstErr)
	}
	if r.idleErr != nil {
		fmt.Fprintf(w, "first idle-client error: %v\n", r.idleErr)
	}
	if len(r.logLines) > 0 {
		lines := r.logLines
		if len(lines) > 10 {
			lines = lines[len(lines)-10:]
		}
		fmt.Fprintf(w, "%s log (last %d of %d lines):\n```\n%s\n```\n", t, len(lines), len(r.logLines), strings.Join(lines, "\n"))
	}
}

func kib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/1024) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
