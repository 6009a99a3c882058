//go:build !windows

package main

import (
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	kservice "github.com/kardianos/service"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/service"
)

// serviceOptions makes the service's Run return on SIGTERM (systemd's
// stop) or when the node stops on its own, so that main exits with the
// node's error and systemd restarts it (Restart=always). SIGHUP stops the
// node gracefully too, where its default would end the process without
// leaving the registry; systemd then starts it again.
func serviceOptions(prg *install.Program) kservice.KeyValue {
	return kservice.KeyValue{"RunWait": func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt, syscall.SIGHUP)
		defer signal.Stop(sig)
		select {
		case <-sig:
		case <-prg.Done():
		}
	}}
}

// registeredWithoutServiceFlag is false: systemd and System V init run a
// `run` without -service (a service registered by an older slotpoller)
// in the foreground, which stops on SIGTERM just the same.
func registeredWithoutServiceFlag() bool { return false }

// runManaged runs the program under the service manager: kardianos/service
// starts it, and stops it when RunWait returns.
func runManaged(s kservice.Service, _ *install.Program) error { return s.Run() }

// serviceLogger logs to standard error, which systemd hands to journald.
func serviceLogger(_ kservice.Service, c config.LogConfig, stderr io.Writer) (*slog.Logger, error) {
	return service.NewLogger(stderr, c), nil
}

// reportToServiceLog has nothing to do here: standard error is the
// service's log already.
func reportToServiceLog(string) {}
