package proxy

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
)

// TestVolatilityLooksUpOnce: sessions missing the same function names at
// once share one lookup and its answer; answers are cached; a failed
// lookup counts as volatile and is not cached.
func TestVolatilityLooksUpOnce(t *testing.T) {
	var v catalogFacts
	var calls atomic.Int64
	release := make(chan struct{})
	lookup := func(names []string) (map[string]bool, error) {
		calls.Add(1)
		<-release
		return map[string]bool{"now": false, "random": true}, nil
	}
	const n = 50
	var wg sync.WaitGroup
	got := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = v.any([]string{"random", "now"}, lookup)
		}()
	}
	time.Sleep(50 * time.Millisecond) // (every caller reaches the flight)
	close(release)
	wg.Wait()
	if c := calls.Load(); c != 1 {
		t.Errorf("%d lookups for %d concurrent misses of the same names, want 1", c, n)
	}
	for i, vol := range got {
		if !vol {
			t.Fatalf("caller %d: random() taken for non-volatile", i)
		}
	}
	if v.any([]string{"now"}, lookup) {
		t.Error("now(): cached as STABLE, answered volatile")
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("cached names looked up again: %d lookups", c)
	}

	failing := func([]string) (map[string]bool, error) { calls.Add(1); return nil, errors.New("down") }
	if !v.any([]string{"lower"}, failing) {
		t.Error("a failed lookup must count as volatile")
	}
	if !v.any([]string{"lower"}, failing) || calls.Load() != 3 {
		t.Errorf("a failed lookup was cached (%d lookups, want 3)", calls.Load())
	}
	// A name the catalog does not know (no such function) is volatile.
	if !v.any([]string{"nosuch"}, func([]string) (map[string]bool, error) { return map[string]bool{}, nil }) {
		t.Error("a name missing from the answer must count as volatile")
	}
	// A replaced runtime's cache keeps nothing; its answers still hold.
	v.close()
	if v.any([]string{"now"}, func([]string) (map[string]bool, error) { return map[string]bool{"now": false}, nil }) {
		t.Error("after close: now() answered volatile")
	}
	if len(v.known) != 0 {
		t.Errorf("closed cache kept %d answers", len(v.known))
	}
}

// TestRoutingCarriesCountsAcrossReload: a reload builds new runtimes; the
// counts that span it (reads fallen back and in flight, SHOW ROUTES'
// decision counters) carry over to the route of the same name, the
// volatility cache does not; a new route starts at zero.
func TestRoutingCarriesCountsAcrossReload(t *testing.T) {
	cfg := &config.Config{Routes: []config.Route{{Name: "main"}}}
	first := newRouting(cfg, zap.NewNop(), nil, nil, nil)
	defer first.close()
	run := first.route("main")
	run.fallbacks.Add(2)
	c, _ := run.decisions.LoadOrStore("\x00"+targetReplica, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(7)
	run.volatility.known = map[string]bool{"now": false}

	cfg2 := &config.Config{Routes: []config.Route{{Name: "main"}, {Name: "other"}}}
	second := newRouting(cfg2, zap.NewNop(), nil, first, nil)
	defer second.close()
	next := second.route("main")
	if next == run || next.fallbacks.Load() != 2 {
		t.Errorf("fallbacks in flight after reload: %d, want 2 (a new runtime)", next.fallbacks.Load())
	}
	if v, ok := next.decisions.Load("\x00" + targetReplica); !ok || v.(*atomic.Uint64).Load() != 7 {
		t.Errorf("decision counter lost across reload")
	}
	if len(next.volatility.known) != 0 {
		t.Error("volatility answers carried across reload")
	}
	if o := second.route("other"); o == nil || o.fallbacks.Load() != 0 {
		t.Error("a new route must start at zero")
	}
	if second.route("nosuch") != nil || (*routing)(nil).route("main") != nil {
		t.Error("route of an unknown name, or of no routing, must be nil")
	}
}

// TestVolatilityNamesOnceAcrossSets: sessions missing overlapping sets of
// names at once ({f g}, {g h}, {h f}, ...) look each name up exactly once,
// in as few lookups as the one catalog connection allows (one at a time,
// the names queued meanwhile together), and every caller gets the answer
// for its names, none refused as busy.
func TestVolatilityNamesOnceAcrossSets(t *testing.T) {
	var v catalogFacts
	var mu sync.Mutex
	seen := map[string]int{}
	lookups := 0
	release := make(chan struct{})
	lookup := func(names []string) (map[string]bool, error) {
		mu.Lock()
		lookups++
		first := lookups == 1
		for _, n := range names {
			seen[n]++
		}
		mu.Unlock()
		if first {
			<-release // the others queue up meanwhile
		}
		got := map[string]bool{}
		for _, n := range names {
			got[n] = n == "random"
		}
		return got, nil
	}
	sets := [][]string{{"lower", "upper"}, {"upper", "random"}, {"random", "lower"}, {"now", "upper"}, {"abs", "now"}}
	const per = 20
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for i := range per * len(sets) {
		set := sets[i%len(sets)]
		wg.Go(func() {
			want := slices.Contains(set, "random")
			if v.any(set, lookup) != want {
				wrong.Add(1)
			}
		})
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // (the first lookup is under way)
		}
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d callers got the wrong answer", n)
	}
	for _, n := range []string{"lower", "upper", "random", "now", "abs"} {
		if seen[n] != 1 {
			t.Errorf("%s looked up %d times, want once (all: %v)", n, seen[n], seen)
		}
	}
	if lookups != 2 {
		t.Errorf("%d lookups, want 2 (the first caller's, then every name queued meanwhile)", lookups)
	}
}

// TestCatalogFactsForget: answers are served from the cache until forget
// drops them (a statement that may change which relations are unlogged);
// the next miss looks the name up again.
func TestCatalogFactsForget(t *testing.T) {
	v := catalogFacts{sql: unloggedSQL, what: "unlogged relations"}
	var calls atomic.Int64
	unlogged := false
	lookup := func(names []string) (map[string]bool, error) {
		calls.Add(1)
		got := map[string]bool{}
		for _, n := range names {
			got[n] = n == "t" && unlogged
		}
		return got, nil
	}
	if v.any([]string{"t", "u"}, lookup) || v.any([]string{"u", "t"}, lookup) || calls.Load() != 1 {
		t.Fatalf("t and u logged: want no, looked up once; lookups %d", calls.Load())
	}
	unlogged = true
	if v.any([]string{"t"}, lookup) {
		t.Fatal("before forget: the cached answer (logged) should stand")
	}
	v.forget()
	if !v.any([]string{"t"}, lookup) || calls.Load() != 2 {
		t.Fatalf("after forget: want t unlogged from a second lookup; lookups %d", calls.Load())
	}
}

// TestCatalogFactsFailOpen: with failOpen (unlogged relations), a failed
// lookup answers no and is kept (the primary may be down: reads must not
// all go there, nor each wait for a dial); forget looks again. Without
// it (volatility), a failed lookup answers yes and is not kept.
func TestCatalogFactsFailOpen(t *testing.T) {
	var calls atomic.Int64
	down := true
	lookup := func(names []string) (map[string]bool, error) {
		calls.Add(1)
		if down {
			return nil, errors.New("connection refused")
		}
		return map[string]bool{"t": true}, nil
	}
	open := catalogFacts{sql: unloggedSQL, failOpen: true}
	if open.any([]string{"t"}, lookup) || open.any([]string{"t"}, lookup) || calls.Load() != 1 {
		t.Fatalf("failOpen, lookup failing: want no, kept (one lookup); lookups %d", calls.Load())
	}
	down = false
	open.forget()
	if !open.any([]string{"t"}, lookup) || calls.Load() != 2 {
		t.Fatalf("failOpen after forget, lookup working: want yes from a second lookup; lookups %d", calls.Load())
	}
	calls.Store(0)
	down = true
	closed := catalogFacts{sql: volatilitySQL}
	if !closed.any([]string{"f"}, lookup) || !closed.any([]string{"f"}, lookup) || calls.Load() != 2 {
		t.Fatalf("volatility, lookup failing: want yes each time, not kept; lookups %d", calls.Load())
	}
}
