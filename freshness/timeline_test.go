package freshness

import (
	"testing"

	"github.com/pg-kinetic/pg-kinetic/health"
)

func TestCarry(t *testing.T) {
	h2, err := health.ParseTimelineHistory(2, "1\t0/5000000\tno recovery target specified\n")
	if err != nil {
		t.Fatal(err)
	}
	h3, err := health.ParseTimelineHistory(3, "1\t0/5000000\tr\n2\t0/7000000\tr\n")
	if err != nil {
		t.Fatal(err)
	}
	fork3, err := health.ParseTimelineHistory(3, "1\t0/4000000\tr\n")
	if err != nil {
		t.Fatal(err)
	}
	fork3Knows2 := fork3.WithOthers(map[uint32]*health.TimelineHistory{2: h2, 3: fork3})
	tok := func(s string) Token {
		t.Helper()
		x, err := ParseToken(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	tests := []struct {
		tok         string
		current     uint32
		h           *health.TimelineHistory
		want        string
		known, lost bool
		sp          LSN
	}{
		{"1:0/4FFFFFF", 2, h2, "2:0/4FFFFFF", true, false, 0x5000000},
		{"1:0/5000000", 2, h2, "2:0/5000000", true, false, 0x5000000},
		{"1:0/5000001", 2, h2, "2:0/5000000", true, true, 0x5000000},
		{"1:1/0", 2, h2, "2:0/5000000", true, true, 0x5000000}, // compared as numbers
		{"2:0/6000000", 2, h2, "2:0/6000000", false, false, 0},
		{"3:0/1", 2, h2, "3:0/1", false, false, 0},
		{"0/4000000", 2, h2, "0/4000000", false, false, 0}, // bare: the current timeline
		{"1:0/4000000", 2, nil, "1:0/4000000", false, false, 0},
		{"1:0/4000000", 3, h2, "1:0/4000000", false, false, 0}, // a history of another timeline
		{"1:0/6000000", 3, h3, "3:0/5000000", true, true, 0x5000000},
		{"2:0/6000000", 3, h3, "3:0/6000000", true, false, 0x7000000},
		// Timeline 3 forked off 2: both left 1, at 0/5000000 and
		// 0/4000000 (a standby that never followed 2 was promoted).
		// Without 2's history nothing can be said; with it, what the
		// two share, up to 0/4000000, survived.
		{"2:0/6000000", 3, fork3, "2:0/6000000", false, false, 0},
		{"2:0/3000000", 3, fork3Knows2, "3:0/3000000", true, false, 0x4000000},
		{"2:0/4000000", 3, fork3Knows2, "3:0/4000000", true, false, 0x4000000},
		{"2:0/4800000", 3, fork3Knows2, "3:0/4000000", true, true, 0x4000000}, // on 1 after 3 left it
		{"2:0/6000000", 3, fork3Knows2, "3:0/4000000", true, true, 0x4000000},
		{"1:0/4800000", 3, fork3Knows2, "3:0/4000000", true, true, 0x4000000}, // (1 is an ancestor)
	}
	for _, tc := range tests {
		got, known, lost, sp := Carry(tok(tc.tok), tc.current, tc.h)
		if got != tok(tc.want) || known != tc.known || lost != tc.lost || sp != tc.sp {
			t.Errorf("Carry(%s, %d) = %s, known %v, lost %v, sp %s; want %s, %v, %v, %s",
				tc.tok, tc.current, got, known, lost, sp, tc.want, tc.known, tc.lost, tc.sp)
		}
	}
}
