package differential

// Minimize shrinks seq to a smaller sequence for which still(seq) holds
// (the same mismatch class in the same mode), by delta debugging over its
// units (Zeller's ddmin): try removing chunks, halving the chunk size when
// no chunk can go, down to single units. The result is 1-minimal: removing
// any one unit loses the mismatch (as far as a single replay can tell).
func Minimize(seq Sequence, still func(Sequence) bool) Sequence {
	idx := make([]int, len(seq.Units))
	for i := range idx {
		idx[i] = i
	}
	base := seq // idx are indices into base.Units; Keep maps them to the generated sequence
	n := 2
	for len(idx) >= 2 {
		chunk := (len(idx) + n - 1) / n
		removed := false
		for start := 0; start < len(idx); start += chunk {
			end := min(start+chunk, len(idx))
			rest := append(append([]int{}, idx[:start]...), idx[end:]...)
			if len(rest) == 0 {
				continue
			}
			if still(base.Keep(rest)) {
				idx = rest
				n = max(n-1, 2)
				removed = true
				break
			}
		}
		if !removed {
			if chunk == 1 {
				break
			}
			n = min(n*2, len(idx))
		}
	}
	if len(idx) == len(seq.Units) {
		return seq
	}
	return base.Keep(idx)
}
