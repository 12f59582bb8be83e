package proxy

// SQL cancels relayed to replicas: pg_cancel_backend(pid) of a session's
// primary backend, which a client runs on the primary, also stops that
// session's statement where it runs, on a replica (docs/behaviour.md,
// "Session identity").

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// pendingCancel is a unit sent to the primary that calls
// pg_cancel_backend(pid) for sessions' primary backends. It is relayed
// when the unit's ReadyForQuery arrives without an error in the unit: the
// primary has then checked the caller's right to signal those backends,
// and signalled them.
type pendingCancel struct {
	seq     uint64 // unitSeq when the unit was sent (as effect.seq)
	targets []cancelTarget
}

// cancelTarget is a session whose statement ran on a replica when a
// pg_cancel_backend of its primary backend was sent: only that statement
// is cancelled there, and only if it still runs when the primary answered.
// (One that began later would not have been cancelled directly: the
// server's signal came before it. Relayed after the primary's answer, the
// cancel could otherwise reach the session's next statement, one that
// started after the primary's own signal already stopped a statement of
// the session there.)
type cancelTarget struct {
	ss *session
	l  *link
	// until: the statement still runs while l has seen fewer
	// ReadyForQuery than this.
	until uint64
}

// cancelPIDs appends to pids the process IDs that classified statement c
// cancels when it runs: its constants, and with bind (the body of the
// Bind that runs it) the parameters that carry one.
func cancelPIDs(pids []uint32, c *classified, bind []byte) []uint32 {
	var b *pgproto3.Bind
	for _, st := range c.Statements {
		for _, a := range st.Cancels {
			v := a.PID
			if a.Param > 0 {
				if bind == nil {
					continue
				}
				if b == nil {
					b = new(pgproto3.Bind)
					if b.Decode(bind) != nil {
						return pids
					}
				}
				var ok bool
				if v, ok = bindInt(b, a.Param-1); !ok {
					continue
				}
			}
			if v > 0 && v <= math.MaxUint32 {
				pids = append(pids, uint32(v))
			}
		}
	}
	return pids
}

// bindInt is parameter i of b as an integer, in the text or binary format
// (int2, int4 or int8).
func bindInt(b *pgproto3.Bind, i int) (int64, bool) {
	if i >= len(b.Parameters) || b.Parameters[i] == nil {
		return 0, false
	}
	v := b.Parameters[i]
	format := int16(0)
	switch {
	case len(b.ParameterFormatCodes) == 1:
		format = b.ParameterFormatCodes[0]
	case i < len(b.ParameterFormatCodes):
		format = b.ParameterFormatCodes[i]
	}
	if format == 0 {
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		return n, err == nil
	}
	switch len(v) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(v))), true
	case 4:
		return int64(int32(binary.BigEndian.Uint32(v))), true
	case 8:
		return int64(binary.BigEndian.Uint64(v)), true
	}
	return 0, false
}

// noteCancels remembers that the unit being sent to primary link l
// cancels pids, with the statements those sessions run on replicas now
// (relayCancelsLocked relays them once the unit succeeded).
func (ss *session) noteCancels(l *link, pids []uint32) {
	if len(pids) == 0 || l.replica {
		return
	}
	targets := ss.srv.cancelTargets(l.addr, pids)
	if len(targets) == 0 {
		return
	}
	ss.mu.Lock()
	ss.mu.cancels = append(ss.mu.cancels, pendingCancel{seq: ss.mu.unitSeq, targets: targets})
	ss.mu.Unlock()
}

// relayCancelsLocked relays the cancels of the unit whose ReadyForQuery
// just arrived (doneSeq), unless that unit failed (the server may have
// refused the caller). Callers hold ss.mu.
func (ss *session) relayCancelsLocked() {
	for len(ss.mu.cancels) > 0 && ss.mu.cancels[0].seq < ss.mu.doneSeq {
		c := ss.mu.cancels[0]
		ss.mu.cancels = ss.mu.cancels[1:]
		if c.seq != ss.mu.doneSeq-1 || ss.mu.unitErr && ss.mu.errDone == c.seq {
			continue
		}
		for _, t := range c.targets {
			go t.ss.cancelOnReplica(t)
		}
	}
	if len(ss.mu.cancels) == 0 {
		ss.mu.cancels = nil
	}
}

// cancelTargets finds the sessions whose primary backend on server is one
// of pids and that run a statement on a replica now.
func (s *Server) cancelTargets(server string, pids []uint32) []cancelTarget {
	s.mu.Lock()
	var sessions []*session
	for k, ss := range s.cancels {
		if slices.Contains(pids, k.pid) {
			sessions = append(sessions, ss)
		}
	}
	s.mu.Unlock()
	var targets []cancelTarget
	for _, ss := range sessions {
		if t, ok := ss.replicaStatement(server); ok {
			targets = append(targets, t)
		}
	}
	return targets
}

// replicaStatement is the statement the session runs on a replica, if its
// primary backend (whose PID the client was given) is on server and one
// runs there. A statement on the primary gets the server's own signal.
func (ss *session) replicaStatement(server string) (cancelTarget, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p, l := ss.mu.primary, ss.mu.cur
	if ss.txPool || p == nil || p.addr != server || p.conn.PID != ss.key.pid || l == nil || !l.replica || !ss.runsOnLocked(l) {
		return cancelTarget{}, false
	}
	until := l.batches
	if ss.mu.unsynced {
		until++ // (the batch being sent, not counted until its Sync)
	}
	return cancelTarget{ss: ss, l: l, until: until}, true
}

// cancelOnReplica sends a CancelRequest to the replica running t's
// statement, if that statement still runs.
func (ss *session) cancelOnReplica(t cancelTarget) {
	ss.mu.Lock()
	l := t.l
	if !ss.stillRunsLocked(t) || !l.claimLocked() {
		ss.mu.Unlock()
		return
	}
	ss.mu.Unlock()
	defer ss.unclaim(l)
	ss.sendCancelOn(l)
}

// stillRunsLocked reports whether t's statement still runs: its link is
// still the session's current one and has not answered it. Callers hold
// ss.mu.
func (ss *session) stillRunsLocked(t cancelTarget) bool {
	return t.l == ss.mu.cur && t.l.rfqs < t.until && ss.runsOnLocked(t.l)
}
