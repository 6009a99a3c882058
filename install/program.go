package install

// The OS-service adapter: running a node under an OS service manager
// (systemd, System V init, the Windows service manager) through
// github.com/kardianos/service, whose contract is: Start must not block,
// Stop returns within a bounded time and never exits the process.
//
// It lives here, with the service's definition and control, rather than
// beside the node: the OS service wraps the node (it imports service for
// the node's stop bound), and the node knows nothing of the OS service.
// The schema migrations the node runs are a package of their own
// (schema), so nothing the node imports imports the OS service.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	kservice "github.com/kardianos/service"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/service"
)

// Program runs a node under the OS service manager: it is the
// kardianos/service Interface. Start launches Run in a goroutine and
// returns at once; Stop cancels Run's context and waits for it at most
// StopTimeout (service.StopTimeout of the node's config). Set the fields, then hand the Program to the service; a
// Program runs once.
type Program struct {
	// Run runs the node until its context ends (Node.Run).
	Run func(context.Context) error
	// StopTimeout bounds Stop: after it Stop returns an error even if Run
	// has not returned. Zero means service.StopTimeout of the default
	// config.
	StopTimeout time.Duration
	// Logger records the start and the stop; nil discards.
	Logger *slog.Logger

	mu       sync.Mutex
	done     chan struct{}
	cancel   context.CancelFunc
	started  bool
	stopping bool
	err      error
}

var _ kservice.Interface = (*Program)(nil)

// Done is closed when Run has returned.
func (p *Program) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.doneLocked()
}

func (p *Program) doneLocked() chan struct{} {
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}

// Err is the error Run returned when the node stopped on its own (it gave
// up); nil while it runs and after a stop asked for by Stop.
func (p *Program) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Program) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}

// Start launches the node and returns at once.
func (p *Program) Start(kservice.Service) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Run == nil {
		return errors.New("install: Program.Run is not set")
	}
	if p.started {
		return errors.New("install: the program was started already")
	}
	p.started = true
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	done := p.doneLocked()
	log := p.logger()
	log.Info("service starting")
	go func() {
		defer close(done)
		err := p.Run(ctx)
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.stopping {
			if err == nil {
				err = errors.New("the node stopped without being asked to")
			}
			p.err = err
			log.Error("node stopped on its own; the service manager will restart it", "err", err)
		} else if err != nil {
			log.Error("node stopped with an error", "err", err)
		}
	}()
	return nil
}

// Stop asks the node to stop and waits until it has drained and left, at
// most StopTimeout. It never exits the process.
func (p *Program) Stop(kservice.Service) error {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		return nil
	}
	p.stopping = true
	p.cancel()
	done := p.doneLocked()
	bound := p.StopTimeout
	if bound <= 0 {
		bound = service.StopTimeout(config.Default())
	}
	p.mu.Unlock()

	log := p.logger()
	log.Info("service stopping", "bound", bound)
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
		log.Info("service stopped")
		return nil
	case <-t.C:
		log.Error("the node did not stop in time; exiting with work in flight, whose leases will expire", "bound", bound)
		return fmt.Errorf("the node did not stop within %v", bound)
	}
}

// NewSystemLogger returns a logger that writes each record, formatted as
// c.Format says, to a service manager's log l (the Windows Event Log):
// errors as errors, warnings as warnings, the rest as information. c.Level
// filters; the time is left to the log, which stamps every entry.
func NewSystemLogger(l kservice.Logger, c config.LogConfig) *slog.Logger {
	out := &systemLogOut{log: l}
	opts := c.HandlerOptions()
	opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return config.DurationsAsText(groups, a)
	}
	var inner slog.Handler = slog.NewTextHandler(out, opts)
	if c.Format == "json" {
		inner = slog.NewJSONHandler(out, opts)
	}
	return slog.New(&systemLogHandler{inner: inner, out: out})
}

// systemLogOut collects one formatted record; its lock is held from the
// formatting to the write to the log.
type systemLogOut struct {
	mu  sync.Mutex
	buf bytes.Buffer
	log kservice.Logger
}

func (o *systemLogOut) Write(p []byte) (int, error) { return o.buf.Write(p) }

// systemLogHandler formats a record with inner, then hands it to the log
// at the record's level.
type systemLogHandler struct {
	inner slog.Handler
	out   *systemLogOut
}

func (h *systemLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *systemLogHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	msg := strings.TrimSuffix(h.out.buf.String(), "\n")
	switch {
	case r.Level >= slog.LevelError:
		return h.out.log.Error(msg)
	case r.Level >= slog.LevelWarn:
		return h.out.log.Warning(msg)
	default:
		return h.out.log.Info(msg)
	}
}

func (h *systemLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &systemLogHandler{inner: h.inner.WithAttrs(as), out: h.out}
}

func (h *systemLogHandler) WithGroup(name string) slog.Handler {
	return &systemLogHandler{inner: h.inner.WithGroup(name), out: h.out}
}
