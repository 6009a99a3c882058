package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slotpoller/slotpoller/admin"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/service"
)

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("run", stdout)
	overrides := addOverrideFlags(fs)
	envFile := addEnvFileFlag(fs)
	asService := fs.Bool("service", false, "run under the OS service manager: what \"slotpoller install\" registers; never needed in a console")
	if err := fs.parse(args); err != nil {
		return err
	}
	// The service manager says it runs the node (run -service, as
	// install registers it); nothing is guessed from the parent process,
	// except for a Windows service registered before -service existed.
	managed := *asService || registeredWithoutServiceFlag()
	cfg, _, err := loadConfigWith(*cfgPath, *envFile, overrides())
	if err != nil {
		if managed {
			reportToServiceLog("slotpoller run: " + err.Error())
		}
		return err
	}
	if managed {
		return runService(cfg, stderr)
	}
	log := service.NewLogger(stderr, cfg.Log)
	node := service.NewNode(cfg, log, nil)
	node.Serve(admin.NewServer(node)) // admin.listen, while the node runs
	ctx, stop := stopOnSignals(log, time.Duration(cfg.Jobs.DrainTimeout), node.StopNow)
	defer stop()
	return node.Run(ctx)
}

// stopOnSignals returns a context that ends at the first Ctrl-C, SIGTERM
// or SIGHUP (the terminal of a foreground node closed): the node then
// stops gracefully. A second Ctrl-C or SIGTERM during that stop calls now,
// which cuts the drain short; a third is left to the system, which ends
// the process as it is. stop releases the signals.
func stopOnSignals(log *slog.Logger, drain time.Duration, now func()) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			log.Info("stopping gracefully: leaving the registry, handing tasks back, letting calls in flight finish; "+
				"a second Ctrl-C or SIGTERM stops at once, giving unfinished jobs back unrun",
				"signal", s.String(), "drain_timeout", config.Duration(drain))
			cancel()
		case <-quit:
			return
		}
		for {
			select {
			case s := <-sig:
				if s == syscall.SIGHUP {
					continue // the terminal is gone; only an operator's second signal hurries
				}
				signal.Stop(sig)
				log.Warn("second signal: stopping at once; the calls in flight are cancelled and their jobs given back unrun "+
					"(a third signal ends the process as it is)", "signal", s.String())
				now()
				return
			case <-quit:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sig)
		close(quit)
		cancel()
	}
}

// runService runs the node under the OS service manager: the service's
// Start launches it, its Stop drains it within service.StopTimeout. Logs
// go to the Windows Event Log, or to standard error (journald) elsewhere.
// A node that gives up on its own makes the process exit with its error,
// so that the service manager restarts it.
func runService(cfg config.Config, stderr io.Writer) error {
	prg := &install.Program{StopTimeout: service.StopTimeout(cfg)}
	svc, err := install.NewService(prg, serviceOptions(prg))
	if err != nil {
		return err
	}
	log, err := serviceLogger(svc, cfg.Log, stderr)
	if err != nil {
		return err
	}
	prg.Logger = log
	node := service.NewNode(cfg, log, nil)
	node.Serve(admin.NewServer(node))
	prg.Run = node.Run
	if err := runManaged(svc, prg); err != nil {
		return err
	}
	return prg.Err()
}
