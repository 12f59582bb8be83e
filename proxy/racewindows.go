package proxy

import (
	"sync/atomic"
	"time"
)

// RaceWindows widens, for tests, windows between two goroutines of a
// session where the order of events decides the outcome and a slow machine
// takes the rare order. A test that sets them replays such an order on
// every run instead of once in thousands. Zero (the default) is no delay;
// production code never sets them.
type RaceWindows struct {
	// AfterErrorHeader delays a server reader between reading the header
	// of an error answering a client's message and recording that the
	// batch failed.
	AfterErrorHeader time.Duration
	// BeforeBarrier delays the session goroutine before it registers a
	// barrier (a message whose answer it waits for).
	BeforeBarrier time.Duration
	// BeforeHeldWait delays the session goroutine after it held a
	// retryable read (retry.go), before it begins to wait for the client.
	BeforeHeldWait time.Duration
}

var raceWindows atomic.Pointer[RaceWindows]

// SetRaceWindows sets the widened windows of every session in the process
// (tests only; kineticd runs in the test's process). It returns the
// previous setting.
func SetRaceWindows(w RaceWindows) RaceWindows {
	old := raceWindows.Swap(&w)
	if old == nil {
		return RaceWindows{}
	}
	return *old
}

// raceWait sleeps for the window pick selects, if a test set one.
func raceWait(pick func(*RaceWindows) time.Duration) {
	if w := raceWindows.Load(); w != nil {
		if d := pick(w); d > 0 {
			time.Sleep(d)
		}
	}
}
