package classify

import (
	"encoding/json"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// The fast path. pg_query's protobuf tree costs several times the parse
// itself (serialising in C, unmarshalling in Go), while its JSON output is
// cheap. Most first-seen texts are plain SELECTs, and for those the JSON
// tree answers: fastSelects walks it without building it and proves a text
// is only SELECTs with none of the things that make a SELECT a write
// (locking clauses, INTO, data-modifying CTEs, TEMP relations, write
// functions), collecting the function names. Whenever it meets anything
// else, or a JSON shape it does not expect, it declines and the full path
// (statement.go, on the protobuf tree) decides. The fuzz target and the
// corpus test check that both paths always agree.

// fastDeclined are the JSON keys (node and field names) whose presence
// sends a text to the full path.
var fastDeclined = toSet(
	"LockingClause", "lockingClause", "intoClause", "IntoClause",
	"InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt",
)

// fastMaxDepth bounds the JSON nesting the fast path follows; deeper trees
// take the full path.
const fastMaxDepth = 1000

// fastStatement is what the fast path reports of one SELECT: its unknown
// functions and the relations it names (Statement.Funcs, .Relations).
type fastStatement struct {
	funcs, rels []string
}

// fastSelects parses sql. A parse error is returned as err. Otherwise ok
// reports whether the fast path answered, with each statement's unknown
// functions and relations (sorted, deduplicated).
func (c *Classifier) fastSelects(sql string) (stmts []fastStatement, ok bool, err error) {
	j, err := pg.ParseToJSON(sql)
	if err != nil {
		return nil, false, err
	}
	w := jsonWalker{s: j, c: c}
	stmts, ok = w.top()
	return stmts, ok && w.i == len(w.s), nil
}

// jsonWalker reads pg_query's JSON parse tree. Any failure (unexpected
// shape, declined key, depth) makes it stop and report false.
type jsonWalker struct {
	s     string
	i     int
	depth int
	c     *Classifier
	funcs []string // of the statement being walked
	rels  []string // relnames of its RangeVars
	ctes  []string // its CTE names
}

// top reads {"version":N,"stmts":[{"stmt":{"SelectStmt":{…}},…},…]}.
func (w *jsonWalker) top() ([]fastStatement, bool) {
	var out []fastStatement
	ok := w.object(func(key string) bool {
		switch key {
		case "version":
			return w.value()
		case "stmts":
			return w.array(func() bool {
				return w.object(func(key string) bool {
					if key != "stmt" {
						return w.value() // stmt_location, stmt_len
					}
					w.funcs, w.rels, w.ctes = nil, nil, nil
					if !w.object(func(key string) bool {
						return key == "SelectStmt" && w.value()
					}) {
						return false
					}
					out = append(out, fastStatement{funcs: sortedUnique(w.funcs), rels: relationsLess(w.rels, w.ctes)})
					return true
				})
			})
		}
		return false
	})
	return out, ok
}

func (w *jsonWalker) ws() {
	for w.i < len(w.s) {
		switch w.s[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

func (w *jsonWalker) peek() byte {
	w.ws()
	if w.i < len(w.s) {
		return w.s[w.i]
	}
	return 0
}

// value reads any value, applying the fast path's checks to objects.
func (w *jsonWalker) value() bool {
	switch w.peek() {
	case '{':
		return w.object(w.member)
	case '[':
		return w.array(w.value)
	case '"':
		_, ok := w.str()
		return ok
	case 0:
		return false
	default: // number, true, false, null
		for w.i < len(w.s) {
			switch w.s[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			w.i++
		}
		return true
	}
}

// member handles one key of an object in a statement tree.
func (w *jsonWalker) member(key string) bool {
	if _, no := fastDeclined[key]; no {
		return false
	}
	switch key {
	case "FuncCall":
		return w.funcCall()
	case "relpersistence":
		v, ok := w.str()
		return ok && v != "t" // a TEMP relation: the full path pins
	case "RangeVar":
		return w.object(func(key string) bool {
			if key != "relname" {
				return w.member(key)
			}
			v, ok := w.str()
			w.rels = append(w.rels, strings.Clone(v))
			return ok
		})
	case "ctename":
		v, ok := w.str()
		w.ctes = append(w.ctes, strings.Clone(v))
		return ok
	}
	return w.value()
}

// funcCall reads a FuncCall object: its funcname decides, its other fields
// (arguments, FILTER, OVER…) are walked like any value.
func (w *jsonWalker) funcCall() bool {
	var names [3]string
	n := 0
	if !w.object(func(key string) bool {
		if key != "funcname" {
			return w.member(key)
		}
		return w.array(func() bool {
			return w.object(func(key string) bool {
				return key == "String" && w.object(func(key string) bool {
					if key != "sval" {
						return w.value()
					}
					s, ok := w.str()
					if !ok || n == len(names) {
						return false
					}
					names[n] = s
					n++
					return true
				})
			})
		})
	}) || n == 0 {
		return false
	}
	schema := ""
	if n >= 2 {
		schema = names[n-2]
	}
	if strings.EqualFold(names[n-1], "current_setting") {
		return false // its argument decides: the full path (walk.go)
	}
	fl, unknown := w.c.funcKind(schema, names[n-1])
	if fl != 0 {
		return false // a write function: the full path decides (and pins)
	}
	if unknown {
		w.funcs = append(w.funcs, strings.Clone(names[n-1]))
	}
	return true
}

// object reads {"k":v,…}, calling member for each key with the walker
// positioned at the value.
func (w *jsonWalker) object(member func(key string) bool) bool {
	if w.peek() != '{' {
		return false
	}
	w.i++
	if w.depth++; w.depth > fastMaxDepth {
		return false
	}
	defer func() { w.depth-- }()
	if w.peek() == '}' {
		w.i++
		return true
	}
	for {
		if w.peek() != '"' {
			return false
		}
		key, ok := w.str()
		if !ok || w.peek() != ':' {
			return false
		}
		w.i++
		if !member(key) {
			return false
		}
		switch w.peek() {
		case ',':
			w.i++
		case '}':
			w.i++
			return true
		default:
			return false
		}
	}
}

// array reads [v,…], calling elem for each element.
func (w *jsonWalker) array(elem func() bool) bool {
	if w.peek() != '[' {
		return false
	}
	w.i++
	if w.depth++; w.depth > fastMaxDepth {
		return false
	}
	defer func() { w.depth-- }()
	if w.peek() == ']' {
		w.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch w.peek() {
		case ',':
			w.i++
		case ']':
			w.i++
			return true
		default:
			return false
		}
	}
}

// str reads a JSON string. Without escapes it is a substring of the
// output (no copy).
func (w *jsonWalker) str() (string, bool) {
	if w.peek() != '"' {
		return "", false
	}
	start := w.i
	escaped := false
	for i := start + 1; i < len(w.s); i++ {
		switch w.s[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			w.i = i + 1
			if !escaped {
				return w.s[start+1 : i], true
			}
			var v string
			if json.Unmarshal([]byte(w.s[start:i+1]), &v) != nil {
				return "", false
			}
			return v, true
		}
	}
	return "", false
}
