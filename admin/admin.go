package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
)

// The admin endpoint (admin.listen) serves the routes of the route table
// (routes.go) while the node runs.
const (
	// statusTimeout bounds the queries of /status.
	statusTimeout = 5 * time.Second
	// adminRetryMax caps the pause between attempts to listen.
	adminRetryMax = 30 * time.Second
)

// Node is what the admin endpoint needs of a node; *service.Node is one.
type Node interface {
	// Config is the node's configuration, as validated.
	Config() config.Config
	// Clock is the node's local clock.
	Clock() clock.Clock
	// Logger is the node's logger, naming the node.
	Logger() *slog.Logger
	// Store is the node's database; nil until the node has connected.
	Store() *store.Store
	// LocalRunner is the runner a job due now may start on at once; nil
	// before the node runs and once it stops.
	LocalRunner() *jobs.Runner
	// NotReady is why the node is not ready, one reason per failing
	// check; none when it is ready.
	NotReady() []string
	// Metrics is the node's Prometheus registry.
	Metrics() prometheus.Gatherer
}

var _ Node = (*service.Node)(nil)

// endpoint is one node's admin handler: what its routes share.
type endpoint struct {
	Node
	cfg   config.Config
	log   *slog.Logger
	clock clock.Clock
}

// maskDSN hides the DSN's password should a driver quote the DSN in an
// error.
func (n *endpoint) maskDSN(msg string) string {
	if dsn := n.cfg.Database.DSN; dsn != "" {
		return strings.ReplaceAll(msg, dsn, config.MaskDSN(dsn))
	}
	return msg
}

// Handler is the admin endpoint's handler for n: the dashboard at /,
// /healthz, /readyz, /metrics, /status and the HTTP API under /api/v1/.
// A Server serves it on admin.listen; it is exported for embedding and
// tests.
func Handler(n Node) http.Handler {
	h, _ := handler(n)
	return h
}

// handler is Handler and its API, whose statements the tests count.
func handler(node Node) (http.Handler, *api) {
	n := &endpoint{Node: node, cfg: node.Config(), log: node.Logger(), clock: node.Clock()}
	ses := newSessions(n.clock, sessionCookieName(n.cfg.Admin.AdminAddr()))
	a := newAPI(n)
	table := n.routes(a, newDashboard(n, ses))
	return n.guard(serveMux(table, a), ses, table), a
}

// healthz is 200 while the process is up.
func healthz(w http.ResponseWriter, _ *http.Request) {
	text(w, http.StatusOK, "ok\n")
}

// readyz is 200 when the node is ready, else 503 with a line per failing
// check.
func (n *endpoint) readyz(w http.ResponseWriter, _ *http.Request) {
	if why := n.NotReady(); len(why) > 0 {
		text(w, http.StatusServiceUnavailable, "not ready\n"+strings.Join(why, "\n")+"\n")
		return
	}
	text(w, http.StatusOK, "ready\n")
}

// metrics serves the node's registry in the Prometheus formats.
func (n *endpoint) metrics() http.Handler {
	return promhttp.HandlerFor(n.Metrics(), promhttp.HandlerOpts{
		ErrorLog:      promLogger{n.log},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// status is the report of `slotpoller status -json`, indented as it is
// (its times are the CLI's, RFC 3339 to the nanosecond: the report is
// the CLI's).
func (n *endpoint) status(w http.ResponseWriter, r *http.Request) {
	s := n.Store()
	if s == nil {
		text(w, http.StatusServiceUnavailable, "database: not connected yet\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	rep, err := service.Status(ctx, s, time.Duration(n.cfg.Checkin.TTL))
	if err != nil {
		text(w, http.StatusServiceUnavailable, n.maskDSN(err.Error())+"\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := jsonEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// promLogger passes the metrics handler's errors to the node's log.
type promLogger struct{ log *slog.Logger }

// Println logs one error of the metrics handler as a warning.
func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}

// Server serves a node's admin endpoint on admin.listen: give it to the
// node's Serve, which starts it with the node's Run and stops it after the
// drain.
type Server struct {
	n Node
	h http.Handler

	mu     sync.Mutex
	addr   string // where it listens; "" when it does not
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// NewServer returns the admin endpoint of n, not yet started.
func NewServer(n Node) *Server {
	return &Server{n: n, h: Handler(n)}
}

// Addr is the address the admin endpoint listens on while it does (its
// port resolved, so ":0" in admin.listen gives the port the system
// chose); "" when admin.listen is off, before it listens and after it
// stopped.
func (a *Server) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// Start starts the admin endpoint when admin.listen is set, and returns at
// once. A failure to listen (the port taken, say, by the previous
// instance still draining during a restart) does not stop the node: its
// work matters more than its being watched. The failure is logged as an
// error and listening is retried, with a growing pause, until it works or
// the endpoint stops.
func (a *Server) Start() {
	cfg := a.n.Config()
	if cfg.Admin.Listen == "" {
		return
	}
	log := a.n.Logger()
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: a.h, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.With("component", "admin").Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	a.mu.Lock()
	a.srv, a.cancel, a.done = srv, cancel, done
	a.mu.Unlock()
	go a.run(ctx, log, srv, done, cfg.Admin.AdminAddr())
}

func (a *Server) run(ctx context.Context, log *slog.Logger, srv *http.Server, done chan struct{}, addr string) {
	defer close(done)
	pause, failures := time.Second, 0
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			if failures > 0 {
				log.Info("admin endpoint listening after all", "addr", ln.Addr().String(), "failed_attempts", failures)
			} else {
				log.Info("admin endpoint listening", "addr", ln.Addr().String())
			}
			a.mu.Lock()
			a.addr = ln.Addr().String()
			a.mu.Unlock()
			err := srv.Serve(ln) // closes ln
			a.mu.Lock()
			a.addr = ""
			a.mu.Unlock()
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin endpoint stopped serving; the node runs on without it", "addr", addr, "err", err)
			}
			return
		}
		failures++
		if failures == 1 {
			log.Error("could not listen on admin.listen; the node runs on without its admin endpoint and keeps trying",
				"addr", addr, "err", err, "retry_in", pause)
		} else {
			log.Debug("admin endpoint: could not listen; retrying", "addr", addr, "err", err, "retry_in", pause)
		}
		if clock.Sleep(ctx, a.n.Clock(), pause) != nil {
			return
		}
		pause = min(2*pause, adminRetryMax)
	}
}

// Stop ends the admin endpoint, letting requests in progress finish until
// ctx ends. It may be called more than once, and without a Start.
func (a *Server) Stop(ctx context.Context) {
	a.mu.Lock()
	srv, cancel, done := a.srv, a.cancel, a.done
	a.srv, a.cancel, a.done = nil, nil, nil
	a.mu.Unlock()
	if srv == nil {
		return
	}
	cancel()
	if err := srv.Shutdown(ctx); err != nil {
		a.n.Logger().Warn("admin endpoint: requests still in progress at stop were cut off", "err", err)
		_ = srv.Close()
	}
	<-done
}
