package proxy

import (
	"cmp"
	"iter"
	"sort"
	"strings"

	"github.com/pg-kinetic/pg-kinetic/classify"
)

// setting is one run-time parameter a client asked for at startup or with
// SET, applied with set_config on every server connection the session
// uses. reset is a RESET of a placeholder (customized option, below):
// set_config with a NULL value, which defines it empty.
type setting struct {
	name, value string
	reset       bool
}

// customized reports whether name is a customized option's (a dotted
// name, e.g. myapp.tenant): where no module defines it, PostgreSQL keeps
// a placeholder for it once set, and RESET and RESET ALL make it empty
// instead of forgetting it (SHOW and current_setting still answer).
func customized(name string) bool { return strings.Contains(name, ".") }

// replayedSettings is the session state replayed on every server the
// session uses (session.mu.settings).
type replayedSettings struct {
	startup     []setting // from the startup packet
	session     []setting // from SET outside SET LOCAL, in order; Reset entries remove
	settingsKey string    // settingsQuery of startup+session settings, as servers record it
	discardGen  uint64    // bumped by DISCARD ALL / DEALLOCATE ALL
	// epoch is bumped by every SET or RESET the session makes: a server
	// this session gave its settings at an earlier epoch gets them again
	// (serverState.settingsBy), whatever its key.
	epoch uint64
}

// Startup parameters that are not settings.
var notSettings = map[string]bool{"user": true, "database": true, "options": true, "replication": true}

// startupSettings returns the client's settings in the order PostgreSQL
// applies them: the -c switches of "options" first, then the other startup
// parameters (sorted, so equal clients produce equal batches).
func startupSettings(params map[string]string) ([]setting, error) {
	var out []setting
	if opts := params["options"]; opts != "" {
		s, err := parseOptions(opts)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	names := make([]string, 0, len(params))
	for k := range params {
		if !notSettings[k] && !strings.HasPrefix(k, "_pq_.") && !strings.HasPrefix(strings.ToLower(k), "pg_kinetic.") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		out = append(out, setting{name: k, value: params[k]})
	}
	return out, nil
}

// parseOptions reads the "options" startup parameter like PostgreSQL's
// pg_split_opts: words separated by spaces, a backslash escapes the next
// character; each setting is "-c name=value", "-cname=value" or
// "--name=value" (dashes in the name become underscores). Other server
// command-line switches are refused with a clear error.
func parseOptions(s string) ([]setting, error) {
	var words []string
	var cur strings.Builder
	inWord, esc := false, false
	for _, r := range s {
		switch {
		case esc:
			cur.WriteRune(r)
			esc, inWord = false, true
		case r == '\\':
			esc, inWord = true, true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	var out []setting
	for i := 0; i < len(words); i++ {
		w := words[i]
		var kv string
		switch {
		case w == "-c":
			if i+1 >= len(words) {
				return nil, fatalf(codeProtocolViolation, "invalid command-line argument for server process: -c requires a value")
			}
			i++
			kv = words[i]
		case strings.HasPrefix(w, "-c"):
			kv = w[2:]
		case strings.HasPrefix(w, "--"):
			kv = w[2:]
		default:
			return nil, fatalf(codeFeatureNotSupported,
				"pg-kinetic: unsupported startup option %q (only -c name=value and --name=value are passed to servers)", w)
		}
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fatalf(codeProtocolViolation, "invalid startup option %q: expected name=value", kv)
		}
		out = append(out, setting{name: strings.ReplaceAll(name, "-", "_"), value: value})
	}
	return out, nil
}

// settingsQuery builds one simple query that applies settings with
// set_config, so a value is read exactly as in postgresql.conf or a startup
// packet (a list like search_path keeps its commas).
func settingsQuery(settings []setting) string {
	if len(settings) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, s := range settings {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pg_catalog.set_config(")
		b.WriteString(quoteLiteral(s.name))
		b.WriteString(", ")
		if s.reset {
			b.WriteString("NULL")
		} else {
			b.WriteString(quoteLiteral(s.value))
		}
		b.WriteString(", false)")
	}
	return b.String()
}

// settingsStatements yields a settings key (settingsQuery) as one SELECT
// per set_config call, in order.
func settingsStatements(key string) iter.Seq[string] {
	return func(yield func(string) bool) {
		const sep, head = ", pg_catalog.set_config(", "SELECT "
		if !strings.HasPrefix(key, head) {
			if key != "" {
				yield(key)
			}
			return
		}
		rest := key[len(head):]
		quoted := false
		start := 0
		for i := 0; i < len(rest); i++ {
			switch {
			case rest[i] == '\'':
				quoted = !quoted // ('' inside a literal toggles twice)
			case !quoted && strings.HasPrefix(rest[i:], sep):
				if !yield(head + rest[start:i]) {
					return
				}
				start = i + 2
				i += len(sep) - 1
			}
		}
		yield(head + rest[start:])
	}
}

// serializableByDefault reports whether settings, applied in order (the
// startup ones, then the session's), leave default_transaction_isolation
// at SERIALIZABLE.
func serializableByDefault(lists ...[]setting) bool {
	v := ""
	for _, l := range lists {
		for _, s := range l {
			if strings.EqualFold(s.name, "default_transaction_isolation") {
				v = s.value
			}
		}
	}
	return strings.EqualFold(strings.Trim(strings.TrimSpace(v), `'"`), "serializable")
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// restoreQuery is the settings query that gives back the client's startup
// values a unit's RESET, RESET ALL or DISCARD ALL returns to the server's
// defaults (a later SET in the unit wins), "" if none.
func (ss *session) restoreQuery(ds []*classified) string {
	if len(ss.mu.settings.startup) == 0 {
		return ""
	}
	all := false
	var last map[string]bool // name -> the unit's last word on it was a RESET
	for _, d := range ds {
		for _, st := range d.Statements {
			switch {
			case st.Effect == classify.EffectDiscardAll || st.Effect == classify.EffectSet && st.Setting.Reset && st.Setting.Name == "":
				all, last = true, nil
			case st.Effect == classify.EffectSet:
				if last == nil {
					last = map[string]bool{}
				}
				last[strings.ToLower(st.Setting.Name)] = st.Setting.Reset
			}
		}
	}
	var out []setting
	for _, s := range ss.mu.settings.startup {
		reset, named := last[strings.ToLower(s.name)]
		if named && reset || !named && all {
			out = append(out, s)
		}
	}
	return settingsQuery(out)
}

// effectiveValue is the value of setting name (lower case) that the
// session's settings give it over the startup ones, "" when neither sets
// it (the server's own).
func effectiveValue(session, startup []setting, name string) string {
	for _, list := range [][]setting{session, startup} {
		for i := len(list) - 1; i >= 0; i-- {
			if strings.ToLower(list[i].name) == name {
				return list[i].value
			}
		}
	}
	return ""
}

// mergeDateStyle is the DateStyle that SET datestyle = next leaves when it
// was prior: a DateStyle names an output style, an input field order or
// both, and SET changes only what it names (SET datestyle = iso, then
// ymd: "ISO, YMD"), so replaying only the last SET would lose the rest
// (PostgreSQL's regression suite, date.sql, found it). GERMAN also means
// DMY unless the value names an order, as in the server's
// check_datestyle. When either value holds what this does not know
// (DEFAULT, a typo the server will refuse), next is kept as it is.
func mergeDateStyle(prior, next string) string {
	if prior == "" {
		return next
	}
	ps, po, ok1 := parseDateStyle(prior)
	ns, no, ok2 := parseDateStyle(next)
	if !ok1 || !ok2 {
		return next
	}
	style, order := cmp.Or(ns, ps), cmp.Or(no, po)
	if ns == "German" && no == "" {
		order = "DMY"
	}
	switch {
	case style == "":
		return order
	case order == "":
		return style
	}
	return style + ", " + order
}

// parseDateStyle splits a DateStyle value into its style and order,
// either "" when the value does not name it.
func parseDateStyle(v string) (style, order string, ok bool) {
	for _, tok := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		switch strings.ToLower(tok) {
		case "iso":
			style = "ISO"
		case "sql":
			style = "SQL"
		case "postgres":
			style = "Postgres"
		case "german":
			style = "German"
		case "ymd":
			order = "YMD"
		case "dmy", "euro", "european":
			order = "DMY"
		case "mdy", "us", "noneuro", "noneuropean":
			order = "MDY"
		default:
			return "", "", false
		}
	}
	return style, order, true
}
