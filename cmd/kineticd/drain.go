package main

import (
	"context"
	"os"
	"syscall"

	"go.uber.org/zap"
)

// cutShortOnSignal ends a drain early: a second SIGTERM or SIGINT while
// Shutdown waits for sessions cancels its context, which closes the
// remaining sessions at once (57P01), as if shutdown_timeout_ms had run
// out. SIGHUP is ignored while draining. It returns when ctx ends.
func cutShortOnSignal(ctx context.Context, cancel context.CancelFunc, sigs <-chan os.Signal, log *zap.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				continue
			}
			log.Warn("second signal while draining: closing the remaining sessions now", zap.String("signal", sig.String()))
			cancel()
			return
		}
	}
}
