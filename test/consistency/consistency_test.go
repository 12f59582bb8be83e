package consistency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Knobs. The defaults keep `make test` fast; a soak run sets
// KINETIC_CONSISTENCY_SECONDS=60 (or more).
const (
	defaultSeconds   = 20
	defaultSessions  = 16
	boardSize        = 256 // published (session, seq, token) entries kept
	routeSampleOneIn = 4   // SHOW pg_kinetic.last_route after 1 read in N
)

// opTimeout is a hang guard per statement, not a timing assertion. The soak
// lengthens it (soakOpTimeout): a machine shared with other work can stall
// a statement for seconds under 1,000 clients without anything hanging.
var opTimeout = 10 * time.Second

// TestConsistencyUnderFaults is the consistency checker (issue 4, item 9).
//
// A private cluster (primary + 2 streaming standbys) and an in-process
// kineticd with both standbys as replicas, read_routing_mode
// prefer_replica, fallback_policy primary and the default freshness policy
// (session_write_lsn_and_max_lag). Table kv(session, seq, writer_token) is
// created on the primary and replicated before the load starts.
//
// N sessions (pgx, each its own client connection through kineticd, a mix
// of the extended protocol with cached statements and the simple protocol)
// loop for a bounded time:
//   - INSERT (session, seq) RETURNING inet_server_port(): must run on the
//     primary;
//   - read it back at once in the same session (count of the row, or
//     max(seq) of the session's rows): must see it — read-your-writes;
//   - publish the session's token (ParameterStatus pg_kinetic.write_lsn,
//     checked against SHOW pg_kinetic.write_lsn) with the seq to a shared
//     board;
//   - 0–3 more reads: max(seq) of the session's own rows or of a random
//     other session's, a row of another session already seen present, or
//     a board row read with the hint /* pg-kinetic: min_lsn=TOKEN */.
//
// Every read is recorded. A read that misses the session's own write is a
// read-your-writes violation; a read that sees less of a session X than an
// earlier read of the same client session saw (smaller max(seq), or a row
// at or below a seq already seen missing) is a monotonic-read violation; a
// board row missing from a read hinted with its token is a cross-session
// token violation. A ParameterStatus token going backwards on one
// connection is a violation too. Monotonic state is per client connection:
// a reconnect starts a new kineticd session with no history.
//
// In parallel a fault loop, every 300–1500 ms (random, seeded), pauses WAL
// replay on a random standby, resumes one, restarts one (fast stop, a short
// random downtime, start), or does nothing. At the end everything is
// resumed and started again, and the cluster must catch up.
//
// With fallback_policy primary no read may fail: every error (by SQLSTATE,
// "conn" for a lost connection, "timeout" for the hang guard) is counted,
// reported and fails the test; the session reconnects after a lost
// connection. The test logs a summary — duration, sessions, operations,
// reads per server and the replica share, sampled routing decisions,
// errors, faults by kind, violations — and asserts zero violations and
// that replicas served some reads.
//
// Environment:
//   - KINETIC_CONSISTENCY_SECONDS: load duration in seconds (default 20),
//     e.g. KINETIC_CONSISTENCY_SECONDS=60 for a soak run;
//   - KINETIC_CONSISTENCY_SESSIONS: concurrent sessions (default 16);
//   - KINETIC_CONSISTENCY_SEED: the random seed (default: time-based; the
//     seed in use is logged, so a fault schedule can be replayed).
func TestConsistencyUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("consistency checker: skipped in -short mode")
	}
	dur := time.Duration(envInt(t, "KINETIC_CONSISTENCY_SECONDS", defaultSeconds)) * time.Second
	nSessions := envInt(t, "KINETIC_CONSISTENCY_SESSIONS", defaultSessions)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KINETIC_CONSISTENCY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KINETIC_CONSISTENCY_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("consistency: duration %v, %d sessions, seed %d (KINETIC_CONSISTENCY_SEED=%d replays it)", dur, nSessions, seed, seed)

	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	setup, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Directly on the primary, as the app user, in the app database.
	if err := execOn(setup, cl.Primary, "create table kv (session int, seq int, writer_token text, primary key (session, seq))"); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReplicated(setup); err != nil {
		t.Fatal(err)
	}

	var replicas []string
	for _, s := range cl.Standbys {
		replicas = append(replicas, s.Addr())
	}
	px := kinetictest.Start(t, cl, kinetictest.Params{
		Replicas:        replicas,
		ReadRoutingMode: "prefer_replica",
		FallbackPolicy:  "primary",
		PoolSize:        max(40, nSessions+8),
		MaxClientConn:   max(100, 2*nSessions+10),
		LogLevel:        "info",
	})
	kinetictest.AwaitReadOn(t, setup, px.AppDSN(), cl.StandbyPorts())

	h := &harness{
		t:           t,
		cl:          cl,
		dsn:         px.AppDSN(),
		primaryPort: cl.Primary.Port,
		sessions:    nSessions,
		portName:    map[int]string{cl.Primary.Port: "primary"},
	}
	for _, s := range cl.Standbys {
		h.portName[s.Port] = s.Name
	}

	run, stop := context.WithTimeout(context.Background(), dur)
	defer stop()
	h.start = time.Now()
	workers := make([]*worker, nSessions)
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(h, i+1, seed)
		workers[i] = w
		wg.Go(func() { w.run(run) })
	}
	fl := &faultLoop{h: h, rng: rand.New(rand.NewPCG(seed, 0xfa017)), counts: map[string]int{}}
	wg.Go(func() { fl.run(run) })
	wg.Wait()
	elapsed := time.Since(h.start)
	for _, w := range workers {
		if w.conn != nil {
			w.conn.Close(context.Background())
		}
	}

	// Leave the cluster whole: everything started, replay resumed, caught up.
	fl.heal()
	healCtx, healCancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer healCancel()
	if err := cl.WaitReplicated(healCtx); err != nil {
		t.Errorf("standbys did not catch up after the faults: %v", err)
	}

	h.report(workers, fl, elapsed)
	h.checkDurability(healCtx, workers)
}

// execOn runs sql on server s as the app user in the app database.
func execOn(ctx context.Context, s *pgtest.Server, sql string) error {
	c, err := pgx.Connect(ctx, s.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql)
	return err
}

// countOn counts kv's rows on server s, directly.
func countOn(ctx context.Context, s *pgtest.Server) (int, error) {
	c, err := pgx.Connect(ctx, s.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var n int
	err = c.QueryRow(ctx, "select count(*) from kv").Scan(&n)
	return n, err
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

// ---- shared state ----

type harness struct {
	t           *testing.T
	cl          *pgtest.Cluster
	dsn         string
	primaryPort int
	sessions    int
	portName    map[int]string
	start       time.Time

	// The soak (soak_test.go) sets these; the checker leaves them zero.
	thinkMin, thinkMax time.Duration // a pause before each step, uniform in [thinkMin, thinkMax)
	keepRecs           int           // > 0: a worker keeps about its last keepRecs records
	// onError, when set, is told of every failed operation (concurrently).
	onError func(r record, code string)
	stmts   atomic.Int64 // operations attempted (records made), failures included

	mu         sync.Mutex
	board      []boardEntry // ring of published tokens
	boardNext  int
	violations []violation
	faults     []faultRecord
}

type boardEntry struct {
	session, seq int
	token        string
}

func (h *harness) publish(e boardEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.board) < boardSize {
		h.board = append(h.board, e)
		return
	}
	h.board[h.boardNext] = e
	h.boardNext = (h.boardNext + 1) % boardSize
}

// pick returns a random published entry, preferring other sessions'.
func (h *harness) pick(rng *rand.Rand, not int) (boardEntry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.board) == 0 {
		return boardEntry{}, false
	}
	var e boardEntry
	for range 8 {
		e = h.board[rng.IntN(len(h.board))]
		if e.session != not {
			break
		}
	}
	return e, true
}

func (h *harness) since() time.Duration { return time.Since(h.start) }

// ---- records ----

type opKind uint8

const (
	opWrite        opKind = iota
	opReadOwnRow          // count of the row just written: read-your-writes
	opReadOwnMax          // max(seq) of the session's own rows: read-your-writes
	opReadOtherMax        // max(seq) of another session's rows: monotonic
	opReadSeenRow         // count of the highest row of a session already seen present: monotonic
	opReadToken           // count of a board row, hinted with its token
	opShowToken           // SHOW pg_kinetic.write_lsn
	opConnect
	nOps
)

var opNames = [nOps]string{"write", "read_own_row", "read_own_max", "read_other_max", "read_seen_row", "read_token", "show_write_lsn", "connect"}

func (k opKind) String() string { return opNames[k] }

func (k opKind) isRead() bool { return k >= opReadOwnRow && k <= opReadToken }

// record is one operation as the client saw it.
type record struct {
	at     time.Duration // since the load started
	dur    time.Duration // the statement's round trip
	gen    int           // the worker's connection generation
	kind   opKind
	target int    // session whose rows were written or read
	seq    int    // the row, or the least max(seq) the read must see
	got    int64  // count or max(seq)
	port   int    // inet_server_port()
	simple bool   // simple protocol (else extended, cached statement)
	token  string // token published or used as hint; for writes, the ParameterStatus before it
	route  string // SHOW pg_kinetic.last_route, when sampled
	err    string
}

func (h *harness) describe(r record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%v conn#%d %s session=%d seq=%d", r.at.Round(time.Microsecond), r.gen, r.kind, r.target, r.seq)
	if r.kind.isRead() && r.err == "" {
		fmt.Fprintf(&b, " got=%d", r.got)
	}
	if r.port != 0 {
		name := h.portName[r.port]
		if name == "" {
			name = "?"
		}
		fmt.Fprintf(&b, " port=%d(%s)", r.port, name)
	}
	if r.kind != opConnect {
		if r.simple {
			b.WriteString(" simple")
		} else {
			b.WriteString(" extended")
		}
	}
	if r.token != "" {
		fmt.Fprintf(&b, " token=%s", r.token)
	}
	if r.route != "" {
		fmt.Fprintf(&b, " last_route=%q", r.route)
	}
	if r.err != "" {
		fmt.Fprintf(&b, " err=%s", r.err)
	}
	return b.String()
}

type violation struct {
	kind    string // read_your_writes, monotonic, token, write_not_on_primary, token_regressed
	session int
	rec     record
	why     string
	history []record // the session's operations before it on this connection
}

func (h *harness) violate(kind string, w *worker, r record, why string) {
	v := violation{kind: kind, session: w.id, rec: r, why: why, history: w.history()}
	h.mu.Lock()
	h.violations = append(h.violations, v)
	h.mu.Unlock()
}

// ---- sessions ----

type stats struct {
	writes, reads   int
	readsByKind     [nOps]int
	readsByPort     map[int]int
	replicaByKind   [nOps]int
	simpleOps       int
	extendedOps     int
	routes          map[string]int       // sampled last_route target/reason
	routeMismatch   int                  // last_route target disagrees with inet_server_port()
	mismatches      []record             // the first few of them
	errs            map[string]int       // by SQLSTATE, "conn", "timeout", "other"
	errFirst        map[string]violation // the first error of each kind, with its history
	reconnects      int
	published       int
	statusBehind    int // ParameterStatus older than SHOW pg_kinetic.write_lsn after the write
	uncertainWrites int
}

type worker struct {
	h        *harness
	id       int
	rng      *rand.Rand
	conn     *pgx.Conn
	gen      int
	nextSeq  int
	lastSeen map[int]int // per session: the highest seq this connection has seen present
	lastPS   freshness.Token
	acked    []int // seqs whose INSERT succeeded
	recs     []record
	st       stats
}

func newWorker(h *harness, id int, seed uint64) *worker {
	return &worker{
		h:   h,
		id:  id,
		rng: rand.New(rand.NewPCG(seed, uint64(id))),
		st: stats{
			readsByPort: map[int]int{},
			routes:      map[string]int{},
			errs:        map[string]int{},
			errFirst:    map[string]violation{},
		},
	}
}

// history returns the worker's last operations on its current connection
// (up to 16), before the one being recorded.
func (w *worker) history() []record {
	n := len(w.recs)
	from := max(n-16, 0)
	for from < n && w.recs[from].gen != w.gen {
		from++
	}
	return slices.Clone(w.recs[from:n])
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if w.h.thinkMax > 0 {
			think := w.h.thinkMin + rand.N(w.h.thinkMax-w.h.thinkMin)
			select {
			case <-ctx.Done():
				return
			case <-time.After(think):
			}
		}
		if w.conn == nil {
			if !w.connect(ctx) {
				return
			}
		}
		n := len(w.recs)
		w.step()
		w.h.stmts.Add(int64(len(w.recs) - n))
		if k := w.h.keepRecs; k > 0 && len(w.recs) > 2*k {
			w.recs = slices.Clone(w.recs[len(w.recs)-k:])
		}
	}
}

// connect opens a new client connection (a new kineticd session with no
// history: monotonic state starts over).
func (w *worker) connect(ctx context.Context) bool {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		c, err := pgx.Connect(cctx, w.h.dsn)
		cancel()
		if err == nil {
			if w.gen > 0 {
				w.st.reconnects++
			}
			w.gen++
			w.conn = c
			w.lastSeen = map[int]int{}
			w.lastPS = freshness.Token{}
			return true
		}
		w.failed(record{at: w.h.since(), gen: w.gen, kind: opConnect}, err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// failed counts an error and drops a broken connection.
func (w *worker) failed(r record, err error) {
	code := errCode(err)
	r.err = code + ": " + err.Error()
	key := r.kind.String() + " " + code
	w.st.errs[key]++
	if _, ok := w.st.errFirst[key]; !ok {
		w.st.errFirst[key] = violation{kind: "error " + key, session: w.id, rec: r, why: "the statement failed", history: w.history()}
	}
	w.recs = append(w.recs, r)
	if w.h.onError != nil {
		w.h.onError(r, code)
	}
	if w.conn != nil && w.conn.IsClosed() {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}

func errCode(err error) string {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		return pe.Code
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		dumpProxyOnce.Do(dumpProxyGoroutines)
		return "timeout"
	default:
		return "conn"
	}
}

func (w *worker) mode() (bool, []any) {
	if w.rng.IntN(2) == 0 {
		w.st.simpleOps++
		return true, []any{pgx.QueryExecModeSimpleProtocol}
	}
	w.st.extendedOps++
	return false, nil
}

// step is one write, its read-back, the token's publication and 0-3 more
// reads.
func (w *worker) step() {
	w.nextSeq++
	seq := w.nextSeq
	prev := w.conn.PgConn().ParameterStatus("pg_kinetic.write_lsn")
	simple, args := w.mode()
	r := record{at: w.h.since(), gen: w.gen, kind: opWrite, target: w.id, seq: seq, simple: simple, token: prev}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := w.conn.QueryRow(ctx, "insert into kv (session, seq, writer_token) values ($1, $2, $3) returning inet_server_port()",
		append(args, w.id, seq, fmt.Sprintf("s%d/c%d/prev=%s", w.id, w.gen, prev))...).Scan(&r.port)
	cancel()
	r.dur = w.h.since() - r.at
	if err != nil {
		w.st.uncertainWrites++ // it may have committed: never relied upon
		w.failed(r, err)
		return
	}
	w.st.writes++
	w.acked = append(w.acked, seq)
	w.recs = append(w.recs, r)
	if r.port != w.h.primaryPort {
		w.h.violate("write_not_on_primary", w, r, "an INSERT ran on a standby port")
	}
	w.lastSeen[w.id] = seq // the session must see its own write from now on

	// Read it back at once.
	if w.rng.IntN(3) == 0 {
		w.readMax(opReadOwnMax, w.id)
	} else {
		w.readRow(opReadOwnRow, w.id, seq, "")
	}
	if w.conn == nil {
		return
	}
	w.publish(seq)
	for n := w.rng.IntN(4); n > 0 && w.conn != nil; n-- {
		switch w.rng.IntN(5) {
		case 0:
			w.readMax(opReadOwnMax, w.id)
		case 1:
			w.readMax(opReadOtherMax, w.other())
		case 2:
			x := w.other()
			// Exactly the row seen (a lower seq may be a write whose
			// outcome its writer never learned).
			if k := w.lastSeen[x]; k > 0 {
				w.readRow(opReadSeenRow, x, k, "")
			} else {
				w.readMax(opReadOtherMax, x)
			}
		default:
			if e, ok := w.h.pick(w.rng, w.id); ok {
				w.readRow(opReadToken, e.session, e.seq, e.token)
			}
		}
	}
}

func (w *worker) other() int {
	if w.h.sessions == 1 {
		return w.id
	}
	x := 1 + w.rng.IntN(w.h.sessions-1)
	if x >= w.id {
		x++
	}
	return x
}

// publish puts the session's token with seq on the board. The token is the
// ParameterStatus pg_kinetic.write_lsn kineticd sent; SHOW
// pg_kinetic.write_lsn (which waits for the position capture) tells
// whether that status covers this write yet — the status is sent after the
// write's ReadyForQuery, so it may still be on its way.
func (w *worker) publish(seq int) {
	r := record{at: w.h.since(), gen: w.gen, kind: opShowToken, target: w.id, seq: seq, simple: true}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	var show string
	err := w.conn.QueryRow(ctx, "show pg_kinetic.write_lsn", pgx.QueryExecModeSimpleProtocol).Scan(&show)
	cancel()
	r.dur = w.h.since() - r.at
	if err != nil {
		w.failed(r, err)
		return
	}
	ps := w.conn.PgConn().ParameterStatus("pg_kinetic.write_lsn")
	r.token = show
	w.recs = append(w.recs, r)
	tShow, err := freshness.ParseToken(show)
	if err != nil {
		w.h.violate("token_invalid", w, r, fmt.Sprintf("SHOW pg_kinetic.write_lsn = %q after a write: %v", show, err))
		return
	}
	tok := show
	if tPS, err := freshness.ParseToken(ps); err != nil || tPS.Less(tShow) {
		w.st.statusBehind++
	} else {
		tok = ps
		if tPS.Less(w.lastPS) {
			w.h.violate("token_regressed", w, r, fmt.Sprintf("ParameterStatus pg_kinetic.write_lsn went from %s to %s", w.lastPS, tPS))
		}
		w.lastPS = tPS
	}
	w.h.publish(boardEntry{session: w.id, seq: seq, token: tok})
	w.st.published++
}

// readRow counts row (x, seq); with token, hinted with min_lsn=token.
func (w *worker) readRow(kind opKind, x, seq int, token string) {
	sql := "select count(*), inet_server_port() from kv where session = $1 and seq = $2"
	if token != "" {
		sql = "/* pg-kinetic: min_lsn=" + token + " */ " + sql
	}
	simple, args := w.mode()
	r := record{at: w.h.since(), gen: w.gen, kind: kind, target: x, seq: seq, simple: simple, token: token}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := w.conn.QueryRow(ctx, sql, append(args, x, seq)...).Scan(&r.got, &r.port)
	cancel()
	r.dur = w.h.since() - r.at
	if err != nil {
		w.failed(r, err)
		return
	}
	w.read(&r)
	if r.got == 1 {
		if seq > w.lastSeen[x] {
			w.lastSeen[x] = seq
		}
		return
	}
	switch kind {
	case opReadOwnRow:
		w.h.violate("read_your_writes", w, r, fmt.Sprintf("session %d did not see its own row seq=%d just written", x, seq))
	case opReadToken:
		w.h.violate("token", w, r, fmt.Sprintf("row (%d,%d) missing from a read hinted with the token its writer published", x, seq))
	default:
		w.h.violate("monotonic", w, r, fmt.Sprintf("row (%d,%d) missing after this connection saw seq %d of session %d", x, seq, w.lastSeen[x], x))
	}
}

// readMax reads max(seq) of session x's rows.
func (w *worker) readMax(kind opKind, x int) {
	simple, args := w.mode()
	want := w.lastSeen[x]
	r := record{at: w.h.since(), gen: w.gen, kind: kind, target: x, seq: want, simple: simple}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := w.conn.QueryRow(ctx, "select coalesce(max(seq), 0)::bigint, inet_server_port() from kv where session = $1",
		append(args, x)...).Scan(&r.got, &r.port)
	cancel()
	r.dur = w.h.since() - r.at
	if err != nil {
		w.failed(r, err)
		return
	}
	w.read(&r)
	if r.got >= int64(want) {
		w.lastSeen[x] = int(r.got)
		return
	}
	if x == w.id {
		w.h.violate("read_your_writes", w, r, fmt.Sprintf("max(seq)=%d of the session's own rows, it has written seq %d on this connection", r.got, want))
	} else {
		w.h.violate("monotonic", w, r, fmt.Sprintf("max(seq)=%d of session %d, this connection already saw seq %d", r.got, x, want))
	}
}

// read accounts a successful read and samples its routing decision.
func (w *worker) read(r *record) {
	w.st.reads++
	w.st.readsByKind[r.kind]++
	w.st.readsByPort[r.port]++
	if r.port != w.h.primaryPort {
		w.st.replicaByKind[r.kind]++
	}
	if w.rng.IntN(routeSampleOneIn) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		var route string
		err := w.conn.QueryRow(ctx, "show pg_kinetic.last_route", pgx.QueryExecModeSimpleProtocol).Scan(&route)
		cancel()
		if err == nil {
			r.route = route
			target, reason := routeWords(route)
			w.st.routes[target+"/"+reason]++
			if (target == "replica") != (r.port != w.h.primaryPort) {
				w.st.routeMismatch++
				if len(w.st.mismatches) < 3 {
					w.st.mismatches = append(w.st.mismatches, *r)
				}
			}
		}
	}
	w.recs = append(w.recs, *r)
}

func routeWords(route string) (target, reason string) {
	for _, f := range strings.Fields(route) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "target":
			target = v
		case "reason":
			reason = v
		}
	}
	return target, reason
}

// ---- faults ----

type faultRecord struct {
	at     time.Duration
	end    time.Duration // when the action returned
	kind   string        // pause, resume, restart, none; cut, kill with faultLoop.cut
	server string
	down   time.Duration // restart: time between stop and start
	err    string
}

type faultLoop struct {
	h *harness
	// cut adds two faults (the soak sets it; the checker's schedule for a
	// seed is unchanged without it): cut terminates every app-user backend
	// on a random server, the primary included (kineticd's pooled server
	// connections and probes); kill SIGKILLs a standby and starts it again.
	cut    bool
	rng    *rand.Rand
	paused map[*pgtest.Server]bool
	counts map[string]int
	errs   int
}

func (f *faultLoop) run(ctx context.Context) {
	f.paused = map[*pgtest.Server]bool{}
	standbys := f.h.cl.Standbys
	for {
		wait := time.Duration(300+f.rng.IntN(1201)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		s := standbys[f.rng.IntN(len(standbys))]
		rec := faultRecord{at: f.h.since(), server: s.Name}
		fctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var err error
		kinds := 4
		if f.cut {
			kinds = 6
		}
		switch f.rng.IntN(kinds) {
		case 0:
			rec.kind = "pause"
			err = s.PauseReplay(fctx)
			if err == nil {
				f.paused[s] = true
			}
		case 1:
			rec.kind = "resume"
			// Resume a paused standby if any, else s (a no-op).
			for _, p := range standbys {
				if f.paused[p] {
					s, rec.server = p, p.Name
					break
				}
			}
			err = s.ResumeReplay(fctx)
			if err == nil {
				f.paused[s] = false
			}
		case 2:
			rec.kind = "restart"
			down := time.Duration(f.rng.IntN(800)) * time.Millisecond
			rec.down = down
			if err = s.Stop(fctx); err == nil {
				time.Sleep(down)
				err = s.Start(fctx)
			}
			f.paused[s] = false // a restarted standby replays again
		case 4:
			rec.kind = "cut"
			all := append([]*pgtest.Server{f.h.cl.Primary}, standbys...)
			s = all[f.rng.IntN(len(all))]
			rec.server = s.Name
			if s.Running() {
				err = s.Exec(fctx, "select pg_terminate_backend(pid) from pg_stat_activity where usename = '"+pgtest.AppUser+"' and pid <> pg_backend_pid()")
			}
		case 5:
			rec.kind = "kill"
			down := time.Duration(f.rng.IntN(800)) * time.Millisecond
			rec.down = down
			if s.Running() {
				err = s.Kill()
			}
			if err == nil {
				time.Sleep(down)
				err = s.Start(fctx)
			}
			f.paused[s] = false
		default:
			rec.kind = "none"
			rec.server = ""
		}
		cancel()
		rec.end = f.h.since()
		if err != nil {
			rec.err = err.Error()
			f.errs++
		}
		f.counts[rec.kind]++
		f.h.mu.Lock()
		f.h.faults = append(f.h.faults, rec)
		f.h.mu.Unlock()
	}
}

// heal starts every standby and resumes its replay.
func (f *faultLoop) heal() {
	t := f.h.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, s := range f.h.cl.Standbys {
		if !s.Running() {
			if err := s.Start(ctx); err != nil {
				t.Errorf("heal: start %s: %v", s.Name, err)
				continue
			}
		}
		if err := s.ResumeReplay(ctx); err != nil {
			t.Errorf("heal: resume %s: %v", s.Name, err)
		}
	}
}

// ---- report ----

func (h *harness) report(workers []*worker, fl *faultLoop, elapsed time.Duration) {
	t := h.t
	var tot stats
	tot.readsByPort = map[int]int{}
	tot.routes = map[string]int{}
	tot.errs = map[string]int{}
	tot.errFirst = map[string]violation{}
	for _, w := range workers {
		s := &w.st
		tot.writes += s.writes
		tot.reads += s.reads
		for k := range nOps {
			tot.readsByKind[k] += s.readsByKind[k]
			tot.replicaByKind[k] += s.replicaByKind[k]
		}
		for p, n := range s.readsByPort {
			tot.readsByPort[p] += n
		}
		for k, n := range s.routes {
			tot.routes[k] += n
		}
		for k, n := range s.errs {
			tot.errs[k] += n
			if f, ok := tot.errFirst[k]; !ok || s.errFirst[k].rec.at < f.rec.at {
				tot.errFirst[k] = s.errFirst[k]
			}
		}
		tot.simpleOps += s.simpleOps
		tot.extendedOps += s.extendedOps
		tot.routeMismatch += s.routeMismatch
		tot.mismatches = append(tot.mismatches, s.mismatches...)
		tot.reconnects += s.reconnects
		tot.published += s.published
		tot.statusBehind += s.statusBehind
		tot.uncertainWrites += s.uncertainWrites
	}
	replicaReads := tot.reads - tot.readsByPort[h.primaryPort]
	share := 0.0
	if tot.reads > 0 {
		share = 100 * float64(replicaReads) / float64(tot.reads)
	}
	viol := map[string]int{}
	for _, v := range h.violations {
		viol[v.kind]++
	}
	nErr := 0
	for _, n := range tot.errs {
		nErr += n
	}

	var b strings.Builder
	fmt.Fprintf(&b, "consistency checker summary\n")
	fmt.Fprintf(&b, "  duration        %v (load), %d sessions\n", elapsed.Round(time.Millisecond), len(workers))
	fmt.Fprintf(&b, "  operations      %d (%d writes, %d reads; %.0f ops/s); %d tokens published; %d statements simple protocol, %d extended\n",
		tot.writes+tot.reads, tot.writes, tot.reads, float64(tot.writes+tot.reads)/elapsed.Seconds(), tot.published, tot.simpleOps, tot.extendedOps)
	fmt.Fprintf(&b, "  reads by server ")
	ports := make([]int, 0, len(tot.readsByPort))
	for p := range tot.readsByPort {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	for _, p := range ports {
		fmt.Fprintf(&b, " %s(%d)=%d", h.portName[p], p, tot.readsByPort[p])
	}
	fmt.Fprintf(&b, "\n  replica share   %.1f%% (%d of %d reads served by replicas, %d by the primary)\n",
		share, replicaReads, tot.reads, tot.readsByPort[h.primaryPort])
	fmt.Fprintf(&b, "  by read kind   ")
	for k := opReadOwnRow; k <= opReadToken; k++ {
		n := tot.readsByKind[k]
		pct := 0.0
		if n > 0 {
			pct = 100 * float64(tot.replicaByKind[k]) / float64(n)
		}
		fmt.Fprintf(&b, " %s=%d (%.1f%% replica)", k, n, pct)
	}
	fmt.Fprintf(&b, "\n  latency (p50/p99/max) %s", latencies(workers))
	fmt.Fprintf(&b, "\n  slow operations (> %v) %s", slowOp, slowOps(workers, h.portName))
	sampled := 0
	for _, n := range tot.routes {
		sampled += n
	}
	fmt.Fprintf(&b, "\n  routing (SHOW pg_kinetic.last_route after %d sampled reads, ~1 in %d): %s; disagreeing with inet_server_port(): %d\n",
		sampled, routeSampleOneIn, sortedCounts(tot.routes), tot.routeMismatch)
	for _, r := range tot.mismatches {
		fmt.Fprintf(&b, "    disagreeing: %s\n", h.describe(r))
	}
	fmt.Fprintf(&b, "  token status    ParameterStatus not yet covering the write when SHOW pg_kinetic.write_lsn answered: %d of %d\n",
		tot.statusBehind, tot.published)
	fmt.Fprintf(&b, "  errors          %d %s; reconnects %d; writes with unknown outcome %d\n", nErr, sortedCounts(tot.errs), tot.reconnects, tot.uncertainWrites)
	fmt.Fprintf(&b, "  faults          %d %s (fault errors %d), seed-driven\n", len(h.faults), sortedCounts(fl.counts), fl.errs)
	fmt.Fprintf(&b, "  violations      %d: read_your_writes=%d monotonic=%d token=%d write_not_on_primary=%d token_regressed=%d token_invalid=%d\n",
		len(h.violations), viol["read_your_writes"], viol["monotonic"], viol["token"], viol["write_not_on_primary"], viol["token_regressed"], viol["token_invalid"])
	t.Log(b.String())

	var fb strings.Builder
	for _, f := range h.faults {
		fmt.Fprintf(&fb, "\n  t=%v %s %s", f.at.Round(time.Millisecond), f.kind, f.server)
		if f.kind == "restart" || f.kind == "kill" {
			fmt.Fprintf(&fb, " (down %v)", f.down)
		}
		if f.err != "" {
			fmt.Fprintf(&fb, " ERROR %s", f.err)
		}
	}
	t.Logf("fault schedule (t = when the action began):%s", fb.String())

	keys := make([]string, 0, len(tot.errs))
	for k := range tot.errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("%d unexpected errors %q (fallback_policy primary: no read or write may fail); the first:\n%s",
			tot.errs[k], k, h.explain(tot.errFirst[k], workers))
	}
	for i, v := range h.violations {
		if i == 20 {
			t.Errorf("... %d more violations", len(h.violations)-20)
			break
		}
		t.Errorf("%s", h.explain(v, workers))
	}
	if replicaReads == 0 {
		t.Errorf("no read was served by a replica (%d reads)", tot.reads)
	}
	if tot.writes == 0 || tot.reads == 0 {
		t.Errorf("no load ran: %d writes, %d reads", tot.writes, tot.reads)
	}
}

// latencies summarises successful operations' round trips by kind, and
// the reads by the server that answered.
func latencies(workers []*worker) string {
	by := map[string][]time.Duration{}
	for _, w := range workers {
		for _, r := range w.recs {
			if r.err != "" || r.kind == opConnect {
				continue
			}
			by[r.kind.String()] = append(by[r.kind.String()], r.dur)
			if r.kind.isRead() {
				where := "replica"
				if r.port == w.h.primaryPort {
					where = "primary"
				}
				by["reads on "+where] = append(by["reads on "+where], r.dur)
			}
		}
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		d := by[k]
		slices.Sort(d)
		q := func(p float64) time.Duration {
			return d[min(len(d)-1, int(p*float64(len(d))))].Round(10 * time.Microsecond)
		}
		parts = append(parts, fmt.Sprintf("%s %v/%v/%v", k, q(0.5), q(0.99), d[len(d)-1].Round(10*time.Microsecond)))
	}
	return strings.Join(parts, "; ")
}

// slowOp is far above any healthy round trip here: reads slower than this
// waited for something (a pool slot, a dead server).
const slowOp = time.Second

func slowOps(workers []*worker, names map[int]string) string {
	m := map[string]int{}
	for _, w := range workers {
		for _, r := range w.recs {
			if r.err == "" && r.kind != opConnect && r.dur > slowOp {
				m[r.kind.String()+" answered by "+names[r.port]]++
			}
		}
	}
	return sortedCounts(m)
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// explain renders a violation: the read, the session's history on that
// connection, the write of the row (from its writer's records) and the
// faults around it.
func (h *harness) explain(v violation, workers []*worker) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s in session %d: %s\n  operation: %s\n  history (this connection):", strings.ToUpper(v.kind), v.session, v.why, h.describe(v.rec))
	for _, r := range v.history {
		fmt.Fprintf(&b, "\n    %s", h.describe(r))
	}
	if x := v.rec.target; x >= 1 && x <= len(workers) {
		writer := workers[x-1]
		fmt.Fprintf(&b, "\n  writer session %d, around seq %d:", x, v.rec.seq)
		for _, r := range writer.recs {
			if r.target == x && (r.kind == opWrite || r.kind == opShowToken) && r.seq >= v.rec.seq-1 && r.seq <= max(v.rec.seq, int(v.rec.got))+1 {
				fmt.Fprintf(&b, "\n    %s", h.describe(r))
			}
		}
	}
	b.WriteString("\n  faults begun within 3s before (and 0.5s after):")
	for _, f := range h.faults {
		if f.at >= v.rec.at-3*time.Second && f.at <= v.rec.at+500*time.Millisecond && f.kind != "none" {
			fmt.Fprintf(&b, "\n    t=%v %s %s", f.at.Round(time.Millisecond), f.kind, f.server)
			if f.kind == "restart" || f.kind == "kill" {
				fmt.Fprintf(&b, " (down %v)", f.down)
			}
		}
	}
	return b.String()
}

// checkDurability compares the acknowledged writes with the primary's rows.
func (h *harness) checkDurability(ctx context.Context, workers []*worker) {
	t := h.t
	rows, err := countOn(ctx, h.cl.Primary)
	if err != nil {
		t.Errorf("count rows on the primary: %v", err)
		return
	}
	acked := 0
	for _, w := range workers {
		acked += len(w.acked)
	}
	if rows < acked {
		t.Errorf("the primary holds %d rows, %d INSERTs were acknowledged", rows, acked)
	}
	for _, s := range h.cl.Standbys {
		n, err := countOn(ctx, s)
		if err != nil {
			t.Errorf("count rows on %s: %v", s.Name, err)
			continue
		}
		if n != rows {
			t.Errorf("%s holds %d rows after catching up, the primary %d", s.Name, n, rows)
		}
	}
	t.Logf("durability: %d rows on the primary and each standby, %d INSERTs acknowledged", rows, acked)
}

var dumpProxyOnce sync.Once

// dumpProxyGoroutines prints the in-process proxy's goroutines the first
// time a statement hits the hang guard, so a hang can be diagnosed.
func dumpProxyGoroutines() {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pg-kinetic/proxy.") {
			fmt.Fprintf(os.Stderr, "hang guard: proxy goroutine:\n%s\n\n", g)
		}
	}
}
