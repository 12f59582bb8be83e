package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// The TOML decoder keeps the position of each key to itself, and what it has
// does not tell apart the entries of an array of tables. keyLines is our own
// index from key path (with array indices, as in Problem.Key) to the line
// that defines it, built by a small scanner over the document.
//
// The scanner runs after the TOML parser has accepted the document, so it can
// be lenient: it only has to follow table headers, keys, strings (which may
// hide '#', '=' and newlines), arrays and inline tables. It is also run on the
// valid prefix of a document that failed to parse, to name the key of a
// syntax error, so it must never loop or panic on arbitrary input.

// path is a key path: formatted segments, the last possibly carrying an array
// index suffix ("routes[0]"). Methods return new slices; a path is never
// mutated after it is built.
type path []string

func (p path) key(name string) path {
	q := make(path, len(p), len(p)+1)
	copy(q, p)
	return append(q, seg(name))
}

func (p path) index(i int) path {
	q := make(path, len(p))
	copy(q, p)
	q[len(q)-1] += "[" + strconv.Itoa(i) + "]"
	return q
}

func (p path) String() string { return strings.Join(p, ".") }

// parent drops the last array index, or else the last segment.
func (p path) parent() path {
	last := p[len(p)-1]
	if strings.HasSuffix(last, "]") && !strings.HasSuffix(last, `"`) {
		if i := strings.LastIndexByte(last, '['); i > 0 {
			q := make(path, len(p))
			copy(q, p)
			q[len(q)-1] = last[:i]
			return q
		}
	}
	return p[:len(p)-1]
}

// seg formats one key segment: bare when TOML allows it, quoted otherwise.
func seg(name string) string {
	if name == "" {
		return `""`
	}
	for _, r := range name {
		if !isBareKeyRune(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

func isBareKeyRune(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

type keyEntry struct {
	key   string // with array indices
	plain string // without, as the TOML parser names keys
	line  int
}

type keyLines struct {
	lines  map[string]int
	order  []keyEntry
	arrays map[string]int // array-of-tables path → entries so far
}

// lineOf returns the line of p, or of its nearest enclosing table or array
// that the document defines, or 1 when none is.
func (k *keyLines) lineOf(p path) int {
	for len(p) > 0 {
		if l, ok := k.lines[p.String()]; ok {
			return l
		}
		p = p.parent()
	}
	return 1
}

func (k *keyLines) record(p, plain path, line int) {
	s := p.String()
	if _, ok := k.lines[s]; ok {
		return
	}
	k.lines[s] = line
	k.order = append(k.order, keyEntry{key: s, plain: plain.String(), line: line})
}

// recordAll records every prefix of p (implicitly created tables) at line.
func (k *keyLines) recordAll(p, plain path, line int) {
	for i := 1; i <= len(p); i++ {
		k.record(p[:i], plain[:i], line)
	}
}

// resolve turns a header's keys into a path, descending into the latest entry
// of every array of tables on the way ("[routes.primary]" after the second
// "[[routes]]" is routes[1].primary).
func (k *keyLines) resolve(keys []string) (p, plain path) {
	for _, name := range keys {
		p, plain = p.key(name), plain.key(name)
		if n := k.arrays[p.String()]; n > 0 {
			p = p.index(n - 1)
		}
	}
	return p, plain
}

func indexLines(src []byte) *keyLines {
	s := &scanner{src: src, line: 1, idx: &keyLines{
		lines:  map[string]int{},
		arrays: map[string]int{},
	}}
	s.document()
	return s.idx
}

type scanner struct {
	src  []byte
	i    int
	line int
	idx  *keyLines
}

func (s *scanner) eof() bool { return s.i >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.i]
}

func (s *scanner) advance() {
	if s.eof() {
		return
	}
	if s.src[s.i] == '\n' {
		s.line++
	}
	s.i++
}

func (s *scanner) hasPrefix(p string) bool { return bytes.HasPrefix(s.src[s.i:], []byte(p)) }

func (s *scanner) skipSpace() {
	for !s.eof() && (s.peek() == ' ' || s.peek() == '\t') {
		s.advance()
	}
}

func (s *scanner) skipComment() {
	for !s.eof() && s.peek() != '\n' {
		s.advance()
	}
}

// skipBlank skips whitespace, newlines and comments.
func (s *scanner) skipBlank() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.advance()
		case '#':
			s.skipComment()
		default:
			return
		}
	}
}

func (s *scanner) document() {
	var table, plain path
	for {
		s.skipBlank()
		if s.eof() {
			return
		}
		start, line := s.i, s.line
		switch {
		case s.hasPrefix("[["):
			s.i += 2
			keys := s.keys()
			if len(keys) > 0 {
				table, plain = s.arrayTable(keys, line)
			}
			s.skipComment() // the closing "]]" and any comment
		case s.peek() == '[':
			s.i++
			keys := s.keys()
			if len(keys) > 0 {
				table, plain = s.idx.resolve(keys)
				s.idx.recordAll(table, plain, line)
			}
			s.skipComment()
		default:
			keys := s.keys()
			s.skipSpace()
			if len(keys) == 0 || s.peek() != '=' {
				s.skipComment() // not a key/value line: skip it
				break
			}
			s.advance()
			s.keyValue(table, plain, keys, line)
		}
		if s.i == start {
			s.advance()
		}
	}
}

func (s *scanner) arrayTable(keys []string, line int) (path, path) {
	p, plain := s.idx.resolve(keys[:len(keys)-1])
	p, plain = p.key(keys[len(keys)-1]), plain.key(keys[len(keys)-1])
	s.idx.recordAll(p, plain, line)
	n := s.idx.arrays[p.String()]
	s.idx.arrays[p.String()] = n + 1
	p = p.index(n)
	s.idx.record(p, plain, line)
	return p, plain
}

func (s *scanner) keyValue(table, plain path, keys []string, line int) {
	p, pl := table, plain
	for _, k := range keys {
		p, pl = p.key(k), pl.key(k)
		s.idx.record(p, pl, line)
	}
	s.value(p, pl)
}

// keys reads a dotted key; nil when there is none at the cursor.
func (s *scanner) keys() []string {
	var keys []string
	for {
		s.skipSpace()
		k, ok := s.keyPart()
		if !ok {
			return keys
		}
		keys = append(keys, k)
		s.skipSpace()
		if s.peek() != '.' {
			return keys
		}
		s.advance()
	}
}

func (s *scanner) keyPart() (string, bool) {
	switch s.peek() {
	case '"':
		start := s.i
		s.basicString()
		raw := string(s.src[start:s.i])
		if k, err := strconv.Unquote(raw); err == nil {
			return k, true
		}
		return strings.Trim(raw, `"`), true
	case '\'':
		start := s.i
		s.literalString()
		return strings.Trim(string(s.src[start:s.i]), "'"), true
	}
	start := s.i
	for !s.eof() {
		c := s.peek()
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || strings.IndexByte(".=[]{},#\"'", c) >= 0 {
			break
		}
		s.advance()
	}
	return string(s.src[start:s.i]), s.i > start
}

func (s *scanner) value(p, plain path) {
	s.skipSpace()
	switch {
	case s.hasPrefix(`"""`):
		s.multilineString('"')
	case s.hasPrefix(`'''`):
		s.multilineString('\'')
	case s.peek() == '"':
		s.basicString()
	case s.peek() == '\'':
		s.literalString()
	case s.peek() == '[':
		s.array(p, plain)
	case s.peek() == '{':
		s.inlineTable(p, plain)
	default: // number, boolean, date-time: up to a delimiter
		for !s.eof() && strings.IndexByte(",]}\n#", s.peek()) < 0 {
			s.advance()
		}
	}
}

func (s *scanner) basicString() {
	s.advance() // opening quote
	for !s.eof() {
		switch s.peek() {
		case '\\':
			s.advance()
		case '"':
			s.advance()
			return
		case '\n': // unterminated; the parser would have refused it
			return
		}
		s.advance()
	}
}

func (s *scanner) literalString() {
	s.advance()
	for !s.eof() {
		c := s.peek()
		if c == '\n' {
			return
		}
		s.advance()
		if c == '\'' {
			return
		}
	}
}

func (s *scanner) multilineString(q byte) {
	delim := strings.Repeat(string(q), 3)
	s.i += 3
	for !s.eof() {
		if q == '"' && s.peek() == '\\' {
			s.advance()
			s.advance()
			continue
		}
		if s.hasPrefix(delim) {
			s.i += 3
			// Up to two more quotes belong to the content ("""a"""" ends in a quote).
			for n := 0; n < 2 && s.peek() == q; n++ {
				s.i++
			}
			return
		}
		s.advance()
	}
}

func (s *scanner) array(p, plain path) {
	s.advance() // '['
	for n := 0; ; {
		s.skipBlank()
		switch s.peek() {
		case 0:
			if s.eof() {
				return
			}
		case ']':
			s.advance()
			return
		case ',':
			s.advance()
			continue
		}
		start := s.i
		elem := p.index(n)
		s.idx.record(elem, plain, s.line)
		s.value(elem, plain)
		n++
		if s.i == start {
			s.advance()
		}
	}
}

func (s *scanner) inlineTable(p, plain path) {
	s.advance() // '{'
	for {
		s.skipBlank()
		switch s.peek() {
		case 0:
			if s.eof() {
				return
			}
		case '}':
			s.advance()
			return
		case ',':
			s.advance()
			continue
		}
		start, line := s.i, s.line
		keys := s.keys()
		s.skipSpace()
		if len(keys) > 0 && s.peek() == '=' {
			s.advance()
			s.keyValue(p, plain, keys, line)
		}
		if s.i == start {
			s.advance()
		}
	}
}

// syntaxKey names the key of a syntax error: the last key the parser read
// (which it names without array indices), with the indices our scanner finds
// for it in the document up to the end of the error line.
func syntaxKey(src []byte, errLine int, lastKey string) string {
	if lastKey == "" {
		return "toml"
	}
	end, l := 0, 1
	for ; end < len(src); end++ {
		if src[end] == '\n' {
			if l == errLine {
				break
			}
			l++
		}
	}
	idx := indexLines(src[:end])
	for i := len(idx.order) - 1; i >= 0; i-- {
		if idx.order[i].plain == lastKey {
			return idx.order[i].key
		}
	}
	return lastKey
}

func (k *keyLines) String() string {
	var b strings.Builder
	for _, e := range k.order {
		fmt.Fprintf(&b, "%d %s\n", e.line, e.key)
	}
	return b.String()
}
