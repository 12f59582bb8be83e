// Command profile runs pgbench through an in-process kineticd against a
// real PostgreSQL 15 primary (test/pgtest) and writes a CPU profile of the
// proxy, for hot-path work (issue 6). It is a tool, not part of make test:
//
//	go run ./test/bench/profile -seconds 10 -clients 8 -mode simple -out /tmp/kineticd.pprof
//	go tool pprof -top /tmp/kineticd.pprof
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/proxy"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func main() {
	seconds := flag.Int("seconds", 10, "pgbench duration")
	clients := flag.Int("clients", 8, "pgbench clients")
	mode := flag.String("mode", "simple", "pgbench -M mode")
	script := flag.String("script", "select-only", "pgbench built-in script (-b): select-only, tpcb-like, simple-update")
	routing := flag.String("routing", "off", "read_routing_mode")
	poolMode := flag.String("pool-mode", "session", "pool_mode")
	standbys := flag.Int("standbys", 1, "streaming replicas (routed reads use all of them)")
	out := flag.String("out", "kineticd.pprof", "CPU profile file")
	flag.Parse()
	if err := run(*seconds, *clients, *standbys, *script, *mode, *routing, *poolMode, *out); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		os.Exit(1)
	}
}

func run(seconds, clients, standbys int, script, mode, routing, poolMode, out string) error {
	ctx := context.Background()
	cl, err := pgtest.Start(ctx, pgtest.Options{Standbys: max(standbys, 1)})
	if err != nil {
		return err
	}
	defer cl.Close()
	dir, err := os.MkdirTemp("", "kinetic-profile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "kineticd.toml")
	p := kinetictest.Params{PoolMode: poolMode, PoolSize: clients + 2, ReadRoutingMode: routing, Replicas: replicaAddrs(cl), LogLevel: "error"}
	if err := os.WriteFile(path, []byte(kinetictest.TOML(cl, p)), 0o600); err != nil {
		return err
	}
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	srv, err := proxy.New(proxy.Options{Config: config.NewHolder(cfg), Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	pgbench := func(args ...string) error {
		cmd := exec.Command(pgtest.Bin("pgbench"), args...)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+pgtest.AppPassword)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Run()
	}
	if err := pgbench("-i", "-s", "1", "-q", "-h", "127.0.0.1", "-p", port, "-U", pgtest.AppUser, pgtest.AppDB); err != nil {
		return err
	}
	if routing != "off" {
		// Sessions keep the replica of their first read: start once every
		// standby can take reads, or some would never see any.
		for deadline := time.Now().Add(30 * time.Second); ; {
			r := srv.Readiness()
			if len(r.Routes) == 1 && r.Routes[0].ReplicasEligible == len(cl.Standbys) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("not every standby eligible after 30 s: %+v", r.Routes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	start := time.Now()
	err = pgbench("-b", script, "-M", mode, "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(seconds),
		"-h", "127.0.0.1", "-p", port, "-U", pgtest.AppUser, pgtest.AppDB)
	pprof.StopCPUProfile()
	fmt.Printf("profiled %v of pgbench -b %s -M %s -c %d through kineticd (routing %s); profile in %s\n",
		time.Since(start).Round(time.Millisecond), script, mode, clients, routing, out)
	return err
}

func replicaAddrs(cl *pgtest.Cluster) []string {
	var addrs []string
	for _, s := range cl.Standbys {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}
