package health

import (
	"fmt"
	"testing"
)

// TestSnapshotGet: a route's few servers are found by comparing addresses,
// more by the index; both give the same answers, the last verdict of an
// address winning.
func TestSnapshotGet(t *testing.T) {
	for _, n := range []int{1, 3, 8, 9, 20} {
		vs := make([]Verdict, n)
		for i := range vs {
			vs[i] = Verdict{Target: Target{Addr: fmt.Sprintf("10.0.0.%d:5432", i)}, LagBytes: int64(i)}
		}
		vs = append(vs, Verdict{Target: Target{Addr: vs[0].Addr}, LagBytes: 1000}) // the same address again, later
		s := NewSnapshot(vs...)
		for i := 1; i < n; i++ {
			v, ok := s.Get(vs[i].Addr)
			if !ok || v.LagBytes != int64(i) {
				t.Errorf("n=%d: Get(%s) = %v, %v; want lag %d", n, vs[i].Addr, v.LagBytes, ok, i)
			}
		}
		if v, ok := s.Get(vs[0].Addr); !ok || v.LagBytes != 1000 {
			t.Errorf("n=%d: Get of the address given twice = %v, %v; want the later verdict (lag 1000)", n, v.LagBytes, ok)
		}
		if _, ok := s.Get("10.0.1.1:5432"); ok {
			t.Errorf("n=%d: Get of an address not in the snapshot found one", n)
		}
	}
	if _, ok := (*Snapshot)(nil).Get("x"); ok {
		t.Error("a nil snapshot has a verdict")
	}
}
