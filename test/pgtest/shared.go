package pgtest

import (
	"context"
	"errors"
	"fmt"
	"go.uber.org/goleak"
	"os"
	"sync"
	"testing"
	"time"
)

// shared is the test package's one cluster. It is package state on purpose:
// a test binary is one package, and the point is to start PostgreSQL once.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Shared returns the test package's cluster (a primary and two standbys),
// starting it on first use. The package's TestMain must call Main so that
// the cluster is closed. When PostgreSQL 15 is not installed the test is
// skipped, or failed when the environment variable CI is set.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		begin := time.Now()
		shared.c, shared.err = Start(context.Background(), Options{})
		if shared.err == nil {
			t.Logf("pgtest: shared cluster (primary + %d standbys) started in %v",
				len(shared.c.Standbys), time.Since(begin).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return shared.c
}

// New starts a cluster of the test's own, for tests that damage it, and
// closes it when the test ends. Like Shared, it skips or fails the test when
// PostgreSQL 15 is not installed.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	begin := time.Now()
	c, err := Start(context.Background(), opts)
	if err != nil {
		unavailable(t, err)
	}
	t.Logf("pgtest: cluster (primary + %d standbys) started in %v", len(c.Standbys), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("pgtest: close: %v", err)
		}
	})
	return c
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoPostgres) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v\nCI is set, so this is a failure, not a skip.", err)
		}
		t.Skip(err)
	}
	t.Fatalf("pgtest: cluster failed to start: %v", err)
}

// Main runs the tests of a package that uses Shared, closes the shared
// cluster afterwards whatever the outcome, and then fails the package when
// goroutines started during the tests are still running (proxy sessions,
// probe loops, readers: everything must be owned and stopped):
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	before := goleak.IgnoreCurrent() // what ran before any test is not ours
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: closing the shared cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	if code == 0 {
		if err := goleak.Find(before); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
