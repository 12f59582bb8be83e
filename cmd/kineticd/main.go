// Command kineticd is the pg-kinetic proxy daemon.
//
//	kineticd --config PATH        run
//	kineticd --check-config PATH  validate and exit (0: "config ok")
//	kineticd --version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/proxy"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kineticd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "run with the configuration file at `PATH`")
	checkPath := fs.String("check-config", "", "validate the configuration file at `PATH` and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case *showVersion:
		fmt.Fprintf(stdout, "kineticd %s\n", version)
		return 0
	case *checkPath != "":
		if _, err := config.Load(*checkPath); err != nil {
			fmt.Fprintln(stdout, err)
			return 1
		}
		fmt.Fprintln(stdout, "config ok")
		return 0
	case *cfgPath == "":
		fmt.Fprintln(stderr, "kineticd: --config PATH is required (or --check-config PATH, --version)")
		fs.Usage()
		return 2
	}

	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	logLevel := zap.NewAtomicLevel()
	log, err := newLogger(cfg.Log, logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "kineticd:", err)
		return 1
	}
	defer log.Sync()

	holder := config.NewHolder(cfg)
	metrics := admin.NewMetrics()
	var srv *proxy.Server
	srv, err = proxy.New(proxy.Options{Config: holder, Logger: log, Version: version, Metrics: metrics,
		Reload: func() error { return reload(holder, srv, logLevel, log) }})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	ln, err := listen(cfg.Server.Listen, cfg.Server.ReusePort)
	if err != nil {
		log.Error("cannot listen", zap.String("listen", cfg.Server.Listen), zap.Error(err))
		return 1
	}
	warnMigrateReq(log, cfg.Server.ReusePort)
	if cfg.Metrics.Listen != "" {
		mln, err := listen(cfg.Metrics.Listen, cfg.Server.ReusePort)
		if err != nil {
			log.Error("cannot listen for metrics", zap.String("metrics.listen", cfg.Metrics.Listen), zap.Error(err))
			srv.Close()
			return 1
		}
		hs := admin.Serve(mln, metrics, srv, cfg.Metrics.Pprof) // /metrics, /healthz, /readyz (+ /debug/pprof/)
		defer hs.Close()
		log.Info("metrics at /metrics, health at /healthz and /readyz", zap.String("listen", mln.Addr().String()))
	}
	log.Info("kineticd started", zap.String("version", version), zap.String("listen", ln.Addr().String()),
		zap.String("config", *cfgPath), zap.Int("routes", len(cfg.Routes)))

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// Ready only now: ln accepts, and a SIGHUP systemd sends from here on is a reload.
	notifySystemd(log, daemon.SdNotifyReady)
	for {
		select {
		case err := <-serveErr:
			if err != nil && !errors.Is(err, proxy.ErrServerClosed) {
				log.Error("listener failed", zap.Error(err))
				srv.Close()
				return 1
			}
			return 0
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				notifySystemd(log, daemon.SdNotifyReloading)
				reload(holder, srv, logLevel, log)
				notifySystemd(log, daemon.SdNotifyReady)
				continue
			}
			notifySystemd(log, daemon.SdNotifyStopping)
			cur := holder.Load()
			log.Info("shutting down: draining sessions", zap.String("signal", sig.String()),
				zap.Duration("shutdown_timeout", cur.Server.ShutdownTimeout()))
			ctx, cancel := context.WithTimeout(context.Background(), cur.Server.ShutdownTimeout())
			go cutShortOnSignal(ctx, cancel, sigs, log)
			err := srv.Shutdown(ctx)
			cancel()
			if err != nil {
				log.Warn("shutdown timeout reached; remaining sessions were closed")
			}
			<-serveErr
			log.Info("kineticd stopped")
			return 0
		}
	}
}

// reload swaps in a new validated config; an invalid one is refused with
// the same messages as --check-config and the running one stays.
func reload(holder *config.Holder, srv *proxy.Server, level zap.AtomicLevel, log *zap.Logger) error {
	old := holder.Load()
	cfg, err := holder.Reload()
	if err != nil {
		log.Error("reload refused; keeping the running configuration", zap.String("problems", err.Error()))
		return err
	}
	if err := srv.Reload(); err != nil {
		log.Error("reload: TLS material could not be loaded; keeping the previous certificates", zap.Error(err))
	}
	if cfg.Server.Listen != old.Server.Listen {
		log.Warn("server.listen changed; it takes effect at restart", zap.String("listen", old.Server.Listen))
	}
	if cfg.Server.ReusePort != old.Server.ReusePort {
		log.Warn("server.reuse_port changed; it takes effect at restart", zap.Bool("reuse_port", old.Server.ReusePort))
	}
	if l, err := zapcore.ParseLevel(cfg.Log.Level); err == nil {
		level.SetLevel(l)
	}
	log.Info("configuration reloaded", zap.String("config", cfg.Path))
	return nil
}

func newLogger(lc config.Log, level zap.AtomicLevel, w io.Writer) (*zap.Logger, error) {
	l, err := zapcore.ParseLevel(lc.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	level.SetLevel(l)
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if lc.Format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), level)), nil
}
