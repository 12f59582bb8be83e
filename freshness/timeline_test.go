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
	}
	for _, tc := range tests {
		got, known, lost, sp := Carry(tok(tc.tok), tc.current, tc.h)
		if got != tok(tc.want) || known != tc.known || lost != tc.lost || sp != tc.sp {
			t.Errorf("Carry(%s, %d) = %s, known %v, lost %v, sp %s; want %s, %v, %v, %s",
				tc.tok, tc.current, got, known, lost, sp, tc.want, tc.known, tc.lost, tc.sp)
		}
	}
}
