package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestCancelRunningQueued: a client's CancelRequest ends its unit's wait
// for a server connection when nothing of the session runs, and only then.
func TestCancelRunningQueued(t *testing.T) {
	for _, tc := range []struct {
		name     string
		running  bool      // the session's current link has a batch unanswered
		timedOut time.Time // query_timeout_ms's cancel, not the client's
		want     bool      // the wait ends with errQueuedCancel
	}{
		{name: "nothing runs", want: true},
		{name: "a unit runs", running: true},
		{name: "query_timeout_ms", timedOut: time.Unix(1, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := &session{txPool: true, log: zap.NewNop(), srv: &Server{}}
			ss.mu.tx = 'I'
			if tc.running {
				// Released: the claim (and the cancel it would send) is
				// refused, which this test does not look at.
				ss.mu.cur = &link{batches: 1, released: true}
				ss.mu.pending = 1
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			ss.mu.queueCancel = cancel
			ss.cancelRunning(tc.timedOut)
			got := errors.Is(context.Cause(ctx), errQueuedCancel)
			if got != tc.want {
				t.Fatalf("wait ended by the cancel: %v, want %v", got, tc.want)
			}
		})
	}
}
