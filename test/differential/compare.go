package differential

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Diff is the first difference between two results of one sequence.
type Diff struct {
	Unit  int // index into the sequence's units; -1: the login
	Index int // index of the first differing line in that unit
	Want  []Line
	Got   []Line
	Class string
}

// Compare returns the first difference between want (PostgreSQL) and got
// (kineticd), or nil when they match.
func Compare(seq Sequence, want, got *Result) *Diff {
	if d := firstLine(toLines(want.Startup), toLines(got.Startup)); d >= 0 {
		return &Diff{Unit: -1, Index: d, Want: toLines(want.Startup), Got: toLines(got.Startup),
			Class: classOf("login", "", lineAt(toLines(want.Startup), d), lineAt(toLines(got.Startup), d))}
	}
	n := max(len(want.Units), len(got.Units))
	for u := range n {
		var w, g []Line
		if u < len(want.Units) {
			w = want.Units[u]
		}
		if u < len(got.Units) {
			g = got.Units[u]
		}
		d := firstLine(w, g)
		if d < 0 {
			continue
		}
		ctx, fe := "", ""
		if u < len(seq.Units) {
			ctx = seq.Units[u].Kind()
			idx := -1
			if d < len(w) {
				idx = w[d].FE
			} else if d < len(g) {
				idx = g[d].FE
			}
			fe = feName(seq.Units[u], idx)
		}
		return &Diff{Unit: u, Index: d, Want: w, Got: g, Class: classOf(ctx, fe, lineAt(w, d), lineAt(g, d))}
	}
	return nil
}

func toLines(ss []string) []Line {
	out := make([]Line, len(ss))
	for i, s := range ss {
		out[i] = Line{FE: -1, S: s}
	}
	return out
}

func firstLine(a, b []Line) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i].S != b[i].S {
			return i
		}
	}
	return -1
}

func lineAt(ls []Line, i int) string {
	if i < len(ls) {
		return ls[i].S
	}
	return ""
}

// feName names the frontend message a line answers ("Bind", "Describe S").
func feName(u Unit, idx int) string {
	if idx < 0 || idx >= len(u.Msgs) {
		return ""
	}
	switch m := u.Msgs[idx].(type) {
	case *pgproto3.Describe:
		return "Describe " + string(m.ObjectType)
	case *pgproto3.Close:
		return "Close " + string(m.ObjectType)
	case *pgproto3.Query:
		if strings.Contains(strings.ToLower(m.String), "pg_kinetic.") {
			w := strings.Fields(m.String)
			if len(w) >= 2 {
				return "Query " + strings.ToUpper(w[0]) + " " + strings.TrimSuffix(w[1], ";")
			}
		}
		return "Query"
	case *pgproto3.Parse:
		if strings.Contains(strings.ToLower(m.Query), "pg_kinetic.") {
			return "Parse (pg_kinetic)"
		}
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", u.Msgs[idx]), "*pgproto3.")
}

// shape reduces a canonical line to what names a mismatch class: the
// message type, with the SQLSTATE of errors and notices, the first word
// of a command tag, the name of a ParameterStatus.
func shape(s string) string {
	switch {
	case s == "":
		return "nothing"
	case strings.HasPrefix(s, hangPrefix):
		return "hang"
	case strings.HasPrefix(s, closedPrefix):
		return "connection lost"
	case strings.HasPrefix(s, connectFail):
		return "connect failed"
	}
	w := strings.Fields(s)
	switch w[0] {
	case "ErrorResponse", "NoticeResponse":
		if len(w) >= 3 {
			return w[0] + "(" + w[2] + ")"
		}
	case "CommandComplete":
		if len(w) >= 2 {
			return w[0] + "(" + strings.Trim(w[1], `"`) + ")"
		}
	case "ParameterStatus":
		if len(w) >= 2 {
			name, _, _ := strings.Cut(w[1], "=")
			return w[0] + "(" + name + ")"
		}
	case "ReadyForQuery":
		return s
	}
	return w[0]
}

func classOf(ctx, fe, want, got string) string {
	sw, sg := shape(want), shape(got)
	where := ctx
	if fe != "" {
		where = fe + " in " + ctx
	}
	if sw == sg {
		return fmt.Sprintf("%s: %s differs", where, sw)
	}
	return fmt.Sprintf("%s: PostgreSQL %s, kineticd %s", where, sw, sg)
}

// Format renders a mismatch for people: the sequence, then the differing
// unit's answers side by side with the first difference marked.
func (d *Diff) Format(seq Sequence, mode string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mismatch in mode %s, sequence %s (replay: KINETIC_DIFF_ONLY=%q)\n", mode, seq.Ref(), seq.Ref())
	fmt.Fprintf(&b, "class: %s\n", d.Class)
	b.WriteString("sequence:\n")
	b.WriteString(seq.String())
	if d.Unit < 0 {
		b.WriteString("first difference at login (ParameterStatus):\n")
	} else {
		n := d.Unit
		if seq.Kept != nil && d.Unit < len(seq.Kept) {
			n = seq.Kept[d.Unit]
		}
		fmt.Fprintf(&b, "first difference in unit %d, answer %d:\n", n, d.Index)
	}
	b.WriteString(SideBySide(d.Want, d.Got, d.Index))
	return b.String()
}

// SideBySide renders two answer lists in columns, marking row mark.
func SideBySide(want, got []Line, mark int) string {
	const w = 70
	var b strings.Builder
	fmt.Fprintf(&b, "     %-*s | %s\n", w, "PostgreSQL", "kineticd")
	for i := range max(len(want), len(got)) {
		l, r := lineAt(want, i), lineAt(got, i)
		if len(l) > w {
			l = l[:w-3] + "..."
		}
		if len(r) > 2*w {
			r = r[:2*w-3] + "..."
		}
		m := "  "
		if i == mark {
			m = ">>"
		}
		fmt.Fprintf(&b, "  %s %-*s | %s\n", m, w, l, r)
	}
	return b.String()
}
