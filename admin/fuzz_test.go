package admin

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// FuzzExecute runs any text as an admin console command (the console reads
// a client's simple Query into it). Properties: every error is an *Error
// with a well-formed SQLSTATE of the console's set; a result's rows all
// have as many values as it has columns, and a result with columns has a
// SHOW tag; an empty command answers the zero Result; a command the Source
// acted on (RELOAD, ROUTING, PAUSE, RESUME) is one whose first word names
// it, and ROUTING STAGE reaches the Source only with a non-negative stage.
func FuzzExecute(f *testing.F) {
	for _, c := range append(slices.Clone(Commands),
		"show servers;", "  SHOW   CLIENTS ; ", "ROUTING STAGE 3", "routing stage -1", "ROUTING STAGE 99999999999999999999",
		"ROUTING STAGE", "PAUSE main", "RESUME", "SHOW", "SELECT 1", ";", "", "show\tconfig\n", "ROUTING STAGE ３") {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, command string) {
		src := &fakeSource{}
		res, err := Execute(command, src)
		acted := src.reloads + src.rollbacks + len(src.stages) + len(src.paused) + len(src.resumed)
		first := ""
		if w := strings.Fields(command); len(w) > 0 {
			first = strings.ToUpper(strings.TrimSuffix(w[0], ";"))
		}
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("%q: error %v (%T) is not an *Error", command, err, err)
			}
			switch ae.Code {
			case CodeSyntaxError, CodeInvalidParameterValue, CodeObjectNotInPrerequisiteState:
			default:
				t.Fatalf("%q: SQLSTATE %q", command, ae.Code)
			}
			if ae.Message == "" {
				t.Fatalf("%q: error without a message", command)
			}
			if acted > 0 {
				t.Fatalf("%q: refused (%v) after the Source acted", command, err)
			}
			return
		}
		if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(command), ";")) == "" {
			if res.Tag != "" || res.Columns != nil {
				t.Fatalf("%q: empty command answered %+v", command, res)
			}
			return
		}
		if res.Tag == "" {
			t.Fatalf("%q: no command tag", command)
		}
		if res.Columns != nil && res.Tag != TagShow || res.Columns == nil && len(res.Rows) > 0 {
			t.Fatalf("%q: columns %v with tag %q and %d rows", command, res.Columns, res.Tag, len(res.Rows))
		}
		for i, row := range res.Rows {
			if len(row) != len(res.Columns) {
				t.Fatalf("%q: row %d has %d values for %d columns", command, i, len(row), len(res.Columns))
			}
		}
		switch {
		case acted > 1:
			t.Fatalf("%q: the Source acted %d times", command, acted)
		case acted == 1 && !slices.Contains([]string{"RELOAD", "ROUTING", "PAUSE", "RESUME"}, first):
			t.Fatalf("%q: the Source acted on a command starting with %q", command, first)
		case acted == 0 && res.Columns == nil:
			t.Fatalf("%q: tag %q without the Source acting", command, res.Tag)
		}
		for _, n := range src.stages {
			if n < 0 {
				t.Fatalf("%q: stage %d reached the Source", command, n)
			}
		}
	})
}
