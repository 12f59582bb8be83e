package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proxy is the measured proxy (kineticd or PgBouncer) running as a child
// process, its output appended to logPath.
type proxy struct {
	name    string // kineticd or pgbouncer, for messages
	cmd     *exec.Cmd
	addr    string
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // cmd.Wait's result, written before done closes
}

// startProxy runs argv as cred (nil: as we are) and waits until addr
// accepts. The child has its own process group (a terminal's Ctrl-C is
// ours to handle) and is killed by the kernel if this process dies first.
func startProxy(ctx context.Context, name string, argv []string, cred *syscall.Credential, addr, logPath string) (*proxy, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	k := &proxy{name: name, addr: addr, logPath: logPath, done: make(chan struct{})}
	k.cmd = exec.Command(argv[0], argv[1:]...)
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		k.err = k.cmd.Wait()
		close(k.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return k, nil
		}
		select {
		case <-k.done:
			return nil, fmt.Errorf("%s exited before accepting: %v\n%s", name, k.err, k.logTail(30))
		case <-ctx.Done():
			k.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			k.stop()
			return nil, fmt.Errorf("%s did not accept on %s within 20s\n%s", name, addr, k.logTail(30))
		}
	}
}

// stop sends SIGTERM (kineticd drains for its shutdown_timeout; PgBouncer
// 1.18 shuts down at once), then SIGKILL after 15 s, and waits for the exit.
func (k *proxy) stop() error {
	select {
	case <-k.done:
		return nil
	default:
	}
	k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(15 * time.Second):
		k.cmd.Process.Kill()
		<-k.done
		return fmt.Errorf("%s ignored SIGTERM for 15s and was killed", k.name)
	}
	// PgBouncer 1.18 exits with status 1 on SIGTERM, its immediate
	// shutdown; kineticd exits 0 once drained, so anything else is a fault.
	var ee *exec.ExitError
	if errors.As(k.err, &ee) && k.name == "kineticd" {
		return fmt.Errorf("%s: %v", k.name, k.err)
	}
	return nil
}

func (k *proxy) exited() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// logLines returns the proxy's output lines (kineticd: log_level warn,
// warnings and errors only).
func (k *proxy) logLines() []string {
	b, _ := os.ReadFile(k.logPath)
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (k *proxy) logTail(n int) string {
	lines := k.logLines()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- " + k.name + " output (tail) ---\n" + strings.Join(lines, "\n")
}

// procStats is what /proc tells about a process.
type procStats struct {
	rssKiB, hwmKiB int64         // VmRSS, VmHWM
	threads        int           // Threads
	fds            int           // entries of /proc/PID/fd
	cpu            time.Duration // utime + stime
}

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const userHZ = 100

func (k *proxy) stats() (procStats, error) {
	return readProcStats(k.cmd.Process.Pid)
}

func readProcStats(pid int) (procStats, error) {
	var st procStats
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return st, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			st.rssKiB = n
		case "VmHWM:":
			st.hwmKiB = n
		case "Threads:":
			st.threads = int(n)
		}
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return st, err
	}
	// The command name in field 2 may hold spaces; fields count from the
	// last ')'. After it: state (3), ..., utime (14), stime (15).
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return st, fmt.Errorf("%s/stat: unexpected format", dir)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("%s/stat: %w", dir, err)
	}
	st.cpu = time.Duration(utime+stime) * time.Second / userHZ
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return st, err
	}
	st.fds = len(fds)
	return st, nil
}

// selfCPU is this process's user + system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
