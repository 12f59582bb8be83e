package health

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/pg-kinetic/pg-kinetic/pool"
)

// probeSQL is the whole probe: one query, one round trip on an open
// connection, executable by any role. Columns:
//
//  1. pg_is_in_recovery()
//  2. the system identifier
//  3. the timeline: on a primary the first 8 hex digits of its current WAL
//     file's name (pg_walfile_name() fails during recovery, hence the CASE;
//     pg_control_checkpoint() would lag a promotion by a checkpoint); on a
//     standby its WAL receiver's received_tli, else (no receiver, or a probe
//     user without pg_read_all_stats, who sees NULL) the later of its
//     latest restartpoint's timeline and its minimum recovery point's
//     (moved on when recovery flushes a page; under a light load that is
//     no sooner than the restartpoint): both at or behind the timeline it
//     replays, never ahead (Probe may then ask the standby, see
//     identify.go)
//  4. a primary's pg_current_wal_insert_lsn(), in bytes
//  5. a standby's pg_last_wal_receive_lsn(), in bytes
//  6. a standby's pg_last_wal_replay_lsn(), in bytes
//  7. a standby's pg_is_wal_replay_paused() (it fails outside recovery)
//  8. wal_block_size, for NormalizeInsertLSN
//  9. pg_postmaster_start_time(), in microseconds since the epoch: a
//     standby that restarted may accept queries at its minimum recovery
//     point, behind what it showed before (Verdict.StartedAt)
//  10. whether a standby's timeline (3) came from the fallback: no
//     received_tli to read (a probe role with REPLICATION may then ask
//     the standby IDENTIFY_SYSTEM, see identify.go)
//
// The standby-only functions keep answering after a promotion (frozen at the
// end of recovery), so the CASEs also keep their stale values off a primary.
// LSNs are sent as numbers of bytes (pg_lsn - '0/0') so no text form needs
// parsing here. pg_last_xact_replay_timestamp() and pg_stat_replication's
// *_lag are deliberately not used: the first keeps growing on an idle pair
// and is NULL on a fresh standby, the others go NULL when idle (SPEC §5:
// lag comes from positions, see EstimateLag).
const probeSQL = `select r,
  (select system_identifier::text from pg_control_system()),
  case when r then coalesce(nullif((select received_tli from pg_stat_wal_receiver), 0),
                            greatest((select timeline_id from pg_control_checkpoint()),
                                     (select min_recovery_end_timeline from pg_control_recovery())))
       else ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint end,
  case when not r then pg_current_wal_insert_lsn() - '0/0' end,
  case when r then pg_last_wal_receive_lsn() - '0/0' end,
  case when r then pg_last_wal_replay_lsn() - '0/0' end,
  case when r then pg_is_wal_replay_paused() else false end,
  current_setting('wal_block_size'),
  (extract(epoch from pg_postmaster_start_time()) * 1000000)::bigint,
  r and coalesce((select received_tli from pg_stat_wal_receiver), 0) = 0
from pg_is_in_recovery() as r`

// closeTimeout bounds the Terminate of a connection the prober gives up.
const closeTimeout = time.Second

// DialTimeout bounds a probe connection's TCP connect, TLS and login. It is
// longer than a probe's timeout on purpose: a login (SCRAM is a few thousand
// HMAC rounds on each side) that outlasts one probe on a loaded host goes on
// in the background, and the next probe uses the connection it made. A
// dial bounded by the probe timeout would instead be cancelled, and
// repeated, at every probe, and the server would never be probed at all.
// The probe that started the dial still fails at its own timeout.
const DialTimeout = 5 * time.Second

// PGProber is the real Prober: it keeps one connection per server address
// open between probes, and runs probeSQL on it. A connection that fails is
// dropped and the next probe dials again.
//
// It logs in the way kineticd logs in to serve clients (pool.Dialer: SCRAM
// with PostgreSQL's own SASLprep, md5 and cleartext with the raw password),
// so a backend password that works for a route's sessions works for its
// probes; pgconn's PRECIS/NFC normalisation failed for some (pass\u2168).
//
// It is safe for concurrent use. Forget(addr) and Close release
// connections; after Close, Probe still works but keeps no connection.
type PGProber struct {
	dialer pool.Dialer      // immutable
	cred   pool.Credentials // immutable

	mu      sync.Mutex
	closed  bool
	idle    map[string]*pool.Conn    // addr -> open connection between probes
	dialing map[string]*pendingDial  // addr -> connection being made
	hist    map[string]cachedHistory // addr -> its timeline history (Probe)
	// replayTL: addr -> what is known of a standby's replayed timeline
	// beyond received_tli (Probe, identify.go). primaryTL: system
	// identifier -> the highest timeline a primary of it was probed on.
	replayTL  map[string]replayTimeline
	primaryTL map[string]uint32
	// lineages: system identifier -> timeline -> the history a primary
	// of it reported (Probe): a primary's verdict carries the others
	// (TimelineHistory.WithOthers), so that a token of a timeline the
	// promoted standby never followed is judged (freshness.Carry). Each
	// inner map is replaced, never modified, when it grows.
	lineages map[string]map[uint32]*TimelineHistory
}

// pendingDial is a connection being made in the background. When it ends
// its connection, if any, is parked in idle, then done is closed.
type pendingDial struct {
	done   chan struct{}
	err    error // set before done is closed
	cancel context.CancelFunc
}

var (
	_ Prober    = (*PGProber)(nil)
	_ Forgetter = (*PGProber)(nil)
)

// NewPGProber returns a prober that logs in as user/password to database
// with TLS per tlsMode (backend_tls_mode: "disable", "prefer" or "require";
// "" means disable). An invalid mode makes every probe fail with the
// dialer's error.
func NewPGProber(user, password, database, tlsMode string) *PGProber {
	if tlsMode == "" {
		tlsMode = "disable"
	}
	return &PGProber{
		// The probe's session gets application_name and nothing else:
		// unlike pgconn, pool.Dialer reads no PG* environment variables.
		dialer: pool.Dialer{TLSMode: tlsMode},
		cred: pool.Credentials{User: user, Password: password, Database: database,
			Params: map[string]string{"application_name": "pg-kinetic health"}},
		idle:      make(map[string]*pool.Conn),
		dialing:   make(map[string]*pendingDial),
		replayTL:  make(map[string]replayTimeline),
		primaryTL: make(map[string]uint32),
	}
}

// Named sets the application_name the prober's sessions log in with
// ("pg-kinetic health" by default), before its first use.
func (p *PGProber) Named(applicationName string) *PGProber {
	p.cred.Params = map[string]string{"application_name": applicationName}
	return p
}

// Probe asks the server at addr, in one query (probeSQL), whether it is in
// recovery, its system identifier, timeline and WAL positions. It reuses
// the open connection to addr when there is one; if that fails (say the
// server restarted since) it retries once on a fresh connection, so one
// restart does not look like an outage.
//
// On a primary past timeline 1 the verdict also carries its timeline
// history (Verdict.History), read once per server and timeline with
// historySQL; a role that may not read it gets none, and tries again
// after historyRetry.
//
// A standby whose last probe could not read received_tli, while a primary
// of its system was seen on a later timeline, is first asked the timeline
// it replays with IDENTIFY_SYSTEM on a replication connection, within half
// of the probe's time (identify.go: when, how often, and after a refusal).
func (p *PGProber) Probe(ctx context.Context, addr string) (Verdict, error) {
	now := time.Now()
	p.mu.Lock()
	st := p.replayTL[addr]
	due := st.identifyDue(p.primaryTL[st.sysID], now)
	p.mu.Unlock()
	var id identifyResult
	if due {
		ictx, cancel := identifyContext(ctx, now)
		id = p.identifySystem(ictx, addr)
		cancel()
	}

	var (
		v        Verdict
		fallback bool
	)
	err := p.run(ctx, addr, func(conn *pool.Conn) (err error) {
		v, fallback, err = query(ctx, conn)
		if err == nil && v.Detected == RolePrimary && v.Timeline > 1 {
			v.History = p.history(ctx, conn, addr, v.Timeline)
		}
		return err
	})
	if err != nil {
		if id.refused {
			p.mu.Lock()
			st := p.replayTL[addr]
			st.refusedAt, st.askedAt = now, now
			p.replayTL[addr] = st
			p.mu.Unlock()
		}
		return v, err
	}
	p.mu.Lock()
	if v.Detected == RolePrimary {
		p.primaryTL[v.SystemID] = max(p.primaryTL[v.SystemID], v.Timeline)
		if v.History != nil {
			v.History = p.lineageLocked(addr, v.SystemID, v.History)
		}
	}
	p.replayTL[addr], v.Timeline = p.replayTL[addr].observe(v, fallback, id, p.primaryTL[v.SystemID], now)
	p.mu.Unlock()
	return v, nil
}

// lineageLocked records h, a primary's history, among its system's and
// returns it knowing the others (WithOthers); the copy is cached with the
// server's history until another timeline's history is seen. p.mu is
// held.
func (p *PGProber) lineageLocked(addr, sysID string, h *TimelineHistory) *TimelineHistory {
	known := p.lineages[sysID]
	if _, ok := known[h.Timeline]; !ok {
		grown := make(map[uint32]*TimelineHistory, len(known)+1)
		for tl, o := range known {
			grown[tl] = o
		}
		grown[h.Timeline] = h
		if p.lineages == nil {
			p.lineages = map[string]map[uint32]*TimelineHistory{}
		}
		p.lineages[sysID], known = grown, grown
	}
	others := 0
	for tl := range known {
		if tl < h.Timeline {
			others++
		}
	}
	if h.Others() == others {
		return h
	}
	h = h.WithOthers(known)
	if c, ok := p.hist[addr]; ok && c.timeline == h.Timeline {
		c.h = h
		p.hist[addr] = c
	}
	return h
}

// historyViaReplication asks the server at addr for timeline tl's
// history with the replication protocol's TIMELINE_HISTORY command, on a
// connection of its own (replication=true) closed at once. The probe role
// needs REPLICATION and pg_hba.conf a replication entry for it.
func (p *PGProber) historyViaReplication(ctx context.Context, addr string, tl uint32) (*TimelineHistory, error) {
	conn, err := p.replicationConn(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Terminate(closeTimeout)
	rows, err := conn.Query(ctx, fmt.Sprintf("TIMELINE_HISTORY %d", tl))
	if err != nil {
		return nil, err
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return nil, errors.New("TIMELINE_HISTORY: unexpected result shape")
	}
	content := rows[0][1] // the file's bytes, as the walsender sends them
	if bytes.HasPrefix(content, []byte(`\x`)) {
		// A bytea in hex text form, should a server send it so.
		dec, err := hex.DecodeString(string(content[2:]))
		if err != nil {
			return nil, fmt.Errorf("TIMELINE_HISTORY: %w", err)
		}
		content = dec
	}
	return ParseTimelineHistory(tl, string(content))
}

// historySQL reads timeline %d's history file. pg_read_file needs a
// superuser, pg_read_server_files, or EXECUTE granted on
// pg_read_file(text) (docs/operations.md, Failover: privileges).
const historySQL = `select pg_read_file('pg_wal/' || lpad(upper(to_hex(%d)), 8, '0') || '.history')`

// historyRetry is how long a failed history read is not tried again for
// the same server and timeline (each failure is an ERROR in its log).
const historyRetry = 30 * time.Second

// cachedHistory is what the prober knows of one server's timeline
// history.
type cachedHistory struct {
	timeline uint32
	h        *TimelineHistory // nil: the read failed at failedAt
	failedAt time.Time
}

// history returns the history of timeline tl of the primary at addr, from
// the cache or read on conn; nil when it cannot be read. Its errors do not
// fail the probe.
func (p *PGProber) history(ctx context.Context, conn *pool.Conn, addr string, tl uint32) *TimelineHistory {
	p.mu.Lock()
	c, ok := p.hist[addr]
	p.mu.Unlock()
	if ok && c.timeline == tl && (c.h != nil || time.Since(c.failedAt) < historyRetry) {
		return c.h
	}
	c = cachedHistory{timeline: tl}
	rows, err := conn.Query(ctx, fmt.Sprintf(historySQL, tl))
	if err == nil && len(rows) == 1 && len(rows[0]) == 1 {
		c.h, err = ParseTimelineHistory(tl, string(rows[0][0]))
	}
	if c.h == nil {
		// A role with REPLICATION may ask the walsender instead.
		c.h, _ = p.historyViaReplication(ctx, addr, tl)
	}
	if c.h == nil && ctx.Err() != nil {
		// Out of time (a loaded host: the walsender's login alone is a
		// SCRAM exchange), not refused: the next probe tries again.
		return nil
	}
	if c.h == nil {
		c.failedAt = time.Now()
	}
	p.mu.Lock()
	if p.hist == nil {
		p.hist = map[string]cachedHistory{}
	}
	p.hist[addr] = c
	p.mu.Unlock()
	return c.h
}

// positionSQL reads a primary's WAL insert position in bytes (at or after
// the end of every commit so far, also with synchronous_commit = off), its
// timeline, wal_block_size and its WAL flush position (how far standbys
// can have received it). pg_current_wal_insert_lsn() fails during
// recovery: a server that is not (or no longer) a primary gives no
// position at all.
const positionSQL = `select pg_current_wal_insert_lsn() - '0/0',
  ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
  current_setting('wal_block_size'), pg_current_wal_flush_lsn() - '0/0'`

// Position reads the WAL insert position of the primary at addr
// (positionSQL), normalised as a commit's end is (NormalizeInsertLSN),
// its timeline and its WAL flush position. Like Probe it keeps its
// connection between calls.
func (p *PGProber) Position(ctx context.Context, addr string) (lsn, flushed uint64, timeline uint32, err error) {
	err = p.run(ctx, addr, func(conn *pool.Conn) error {
		rows, err := conn.Query(ctx, positionSQL)
		if err != nil {
			return err
		}
		if len(rows) != 1 || len(rows[0]) != 4 {
			return errors.New("position: unexpected result shape")
		}
		raw, err1 := strconv.ParseUint(string(rows[0][0]), 10, 64)
		tli, err2 := strconv.ParseUint(string(rows[0][1]), 10, 32)
		blk, err3 := strconv.ParseUint(string(rows[0][2]), 10, 32)
		fl, err4 := strconv.ParseUint(string(rows[0][3]), 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return fmt.Errorf("position: %w", err)
		}
		lsn, flushed, timeline = NormalizeInsertLSN(raw, blk), fl, uint32(tli)
		return nil
	})
	return lsn, flushed, timeline, err
}

// flushSQL makes a primary write out its WAL up to at least a position
// (%d, in bytes) when it has not yet: WAL written without a transaction
// ID (VACUUM's, a read's page pruning) or by a commit with
// synchronous_commit = off stays in the primary's buffers until its WAL
// writer writes it, 200 ms to 600 ms later by default, and no standby can
// replay it before. A transaction that writes WAL and has an ID is flushed
// at commit, with all WAL before it; pg_logical_emit_message(true, …)
// makes one with a record that standbys replay as nothing, and
// synchronous_commit = local (for this transaction only) flushes it
// whatever the server's default, without waiting for synchronous
// standbys. CASE evaluates its branches in order: nothing is written when
// the WAL is flushed already. The answer is the flush position before,
// and the message's position (flushed with its commit), or NULL when
// nothing was needed. (A subquery with a volatile function is not pulled
// up: f is read once.)
const flushSQL = `select f, case when f >= %d then null
  when set_config('synchronous_commit', 'local', true) = '' then null
  else pg_logical_emit_message(true, 'pg_kinetic', '') - '0/0' end
from (select pg_current_wal_flush_lsn() - '0/0' as f) s`

// FlushTo makes the primary at addr flush its WAL up to lsn at least
// (flushSQL); it reports whether that took a write (false: it was flushed
// already), and a position its WAL is flushed up to now. Like Probe it
// keeps its connection between calls.
func (p *PGProber) FlushTo(ctx context.Context, addr string, lsn uint64) (wrote bool, flushed uint64, err error) {
	err = p.run(ctx, addr, func(conn *pool.Conn) error {
		rows, err := conn.Query(ctx, fmt.Sprintf(flushSQL, lsn))
		if err != nil {
			return err
		}
		if len(rows) != 1 || len(rows[0]) != 2 {
			return errors.New("flush: unexpected result shape")
		}
		col := rows[0][0]
		if wrote = rows[0][1] != nil; wrote {
			col = rows[0][1]
		}
		if flushed, err = strconv.ParseUint(string(col), 10, 64); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		return nil
	})
	return wrote, flushed, err
}

// replaySQL reads a standby's replay position in bytes, its timeline
// (as the probe does) and start time; it answers nothing useful off a
// standby (pg_is_in_recovery() false).
const replaySQL = `select pg_is_in_recovery(), pg_last_wal_replay_lsn() - '0/0',
  coalesce(nullif((select received_tli from pg_stat_wal_receiver), 0),
           (select timeline_id from pg_control_checkpoint())),
  (extract(epoch from pg_postmaster_start_time()) * 1000000)::bigint`

// ReplayPosition reads the replay position of the standby at addr, its
// timeline and start time (replaySQL); an error when addr is not in
// recovery. Like Probe it keeps its connection between calls.
func (p *PGProber) ReplayPosition(ctx context.Context, addr string) (lsn uint64, timeline uint32, started time.Time, err error) {
	err = p.run(ctx, addr, func(conn *pool.Conn) error {
		rows, err := conn.Query(ctx, replaySQL)
		if err != nil {
			return err
		}
		if len(rows) != 1 || len(rows[0]) != 4 {
			return errors.New("replay position: unexpected result shape")
		}
		if string(rows[0][0]) != "t" {
			return errors.New("replay position: the server is not in recovery")
		}
		raw, err1 := strconv.ParseUint(string(rows[0][1]), 10, 64)
		tli, err2 := strconv.ParseUint(string(rows[0][2]), 10, 32)
		us, err3 := strconv.ParseInt(string(rows[0][3]), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("replay position: %w", err)
		}
		lsn, timeline, started = raw, uint32(tli), time.UnixMicro(us)
		return nil
	})
	return lsn, timeline, started, err
}

// run calls fn with the open connection to addr, or a new one. If fn
// fails on a reused connection (say the server restarted since) it is
// retried once on a fresh connection, so one restart does not look like
// an outage. The connection is kept when fn succeeds.
func (p *PGProber) run(ctx context.Context, addr string, fn func(*pool.Conn) error) error {
	conn, reused := p.take(addr), true
	if conn == nil {
		var err error
		if conn, err = p.connect(ctx, addr); err != nil {
			return err
		}
		reused = false
	}
	err := fn(conn)
	if err != nil && reused && ctx.Err() == nil {
		conn.Close()
		if conn, err = p.connect(ctx, addr); err != nil {
			return err
		}
		err = fn(conn)
	}
	if err != nil {
		conn.Close()
		return err
	}
	p.put(addr, conn)
	return nil
}

// Forget cancels a connection to addr still being made, waits for that
// dial to end, and closes the open connection to addr (with a Terminate,
// bounded by closeTimeout).
func (p *PGProber) Forget(addr string) {
	p.mu.Lock()
	d := p.dialing[addr]
	p.mu.Unlock()
	if d != nil {
		d.cancel()
		<-d.done // its connection, if it made one, is now in idle
	}
	p.mu.Lock()
	conn := p.idle[addr]
	delete(p.idle, addr)
	delete(p.replayTL, addr)
	p.mu.Unlock()
	if conn != nil {
		conn.Terminate(closeTimeout)
	}
}

// Close forgets every address. Connections in use by a running Probe are
// closed when it returns.
func (p *PGProber) Close() {
	p.mu.Lock()
	p.closed = true
	addrs := make(map[string]bool, len(p.idle)+len(p.dialing))
	for a := range p.idle {
		addrs[a] = true
	}
	for a := range p.dialing {
		addrs[a] = true
	}
	p.mu.Unlock()
	for a := range addrs {
		p.Forget(a)
	}
}

func (p *PGProber) take(addr string) *pool.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.idle[addr]
	delete(p.idle, addr)
	return c
}

// put keeps conn for the next probe of addr, or closes it when the prober
// is closed or another probe of addr already parked one.
func (p *PGProber) put(addr string, conn *pool.Conn) {
	p.mu.Lock()
	if !p.closed && p.idle[addr] == nil {
		p.idle[addr] = conn
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	conn.Terminate(closeTimeout)
}

// connect returns a new connection to addr. The connection is made by a
// background dial bounded by DialTimeout, shared with any earlier probe
// whose ctx ended while it was under way; when ctx ends first, connect
// fails and the dial goes on, parking its connection for the next probe.
func (p *PGProber) connect(ctx context.Context, addr string) (*pool.Conn, error) {
	p.mu.Lock()
	d := p.dialing[addr]
	if d == nil {
		dctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
		d = &pendingDial{done: make(chan struct{}), cancel: cancel}
		p.dialing[addr] = d
		go p.runDial(dctx, addr, d)
	}
	p.mu.Unlock()
	select {
	case <-d.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("connecting (still under way in the background): %w", ctx.Err())
	}
	if d.err != nil {
		return nil, d.err
	}
	if conn := p.take(addr); conn != nil {
		return conn, nil
	}
	// Only Forget or Close (which closed it) or a concurrent probe of the
	// same address (the checker runs one at a time) could have taken it.
	return nil, errors.New("probe connection closed before use")
}

// runDial is the background half of connect.
func (p *PGProber) runDial(ctx context.Context, addr string, d *pendingDial) {
	defer d.cancel()
	conn, err := p.dialer.Dial(ctx, addr, p.cred)
	if err == nil {
		p.put(addr, conn)
	}
	p.mu.Lock()
	d.err = err
	delete(p.dialing, addr)
	p.mu.Unlock()
	close(d.done)
}

// query runs probeSQL on conn and decodes its row.
func query(ctx context.Context, conn *pool.Conn) (v Verdict, fallback bool, err error) {
	rows, err := conn.Query(ctx, probeSQL)
	if err != nil {
		return Verdict{}, false, err
	}
	if len(rows) != 1 || len(rows[0]) != 10 {
		return Verdict{}, false, errors.New("probe: unexpected result shape")
	}
	return decodeProbeRow(rows[0])
}

// decodeProbeRow turns probeSQL's row (text format; nil is NULL) into the
// fields a Prober fills, and whether a standby's timeline came from the
// fallback (column 10).
func decodeProbeRow(row [][]byte) (Verdict, bool, error) {
	v, err := decodeProbeColumns(row)
	if err != nil {
		return Verdict{}, false, err
	}
	switch string(row[9]) {
	case "t":
		return v, true, nil
	case "f":
		return v, false, nil
	}
	return Verdict{}, false, fmt.Errorf("probe: timeline fallback %q", row[9])
}

// decodeProbeColumns decodes probeSQL's columns 1 to 9.
func decodeProbeColumns(row [][]byte) (Verdict, error) {
	var v Verdict
	switch string(row[0]) {
	case "t":
		v.Detected = RoleStandby
	case "f":
		v.Detected = RolePrimary
	default:
		return Verdict{}, fmt.Errorf("probe: pg_is_in_recovery() returned %q", row[0])
	}
	if len(row[1]) == 0 {
		return Verdict{}, errors.New("probe: no system identifier")
	}
	v.SystemID = string(row[1])
	var tl, insert, blockSize, started uint64
	for _, f := range []struct {
		name string
		text []byte
		bits int
		dst  *uint64
	}{
		{"timeline", row[2], 32, &tl},
		{"current WAL position", row[3], 64, &insert},
		{"receive position", row[4], 64, &v.ReceiveLSN},
		{"replay position", row[5], 64, &v.ReplayLSN},
		{"wal_block_size", row[7], 32, &blockSize},
		{"start time", row[8], 63, &started},
	} {
		if f.text == nil {
			continue // NULL: unknown
		}
		n, err := strconv.ParseUint(string(f.text), 10, f.bits)
		if err != nil {
			return Verdict{}, fmt.Errorf("probe: %s %q: %w", f.name, f.text, err)
		}
		*f.dst = n
	}
	v.Timeline = uint32(tl)
	v.CurrentLSN = NormalizeInsertLSN(insert, blockSize)
	if started != 0 {
		v.StartedAt = time.UnixMicro(int64(started))
	}
	switch string(row[6]) {
	case "t":
		v.ReplayPaused = true
	case "f", "":
	default:
		return Verdict{}, fmt.Errorf("probe: pg_is_wal_replay_paused() returned %q", row[6])
	}
	return v, nil
}
