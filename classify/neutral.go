package classify

// SessionNeutral reports, without parsing, that a text cannot change
// session state nor control a transaction: it is one plain SELECT with no
// function call and no INTO. A proxy that only needs a unit's session
// effects (transaction pooling with read routing off: SETs, prepared
// statements, pins) may then skip classification. It is conservative
// byte by byte, never a parser: false means "classify it", true holds for
// every text the rules below admit, whatever its strings or identifiers
// contain, because everything that could matter is refused wherever it
// appears, quoted or not:
//
//   - ASCII only, and the first word (after blanks) is SELECT;
//   - no '(' anywhere: without parentheses no function is called, so no
//     set_config, advisory lock or other side-effecting built-in (the few
//     SQL-standard functions written without them, such as current_user,
//     only read);
//   - no "into" in any case anywhere (SELECT INTO creates a table);
//   - no ';' except trailing ones (one statement), no comment markers
//     (hints), no '$' (parameters, dollar quotes) and no backslash.
//
// TestSessionNeutralAgrees and FuzzSessionNeutral check every admitted
// text against the full classification.
func SessionNeutral(text string) bool {
	end := len(text)
	for end > 0 && (isBlank(text[end-1]) || text[end-1] == ';') {
		end--
	}
	i := 0
	for i < end && isBlank(text[i]) {
		i++
	}
	if end-i < 7 || !equalFoldASCII(text[i:i+6], "select") || !isBlank(text[i+6]) {
		return false
	}
	for j := i; j < end; j++ {
		switch c := text[j]; {
		case c >= 0x80, c == 0, c == '(', c == ';', c == '$', c == '\\':
			return false
		case c == '-' && j+1 < end && text[j+1] == '-', c == '/' && j+1 < end && text[j+1] == '*':
			return false
		case (c == 'i' || c == 'I') && j+4 <= end && equalFoldASCII(text[j:j+4], "into"):
			return false
		}
	}
	return true
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// equalFoldASCII compares s with lower, a lower-case ASCII word.
func equalFoldASCII(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for k := 0; k < len(s); k++ {
		c := s[k]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[k] {
			return false
		}
	}
	return true
}
