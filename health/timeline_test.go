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

// TestTimelineFork: a timeline that is not an ancestor shares WAL up to
// where the first of the two lineages left their latest common timeline,
// when its history is known.
func TestTimelineFork(t *testing.T) {
	// 1 -> 2 at 0/3000000; 2 -> 3 at 0/5000000, 3 -> 5 at 0/9000000;
	// and 6 forked off 3 at 0/8000000 (its standby never followed 5);
	// 4 forked off 2 at 0/6000000.
	h3 := mustHistory(t, 3, "1\t0/2000000\tr\n2\t0/5000000\tr\n")
	h4 := mustHistory(t, 4, "1\t0/2000000\tr\n2\t0/6000000\tr\n")
	h5 := mustHistory(t, 5, "1\t0/2000000\tr\n2\t0/5000000\tr\n3\t0/9000000\tr\n")
	h6 := mustHistory(t, 6, "1\t0/2000000\tr\n2\t0/5000000\tr\n3\t0/8000000\tr\n")
	all := map[uint32]*TimelineHistory{3: h3, 4: h4, 5: h5, 6: h6}
	k6 := h6.WithOthers(all)
	if k6.Others() != 3 || h6.Others() != 0 {
		t.Fatalf("WithOthers: %d others, the original %d", k6.Others(), h6.Others())
	}
	for _, tc := range []struct {
		h   *TimelineHistory
		tl  uint32
		end uint64
		ok  bool
	}{
		{k6, 5, 0x8000000, true}, // both on 3: 5 left it at 9, 6 at 8
		{k6, 4, 0x5000000, true}, // both on 2: 4 left it at 6, 6 at 5
		{k6, 3, 0, false},        // an ancestor: SwitchPoint answers
		{h6, 5, 0, false},        // 5's history unknown
		{k6, 7, 0, false},        // unknown
		{nil, 5, 0, false},
	} {
		end, ok := tc.h.Fork(tc.tl)
		if end != tc.end || ok != tc.ok {
			t.Errorf("Fork(%d) on %v = %X, %v; want %X, %v", tc.tl, tc.h, end, ok, tc.end, tc.ok)
		}
	}
}

// TestProberLineage: a primary's history comes to know the histories its
// system's earlier primaries reported, and the copy is cached until
// another timeline's is seen.
func TestProberLineage(t *testing.T) {
	p := &PGProber{hist: map[string]cachedHistory{}}
	h5 := mustHistory(t, 5, "4\t0/9000000\tr\n")
	h6 := mustHistory(t, 6, "4\t0/8000000\tr\n")
	p.hist["a:1"] = cachedHistory{timeline: 5, h: h5}
	if got := p.lineageLocked("a:1", "sys", h5); got.Others() != 0 {
		t.Fatalf("the first history knows %d others", got.Others())
	}
	p.hist["b:1"] = cachedHistory{timeline: 6, h: h6}
	got := p.lineageLocked("b:1", "sys", h6)
	if end, ok := got.Fork(5); !ok || end != 0x8000000 {
		t.Fatalf("6's history: Fork(5) = %X, %v", end, ok)
	}
	if p.hist["b:1"].h != got {
		t.Fatal("the copy is not cached")
	}
	if again := p.lineageLocked("b:1", "sys", got); again != got {
		t.Fatal("a second probe made another copy")
	}
	if other := p.lineageLocked("c:1", "other", mustHistory(t, 6, "4\t0/1000000\tr\n")); other.Others() != 0 {
		t.Fatalf("another system's history knows %d others", other.Others())
	}
}

// mustHistory parses timeline tl's history text or fails the test.
func mustHistory(t *testing.T, tl uint32, text string) *TimelineHistory {
	t.Helper()
	h, err := ParseTimelineHistory(tl, text)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
