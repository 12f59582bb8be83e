package freshness

import (
	"strings"
	"testing"
)

func TestParseLSN(t *testing.T) {
	tests := []struct {
		in   string
		want LSN
		ok   bool
	}{
		{"0/0", 0, true},
		{"0/16B6C50", 0x16B6C50, true},
		{"0/16b6c50", 0x16B6C50, true},
		{"1/0", 1 << 32, true},
		{"0/FFFFFFFF", 0xFFFFFFFF, true},
		{"FFFFFFFF/FFFFFFFF", 1<<64 - 1, true},
		{"00000000/00000001", 1, true}, // eight digits with leading zeros, as PostgreSQL accepts
		{"ff/0000000a", 0xFF_0000000A, true},
		{"", 0, false},
		{"/", 0, false},
		{"0/", 0, false},
		{"/0", 0, false},
		{"0", 0, false},
		{"16B6C50", 0, false},
		{"0/1/2", 0, false},
		{"100000000/0", 0, false}, // nine digits
		{"0/000000001", 0, false},
		{"0x1/0", 0, false},
		{"+1/0", 0, false},
		{"-1/0", 0, false},
		{" 0/1", 0, false},
		{"0/1 ", 0, false},
		{"0/1\n", 0, false},
		{"0/G", 0, false},
		{"0_1/0", 0, false},
		{"1:0/1", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseLSN(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseLSN(%q) = %v, %v; want %#x, ok %v", tc.in, uint64(got), err, uint64(tc.want), tc.ok)
		}
	}
}

func TestLSNString(t *testing.T) {
	for _, tc := range []struct {
		l    LSN
		want string
	}{
		{0, "0/0"},
		{0x16B6C50, "0/16B6C50"},
		{1 << 32, "1/0"},
		{0xFFFFFFFF, "0/FFFFFFFF"},
		{0xAB_0000000C, "AB/C"},
		{1<<64 - 1, "FFFFFFFF/FFFFFFFF"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("LSN(%#x).String() = %q, want %q", uint64(tc.l), got, tc.want)
		}
	}
}

// Positions order as numbers: text order is wrong across the 32-bit halves
// and across digit counts.
func TestLSNOrder(t *testing.T) {
	ordered := []string{"0/0", "0/9", "0/10", "0/A0", "0/FFFFFFFF", "1/0", "1/9", "1/10", "A/0", "10/0", "FFFFFFFF/FFFFFFFF"}
	for i := 1; i < len(ordered); i++ {
		a, _ := ParseLSN(ordered[i-1])
		b, err := ParseLSN(ordered[i])
		if err != nil {
			t.Fatal(err)
		}
		if !(a < b) {
			t.Errorf("%s < %s is false", ordered[i-1], ordered[i])
		}
	}
}

func TestParseToken(t *testing.T) {
	tests := []struct {
		in   string
		want Token
		ok   bool
	}{
		{"1:0/16B6C50", Token{1, 0x16B6C50}, true},
		{"0/16B6C50", Token{0, 0x16B6C50}, true},
		{"2:1/0", Token{2, 1 << 32}, true},
		{"4294967295:FFFFFFFF/FFFFFFFF", Token{1<<32 - 1, 1<<64 - 1}, true},
		{"01:0/1", Token{1, 1}, true},
		{"0/0", Token{}, true},
		{"0:0/16B6C50", Token{}, false}, // timeline 0 is spelled bare
		{"4294967296:0/1", Token{}, false},
		{"-1:0/1", Token{}, false},
		{"+1:0/1", Token{}, false},
		{"a:0/1", Token{}, false},
		{"1a:0/1", Token{}, false},
		{":0/1", Token{}, false},
		{"1:", Token{}, false},
		{"1:0", Token{}, false},
		{"1:2:0/1", Token{}, false},
		{" 1:0/1", Token{}, false},
		{"1 :0/1", Token{}, false},
		{"", Token{}, false},
		{"99999999999:0/1", Token{}, false},
	}
	for _, tc := range tests {
		got, err := ParseToken(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseToken(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestTokenStringAndIsZero(t *testing.T) {
	for _, tc := range []struct {
		t    Token
		want string
		zero bool
	}{
		{Token{1, 0x16B6C50}, "1:0/16B6C50", false},
		{Token{0, 0x16B6C50}, "0/16B6C50", false},
		{Token{}, "0/0", true},
		{Token{Timeline: 3}, "3:0/0", false},
		{Token{1<<32 - 1, 1 << 32}, "4294967295:1/0", false},
	} {
		if got := tc.t.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.t, got, tc.want)
		}
		if tc.t.IsZero() != tc.zero {
			t.Errorf("%+v.IsZero() = %v", tc.t, !tc.zero)
		}
	}
}

func FuzzParseLSN(f *testing.F) {
	for _, s := range []string{"0/0", "0/16B6C50", "1/0", "FFFFFFFF/FFFFFFFF", "00000000/00000001", "ff/a", "0/", "/0", "1:0/1", "0x1/0", "100000000/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLSN(s)
		if err != nil {
			if l != 0 {
				t.Fatalf("ParseLSN(%q) failed but returned %v", s, l)
			}
			return
		}
		// Round trip through the canonical form, which differs from the
		// input only by case and leading zeros.
		back, err := ParseLSN(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLSN(%q) = %v; ParseLSN(%q) = %v, %v", s, uint64(l), l.String(), uint64(back), err)
		}
		hi, lo, _ := strings.Cut(s, "/")
		chi, clo, _ := strings.Cut(l.String(), "/")
		if trim(hi) != chi || trim(lo) != clo {
			t.Fatalf("%q printed as %q", s, l.String())
		}
	})
}

// trim returns hex digits in canonical form: upper case, no leading zeros.
func trim(h string) string {
	h = strings.TrimLeft(strings.ToUpper(h), "0")
	if h == "" {
		return "0"
	}
	return h
}

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1:0/16B6C50", "0/16B6C50", "0:0/1", "4294967295:FFFFFFFF/FFFFFFFF", "4294967296:0/1", "01:0/1", ":0/1", "1:", "1:2:0/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if !tok.IsZero() {
				t.Fatalf("ParseToken(%q) failed but returned %+v", s, tok)
			}
			return
		}
		back, err := ParseToken(tok.String())
		if err != nil || back != tok {
			t.Fatalf("ParseToken(%q) = %+v; ParseToken(%q) = %+v, %v", s, tok, tok.String(), back, err)
		}
		if strings.Contains(s, ":") != (tok.Timeline != 0) {
			t.Fatalf("ParseToken(%q) = %+v: timeline and colon disagree", s, tok)
		}
	})
}

// Every position and token survives String and back.
func FuzzLSNRoundTrip(f *testing.F) {
	f.Add(uint64(0), uint32(0))
	f.Add(uint64(0xFFFFFFFF), uint32(1))
	f.Add(uint64(1<<32), uint32(1<<32-1))
	f.Fuzz(func(t *testing.T, v uint64, tl uint32) {
		if l, err := ParseLSN(LSN(v).String()); err != nil || l != LSN(v) {
			t.Fatalf("LSN %#x: %q parsed as %v, %v", v, LSN(v).String(), uint64(l), err)
		}
		tok := Token{Timeline: tl, LSN: LSN(v)}
		if back, err := ParseToken(tok.String()); err != nil || back != tok {
			t.Fatalf("%+v: %q parsed as %+v, %v", tok, tok.String(), back, err)
		}
	})
}

func TestTokenLess(t *testing.T) {
	for _, tc := range []struct {
		a, b Token
		want bool
	}{
		{Token{1, 0x200}, Token{1, 0x300}, true},
		{Token{1, 0x300}, Token{1, 0x200}, false},
		{Token{1, 0x900}, Token{2, 0x100}, true},
		{Token{2, 0x100}, Token{1, 0x900}, false},
		{Token{2, 0x100}, Token{2, 0x100}, false},
		{Token{}, Token{1, 1}, true},
	} {
		if got := tc.a.Less(tc.b); got != tc.want {
			t.Errorf("%v.Less(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
