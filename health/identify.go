package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pg-kinetic/pg-kinetic/pool"
)

// A standby's timeline without received_tli (issue 14 item 3).
//
// probeSQL reads a standby's timeline from its WAL receiver's
// received_tli, which a probe role without pg_read_all_stats sees as NULL;
// it then falls back to the standby's last restartpoint's and minimum
// recovery point's timelines, which trail a timeline switch by up to
// checkpoint_timeout. A role with REPLICATION may ask the standby itself:
// on a standby (a cascading walsender) the replication command
// IDENTIFY_SYSTEM answers, in its timeline column, the timeline of the
// last record it replayed (PostgreSQL 15 walsender.c IdentifySystem →
// GetStandbyFlushRecPtr: currTLI = replayTLI). That is the timeline the
// standby's queries see, never ahead of it, where received_tli may be.
//
// A replication connection is a login and a walsender, so the prober does
// not ask at every probe, only when it can matter (identifyDue): the
// standby's last probe fell back, and a primary of its system was seen on a
// later timeline than the standby is known to replay. While its answers
// leave the standby behind, the asks back off (identifyWait); a refusal
// by the server (no REPLICATION, no pg_hba.conf replication entry, no free
// walsender) waits identifyRetry.

// identifyGap is the wait after the first IDENTIFY_SYSTEM that left a
// standby behind its primary's timeline; it doubles at each further one,
// up to identifyRetry.
const identifyGap = 500 * time.Millisecond

// identifyRetry is how long a server that refused a replication
// connection is not asked again (each refusal is a FATAL in its log), and
// the longest wait between asks of a standby that stays behind.
const identifyRetry = 30 * time.Second

// replayTimeline is what a PGProber knows of one standby's replayed
// timeline beyond its latest probe row, for one run of the server. Guarded
// by PGProber.mu.
type replayTimeline struct {
	sysID   string    // the server's system identifier at its last probe
	started time.Time // its run (pg_postmaster_start_time()) at its last probe
	// fallback: the last probe could not read received_tli, and the
	// timeline came from the restartpoint and minimum recovery point.
	fallback bool
	// known is the highest timeline known replayed in this run while
	// falling back: the fallback's, or an IDENTIFY_SYSTEM answer. A
	// standby's replay timeline never goes down within a run, so an
	// earlier answer still holds. 0 when not falling back.
	known uint32
	// asks counts the IDENTIFY_SYSTEM asks of this run in a row that
	// left known below the primary's timeline (an answer still behind,
	// or a failure); askedAt is the last one.
	asks    int
	askedAt time.Time
	// refusedAt is when the server last refused the replication
	// connection or the command (zero: never); it outlives runs.
	refusedAt time.Time
}

// identifyWait is the least time between an ask that left a standby
// behind (the n-th in a row, n ≥ 1) and the next: identifyGap·2^(n-1),
// at most identifyRetry.
func identifyWait(n int) time.Duration {
	d := identifyGap
	for i := 1; i < n && d < identifyRetry; i++ {
		d *= 2
	}
	return min(d, identifyRetry)
}

// identifyDue reports whether the next probe of the standby whose state is
// s should ask it IDENTIFY_SYSTEM first, at now; primary is the highest
// timeline a primary of s's system was seen on (0: none). It is due when
//
//   - the standby's last probe fell back (received_tli unreadable),
//   - primary is above the timeline known for the standby,
//   - the server did not refuse a replication connection in the last
//     identifyRetry, and
//   - this is the first ask since the standby fell behind (asks = 0), or
//     identifyWait(asks) has passed since the last one.
//
// For example, with a standby known on timeline 1 falling back, whose
// primary is on timeline 2, last asked at 12:00:00.000:
//
//	asks 0                                    → due
//	asks 1, now 12:00:00.400                  → not due (wait 500 ms)
//	asks 1, now 12:00:00.500                  → due
//	asks 3, now 12:00:01.999                  → not due (wait 2 s)
//	asks 9, now 12:00:29.999                  → not due (wait 30 s, the cap)
//	refused at 12:00:00.000, now 12:00:29.999 → not due
//	received_tli readable (fallback false)    → not due
//	primary on timeline 1                     → not due
func (s replayTimeline) identifyDue(primary uint32, now time.Time) bool {
	switch {
	case !s.fallback || primary <= s.known:
		return false
	case !s.refusedAt.IsZero() && now.Sub(s.refusedAt) < identifyRetry:
		return false
	case s.asks == 0:
		return true
	}
	return now.Sub(s.askedAt) >= identifyWait(s.asks)
}

// identifyResult is the outcome of an IDENTIFY_SYSTEM ask.
type identifyResult struct {
	asked   bool
	sysID   string // the system identifier it answered
	tl      uint32 // the timeline it answered, 0 when it failed
	refused bool   // the server refused (an ErrorResponse), see identifyRetry
}

// observe returns the state after a probe of the server whose row decoded
// to v (fallback: its timeline came from the fallback), id the outcome of
// the ask made before that probe's query if any, primary as for
// identifyDue, at now; and the timeline to report for it.
//
// An answer counts only for the run it was asked in: the probe's start
// time and system identifier must be those of the previous probe, which
// the ask came after (a server that restarted in between may have come
// back behind it). It is read before the probe's query, so the positions
// of the verdict are at least as recent as the timeline reported: the
// standby replays at least that timeline when they are read, and is
// never made to look ahead of what it replays.
//
// For example, a standby falling back to timeline 1 in the run started
// at S, its primary on timeline 2:
//
//	no ask                                        → 1
//	asked in run S, answered 2                    → 2 (asks 0: caught up)
//	asked in run S, answered 1                    → 1 (asks 1)
//	asked, answered 2; the probe shows run S'     → 1 (new run: the answer is dropped)
//	earlier answer 2 in run S, no ask now         → 2
//	received_tli readable, 3                      → 3 (state cleared)
func (s replayTimeline) observe(v Verdict, fallback bool, id identifyResult, primary uint32, now time.Time) (replayTimeline, uint32) {
	sameRun := !v.StartedAt.IsZero() && v.StartedAt.Equal(s.started) && v.SystemID == s.sysID
	n := replayTimeline{sysID: v.SystemID, started: v.StartedAt, refusedAt: s.refusedAt}
	if sameRun {
		n.known, n.asks, n.askedAt = s.known, s.asks, s.askedAt
	}
	if id.asked {
		n.askedAt = now
		if id.refused {
			n.refusedAt = now
		}
	}
	if v.Detected != RoleStandby || !fallback {
		n.known, n.asks = 0, 0
		return n, v.Timeline
	}
	n.fallback = true
	n.known = max(n.known, v.Timeline)
	if id.asked && sameRun && id.sysID == v.SystemID {
		n.known = max(n.known, id.tl)
	}
	switch {
	case n.known >= primary:
		n.asks = 0
	case id.asked:
		n.asks++
	}
	return n, n.known
}

// identifyContext bounds an ask made within a probe to half of what is
// left of the probe's time, so that the probe's own query keeps the other
// half: a probe that runs late fails, and the server would look down.
func identifyContext(ctx context.Context, now time.Time) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, now.Add(dl.Sub(now)/2))
	}
	return context.WithTimeout(ctx, DialTimeout)
}

// replicationConn opens a replication connection (replication=true) to
// addr as the prober's role. The role needs REPLICATION and pg_hba.conf a
// replication entry for it.
func (p *PGProber) replicationConn(ctx context.Context, addr string) (*pool.Conn, error) {
	cred := p.cred
	cred.Params = map[string]string{"replication": "true"}
	for k, v := range p.cred.Params {
		cred.Params[k] = v
	}
	return p.dialer.Dial(ctx, addr, cred)
}

// identifySystem asks the server at addr IDENTIFY_SYSTEM on a replication
// connection of its own, closed at once, and returns the system
// identifier and timeline it answers (see above: on a standby, the
// timeline it replays).
func (p *PGProber) identifySystem(ctx context.Context, addr string) identifyResult {
	r := identifyResult{asked: true}
	conn, err := p.replicationConn(ctx, addr)
	if err == nil {
		defer conn.Terminate(closeTimeout)
		var rows [][][]byte
		if rows, err = conn.Query(ctx, "IDENTIFY_SYSTEM"); err == nil {
			r.sysID, r.tl, err = decodeIdentifySystem(rows)
		}
	}
	var se *pool.ServerError
	r.refused = err != nil && errors.As(err, &se)
	return r
}

// decodeIdentifySystem reads IDENTIFY_SYSTEM's row: systemid, timeline,
// xlogpos, dbname.
func decodeIdentifySystem(rows [][][]byte) (sysID string, tl uint32, err error) {
	if len(rows) != 1 || len(rows[0]) < 2 || len(rows[0][0]) == 0 {
		return "", 0, errors.New("IDENTIFY_SYSTEM: unexpected result shape")
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(rows[0][1])), 10, 32)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("IDENTIFY_SYSTEM: timeline %q", rows[0][1])
	}
	return string(rows[0][0]), uint32(n), nil
}
