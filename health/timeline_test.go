package health

import "testing"

func TestParseTimelineHistory(t *testing.T) {
	h, err := ParseTimelineHistory(3, "1\t0/3000148\tno recovery target specified\n\n# comment\n2\t1/5000000\tbefore 2000-01-01 00:00:00+00\n")
	if err != nil {
		t.Fatal(err)
	}
	for tl, want := range map[uint32]uint64{1: 0x3000148, 2: 0x1_05000000} {
		if got, ok := h.SwitchPoint(tl); !ok || got != want {
			t.Errorf("SwitchPoint(%d) = %x, %v; want %x", tl, got, ok, want)
		}
	}
	if _, ok := h.SwitchPoint(3); ok {
		t.Error("a timeline is not its own ancestor")
	}
	var none *TimelineHistory
	if _, ok := none.SwitchPoint(1); ok {
		t.Error("a nil history knows a switch point")
	}
	for _, bad := range []string{
		"1",                 // no switch point
		"x\t0/1\tr",         // parent not a number
		"0\t0/1\tr",         // timeline 0
		"3\t0/1\tr",         // not below the timeline
		"2\t0/1\n1\t0/2",    // not increasing
		"1\t01\tr",          // no slash
		"1\tG/1\tr",         // not hexadecimal
		"1\t1FFFFFFFF/0\tr", // high half too big
	} {
		if _, err := ParseTimelineHistory(3, bad); err == nil {
			t.Errorf("ParseTimelineHistory(3, %q) accepted", bad)
		}
	}
}
