package consistency

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestSoak is the soak test (issue 16, item 6), run by `make soak` only:
// go test ./... skips it unless KINETIC_SOAK=1.
//
// kineticd runs as its own process (the binary, kinetictest.StartProcessFile)
// in transaction pooling with read routing on (prefer_replica, fallback
// primary) in front of a private primary + 2 streaming standbys. The
// consistency checker's sessions (worker, SOAK_CLIENTS of them, default
// 1000) run its mixed load — an INSERT, its read-back, the token's
// publication, 0–3 more reads — with a think time between steps, and its
// read-your-writes, monotonic-read and token checks. Its fault loop runs
// throughout with the two faults only the soak enables (faultLoop.cut):
// pause/resume replay, fast restart of a standby, SIGKILL and restart of a
// standby, and every app-user backend on a random server terminated. A
// stream of hostile clients (hostileKinds) connects beside them.
//
// Every minute it samples kineticd's RSS (/proc/PID/status VmRSS), open
// descriptors (/proc/PID/fd), goroutines (go_goroutines on /metrics), the
// app user's backends in pg_stat_activity per server, statements per
// second and errors by class, and saves a heap profile of kineticd
// ([metrics] pprof, after a forced GC) in a new directory under
// os.TempDir(). At the end it writes a markdown report
// (SOAK_REPORT, default a new file under os.TempDir(), its path logged):
// the per-minute table, the least-squares slopes per minute over the
// samples after the first 20% of the run, what the in-use heap gained
// between the first profile after warm-up and the last, by function (go
// tool pprof -base), the errors by class with the
// fault that explains each, the faults and hostile clients by kind, and
// the leak check. A failed soak also keeps every server's log and
// kineticd's output next to the report (REPORT.NAME.log).
//
// It fails on: a consistency violation; an error no fault explains
// (soakAllowed maps each fault kind to the error classes it may cause and
// soakGrace bounds how long after the fault); kineticd exiting; a leaked
// server connection (soakLeaks: after the clients are gone, every app-user
// backend on every server is one kineticd's pool counts, idle, within
// soakSettle); no load or no replica read. The slopes are stated, not
// asserted.
//
// Environment: SOAK_DURATION (Go duration, default 30m), SOAK_CLIENTS
// (default 1000), SOAK_THINK_MS (mean pause between steps, default 15000:
// uniform in [mean/2, 3·mean/2)), SOAK_HOSTILE_PER_SEC (default 5),
// SOAK_POOL_SIZE (per server, default 40), SOAK_SEED, SOAK_REPORT,
// SOAK_SAMPLE (sample interval, default 1m), SOAK_STMT_CACHE (the clients'
// pgx statement_cache_capacity, default pgx's 512).
func TestSoak(t *testing.T) {
	if os.Getenv("KINETIC_SOAK") == "" {
		t.Skip("the soak runs with make soak (KINETIC_SOAK=1)")
	}
	sc := soakSettings(t)
	defer func(d time.Duration) { opTimeout = d }(opTimeout)
	opTimeout = soakOpTimeout
	raiseNoFile(t, sc)
	t.Logf("soak: %v, %d clients, think %v mean, %d hostile/s, pool %d per server, seed %d (SOAK_SEED=%d replays the fault schedule)",
		sc.duration, sc.clients, sc.think, sc.hostilePerSec, sc.poolSize, sc.seed, sc.seed)

	cl := pgtest.New(t, pgtest.Options{Standbys: 2, Conf: fmt.Sprintf("max_connections = %d", 3*sc.poolSize+100)})
	setup, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := execOn(setup, cl.Primary, "create table kv (session int, seq int, writer_token text, primary key (session, seq))"); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReplicated(setup); err != nil {
		t.Fatal(err)
	}
	pr, metricsURL := startSoakProxy(t, cl, sc)
	kinetictest.AwaitReadOn(t, setup, pr.AppDSN(), cl.StandbyPorts())

	clientDSN := pr.AppDSN()
	if sc.stmtCache > 0 {
		clientDSN += fmt.Sprintf("&statement_cache_capacity=%d", sc.stmtCache)
	}
	h := &harness{
		t:           t,
		cl:          cl,
		dsn:         clientDSN,
		primaryPort: cl.Primary.Port,
		sessions:    sc.clients,
		portName:    map[int]string{cl.Primary.Port: "primary"},
		thinkMin:    sc.think / 2,
		thinkMax:    sc.think * 3 / 2,
		keepRecs:    64,
	}
	for _, s := range cl.Standbys {
		h.portName[s.Port] = s.Name
	}
	el := &errLog{}
	h.onError = func(r record, code string) { el.add(r.at, r.kind, code) }
	sp := &sampler{lastOverflows: -1, h: h, pr: pr, metricsURL: metricsURL, servers: append([]*pgtest.Server{cl.Primary}, cl.Standbys...), el: el}

	if n, err := listenOverflows(); err == nil {
		sp.lastOverflows = n
	}
	profDir, err := os.MkdirTemp("", "kinetic-soak-heap-")
	if err != nil {
		t.Fatal(err)
	}
	sp.profDir = profDir
	t.Logf("soak: heap profiles in %s", profDir)
	ramp := min(time.Minute, sc.duration/10)
	run, stop := context.WithTimeout(context.Background(), sc.duration)
	defer stop()
	h.start = time.Now()
	workers := make([]*worker, sc.clients)
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(h, i+1, sc.seed)
		workers[i] = w
		// Clients arrive spread over the ramp (a login storm of 1,000 at
		// once is the dial bound's test, not the soak's).
		delay := ramp * time.Duration(i) / time.Duration(len(workers))
		wg.Go(func() {
			select {
			case <-run.Done():
				return
			case <-time.After(delay):
			}
			w.run(run)
		})
	}
	fl := &faultLoop{h: h, cut: true, rng: rand.New(rand.NewPCG(sc.seed, 0xfa017)), counts: map[string]int{}}
	wg.Go(func() { fl.run(run) })
	hc := &hostile{addr: pr.Addr, dsn: pr.AppDSN(), rng: rand.New(rand.NewPCG(sc.seed, 0x4057)), counts: map[string]int{}}
	var hwg sync.WaitGroup
	hwg.Go(func() { hc.run(run, sc.hostilePerSec) })
	sp.hostile = hc
	var swg sync.WaitGroup
	swg.Go(func() { sp.run(run, sc.sample) })
	wg.Wait()
	hwg.Wait()
	elapsed := time.Since(h.start)
	swg.Wait()
	sp.take(elapsed) // the last (partial) interval
	for _, w := range workers {
		if w.conn != nil {
			w.conn.Close(context.Background())
		}
	}
	alive := !pr.Exited()

	fl.heal()
	healCtx, healCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer healCancel()
	if err := cl.WaitReplicated(healCtx); err != nil {
		t.Errorf("standbys did not catch up after the faults: %v", err)
	}
	leaks := soakLeaks(healCtx, sp)

	rep := buildSoakReport(sc, h, workers, fl, hc, sp, el, leaks, elapsed, alive)
	path := sc.report
	if path == "" {
		dir, err := os.MkdirTemp("", "kinetic-soak-")
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, "report.md")
	}
	if err := os.WriteFile(path, []byte(rep.text), 0o644); err != nil {
		t.Errorf("write the report: %v", err)
	}
	t.Logf("soak report: %s\n%s", path, rep.summary)
	fmt.Printf("soak report written to %s\n", path)
	for _, f := range rep.failures {
		t.Error(f)
	}
	if len(rep.failures) > 0 {
		keepSoakLogs(t, path, sp.servers, pr)
		diag, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		for _, s := range sp.servers {
			t.Logf("%s's log, last 40 lines:\n%s", s.Name, pgtest.LogTail(s.LogFile, 40))
			act, err := s.QueryString(diag, "select coalesce(string_agg(a, E'\\n'), 'none') from (select format('%s %s %s %s ×%s', coalesce(usename, '-'), backend_type, quote_literal(application_name), coalesce(state, '-'), count(*)) a"+
				" from pg_stat_activity group by usename, backend_type, application_name, state order by 1) x")
			t.Logf("%s's pg_stat_activity at the end (%v):\n%s", s.Name, err, act)
		}
	}
	for i, v := range h.violations {
		if i == 10 {
			break
		}
		t.Errorf("%s", h.explain(v, workers))
	}
	h.checkDurability(healCtx, workers)
}

// keepSoakLogs copies every server's whole log and kineticd's output next
// to the report of a failed soak (REPORT.NAME.log): the cluster directory
// goes with the test, and an error no fault explains is only explained by
// what the servers logged at its time (t = 0 is the report's start time).
func keepSoakLogs(t *testing.T, report string, servers []*pgtest.Server, pr *kinetictest.Process) {
	base := strings.TrimSuffix(report, filepath.Ext(report))
	for _, s := range servers {
		b, err := os.ReadFile(s.LogFile)
		if err == nil {
			err = os.WriteFile(base+"."+s.Name+".log", b, 0o644)
		}
		if err != nil {
			t.Logf("keep %s's log: %v", s.Name, err)
		}
	}
	if err := os.WriteFile(base+".kineticd.log", []byte(pr.Logs()), 0o644); err != nil {
		t.Logf("keep kineticd's log: %v", err)
	}
	t.Logf("the servers' and kineticd's logs are kept as %s.*.log", base)
}

// ---- settings ----

type soakConfig struct {
	duration, think, sample time.Duration
	clients, hostilePerSec  int
	poolSize                int
	seed                    uint64
	report                  string
	noFile                  uint64 // RLIMIT_NOFILE after raiseNoFile
	// stmtCache is the clients' pgx statement_cache_capacity (0: pgx's
	// default, 512 per connection). Every token-hinted read is a text of
	// its own, so each client prepares statements up to that many, and
	// kineticd keeps them for it (transaction pooling).
	stmtCache int
}

func soakSettings(t *testing.T) soakConfig {
	sc := soakConfig{
		duration:      envDuration(t, "SOAK_DURATION", 30*time.Minute),
		sample:        envDuration(t, "SOAK_SAMPLE", time.Minute),
		think:         time.Duration(envInt(t, "SOAK_THINK_MS", 15000)) * time.Millisecond,
		clients:       envInt(t, "SOAK_CLIENTS", 1000),
		hostilePerSec: envInt(t, "SOAK_HOSTILE_PER_SEC", 5),
		poolSize:      envInt(t, "SOAK_POOL_SIZE", 40),
		seed:          uint64(time.Now().UnixNano()),
		report:        os.Getenv("SOAK_REPORT"),
		stmtCache:     envInt(t, "SOAK_STMT_CACHE", 0),
	}
	if s := os.Getenv("SOAK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", s, err)
		}
		sc.seed = v
	}
	return sc
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 30m or 90s", name, s)
	}
	return d
}

// raiseNoFile lifts this process's open-file limit to its hard limit (at
// most 1<<20); kineticd, its child, inherits it. 1,000 clients need about
// 1,000 descriptors in kineticd and as many here, plus the pools'.
func raiseNoFile(t *testing.T, sc soakConfig) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	want := min(lim.Max, 1<<20)
	if lim.Cur < want {
		lim.Cur = want
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatalf("raise RLIMIT_NOFILE to %d: %v", want, err)
		}
	}
	if need := uint64(3*sc.clients + 1000); lim.Cur < need {
		t.Fatalf("RLIMIT_NOFILE is %d (hard %d), %d clients need about %d: raise the hard limit (ulimit -Hn)", lim.Cur, lim.Max, sc.clients, need)
	}
}

// startSoakProxy renders kinetictest's config with the soak's settings and
// a metrics listener, and starts the kineticd binary with it.
func startSoakProxy(t *testing.T, cl *pgtest.Cluster, sc soakConfig) (*kinetictest.Process, string) {
	var replicas []string
	for _, s := range cl.Standbys {
		replicas = append(replicas, s.Addr())
	}
	listen := kinetictest.FreeAddr(t)
	text := kinetictest.TOML(cl, kinetictest.Params{
		Listen:          listen,
		PoolMode:        "transaction",
		PoolSize:        sc.poolSize,
		AcquireTimeout:  5000,
		MaxClientConn:   sc.clients + 4*sc.hostilePerSec + 200,
		Replicas:        replicas,
		ReadRoutingMode: "prefer_replica",
		FallbackPolicy:  "primary",
		LogLevel:        "warn",
	})
	metrics := kinetictest.FreeAddr(t)
	const noMetrics = "[metrics]\nlisten = \"\"\n"
	if !strings.Contains(text, noMetrics) {
		t.Fatalf("kinetictest's config has no %q to replace:\n%s", noMetrics, text)
	}
	// pprof: the sampler saves a heap profile with every sample.
	text = strings.Replace(text, noMetrics, "[metrics]\nlisten = \""+metrics+"\"\npprof = true\n", 1)
	// The product's probe interval and timeout (2000 ms, 750 ms), not the
	// tests' 200 ms ones: under 1,000 clients on a shared machine a 200 ms
	// probe timeout marks healthy servers unreachable.
	for _, l := range []string{"replica_health_interval_ms = 200\n", "replica_health_timeout_ms = 200\n"} {
		if !strings.Contains(text, l) {
			t.Fatalf("kinetictest's config has no %q to remove:\n%s", l, text)
		}
		text = strings.Replace(text, l, "", 1)
	}
	path := filepath.Join(t.TempDir(), "kineticd.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return kinetictest.StartProcessFile(t, path, listen), "http://" + metrics + "/metrics"
}

// ---- errors and their explanations ----

// soakAllowed maps each fault kind to the error classes (SQLSTATE, or
// errCode's "conn" for a connection lost without one) it may cause in a
// client session. pause and resume explain none: with fallback_policy
// primary a lagging replica costs a fallback, never an error. Hostile
// clients explain none either.
var soakAllowed = map[string][]string{
	// A standby's fast shutdown terminates its backends (57P01) and
	// refuses logins while it stops and starts (57P03); a unit in flight
	// on it is lost with its server connection.
	"restart": {"57P01", "57P03", "08006", "conn"},
	// SIGKILL: the standby's backends vanish without a message.
	"kill": {"57P01", "57P03", "08006", "conn"},
	// pg_terminate_backend: 57P01 to the unit in flight on the cut server
	// connection, or the connection just lost; on the primary, 08007 to a
	// write whose commit was in flight (its outcome unknown,
	// docs/behaviour.md "Losing the primary").
	"cut": {"57P01", "08006", "08007", "conn"},
}

// soakOpTimeout is the soak's hang guard per statement: an operation
// without an answer for this long counts as error class "timeout", which no
// fault explains.
const soakOpTimeout = 30 * time.Second

// soakGrace is how long after a fault's action returned an error may still
// be its consequence (a server connection broken by it and used later).
const soakGrace = 5 * time.Second

type errEvent struct {
	at   time.Duration
	kind opKind
	code string
}

type errLog struct {
	mu  sync.Mutex
	all []errEvent
}

func (l *errLog) add(at time.Duration, kind opKind, code string) {
	l.mu.Lock()
	l.all = append(l.all, errEvent{at, kind, code})
	l.mu.Unlock()
}

func (l *errLog) snapshot() []errEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]errEvent(nil), l.all...)
}

// explainErr returns the fault that explains e ("KIND SERVER"), or "".
// A fault explains an error only on a server the operation may have run
// on: writes, SHOW pg_kinetic.write_lsn (its position capture) and logins
// run on the primary, so only a fault of the primary explains them; a read
// may run on any server.
func explainErr(e errEvent, faults []faultRecord, primary string) string {
	primaryOnly := e.kind == opWrite || e.kind == opShowToken || e.kind == opConnect
	for i := len(faults) - 1; i >= 0; i-- {
		f := faults[i]
		if f.at > e.at || e.at > f.end+soakGrace {
			continue
		}
		if primaryOnly && f.server != primary {
			continue
		}
		for _, c := range soakAllowed[f.kind] {
			if c == e.code {
				return f.kind + " " + f.server
			}
		}
	}
	return ""
}

// ---- sampling ----

type soakSample struct {
	at     time.Duration
	rssKiB int64
	// liveMiB is kineticd's live heap: the heap allocated just after the
	// heap profile's forced GC (go_memstats_heap_alloc_bytes). Without a
	// profile, half the runtime's next GC goal (go_memstats_next_gc_bytes,
	// GOGC=100), which overstates it: since Go 1.18 the goal also counts
	// goroutine stacks (about 1,100 here). RSS also holds what the
	// runtime has not returned to the system yet.
	liveMiB    float64
	fds        int   // /proc/PID/fd entries
	goroutines int   // go_goroutines
	clients    int   // kinetic_client_connections
	backends   []int // app-user backends per server (sampler.servers order), -1 unknown
	pooled     []int // kinetic_pool_connections per server, -1 unknown
	stmts      int64 // operations in the interval
	errs       map[string]int
	faults     int
	hostile    int
	violations int   // so far
	overflows  int64 // the kernel's listen queue overflows in the interval (TcpExt ListenOverflows, every socket)
	note       string
}

type soakProfile struct {
	at   time.Duration
	path string
}

type sampler struct {
	h          *harness
	pr         *kinetictest.Process
	metricsURL string
	servers    []*pgtest.Server
	el         *errLog
	hostile    *hostile

	samples []soakSample
	// profDir holds a heap profile per sample (heap-<seconds>s.pb.gz,
	// after a forced GC); profiles lists them in sample order.
	profDir   string
	profiles  []soakProfile
	lastStmts int64
	lastErrs  int
	lastFault int
	lastHost  int
	// lastOverflows is the kernel's listen overflow count at the last
	// sample (-1 before the first).
	lastOverflows int64
}

func (sp *sampler) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			sp.take(sp.h.since())
		}
	}
}

func (sp *sampler) take(at time.Duration) {
	s := soakSample{at: at, errs: map[string]int{}}
	var notes []string
	pid := sp.pr.Cmd.Process.Pid
	if cur, _, err := sp.pr.RSSKiB(); err == nil {
		s.rssKiB = cur
	} else {
		notes = append(notes, "rss: "+err.Error())
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.fds = len(ents)
	} else {
		s.fds = -1
		notes = append(notes, "fds: "+err.Error())
	}
	// The heap profile first: its forced GC makes the heap figures
	// scraped just after it the live heap.
	profiled := false
	if sp.profDir != "" {
		if path, err := sp.heapProfile(at); err == nil {
			sp.profiles = append(sp.profiles, soakProfile{at, path})
			profiled = true
		} else {
			notes = append(notes, "heap profile: "+err.Error())
		}
	}
	m, err := scrape(sp.metricsURL)
	if err != nil {
		notes = append(notes, "metrics: "+err.Error())
	}
	s.goroutines = int(m.value("go_goroutines", -1))
	if profiled {
		s.liveMiB = m.value("go_memstats_heap_alloc_bytes", -1) / (1 << 20)
	} else {
		s.liveMiB = m.value("go_memstats_next_gc_bytes", -1) / 2 / (1 << 20)
	}
	s.clients = int(m.value("kinetic_client_connections", -1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range sp.servers {
		s.backends = append(s.backends, appBackends(ctx, srv))
		s.pooled = append(s.pooled, m.pooled(srv.Addr(), ""))
	}
	n := sp.h.stmts.Load()
	s.stmts, sp.lastStmts = n-sp.lastStmts, n
	errs := sp.el.snapshot()
	for _, e := range errs[sp.lastErrs:] {
		s.errs[e.code]++
	}
	sp.lastErrs = len(errs)
	sp.h.mu.Lock()
	s.faults, sp.lastFault = len(sp.h.faults)-sp.lastFault, len(sp.h.faults)
	s.violations = len(sp.h.violations)
	sp.h.mu.Unlock()
	if sp.hostile != nil {
		nh := sp.hostile.total()
		s.hostile, sp.lastHost = nh-sp.lastHost, nh
	}
	if n, err := listenOverflows(); err == nil {
		if sp.lastOverflows >= 0 {
			s.overflows = n - sp.lastOverflows
		}
		sp.lastOverflows = n
	}
	s.note = strings.Join(notes, "; ")
	if len(sp.samples) > 0 && at-sp.samples[len(sp.samples)-1].at < time.Second {
		return // the final take right after the last tick
	}
	sp.samples = append(sp.samples, s)
	var prev time.Duration
	if k := len(sp.samples); k > 1 {
		prev = sp.samples[k-2].at
	}
	sp.h.t.Logf("soak sample t=%v: rss %.1f MiB, live heap %.1f MiB, fds %d, goroutines %d, clients %d, backends %v, pooled %v, %.0f stmt/s, errors %s, faults %d, hostile %d, violations %d, listen overflows %d %s",
		at.Round(time.Second), float64(s.rssKiB)/1024, s.liveMiB, s.fds, s.goroutines, s.clients, s.backends, s.pooled,
		float64(s.stmts)/(at-prev).Seconds(), sortedCounts(s.errs), s.faults, s.hostile, s.violations, s.overflows, s.note)
}

// heapProfile saves kineticd's heap profile (after a forced GC, so its
// in-use figures are live memory) under sp.profDir.
func (sp *sampler) heapProfile(at time.Duration) (string, error) {
	url := strings.TrimSuffix(sp.metricsURL, "/metrics") + "/debug/pprof/heap?gc=1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	path := filepath.Join(sp.profDir, fmt.Sprintf("heap-%05ds.pb.gz", int(at.Seconds())))
	return path, os.WriteFile(path, body, 0o644)
}

// heapGrowth is `go tool pprof -top` of the in-use heap of the last
// profile less the first one at or after warm: what the live heap gained
// after warm-up, by function.
func (sp *sampler) heapGrowth(warm time.Duration) (string, error) {
	var first, last *soakProfile
	for i := range sp.profiles {
		if sp.profiles[i].at < warm {
			continue
		}
		if first == nil {
			first = &sp.profiles[i]
		}
		last = &sp.profiles[i]
	}
	if first == nil || first == last {
		return "", fmt.Errorf("fewer than two heap profiles after warm-up")
	}
	out, err := exec.Command("go", "tool", "pprof", "-sample_index=inuse_space", "-top", "-nodecount=25",
		"-base", first.path, last.path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v: %s", err, out)
	}
	return fmt.Sprintf("`go tool pprof -sample_index=inuse_space -top -base %s %s` (t=%s → t=%s):\n\n```\n%s```\n",
		filepath.Base(first.path), filepath.Base(last.path), fmtMin(first.at), fmtMin(last.at), out), nil
}

// listenOverflows reads the kernel's TcpExt ListenOverflows counter: SYNs
// dropped because a listening socket's accept queue was full (a server
// that does not accept as fast as it is dialled).
func listenOverflows() (int64, error) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0, err
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(vals) != len(names) {
			continue
		}
		for j, n := range names {
			if n == "ListenOverflows" {
				return strconv.ParseInt(vals[j], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no TcpExt ListenOverflows in /proc/net/netstat")
}

// appBackends counts the app user's backends on s (kineticd's pooled server
// connections and its probes; the harness's own queries are the
// superuser's), -1 when s does not answer.
func appBackends(ctx context.Context, s *pgtest.Server) int {
	v, err := s.QueryString(ctx, "select count(*) from pg_stat_activity where usename = '"+pgtest.AppUser+"'")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// metricsText is a scrape: lines "name{labels} value".
type metricsText []string

func scrape(url string) (metricsText, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var lines metricsText
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); l != "" && l[0] != '#' {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

func (m metricsText) value(name string, def float64) float64 {
	for _, l := range m {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return def
}

// pooled sums kinetic_pool_connections for server addr (state "" = every
// state), -1 when the series is absent.
func (m metricsText) pooled(addr, state string) int {
	total, found := 0.0, false
	for _, l := range m {
		if !strings.HasPrefix(l, "kinetic_pool_connections{") || !strings.Contains(l, `server="`+addr+`"`) {
			continue
		}
		if state != "" && !strings.Contains(l, `state="`+state+`"`) {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		total += v
		found = true
	}
	if !found {
		return -1
	}
	return int(total)
}

// ---- leaks ----

// soakSettle bounds the wait for the pools to come to rest once the
// clients are gone.
const soakSettle = 60 * time.Second

type leakCheck struct {
	ok     bool
	leaked int      // backends beyond the pools' counts, summed over servers
	detail []string // per server, the last reading
	waited time.Duration
}

// soakLeaks checks, once every client (good and hostile) has disconnected
// and the cluster is healed, that no server connection leaked. Precisely,
// on every server:
//   - kineticd's own sessions (application_name 'pg-kinetic health',
//     'pg-kinetic position', 'pg-kinetic flush', 'pg-kinetic catalog': the
//     probe, the WAL position reader, the flusher and the two catalog
//     lookups) number at most 5;
//   - every other app-user backend in pg_stat_activity (a pooled server
//     connection) is 'idle', and there are no more of them than
//     kinetic_pool_connections{server} counts: a backend beyond that count
//     is one kineticd no longer knows of, a leak;
//   - kinetic_pool_connections{server, state="active"} is 0.
//
// The pool may count more than the server has: connections whose server
// side a fault closed (a restart, a cut) stay counted until the pool next
// touches them. They are reported, not failed: the server holds nothing
// for them. The check is retried every 500 ms for up to soakSettle (a
// connection closed by kineticd leaves pg_stat_activity a moment later).
func soakLeaks(ctx context.Context, sp *sampler) leakCheck {
	start := time.Now()
	var lc leakCheck
	for {
		lc = leakCheck{ok: true}
		m, err := scrape(sp.metricsURL)
		if err != nil {
			lc.ok = false
			lc.detail = append(lc.detail, "metrics: "+err.Error())
		}
		for _, s := range sp.servers {
			pooledBackends, probes, busy, err := leakCounts(ctx, s)
			if err != nil {
				lc.ok = false
				lc.detail = append(lc.detail, fmt.Sprintf("%s: %v", s.Name, err))
				continue
			}
			pool := m.pooled(s.Addr(), "")
			active := m.pooled(s.Addr(), "active")
			if pool < 0 {
				pool = 0 // no series: the pool never opened a connection to s
			}
			good := pooledBackends <= pool && busy == 0 && active <= 0 && probes <= 5
			if !good {
				lc.ok = false
			}
			who, _ := s.QueryString(ctx, "select coalesce(string_agg(a, ', '), 'none') from (select format('%s %s ×%s', quote_literal(application_name), coalesce(state, '-'), count(*)) a"+
				" from pg_stat_activity where usename = '"+pgtest.AppUser+"' group by application_name, state order by 1) x")
			lc.leaked += max(pooledBackends-pool, 0)
			lc.detail = append(lc.detail, fmt.Sprintf("%s: %d pooled backends (%d leaked), kineticd's pool counts %d (%d active; %d whose server side is gone), %d not idle, %d of kineticd's own sessions (by application_name and state: %s)",
				s.Name, pooledBackends, max(pooledBackends-pool, 0), pool, max(active, 0), max(pool-pooledBackends, 0), busy, probes, who))
		}
		lc.waited = time.Since(start)
		if lc.ok || lc.waited > soakSettle || ctx.Err() != nil {
			return lc
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func leakCounts(ctx context.Context, s *pgtest.Server) (pooled, probes, busy int, err error) {
	base := "select count(*) from pg_stat_activity where usename = '" + pgtest.AppUser + "' and "
	for _, q := range []struct {
		cond string
		dst  *int
	}{
		{"application_name not like 'pg-kinetic %'", &pooled},
		{"application_name like 'pg-kinetic %'", &probes},
		{"application_name not like 'pg-kinetic %' and state is distinct from 'idle'", &busy},
	} {
		v, err := s.QueryString(ctx, base+q.cond)
		if err != nil {
			return 0, 0, 0, err
		}
		if *q.dst, err = strconv.Atoi(v); err != nil {
			return 0, 0, 0, err
		}
	}
	return pooled, probes, busy, nil
}

// ---- hostile clients ----

// hostileKinds are the misbehaving clients the soak sends beside the good
// ones. None may affect them (no error is explained by a hostile client).
var hostileKinds = []string{"vanish", "garbage", "truncated", "slowloris", "oversize", "ssl_garbage", "auth_garbage", "auth_vanish", "bad_message"}

type hostile struct {
	addr   string
	dsn    string // the app user's, for a real login
	mu     sync.Mutex
	rng    *rand.Rand
	counts map[string]int
	n      int
}

func (hc *hostile) total() int {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.n
}

// run starts perSec hostile clients a second (each in its own goroutine,
// each closing within about 10 s) until ctx ends, then waits for them.
func (hc *hostile) run(ctx context.Context, perSec int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(time.Second / time.Duration(perSec))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hc.mu.Lock()
		kind := hostileKinds[hc.rng.IntN(len(hostileKinds))]
		seed := hc.rng.Uint64()
		hc.counts[kind]++
		hc.n++
		hc.mu.Unlock()
		wg.Go(func() { hostileClient(hc.addr, hc.dsn, kind, rand.New(rand.NewPCG(seed, 1))) })
	}
}

// startupPacket is a protocol 3.0 StartupMessage for user app, database app.
func startupPacket() []byte {
	body := []byte{0, 3, 0, 0}
	for _, kv := range []string{"user", pgtest.AppUser, "database", pgtest.AppDB} {
		body = append(body, kv...)
		body = append(body, 0)
	}
	body = append(body, 0)
	return append(be32(len(body)+4), body...)
}

func be32(n int) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// hostileClient plays one misbehaving client. It never checks what
// kineticd answers: the soak judges by the good clients, kineticd's
// survival and its resources.
func hostileClient(addr, dsn, kind string, rng *rand.Rand) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	drain := func() { io.Copy(io.Discard, io.LimitReader(c, 1<<16)) }
	switch kind {
	case "vanish":
		// connect and close at once
	case "garbage":
		c.Write(randBytes(rng, 1+rng.IntN(4096)))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		drain()
	case "truncated":
		p := startupPacket()
		c.Write(p[:1+rng.IntN(len(p)-1)])
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Millisecond)
	case "slowloris":
		// A valid startup, one byte every 700 ms: about 10 s for 15 bytes,
		// then gone (kineticd may close first).
		p := startupPacket()
		for i := 0; i < len(p) && i < 15; i++ {
			if _, err := c.Write(p[i : i+1]); err != nil {
				return
			}
			time.Sleep(700 * time.Millisecond)
		}
	case "oversize":
		c.Write(append(be32(0x7fffffff), 0, 3, 0, 0))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		drain()
	case "ssl_garbage":
		c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}) // SSLRequest
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		c.Write(randBytes(rng, 1+rng.IntN(512)))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		drain()
	case "auth_vanish":
		// Start a login, read the authentication request, vanish.
		c.Write(startupPacket())
		b := make([]byte, 1)
		io.ReadFull(c, b)
	case "auth_garbage":
		// Start a login, then garbage inside the authentication exchange.
		c.Write(startupPacket())
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		c.Write(randBytes(rng, 1+rng.IntN(256)))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		drain()
	case "bad_message":
		// A real login (pgconn), then a message with a lying length and
		// garbage on the raw connection, and gone.
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pc, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			return
		}
		msg := append([]byte{'Q'}, be32(1<<20)...)
		msg = append(msg, randBytes(rng, 1+rng.IntN(256))...)
		pc.Conn().Write(msg)
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		pc.Conn().Close()
	}
}

// ---- report ----

type soakReport struct {
	text, summary string
	failures      []string
}

// slope is the least-squares slope of ys over xs (minutes), NaN with fewer
// than two points.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / den
}

func buildSoakReport(sc soakConfig, h *harness, workers []*worker, fl *faultLoop, hc *hostile, sp *sampler,
	el *errLog, leaks leakCheck, elapsed time.Duration, alive bool) soakReport {
	var rep soakReport
	var b strings.Builder
	rev := []byte(os.Getenv("SOAK_COMMIT"))
	if len(rev) == 0 {
		rev, _ = exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	}
	fmt.Fprintf(&b, "# Soak report\n\n")
	fmt.Fprintf(&b, "Started %s, commit %s. kineticd (its own process) in transaction pooling, read_routing_mode prefer_replica, fallback_policy primary, pool %d per server, in front of a primary and 2 streaming standbys (PostgreSQL 15, test/pgtest). ",
		h.start.UTC().Format("2006-01-02 15:04:05.000 UTC (t = 0; the servers' and kineticd's logs use this clock)"), strings.TrimSpace(string(rev)), sc.poolSize)
	cache := "pgx's default statement cache (512 statements per connection)"
	if sc.stmtCache > 0 {
		cache = fmt.Sprintf("a pgx statement cache of %d statements per connection", sc.stmtCache)
	}
	fmt.Fprintf(&b, "%d clients (the consistency checker's sessions, think time %v–%v, %s), the fault loop throughout, %d hostile clients a second. Seed %d. Load ran %v (the last clients' statements ended %v after the %v deadline).\n\n",
		sc.clients, h.thinkMin, h.thinkMax, cache, sc.hostilePerSec, sc.seed, elapsed.Round(time.Second), max(elapsed-sc.duration, 0).Round(100*time.Millisecond), sc.duration)

	names := []string{}
	for _, s := range sp.servers {
		names = append(names, s.Name)
	}
	fmt.Fprintf(&b, "## Per-interval samples\n\n")
	fmt.Fprintf(&b, "| t | RSS MiB | live heap MiB | fds | goroutines | clients |")
	for _, n := range names {
		fmt.Fprintf(&b, " backends %s |", n)
	}
	fmt.Fprintf(&b, " ops/s | errors | faults | hostile | violations | listen overflows |\n|---|---|---|---|---|---|")
	for range names {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|---|---|\n")
	var prev time.Duration
	for _, s := range sp.samples {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %d | %d | %d |", fmtMin(s.at), float64(s.rssKiB)/1024, s.liveMiB, s.fds, s.goroutines, s.clients)
		for i := range names {
			fmt.Fprintf(&b, " %s |", unknown(s.backends[i]))
		}
		fmt.Fprintf(&b, " %.0f | %s | %d | %d | %d | %d |\n", float64(s.stmts)/(s.at-prev).Seconds(), sortedCounts(s.errs), s.faults, s.hostile, s.violations, s.overflows)
		prev = s.at
	}

	// Slopes after warm-up.
	warm := elapsed / 5
	type series struct {
		name string
		get  func(s soakSample) float64
	}
	ser := []series{
		{"RSS (MiB)", func(s soakSample) float64 { return float64(s.rssKiB) / 1024 }},
		{"live heap (MiB)", func(s soakSample) float64 { return s.liveMiB }},
		{"goroutines", func(s soakSample) float64 { return float64(s.goroutines) }},
		{"open fds", func(s soakSample) float64 { return float64(s.fds) }},
	}
	for i, n := range names {
		ser = append(ser, series{"backends " + n, func(s soakSample) float64 {
			if s.backends[i] < 0 {
				return math.NaN()
			}
			return float64(s.backends[i])
		}})
	}
	fmt.Fprintf(&b, "\n## Slopes after warm-up\n\nLeast-squares slope per minute over the samples at t ≥ %v (the first 20%% of the run excluded); samples where a server did not answer (down in a fault) are left out of its series.\n\n", warm.Round(time.Second))
	b.WriteString("| series | samples | first | last | mean | slope per minute |\n|---|---|---|---|---|---|\n")
	var sum strings.Builder
	for _, se := range ser {
		var xs, ys []float64
		for _, s := range sp.samples {
			if s.at < warm {
				continue
			}
			y := se.get(s)
			if math.IsNaN(y) || y < 0 {
				continue
			}
			xs = append(xs, s.at.Minutes())
			ys = append(ys, y)
		}
		sl := slope(xs, ys)
		mean := 0.0
		for _, y := range ys {
			mean += y
		}
		if len(ys) > 0 {
			mean /= float64(len(ys))
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %+.3f |\n", se.name, len(ys), ys[0], ys[len(ys)-1], mean, sl)
		} else {
			fmt.Fprintf(&b, "| %s | 0 | | | | |\n", se.name)
		}
		fmt.Fprintf(&sum, "  slope %-18s %+.3f/min over %d samples\n", se.name, sl, len(ys))
	}

	fmt.Fprintf(&b, "\n## Live heap growth after warm-up\n\nHeap profiles (after a forced GC) are in %s, one per sample.\n\n", sp.profDir)
	if g, err := sp.heapGrowth(warm); err == nil {
		b.WriteString(g)
	} else {
		fmt.Fprintf(&b, "No comparison: %v.\n", err)
	}

	// Totals.
	var tot stats
	tot.readsByPort = map[int]int{}
	for _, w := range workers {
		tot.writes += w.st.writes
		tot.reads += w.st.reads
		tot.reconnects += w.st.reconnects
		tot.uncertainWrites += w.st.uncertainWrites
		for p, n := range w.st.readsByPort {
			tot.readsByPort[p] += n
		}
	}
	replicaReads := tot.reads - tot.readsByPort[h.primaryPort]
	stmts := h.stmts.Load()
	fmt.Fprintf(&b, "\n## Load\n\n%d operations attempted (%.0f/s): %d writes and %d reads succeeded, %d reads (%.1f%%) served by the standbys; %d reconnects; %d writes with an unknown outcome (failed in flight).\n",
		stmts, float64(stmts)/elapsed.Seconds(), tot.writes, tot.reads, replicaReads, pct(replicaReads, tot.reads), tot.reconnects, tot.uncertainWrites)

	// Errors.
	h.mu.Lock()
	faults := append([]faultRecord(nil), h.faults...)
	violations := append([]violation(nil), h.violations...)
	h.mu.Unlock()
	explained := map[string]int{}
	unexplained := map[string]int{}
	var firstUnexplained []errEvent
	for _, e := range el.snapshot() {
		key := e.kind.String() + " " + e.code
		if by := explainErr(e, faults, h.cl.Primary.Name); by != "" {
			explained[key+" ← "+by]++
			continue
		}
		unexplained[key]++
		if len(firstUnexplained) < 10 {
			firstUnexplained = append(firstUnexplained, e)
		}
	}
	fmt.Fprintf(&b, "\n## Errors\n\nEach fault kind may cause these classes up to %v after its action returned, on the server it hit (writes, SHOW pg_kinetic.write_lsn and logins run on the primary: only a fault of the primary explains their errors): ", soakGrace)
	kinds := make([]string, 0, len(soakAllowed))
	for k := range soakAllowed {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for i, k := range kinds {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s → %s", k, strings.Join(soakAllowed[k], ", "))
	}
	b.WriteString("; pause, resume and hostile clients → none.\n\n")
	fmt.Fprintf(&b, "- explained: %s\n- **unexplained: %s**\n", sortedCounts(explained), sortedCounts(unexplained))
	for _, e := range firstUnexplained {
		fmt.Fprintf(&b, "  - t=%v %s %s; the last fault begun before it:", e.at.Round(time.Millisecond), e.kind, e.code)
		last := -1
		for i, f := range faults {
			if f.at <= e.at && f.kind != "none" {
				last = i
			}
		}
		if last < 0 {
			b.WriteString(" none\n")
			continue
		}
		f := faults[last]
		fmt.Fprintf(&b, " %s %s at t=%v, done at t=%v\n", f.kind, f.server, f.at.Round(time.Millisecond), f.end.Round(time.Millisecond))
	}

	// Faults, hostile clients, violations, leaks.
	fmt.Fprintf(&b, "\n## Faults and hostile clients\n\nFaults: %d %s (%d failed to apply). Hostile clients: %d %s.\n", len(faults), sortedCounts(fl.counts), fl.errs, hc.total(), sortedCounts(hc.counts))
	vk := map[string]int{}
	for _, v := range violations {
		vk[v.kind]++
	}
	fmt.Fprintf(&b, "\n## Consistency\n\n%d violations %s (read-your-writes, monotonic reads, tokens; the consistency checker's checks on every read).\n", len(violations), sortedCounts(vk))
	for i, v := range violations {
		if i == 5 {
			fmt.Fprintf(&b, "\n... and %d more (the test log has 10)\n", len(violations)-5)
			break
		}
		fmt.Fprintf(&b, "\n```\n%s\n```\n", h.explain(v, workers))
	}
	fmt.Fprintf(&b, "\n## Server connections at the end\n\nAfter every client disconnected and the cluster healed (waited %v): ", leaks.waited.Round(100*time.Millisecond))
	if leaks.ok {
		fmt.Fprintf(&b, "%d leaked.\n\n", leaks.leaked)
	} else {
		b.WriteString("**LEAK**.\n\n")
	}
	for _, d := range leaks.detail {
		fmt.Fprintf(&b, "- %s\n", d)
	}

	// Verdict.
	if !alive {
		rep.failures = append(rep.failures, "kineticd exited during the soak")
	}
	if len(violations) > 0 {
		rep.failures = append(rep.failures, fmt.Sprintf("%d consistency violations", len(violations)))
	}
	if len(unexplained) > 0 {
		rep.failures = append(rep.failures, fmt.Sprintf("errors no fault explains: %s", sortedCounts(unexplained)))
	}
	if !leaks.ok {
		rep.failures = append(rep.failures, "server connections leaked: "+strings.Join(leaks.detail, "; "))
	}
	if tot.writes == 0 || tot.reads == 0 {
		rep.failures = append(rep.failures, fmt.Sprintf("no load ran: %d writes, %d reads", tot.writes, tot.reads))
	}
	if replicaReads == 0 {
		rep.failures = append(rep.failures, "no read was served by a standby")
	}
	b.WriteString("\n## Verdict\n\n")
	if len(rep.failures) == 0 {
		b.WriteString("PASS: kineticd ran throughout, 0 consistency violations, 0 unexplained errors, 0 leaked server connections.\n")
	} else {
		b.WriteString("FAIL:\n")
		for _, f := range rep.failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	rep.text = b.String()
	rep.summary = fmt.Sprintf("  %d samples, %d ops (%.0f/s), replica reads %.1f%%, errors explained %s unexplained %s, faults %s, hostile %d, violations %d, leak check ok=%v\n%s",
		len(sp.samples), stmts, float64(stmts)/elapsed.Seconds(), pct(replicaReads, tot.reads), sortedCounts(explained), sortedCounts(unexplained),
		sortedCounts(fl.counts), hc.total(), len(violations), leaks.ok, sum.String())
	return rep
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func unknown(n int) string {
	if n < 0 {
		return "–"
	}
	return strconv.Itoa(n)
}

func fmtMin(d time.Duration) string {
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
