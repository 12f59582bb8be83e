package main

import (
	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// notifySystemd reports a state change to the service manager (sd_notify,
// for deploy/systemd/kineticd.service, Type=notify): daemon.SdNotifyReady
// once the client listener accepts, daemon.SdNotifyReloading and then
// daemon.SdNotifyReady around a SIGHUP reload (whether or not the new file
// was taken: the process serves either way), daemon.SdNotifyStopping when
// draining begins. Outside systemd NOTIFY_SOCKET is unset and it does
// nothing. A failure to notify is logged and otherwise ignored: systemd then
// times the start out, which says more than a refusal to run would.
func notifySystemd(log *zap.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("cannot notify systemd", zap.String("state", state), zap.Error(err))
	}
}
