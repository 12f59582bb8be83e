// Package kinetictest runs kineticd for end-to-end tests: in-process (a
// proxy.Server on 127.0.0.1:0, so the race detector sees the proxy) or as
// the real binary in a subprocess (signals, RSS, the CLI). Configs are
// rendered as TOML and go through config.Parse like a user's file.
package kinetictest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/proxy"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Params fill the config template. Zero values take the defaults below.
type Params struct {
	Listen          string // default 127.0.0.1:0 (in-process) or a free port
	PoolSize        int    // default 4
	PoolMode        string // default session
	AcquireTimeout  int    // ms, default 2000
	MaxClientConn   int    // default 100
	ShutdownTimeout int    // ms, default 5000
	TLSMode         string // default disable
	TLSCert, TLSKey string
	TLSCA           string // tls_ca_file, default ""
	AdminRequireTLS bool   // [admin] require_tls
	BackendTLSMode  string // default disable
	LogLevel        string // default debug
	Primary         string // default the cluster primary
	Replicas        []string
	ReadRoutingMode string // default off
	FallbackPolicy  string // default primary
	// ReadRoutingExtra is appended inside [routes.read_routing].
	ReadRoutingExtra string
	// HAExtra is appended inside [routes.ha] (e.g. follow_failover = false).
	HAExtra string
	// FreshnessExtra, when set, is a [routes.freshness] table's keys.
	FreshnessExtra string
	// Extra is appended verbatim (more [[users]], [[routes]]...).
	Extra string
	// RolloutShared leaves [rollout] shared at the product default (true).
	// Tests turn it off unless they set this: their routes share names
	// (main, ...) on one shared cluster, and a shared rollout row left by
	// one test would roll back the next one's routes.
	RolloutShared bool
	// ServerExtra is appended inside [server] (timeouts), PoolExtra
	// inside [routes.pool] (limits).
	ServerExtra, PoolExtra string
	// Users, when set, replaces the default [[users]] entries (app and
	// md5user, plaintext passwords) and the admin list naming app: the
	// first of them is then the probes' user.
	Users string
}

const tmpl = `# rendered by kinetictest
[server]
listen = "{{.Listen}}"
pool_mode = "{{.PoolMode}}"
max_client_conn = {{.MaxClientConn}}
shutdown_timeout_ms = {{.ShutdownTimeout}}
{{.ServerExtra}}
tls_mode = "{{.TLSMode}}"
tls_cert_file = "{{.TLSCert}}"
tls_key_file = "{{.TLSKey}}"
tls_ca_file = "{{.TLSCA}}"
backend_tls_mode = "{{.BackendTLSMode}}"

[admin]
{{if not .Users}}users = ["app"]
{{end}}require_tls = {{.AdminRequireTLS}}

[metrics]
listen = ""

[log]
level = "{{.LogLevel}}"
format = "console"

{{if .Users}}{{.Users}}{{else}}[[users]]
name = "app"
password = "app-secret"

[[users]]
name = "md5user"
password = "md5-secret"
{{end}}
[[routes]]
name = "main"
database = "app"
[routes.primary]
address = "{{.Primary}}"
{{range .Replicas}}
[[routes.replicas]]
address = "{{.}}"
{{end}}
[routes.read_routing]
read_routing_mode = "{{.ReadRoutingMode}}"
fallback_policy = "{{.FallbackPolicy}}"
{{.ReadRoutingExtra}}
[routes.ha]
# Probe often so tests see state changes fast, with as long a timeout as
# the interval allows: on a CI runner starved by parallel suites and a JVM,
# 150 ms timed probes out and took the replicas out of rotation.
replica_health_interval_ms = 200
replica_health_timeout_ms = 200
{{.HAExtra}}
{{if .FreshnessExtra}}[routes.freshness]
{{.FreshnessExtra}}
{{end}}[routes.pool]
size = {{.PoolSize}}
acquire_timeout_ms = {{.AcquireTimeout}}
{{.PoolExtra}}
{{.Extra}}
`

// TOML renders the configuration for cluster c.
func TOML(c *pgtest.Cluster, p Params) string {
	if p.Listen == "" {
		p.Listen = "127.0.0.1:0"
	}
	if p.PoolSize == 0 {
		p.PoolSize = 4
	}
	if p.PoolMode == "" {
		// KINETIC_TEST_POOL_MODE runs a whole suite in another pool mode.
		p.PoolMode = cmp.Or(os.Getenv("KINETIC_TEST_POOL_MODE"), "session")
	}
	if p.AcquireTimeout == 0 {
		p.AcquireTimeout = 2000
	}
	if p.MaxClientConn == 0 {
		p.MaxClientConn = 100
	}
	if p.ShutdownTimeout == 0 {
		p.ShutdownTimeout = 5000
	}
	if p.TLSMode == "" {
		p.TLSMode = "disable"
	}
	if p.ReadRoutingMode == "" {
		p.ReadRoutingMode = "off"
	}
	if p.FallbackPolicy == "" {
		p.FallbackPolicy = "primary"
	}
	if p.BackendTLSMode == "" {
		p.BackendTLSMode = "disable"
	}
	if p.LogLevel == "" {
		p.LogLevel = "debug"
	}
	if p.Primary == "" {
		p.Primary = c.Primary.Addr()
	}
	var b bytes.Buffer
	template.Must(template.New("cfg").Parse(tmpl)).Execute(&b, p)
	out := b.String()
	if !p.RolloutShared {
		if strings.Contains(out, "\n[rollout]\n") {
			out = strings.Replace(out, "\n[rollout]\n", "\n[rollout]\nshared = false\n", 1)
		} else {
			out += "\n[rollout]\nshared = false\n"
		}
	}
	return out
}

// Proxy is an in-process kineticd.
type Proxy struct {
	Server *proxy.Server
	Holder *config.Holder
	Addr   string // 127.0.0.1:PORT
	Path   string // the config file

	done chan error
}

// Start runs an in-process kineticd with the rendered config and stops it
// when the test ends.
func Start(t testing.TB, c *pgtest.Cluster, p Params) *Proxy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kineticd.toml")
	if err := os.WriteFile(path, []byte(TOML(c, p)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("test config invalid:\n%v", err)
	}
	h := config.NewHolder(cfg)
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	srv, err := proxy.New(proxy.Options{Config: h, Logger: log, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		t.Fatal(err)
	}
	px := &Proxy{Server: srv, Holder: h, Addr: ln.Addr().String(), Path: path, done: make(chan error, 1)}
	go func() { px.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-px.done; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return px
}

// Done yields Serve's result once it returns.
func (p *Proxy) Done() <-chan error { return p.done }

// Port is the proxy's TCP port.
func (p *Proxy) Port() int { return portOf(p.Addr) }

// DSN is a URL for user/password/db through the proxy, sslmode=disable.
func (p *Proxy) DSN(user, password, db string) string { return DSN(p.Addr, user, password, db) }

// AppDSN is the DSN of the app user to database app.
func (p *Proxy) AppDSN() string { return p.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB) }

// DSN builds a URL connection string.
func DSN(addr, user, password, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: addr, Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds cmd/kineticd once per test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kineticd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "kineticd")
		cmd := exec.Command("go", "build", "-o", buildPath, "github.com/pg-kinetic/pg-kinetic/cmd/kineticd")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build kineticd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// Process is kineticd running as a subprocess.
type Process struct {
	Cmd  *exec.Cmd
	Addr string
	Path string // config file

	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, written before done closes
}

type lockedWriter struct{ p *Process }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.logs.Write(b)
}

// FreeAddr returns a loopback address with a port that was free just now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// StartProcess runs the kineticd binary with the rendered config (its
// Listen is replaced by a free port) and waits until it accepts.
func StartProcess(t testing.TB, c *pgtest.Cluster, p Params) *Process {
	t.Helper()
	p.Listen = FreeAddr(t)
	path := filepath.Join(t.TempDir(), "kineticd.toml")
	if err := os.WriteFile(path, []byte(TOML(c, p)), 0o600); err != nil {
		t.Fatal(err)
	}
	return StartProcessFile(t, path, p.Listen)
}

// StartProcessFile runs kineticd --config path and waits until addr accepts.
func StartProcessFile(t testing.TB, path, addr string) *Process {
	t.Helper()
	pr := &Process{Addr: addr, Path: path, done: make(chan struct{})}
	pr.Cmd = exec.Command(Binary(t), "--config", path)
	pr.Cmd.Stdout = lockedWriter{pr}
	pr.Cmd.Stderr = lockedWriter{pr}
	if err := pr.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		pr.err = pr.Cmd.Wait()
		close(pr.done)
	}()
	t.Cleanup(func() {
		if !pr.Exited() {
			pr.Cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-pr.done:
			case <-time.After(15 * time.Second):
				pr.Cmd.Process.Kill()
				<-pr.done
			}
		}
		if t.Failed() {
			t.Logf("kineticd output:\n%s", pr.Logs())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return pr
		}
		select {
		case <-pr.done:
			t.Fatalf("kineticd exited before accepting: %v\n%s", pr.err, pr.Logs())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("kineticd did not accept on %s:\n%s", addr, pr.Logs())
		}
	}
}

// Logs returns what the process wrote so far.
func (pr *Process) Logs() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.logs.String()
}

// WaitLog waits until the logs contain s.
func (pr *Process) WaitLog(ctx context.Context, s string) error {
	for !strings.Contains(pr.Logs(), s) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("log line %q not seen: %w", s, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Exited reports whether the process has exited.
func (pr *Process) Exited() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// Wait waits up to guard (a hang guard, not a timing assertion) for the
// process to exit and returns cmd.Wait's result.
func (pr *Process) Wait(t testing.TB, guard time.Duration) error {
	t.Helper()
	select {
	case <-pr.done:
		return pr.err
	case <-time.After(guard):
		t.Fatalf("kineticd still running after %v\n%s", guard, pr.Logs())
		return nil
	}
}

// DSNWithApp is AppDSN with an application_name, to find the session's
// server backend in pg_stat_activity.
func (pr *Process) DSNWithApp(app string) string { return pr.AppDSN() + "&application_name=" + app }

// AppDSN is the DSN of the app user through the process.
func (pr *Process) AppDSN() string {
	return DSN(pr.Addr, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB)
}

// RSSKiB returns the current and peak resident set size of the process.
func (pr *Process) RSSKiB() (cur, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pr.Cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = n
		case "VmHWM:":
			peak = n
		}
	}
	return cur, peak, nil
}
