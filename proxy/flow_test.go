package proxy

import "testing"

// TestUnitFlow: the flow's transitions (flow.go) from each state.
func TestUnitFlow(t *testing.T) {
	srv := &link{}
	for _, tc := range []struct {
		name  string
		from  unitFlow
		step  func(f *unitFlow)
		want  flowState
		wantL *link
	}{
		{"collecting, routed open to a server", unitFlow{}, func(f *unitFlow) { f.open(srv, false) }, following, srv},
		{"collecting, rejected before a server", unitFlow{}, func(f *unitFlow) { f.open(nil, true) }, skipping, nil},
		{"collecting, answered by the proxy alone", unitFlow{}, func(f *unitFlow) { f.open(nil, false) }, collecting, nil},
		{"following, a proxy-answered message failed", unitFlow{state: following, l: srv}, func(f *unitFlow) { f.open(srv, true) }, skipping, srv},
		{"following, its Sync", unitFlow{state: following, l: srv}, (*unitFlow).close, collecting, nil},
		{"skipping, its Sync", unitFlow{state: skipping, l: srv}, (*unitFlow).close, collecting, nil},
	} {
		f := tc.from
		tc.step(&f)
		if f.state != tc.want || f.l != tc.wantL {
			t.Errorf("%s: %v with %p, want %v with %p", tc.name, f.state, f.l, tc.want, tc.wantL)
		}
	}
}
