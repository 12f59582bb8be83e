package health

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// TimelineHistory is the history of a timeline, as PostgreSQL keeps it in
// pg_wal/TTTTTTTT.history on the server that created the timeline (and on
// every server that followed it): each earlier timeline of its lineage and
// the WAL position where it was left — the switch point. WAL before a
// timeline's switch point is shared with every later timeline of the
// lineage; anything written on it at or after the switch point is not.
//
// A TimelineHistory is immutable once parsed; verdicts share it by pointer.
type TimelineHistory struct {
	// Timeline is the timeline whose history this is.
	Timeline uint32
	// ends maps each ancestor timeline to its switch point (in bytes).
	ends map[uint32]uint64
	// others are the histories of earlier timelines of the same system
	// that were seen (WithOthers), by timeline: a timeline that is not
	// an ancestor of this one forked off its lineage (Fork).
	others map[uint32]*TimelineHistory
}

// WithOthers returns h knowing the histories others (of the same system;
// h's own timeline and later ones are left out): a copy, h stays as it
// is. others is not modified afterwards.
func (h *TimelineHistory) WithOthers(others map[uint32]*TimelineHistory) *TimelineHistory {
	c := *h
	c.others = make(map[uint32]*TimelineHistory, len(others))
	for tl, o := range others {
		if tl < h.Timeline && o != nil {
			c.others[tl] = &TimelineHistory{Timeline: o.Timeline, ends: o.ends} // (without theirs)
		}
	}
	return &c
}

// Others reports how many other timelines' histories h knows.
func (h *TimelineHistory) Others() int {
	if h == nil {
		return 0
	}
	return len(h.others)
}

// Fork answers, for an earlier timeline tl that is not an ancestor of
// h.Timeline but whose history h knows (WithOthers), how much of tl's WAL
// h.Timeline shares: up to end (in bytes), where the first of the two
// lineages left their latest common timeline. A failover to a standby
// that never followed timeline tl (it stayed on tl's parent, then was
// promoted) makes such a fork: everything written on tl after end is not
// on h.Timeline. false: tl is h's ancestor, or its history is unknown.
//
// For example, with timeline 5 (history "4 0/9000000") and timeline 6
// (history "4 0/8000000"), Fork(5) on 6's history is 0/8000000.
func (h *TimelineHistory) Fork(tl uint32) (end uint64, ok bool) {
	if h == nil {
		return 0, false
	}
	if _, anc := h.ends[tl]; anc {
		return 0, false
	}
	o := h.others[tl]
	if o == nil {
		return 0, false
	}
	var common uint32
	for a, left := range o.ends {
		if mine, shared := h.ends[a]; shared && a >= common {
			common, end = a, min(left, mine)
		}
	}
	return end, common != 0
}

// SwitchPoint returns where timeline tl was left on the way to
// h.Timeline, and false when tl is not an ancestor of it (or h is nil).
func (h *TimelineHistory) SwitchPoint(tl uint32) (uint64, bool) {
	if h == nil {
		return 0, false
	}
	lsn, ok := h.ends[tl]
	return lsn, ok
}

// ParseTimelineHistory parses the text of timeline tl's history file. Its
// lines are "PARENT_TLI<tab>SWITCHPOINT<tab>REASON" (the switch point as
// X/X hexadecimal), blank lines and lines starting with # are ignored, as
// PostgreSQL's readTimeLineHistory does. Parent timelines must increase
// and stay below tl.
//
// For example, for timeline 3:
//
//	1	0/3000148	no recovery target specified
//	2	0/5000000	no recovery target specified
//
// gives SwitchPoint(1) = 0x3000148, SwitchPoint(2) = 0x5000000.
func ParseTimelineHistory(tl uint32, text string) (*TimelineHistory, error) {
	h := &TimelineHistory{Timeline: tl, ends: map[uint32]uint64{}}
	var last uint32
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("timeline %d history, line %d: %q: want TIMELINE and SWITCHPOINT", tl, n, line)
		}
		parent, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || parent == 0 || uint32(parent) <= last || uint32(parent) >= tl {
			return nil, fmt.Errorf("timeline %d history, line %d: bad parent timeline %q", tl, n, f[0])
		}
		hi, lo, ok := strings.Cut(f[1], "/")
		h1, err1 := strconv.ParseUint(hi, 16, 32)
		l1, err2 := strconv.ParseUint(lo, 16, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("timeline %d history, line %d: bad switch point %q", tl, n, f[1])
		}
		last = uint32(parent)
		h.ends[last] = h1<<32 | l1
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return h, nil
}
