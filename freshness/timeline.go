package freshness

import "github.com/pg-kinetic/pg-kinetic/health"

// Carry brings token t, written on an earlier timeline, onto the current
// timeline using the current timeline's history h (SPEC §5, §7): WAL
// before the switch point of t's timeline is shared by every later
// timeline of the lineage, so a position at or before it names the same
// commit there. It returns:
//
//   - known = false: nothing can be said (t is not from an earlier
//     timeline, h is nil or not the current timeline's, or t's timeline is
//     not in its lineage and its own history is not known); the caller keeps t, and Eligible sends reads
//     needing it to the primary (timeline_changed).
//   - known, not lost: the same position on the current timeline.
//   - known, lost: t lies beyond the switch point — the write it names was
//     never on the current timeline (lost in the failover); carried is the
//     switch point, on the current timeline, the most of t that survived.
//
// For example, with current timeline 2 whose history says timeline 1 was
// left at 0/5000000:
//
//	Carry(1:0/4FFFFFF) = 2:0/4FFFFFF, known
//	Carry(1:0/5000000) = 2:0/5000000, known   (the switch point itself)
//	Carry(1:0/5000001) = 2:0/5000000, known, lost, switch point 0/5000000
//	Carry(2:0/6000000) = unknown (already current)
//	Carry(3:0/1)       = unknown (a later timeline)
//
// A token of a timeline that forked off the current lineage (timeline 2
// left timeline 1 at 0/5000000, timeline 3 left timeline 1 at 0/4000000:
// a standby that never followed timeline 2 was promoted) is judged by
// what the two timelines share, when timeline 2's history is known
// (TimelineHistory.Fork):
//
//	Carry(2:0/3000000) = 3:0/3000000, known
//	Carry(2:0/6000000) = 3:0/4000000, known, lost, switch point 0/4000000
func Carry(t Token, current uint32, h *health.TimelineHistory) (carried Token, known, lost bool, switchPoint LSN) {
	if t.Timeline == 0 || current == 0 || t.Timeline >= current || h == nil || h.Timeline != current {
		return t, false, false, 0
	}
	sp, ok := h.SwitchPoint(t.Timeline)
	if !ok {
		// t's timeline forked off the current lineage (the standby
		// promoted never followed it): what the two share is known
		// when t's timeline's history is.
		if sp, ok = h.Fork(t.Timeline); !ok {
			return t, false, false, 0
		}
	}
	if t.LSN <= LSN(sp) {
		return Token{Timeline: current, LSN: t.LSN}, true, false, LSN(sp)
	}
	return Token{Timeline: current, LSN: LSN(sp)}, true, true, LSN(sp)
}
