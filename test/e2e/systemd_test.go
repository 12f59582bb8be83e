package e2e

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
)

// notifyListener is the service manager's end of sd_notify: a unixgram
// socket whose path goes to kineticd in NOTIFY_SOCKET.
type notifyListener struct {
	path string
	conn *net.UnixConn
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifyListener{path: path, conn: conn}
}

// next returns the next datagram; guard is a hang guard, not a timing
// assertion.
func (n *notifyListener) next(t *testing.T, guard time.Duration) string {
	t.Helper()
	buf := make([]byte, 4096)
	n.conn.SetReadDeadline(time.Now().Add(guard))
	k, err := n.conn.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message: %v", err)
	}
	return string(buf[:k])
}

// TestSystemdNotify runs the binary as systemd would with Type=notify and
// reads what it reports: READY=1 only once the client listener accepts,
// RELOADING=1 then READY=1 around a SIGHUP (a valid file and a refused one),
// STOPPING=1 on SIGTERM, and nothing else in between. No PostgreSQL is
// needed: the route's primary is an address where nothing listens.
func TestSystemdNotify(t *testing.T) {
	notify := listenNotify(t)
	addr := kinetictest.FreeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "kineticd.toml")
	cfg := kinetictest.TOML(nil, kinetictest.Params{Listen: addr, Primary: kinetictest.FreeAddr(t)})
	writeFile(t, cfgPath, cfg)

	cmd := exec.Command(kinetictest.Binary(t), "--config", cfgPath)
	cmd.Env = append(cmd.Environ(), "NOTIFY_SOCKET="+notify.path)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{}) // closed once cmd.Wait has returned into waitErr
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("kineticd output:\n%s", logs.String())
		}
	})

	if got := notify.next(t, 30*time.Second); got != "READY=1" {
		t.Fatalf("first notification: want READY=1, got %q", got)
	}
	// READY=1 promises a listener: a client connecting now must get in
	// without a retry.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("READY=1 was sent but %s does not accept: %v", addr, err)
	}
	c.Close()

	reloadOnce := func(what string) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if got := notify.next(t, 30*time.Second); got != "RELOADING=1" {
			t.Fatalf("%s: after SIGHUP want RELOADING=1, got %q", what, got)
		}
		if got := notify.next(t, 30*time.Second); got != "READY=1" {
			t.Fatalf("%s: after RELOADING=1 want READY=1, got %q", what, got)
		}
	}
	reloadOnce("valid file")
	writeFile(t, cfgPath, cfg+"\nno_such_key = 1\n")
	reloadOnce("refused file")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := notify.next(t, 30*time.Second); got != "STOPPING=1" {
		t.Fatalf("after SIGTERM want STOPPING=1, got %q", got)
	}
	select {
	case <-done:
		if waitErr != nil {
			t.Fatalf("kineticd after SIGTERM: %v", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kineticd still running 30 s after SIGTERM")
	}
	// The logs say both reloads happened as the notifications claim.
	out := logs.String()
	if !strings.Contains(out, "configuration reloaded") || !strings.Contains(out, "reload refused") {
		t.Fatalf("want one reload taken and one refused in the logs")
	}
	// Nothing after STOPPING=1.
	notify.conn.SetReadDeadline(time.Now())
	if k, err := notify.conn.Read(make([]byte, 64)); err == nil {
		t.Fatalf("unexpected notification after STOPPING=1 (%d bytes)", k)
	}
}
