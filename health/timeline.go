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
