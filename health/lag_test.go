package health

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// The examples in EstimateLag's documentation, verbatim.
func TestEstimateLagDocExamples(t *testing.T) {
	history := []Sample{{at(0), 0x100}, {at(2 * time.Second), 0x200}, {at(4 * time.Second), 0x200}}
	now := at(5 * time.Second)
	for _, ex := range []struct {
		replay          uint64
		wantBytes, want int64
	}{
		{0x200, 0, 0},
		{0x300, 0, 0},
		{0x180, 0x80, 5000},
		{0x100, 0x100, 5000},
		{0x80, 0x180, -1},
		{0, -1, -1},
	} {
		if b, ms := EstimateLag(history, ex.replay, now); b != ex.wantBytes || ms != ex.want {
			t.Errorf("replay %#x: EstimateLag = (%d, %d), want (%d, %d)", ex.replay, b, ms, ex.wantBytes, ex.want)
		}
	}
}

func TestEstimateLagEdges(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		history   []Sample
		replay    uint64
		now       time.Time
		wantBytes int64
		wantMS    int64
	}{
		{"empty history: unknown", nil, 0x100, at(0), -1, -1},
		{"empty history, replay 0: unknown", nil, 0, at(0), -1, -1},
		{"replay unknown: unknown even with history", []Sample{{at(0), 0x100}}, 0, at(s), -1, -1},
		{"one sample, caught up", []Sample{{at(0), 0x100}}, 0x100, at(time.Hour), 0, 0},
		{"one sample, behind it: ms unknown", []Sample{{at(0), 0x100}}, 0xFF, at(s), 1, -1},
		{"rounds up to the millisecond", []Sample{{at(0), 0x100}, {at(s), 0x200}}, 0x100, at(time.Microsecond), 0x100, 1},
		{"exactly 1ms", []Sample{{at(0), 0x100}, {at(s), 0x200}}, 0x100, at(time.Millisecond), 0x100, 1},
		{"sample at now still at replay: 0 ms though bytes behind", []Sample{{at(s), 0x100}, {at(2 * s), 0x200}}, 0x100, at(s), 0x100, 0},
		{"newest of equal positions counts", []Sample{{at(0), 0x100}, {at(3 * s), 0x100}, {at(4 * s), 0x200}}, 0x100, at(5 * s), 0x100, 2000},
		{"between samples: the older one", []Sample{{at(0), 0x100}, {at(s), 0x200}, {at(2 * s), 0x300}}, 0x2FF, at(3 * s), 1, 2000},
		{"across the 32-bit halves", []Sample{{at(0), 0xFFFFFFFF}, {at(s), 0x1_00000000}}, 0xFFFFFFFF, at(2 * s), 1, 2000},
		{"caught up across the halves", []Sample{{at(0), 0xFFFFFFFF}, {at(s), 0x1_00000000}}, 0x1_00000000, at(2 * s), 0, 0},
		{"huge distance is capped", []Sample{{at(0), 1}, {at(s), 1<<64 - 1}}, 1, at(2 * s), 1<<63 - 1, 2000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if b, ms := EstimateLag(tc.history, tc.replay, tc.now); b != tc.wantBytes || ms != tc.wantMS {
				t.Errorf("EstimateLag = (%d, %d), want (%d, %d)", b, ms, tc.wantBytes, tc.wantMS)
			}
		})
	}
}

// Scenarios of a primary probed every second and a standby probed at the
// same moments, with time injected: the history is built by appendSample as
// the Checker builds it, and each step checks the standby's lag.
func TestEstimateLagScenarios(t *testing.T) {
	type step struct {
		primary uint64 // the primary's position sampled this second
		replay  uint64 // the standby's replay position this second
		bytes   int64
		ms      int64
	}
	repeat := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"idle pair: lag 0 forever (10 minutes)", repeat(600, step{0x3000000, 0x3000000, 0, 0})},
		{"busy pair, standby keeps up: 0", []step{
			{0x1000, 0x1000, 0, 0}, {0x2000, 0x2000, 0, 0}, {0x5000, 0x5000, 0, 0}, {0x9000, 0x9000, 0, 0},
		}},
		{"paused standby: lag grows with time while the primary writes", []step{
			{0x1000, 0x1000, 0, 0},
			{0x2000, 0x1000, 0x1000, 1000},
			{0x3000, 0x1000, 0x2000, 2000},
			{0x4000, 0x1000, 0x3000, 3000},
		}},
		{"paused standby, primary stops writing: lag still grows", []step{
			{0x1000, 0x1000, 0, 0},
			{0x2000, 0x1000, 0x1000, 1000},
			{0x2000, 0x1000, 0x1000, 2000},
			{0x2000, 0x1000, 0x1000, 3000},
			{0x2000, 0x1000, 0x1000, 4000},
		}},
		{"standby catches up: back to 0, and stays there while idle", cat(
			[]step{{0x1000, 0x1000, 0, 0}, {0x2000, 0x1000, 0x1000, 1000}, {0x3000, 0x1000, 0x2000, 2000}},
			[]step{{0x4000, 0x2000, 0x2000, 2000}}, // replayed up to the sample of 2 s ago
			[]step{{0x4000, 0x4000, 0, 0}},
			repeat(200, step{0x4000, 0x4000, 0, 0}),
		)},
		{"standby behind the whole history: ms unknown, bytes known", cat(
			[]step{{0x1000, 0x800, 0x800, -1}},
			repeat(3, step{0x1000, 0x800, 0x800, -1}),
		)},
		{"history slides past a stuck standby: ms becomes unknown", cat(
			[]step{{0x1000, 0x1000, 0, 0}},
			func() []step { // a write every second for 2 minutes
				var out []step
				for i := 1; i <= 120; i++ {
					out = append(out, step{0x1000 + uint64(i), 0x1000, int64(i), int64(i) * 1000})
				}
				return out
			}(),
			[]step{{0x1000 + 121, 0x1000, 121, -1}},
		)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var (
				history []Sample
				seen    []time.Time
			)
			for i, st := range tc.steps {
				now := at(time.Duration(i) * time.Second)
				history, seen = appendSample(history, seen, Sample{At: now, LSN: st.primary}, now)
				if len(history) > historyMax || len(seen) != len(history) {
					t.Fatalf("step %d: history of %d samples, %d seen", i, len(history), len(seen))
				}
				b, ms := EstimateLag(history, st.replay, now)
				if b != st.bytes || ms != st.ms {
					t.Fatalf("step %d (primary %#x, replay %#x): lag (%d bytes, %d ms), want (%d, %d); history %v",
						i, st.primary, st.replay, b, ms, st.bytes, st.ms, history)
				}
			}
		})
	}
}

func TestAppendSample(t *testing.T) {
	const s = time.Second
	build := func(samples ...Sample) ([]Sample, []time.Time) {
		var (
			h    []Sample
			seen []time.Time
		)
		for _, x := range samples {
			h, seen = appendSample(h, seen, x, x.At.Add(time.Millisecond))
		}
		return h, seen
	}
	t.Run("a run of equal positions keeps its first and last", func(t *testing.T) {
		h, seen := build(Sample{at(0), 1}, Sample{at(s), 2}, Sample{at(2 * s), 2}, Sample{at(3 * s), 2}, Sample{at(4 * s), 2}, Sample{at(5 * s), 3})
		want := []Sample{{at(0), 1}, {at(s), 2}, {at(4 * s), 2}, {at(5 * s), 3}}
		if fmt.Sprint(h) != fmt.Sprint(want) {
			t.Fatalf("history %v, want %v", h, want)
		}
		for i := range h {
			if !seen[i].Equal(h[i].At.Add(time.Millisecond)) {
				t.Fatalf("seen[%d] = %v, not the recording of %v", i, seen[i], h[i])
			}
		}
	})
	t.Run("an idle primary costs two samples", func(t *testing.T) {
		var (
			h    []Sample
			seen []time.Time
		)
		for i := range 10000 {
			h, seen = appendSample(h, seen, Sample{at(time.Duration(i) * 10 * time.Millisecond), 7}, at(0))
		}
		if len(h) != 2 || !h[0].At.Equal(at(0)) || !h[1].At.Equal(at(99990*time.Millisecond)) {
			t.Fatalf("history %v", h)
		}
	})
	t.Run("older than the window is dropped, the latest always kept", func(t *testing.T) {
		h, _ := build(Sample{at(0), 1}, Sample{at(s), 2}, Sample{at(historyWindow), 3}, Sample{at(historyWindow + s), 4})
		if len(h) != 3 || h[0].LSN != 2 {
			t.Fatalf("history %v, want the samples from 1s on", h)
		}
		h, _ = build(Sample{at(0), 1}, Sample{at(time.Hour), 2})
		if len(h) != 1 || h[0].LSN != 2 {
			t.Fatalf("history %v, want the latest only", h)
		}
	})
	t.Run("at most historyMax samples", func(t *testing.T) {
		var (
			h    []Sample
			seen []time.Time
		)
		for i := range historyMax + 10 {
			h, seen = appendSample(h, seen, Sample{at(time.Duration(i) * time.Millisecond), uint64(i + 1)}, at(0))
		}
		if len(h) != historyMax || len(seen) != historyMax || h[0].LSN != 11 || h[len(h)-1].LSN != historyMax+10 {
			t.Fatalf("%d samples from %v to %v", len(h), h[0], h[len(h)-1])
		}
	})
}

func TestNormalizeInsertLSN(t *testing.T) {
	const page = 8192
	tests := []struct {
		insert, blockSize, want uint64
	}{
		{0x3000028, page, 0x3000000}, // fresh cluster: just past a segment's long header
		{0x3002018, page, 0x3002000}, // just past a page's short header
		{0x3002020, page, 0x3002000}, // a record's 8-byte tail on a new page: same comparisons
		{0x3002028, page, 0x3002000},
		{0x3002030, page, 0x3002030}, // beyond any header: a record end
		{0x3002000, page, 0x3002000}, // on the boundary already (a write position)
		{0x3001FF8, page, 0x3001FF8},
		{0x1_00000018, page, 0x1_00000000},
		{0x3004018, 16384, 0x3004000},
		{0x3002018, 16384, 0x3002018}, // not a page boundary with 16 kB pages
		{0x3000028, 0, 0x3000028},     // block size unknown: unchanged
		{0, page, 0},
	}
	for _, tc := range tests {
		if got := NormalizeInsertLSN(tc.insert, tc.blockSize); got != tc.want {
			t.Errorf("NormalizeInsertLSN(%#x, %d) = %#x, want %#x", tc.insert, tc.blockSize, got, tc.want)
		}
	}
}
