package main

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// listen opens a TCP listener on addr. With reusePort the socket gets
// SO_REUSEPORT before bind, so another process that sets it too (a new
// kineticd during a restart) can listen on the same address: the kernel
// spreads new connections over every listening socket of the group, and a
// socket that closes stops receiving them at once.
func listen(addr string, reusePort bool) (net.Listener, error) {
	var lc net.ListenConfig
	if reusePort {
		lc.Control = setReusePort
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

func setReusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return os.NewSyscallError("setsockopt SO_REUSEPORT", serr)
	}
	return nil
}

// migrateReqPath is the Linux (5.14+) sysctl that makes the kernel move
// connections waiting in a closing SO_REUSEPORT listener's accept queue to
// another listener of the group instead of resetting them.
const migrateReqPath = "/proc/sys/net/ipv4/tcp_migrate_req"

// migrateReq reports the value of net.ipv4.tcp_migrate_req: "1" or "0",
// or "" when the kernel has no such setting (or it cannot be read).
func migrateReq() string {
	b, err := os.ReadFile(migrateReqPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// warnMigrateReq logs at start, when reuse_port is on, what the kernel
// does with the connections queued in this listener when it closes at
// SIGTERM: with net.ipv4.tcp_migrate_req = 1 they move to the next
// kineticd; otherwise they are reset, and a client connecting at that
// instant sees its connection fail (docs/operations.md has the figures).
func warnMigrateReq(log *zap.Logger, reusePort bool) {
	if !reusePort {
		return
	}
	switch v := migrateReq(); v {
	case "1":
	case "":
		log.Warn("server.reuse_port: this kernel has no net.ipv4.tcp_migrate_req (Linux 5.14+); connections queued in the listener when it closes at shutdown are reset")
	default:
		log.Warn("server.reuse_port: net.ipv4.tcp_migrate_req is "+v+"; connections queued in the listener when it closes at shutdown are reset, set it to 1 for restarts without failed connections",
			zap.String("sysctl", "net.ipv4.tcp_migrate_req"))
	}
}
