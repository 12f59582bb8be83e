// Command connscale measures what idle clients cost kineticd, and how it
// serves a few busy clients among many idle ones (issue 6, item 4). It is a
// tool, not part of make test. It starts a PostgreSQL 15 primary
// (test/pgtest), loads pgbench -i -s 1 into it, runs the kineticd binary in
// front of it with a config rendered by test/kinetictest (or, with
// -target pgbouncer, PgBouncer 1.18 with the same pool mode, pool size and
// client limit, for comparison), and then:
//
//  1. warms kineticd up (-active clients run the load for -warmup, then
//     disconnect), waits -settle and reads its VmRSS;
//  2. opens -clients authenticated connections through it,
//     -dial-concurrency at a time, leaves them idle for -settle and reads
//     VmRSS again: (after − before) / clients is the memory of one idle
//     client, as the kernel sees it (nothing is forced inside kineticd: no
//     GC, no debug hooks);
//  3. runs pgbench -S's lookup (SELECT abalance FROM pgbench_accounts
//     WHERE aid = ?, random aid) on -active of those connections for
//     -seconds, half of them with the simple protocol and a literal, half
//     with the extended protocol and $1, while the others stay open and
//     idle; it reports throughput, latency and kineticd's CPU time
//     (utime+stime from /proc) over the run;
//  4. checks that every idle client still answers a query.
//
// It prints a markdown table on stdout (progress goes to stderr) and cleans
// up kineticd and the cluster on every exit, Ctrl-C included. It exits 1,
// after the table, when not every client could connect or a query failed.
//
//	make build && go run ./test/bench/connscale
//	go run ./test/bench/connscale -pool-mode session -pool 250 -clients 200
//	go run ./test/bench/connscale -target pgbouncer
//
// In session mode every client holds a server connection, so -clients must
// not exceed -pool; the cluster's max_connections is raised to fit -pool.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	target          string // kineticd or pgbouncer
	kineticd        string // path of the binary
	clients         int
	active          int
	poolMode        string
	poolSize        int
	maxClientConn   int // 0: clients + 100
	acquireTimeout  int // ms; 0: kinetictest's default
	dialConcurrency int
	maxDialFailures int
	protocol        string // both, simple or extended
	warmup          time.Duration
	settle          time.Duration
	load            time.Duration
}

func main() {
	var o options
	var seconds int
	flag.StringVar(&o.target, "target", "kineticd", "proxy to measure: kineticd or pgbouncer")
	flag.StringVar(&o.kineticd, "kineticd", "bin/kineticd", "kineticd binary (make build)")
	flag.IntVar(&o.clients, "clients", 10000, "idle client connections to open")
	flag.IntVar(&o.active, "active", 64, "clients of -clients that run the load")
	flag.StringVar(&o.poolMode, "pool-mode", "transaction", "pool_mode: session or transaction")
	flag.IntVar(&o.poolSize, "pool", 16, "routes.pool.size (PgBouncer: default_pool_size)")
	flag.IntVar(&o.maxClientConn, "max-client-conn", 0, "server.max_client_conn (0: clients + 100; PgBouncer: max_client_conn)")
	flag.IntVar(&o.acquireTimeout, "acquire-timeout-ms", 0, "routes.pool.acquire_timeout_ms (0: 2000; PgBouncer: query_wait_timeout, in whole seconds)")
	flag.IntVar(&o.dialConcurrency, "dial-concurrency", 32, "connections opened at a time")
	flag.IntVar(&o.maxDialFailures, "max-dial-failures", 50, "stop opening connections after this many failed")
	flag.StringVar(&o.protocol, "protocol", "both", "load protocol: both (half each), simple or extended")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "warm-up load before the first RSS reading")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "wait before each RSS reading")
	flag.IntVar(&seconds, "seconds", 10, "load duration in seconds")
	flag.Parse()
	o.load = time.Duration(seconds) * time.Second
	if o.maxClientConn == 0 {
		o.maxClientConn = o.clients + 100
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "connscale:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, o)
	if res != nil {
		res.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "connscale:", err)
		stop()
		os.Exit(1)
	}
}

func (o options) check() error {
	switch {
	case o.clients < 1 || o.active < 1 || o.poolSize < 1 || o.dialConcurrency < 1 || o.load <= 0:
		return errors.New("-clients, -active, -pool, -dial-concurrency and -seconds must be positive")
	case o.active > o.clients:
		return fmt.Errorf("-active %d is more than -clients %d", o.active, o.clients)
	case o.target != "kineticd" && o.target != "pgbouncer":
		return fmt.Errorf("-target %q: want kineticd or pgbouncer", o.target)
	case o.poolMode != "session" && o.poolMode != "transaction":
		return fmt.Errorf("-pool-mode %q: want session or transaction", o.poolMode)
	case o.protocol != "both" && o.protocol != "simple" && o.protocol != "extended":
		return fmt.Errorf("-protocol %q: want both, simple or extended", o.protocol)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	// Go raised the soft limit to the hard one at start-up; kineticd, a Go
	// program too, raises its own.
	if need := uint64(o.clients + 256); lim.Cur < need {
		return fmt.Errorf("open file limit %d is below the %d this run needs (ulimit -n)", lim.Cur, need)
	}
	return nil
}
