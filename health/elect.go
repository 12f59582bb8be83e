package health

// Election is a route's primary as the probes see it (SPEC §7,
// routes.ha.follow_failover).
type Election struct {
	// Primary is the address of the elected primary, "" when there is
	// none: no server is a primary of the route, or two are on the same
	// timeline (Ambiguous). Writes go to Primary only.
	Primary string
	// Ambiguous: two or more servers not in recovery, of the route's
	// system, on the highest timeline. Writes fail closed until one of
	// them is gone or in recovery.
	Ambiguous bool
	// Timeline is the elected primary's timeline (0 when none or unknown).
	// The highest timeline elected so far never goes down: a server not in
	// recovery on a lower one is a split brain however alone it is.
	Timeline uint32
}

// Elect chooses a route's primary from the latest verdicts of its servers
// (configured primary and replicas alike). sysID is the route's system
// identifier ("" when not known yet: any is accepted); last is the previous
// election.
//
// The rules, in order:
//
//  1. The candidates are the servers that are reachable, not in recovery,
//     of the route's system (sysID), and on a timeline at or above
//     last.Timeline: a primary on a lower timeline than one already
//     elected is an old primary restarted without a rewind (split brain).
//  2. One candidate on the highest candidate timeline: it is the primary.
//  3. Two or more there: none, Ambiguous (writes fail closed).
//  4. No candidate: the last primary stays elected while it is unreachable
//     (it may come back; writes fail with a connection error meanwhile) or
//     has no verdict; a last primary that is reachable and in recovery, or
//     of another system, is no longer one: none.
//
// For example, with servers a, b, c of one system, last = {a, timeline 1}:
//
//	a primary tl1, b standby, c standby         → a
//	a unreachable, b standby, c standby         → a (kept)
//	a unreachable, b primary tl2, c standby     → b, timeline 2
//	a primary tl1, b primary tl2                → b (a is a split brain)
//	a primary tl1, b primary tl1                → none, ambiguous
//	a standby, b standby, c standby             → none
//
// and with last = {b, timeline 2}: a primary tl1 alone → none (a is a
// split brain, b is gone).
func Elect(vs []Verdict, sysID string, last Election) Election {
	var top uint32
	n, pick := 0, ""
	for _, v := range vs {
		if !v.Reachable || v.Detected != RolePrimary || (sysID != "" && v.SystemID != sysID) || v.Timeline < last.Timeline {
			continue
		}
		switch {
		case n == 0 || v.Timeline > top:
			top, n, pick = v.Timeline, 1, v.Addr
		case v.Timeline == top:
			n++
		}
	}
	switch {
	case n == 1:
		return Election{Primary: pick, Timeline: top}
	case n > 1:
		return Election{Ambiguous: true, Timeline: last.Timeline}
	}
	if last.Primary != "" {
		kept := true
		for _, v := range vs {
			if v.Addr == last.Primary && v.Reachable {
				kept = false // reachable, yet not a candidate: demoted, or another system
			}
		}
		if kept {
			return Election{Primary: last.Primary, Timeline: last.Timeline}
		}
	}
	return Election{Timeline: last.Timeline}
}
