package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"
)

// decoder copies a generic TOML document (as the TOML parser returns it:
// map[string]any) onto a Config that already holds the defaults. Only keys
// present in the document overwrite a field, so an explicit 0 stays 0 and an
// omitted key keeps its default, in every entry of every array of tables —
// which MetaData.IsDefined cannot tell us, since it does not look inside
// arrays of tables. Going through the generic document also lets us report
// every unknown key and every wrong type, where decoding straight into the
// struct stops at the first.
type decoder struct {
	file  string
	lines *keyLines
	probs Errors
	bad   map[string]bool // keys that already have a problem
	// defined holds every key present in the document, as path strings.
	defined map[string]bool
}

func (d *decoder) problem(p path, format string, args ...any) {
	key := p.String()
	if d.bad[key] {
		return // one problem per key: a wrong type is not also "required"
	}
	d.bad[key] = true
	d.probs = append(d.probs, Problem{
		File: d.file,
		Line: d.lines.lineOf(p),
		Key:  key,
		Msg:  fmt.Sprintf(format, args...),
	})
}

var (
	routeType    = reflect.TypeFor[Route]()
	endpointType = reflect.TypeFor[Endpoint]()
	classType    = reflect.TypeFor[QueryClass]()
	userType     = reflect.TypeFor[User]()
)

// newElem returns the defaults an entry of an array of tables starts from.
func newElem(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t {
	case routeType:
		v.Set(reflect.ValueOf(DefaultRoute()))
	case endpointType:
		v.Set(reflect.ValueOf(DefaultReplica()))
	case classType:
		v.Set(reflect.ValueOf(DefaultClass()))
	case userType:
		v.Set(reflect.ValueOf(DefaultUser()))
	}
	return v
}

// tomlFields maps the TOML keys of struct type t to field indexes.
func tomlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		m[tag] = i
	}
	return m
}

func (d *decoder) decodeStruct(p path, m map[string]any, rv reflect.Value) {
	fields := tomlFields(rv.Type())
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kp := p.key(k)
		d.defined[kp.String()] = true
		i, ok := fields[k]
		if !ok {
			d.problem(kp, "%s", unknownKeyMsg(p, k, fields))
			continue
		}
		// The primary is an Endpoint like a replica, but weight is a share
		// of reads among replicas and means nothing for the primary.
		if rv.Type() == endpointType && k == "weight" && len(p) > 0 && p[len(p)-1] == "primary" {
			d.problem(kp, "unknown key: weight applies to [[routes.replicas]] only")
			continue
		}
		d.decodeValue(kp, m[k], rv.Field(i))
	}
}

func (d *decoder) decodeValue(p path, v any, fv reflect.Value) {
	switch fv.Kind() {
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			d.problem(p, "must be a string (got %s)", describe(v))
			return
		}
		fv.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			d.problem(p, "must be a boolean, true or false (got %s)", describe(v))
			return
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			d.problem(p, "must be an integer (got %s)", describe(v))
			return
		}
		if fv.OverflowInt(n) {
			d.problem(p, "%d is out of range", n)
			return
		}
		fv.SetInt(n)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			d.problem(p, "must be a table (got %s)", describe(v))
			return
		}
		d.decodeStruct(p, m, fv)
	case reflect.Slice:
		d.decodeSlice(p, v, fv)
	case reflect.Pointer:
		// An optional value: nil when the key is absent, set when present.
		e := reflect.New(fv.Type().Elem())
		d.decodeValue(p, v, e.Elem())
		fv.Set(e)
	default:
		panic("config: unsupported field kind " + fv.Kind().String())
	}
}

func (d *decoder) decodeSlice(p path, v any, fv reflect.Value) {
	et := fv.Type().Elem()
	var elems []any
	switch a := v.(type) {
	case []any:
		elems = a
	case []map[string]any:
		elems = make([]any, len(a))
		for i := range a {
			elems[i] = a[i]
		}
	default:
		if et.Kind() == reflect.Struct {
			d.problem(p, "must be an array of tables, written [[%s]] (got %s)", plainKey(p), describe(v))
		} else {
			d.problem(p, "must be an array of %ss (got %s)", kindWord(et), describe(v))
		}
		return
	}
	out := reflect.MakeSlice(fv.Type(), 0, len(elems))
	for i, e := range elems {
		ev := newElem(et)
		if et.Kind() == reflect.Struct {
			m, ok := e.(map[string]any)
			if !ok {
				d.problem(p.index(i), "must be a table (got %s)", describe(e))
				continue
			}
			d.decodeStruct(p.index(i), m, ev)
		} else {
			d.decodeValue(p.index(i), e, ev)
		}
		out = reflect.Append(out, ev)
	}
	fv.Set(out)
}

func kindWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Bool:
		return "boolean"
	}
	return t.String()
}

// describe names a TOML value's type for a message, with the value itself
// when it is a short scalar.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			return "string"
		}
		return fmt.Sprintf("string %q", x)
	case int64:
		return fmt.Sprintf("integer %d", x)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return "float"
		}
		return fmt.Sprintf("float %v", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case time.Time:
		return "datetime"
	case []map[string]any:
		return "array of tables"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", v)
}

// plainKey is p without array indices: how the TOML source spells a header.
func plainKey(p path) string {
	q := make([]string, len(p))
	for i, s := range p {
		if j := strings.LastIndexByte(s, '['); j > 0 && strings.HasSuffix(s, "]") && !strings.HasSuffix(s, `"`) {
			s = s[:j]
		}
		q[i] = s
	}
	return strings.Join(q, ".")
}

// knownTables maps each key of the schema to the tables it belongs in, to
// point a misplaced key at its right table.
var knownTables = sync.OnceValue(func() map[string][]tableName {
	m := map[string][]tableName{}
	var walk func(t reflect.Type, table tableName)
	walk = func(t reflect.Type, table tableName) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("toml")
			if tag == "" || tag == "-" {
				continue
			}
			ft, array := f.Type, false
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft, array = ft.Elem(), true
			}
			if ft.Kind() != reflect.Struct {
				if table.plain == "routes.primary" && tag == "weight" {
					continue // see decodeStruct: replicas only
				}
				m[tag] = append(m[tag], table)
				continue
			}
			sub := tableName{plain: tag}
			if table.plain != "" {
				sub.plain = table.plain + "." + tag
			}
			sub.display = "[" + sub.plain + "]"
			if array {
				sub.display = "[" + sub.display + "]"
			}
			walk(ft, sub)
		}
	}
	walk(reflect.TypeFor[Config](), tableName{display: "the top level"})
	return m
})

type tableName struct{ plain, display string }

func unknownKeyMsg(table path, k string, fields map[string]int) string {
	here := plainKey(table)
	var elsewhere []string
	for _, t := range knownTables()[k] {
		if t.plain != here {
			elsewhere = append(elsewhere, t.display)
		}
	}
	if len(elsewhere) > 0 {
		return fmt.Sprintf("unknown key here; %q belongs in %s", k, strings.Join(elsewhere, " or "))
	}
	// Suggest a near miss: at most two edits, and fewer than half the key.
	best, bestDist := "", 3
	for f := range fields {
		dist := editDistance(k, f)
		if 2*dist >= len(k) {
			continue
		}
		if dist < bestDist || dist == bestDist && f < best {
			best, bestDist = f, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key (did you mean %q?)", best)
	}
	return "unknown key"
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
