//go:build windows

package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	kservice "github.com/kardianos/service"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
)

// serviceOptions has nothing to add on Windows: runManaged runs the
// program with a handler of its own.
func serviceOptions(*install.Program) kservice.KeyValue { return nil }

// registeredWithoutServiceFlag tells whether this `run` without -service
// is a service all the same: one registered by a slotpoller from before
// -service, which Windows starts as `run -config PATH`. Only then is
// Windows' guess used (a parent services.exe, no interactive desktop);
// `install` registers `run -service`, which never guesses.
func registeredWithoutServiceFlag() bool { return !kservice.Interactive() }

// serviceLogger logs to the Windows Event Log, under the source that
// install registered.
func serviceLogger(s kservice.Service, c config.LogConfig, _ io.Writer) (*slog.Logger, error) {
	// SystemLogger, not Logger: Logger picks the console when Windows'
	// guess says the process is not a service.
	l, err := s.SystemLogger(nil)
	if err != nil {
		return nil, fmt.Errorf("cannot open the event log: %w", err)
	}
	return install.NewSystemLogger(l, c), nil
}

// reportToServiceLog writes an error that stops the service before its
// logger exists (a config that does not load) to the event log: a service
// has no console, and its standard error goes nowhere.
func reportToServiceLog(msg string) {
	s, err := install.NewService(&install.Program{}, nil)
	if err != nil {
		return
	}
	if l, err := s.SystemLogger(nil); err == nil {
		_ = l.Error(msg)
	}
	// Then tell the service manager that the start failed, rather than
	// leave it waiting for a process that has gone: `slotpoller start`
	// then fails at once, pointing at the Event Log.
	_ = svc.Run(install.ServiceName, failedStart{})
}

// failedStart is the handler of a service whose node cannot start: it
// stops the service with exit code 1.
type failedStart struct{}

func (failedStart) Execute(_ []string, _ <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	return true, 1
}

// runManaged runs the program under the Windows service manager with a
// handler of its own: kardianos/service reports a stop as pending with no
// wait hint and never reports progress, so that Windows may count a node
// that drains as hung. This one reports the drain's progress until the
// program has stopped, and accepts the pre-shutdown notice, whose timeout
// install sets to the stop timeout, so that a system shutdown waits for
// the drain too.
func runManaged(_ kservice.Service, prg *install.Program) error {
	if err := svc.Run(install.ServiceName, &serviceHandler{prg: prg}); err != nil {
		if errors.Is(err, windows.ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) {
			return fmt.Errorf("run -service is what the Windows service manager runs (%w); in a console, run without -service", err)
		}
		return err
	}
	return nil
}

const (
	// stopProgressEvery is how often a stopping service reports progress.
	stopProgressEvery = 2 * time.Second
	// stopWaitHint is how long the service manager is told to wait for
	// the next report: a few of them, so that a slow report is no hang.
	stopWaitHint = 5 * stopProgressEvery
)

// serviceHandler is the svc.Handler of a slotpoller service.
type serviceHandler struct{ prg *install.Program }

func (h *serviceHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	const accepts = svc.AcceptStop | svc.AcceptShutdown | svc.AcceptPreShutdown
	status <- svc.Status{State: svc.StartPending}
	if err := h.prg.Start(nil); err != nil {
		return true, 1
	}
	status <- svc.Status{State: svc.Running, Accepts: accepts}
	for {
		select {
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown, svc.PreShutdown:
				return h.stop(status)
			}
		case <-h.prg.Done():
			// The node gave up: the service stops with a service-specific
			// exit code, a failure that is no crash, for which install
			// turns the recovery actions on (restart after 5 s); then
			// runService returns the node's error and main exits 1.
			return true, 1
		}
	}
}

// stop stops the program, reporting stop-pending with a new checkpoint
// every stopProgressEvery until it has stopped (within its own bound).
func (h *serviceHandler) stop(status chan<- svc.Status) (bool, uint32) {
	err := stopWithProgress(func() error { return h.prg.Stop(nil) }, stopProgressEvery, func(checkpoint uint32) {
		status <- svc.Status{State: svc.StopPending, CheckPoint: checkpoint, WaitHint: uint32(stopWaitHint / time.Millisecond)}
	})
	if err != nil {
		return true, 2
	}
	return false, 0
}
