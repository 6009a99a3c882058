//go:build windows

package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	kservice "github.com/kardianos/service"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/service"
)

// serviceOptions watches the node: the Windows service manager only hears
// of the stops it asks for, so a node that gives up on its own ends the
// process with a failure, and the recovery action that install sets
// (restart after 5s) applies. This is main's own exit, never the
// program's Stop.
func serviceOptions(prg *service.Program) kservice.KeyValue {
	go func() {
		<-prg.Done()
		if prg.Err() != nil {
			os.Exit(1)
		}
	}()
	return nil
}

// serviceLogger logs to the Windows Event Log, under the source that
// install registered.
func serviceLogger(s kservice.Service, c service.LogConfig, _ io.Writer) (*slog.Logger, error) {
	l, err := s.Logger(nil)
	if err != nil {
		return nil, fmt.Errorf("cannot open the event log: %w", err)
	}
	return service.NewSystemLogger(l, c), nil
}

// reportToServiceLog writes an error that stops the service before its
// logger exists (a config that does not load) to the event log: a service
// has no console, and its standard error goes nowhere.
func reportToServiceLog(msg string) {
	s, err := install.NewService(&service.Program{}, nil)
	if err != nil {
		return
	}
	if l, err := s.SystemLogger(nil); err == nil {
		_ = l.Error(msg)
	}
}
