package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration file.
//
// Key is the dotted TOML key path of the offending value. Array-of-tables
// entries and array elements carry their zero-based index in brackets, so the
// second replica's address of the first route is
//
//	routes[0].replicas[1].address
//
// Key segments that are not bare TOML keys are double-quoted, as in TOML
// ("server.\"odd key\""). Line is the 1-based line of the key in File; for a
// missing key it is the line of the enclosing table header, and for something
// missing from the whole document (no [[users]], no [[routes]]) it is 1.
// Line is 0 only when the file could not be read at all.
type Problem struct {
	File string
	Line int
	Key  string
	Msg  string
}

// String renders the problem as "PATH:LINE: KEY: what is wrong", the format
// kineticd --check-config prints. A problem with no line (the file could not
// be read) renders as "PATH: what is wrong".
func (p Problem) String() string {
	file := p.File
	if file == "" {
		file = "<config>"
	}
	if p.Line == 0 && p.Key == "" {
		return file + ": " + p.Msg
	}
	return fmt.Sprintf("%s:%d: %s: %s", file, p.Line, p.Key, p.Msg)
}

// Errors is every problem found in one configuration file, in line order.
// Load, Parse and Holder.Reload return it (as *Errors) for any failure, so a
// caller can print err.Error() — one problem per line — or range over the
// problems with errors.As.
type Errors []Problem

// Error returns one line per problem, without a trailing newline.
func (e *Errors) Error() string {
	if e == nil || len(*e) == 0 {
		return "config: no problems"
	}
	var b strings.Builder
	for i, p := range *e {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}
