package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// The admin endpoint (admin.listen) serves, while the node runs:
//
//	GET /healthz  200 "ok" while the process is up
//	GET /readyz   200 "ready" when the database answers, the clock offset is
//	              known and the node is checked in; else 503 with one line
//	              per failing check
//	GET /metrics  Prometheus text format (the node's own registry)
//	GET /status   the JSON of `slotpoller status -json`
//	/api/v1/...   the HTTP API (api.go)
//
// All but /healthz and /readyz pass the guard (api_guard.go): the token
// when admin.token is set, no foreign Origin, a loopback Host otherwise.
const (
	// pingTimeout bounds the database check of /readyz.
	pingTimeout = 2 * time.Second
	// pingEvery is how long a database check's answer is reused: probes
	// and scrapes never cost the database more than one query a second.
	pingEvery = time.Second
	// statusTimeout bounds the queries of /status.
	statusTimeout = 5 * time.Second
	// adminStopTimeout is how long a stop waits for requests in progress.
	adminStopTimeout = 2 * time.Second
	// adminRetryMax caps the pause between attempts to listen.
	adminRetryMax = 30 * time.Second
)

// nodeParts are the parts of a running node the admin endpoint reads; each
// is nil until Run has built it.
type nodeParts struct {
	store    *store.Store
	est      *clocksync.Estimator
	reg      *checkin.Registry
	runner   *jobs.Runner
	stopping bool
}

func (n *Node) parts() nodeParts {
	n.mu.Lock()
	defer n.mu.Unlock()
	return nodeParts{store: n.store, est: n.est, reg: n.reg, runner: n.runner, stopping: n.stopping}
}

// dbCheck is the cached answer of the database check.
type dbCheck struct {
	mu    sync.Mutex
	store *store.Store
	at    time.Time // local time the last check ended; zero: never
	err   error
}

// pingDB reads the database clock with a short timeout, at most once per
// pingEvery; in between it returns the last answer.
func (n *Node) pingDB(s *store.Store) error {
	c := &n.dbCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store == s && !c.at.IsZero() && n.clock.Now().Sub(c.at) < pingEvery {
		return c.err
	}
	// Not the request's context: a probe that hangs up must not leave a
	// cancellation behind as the database's answer.
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	_, err := s.Now(ctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("did not answer within %v", pingTimeout)
	}
	c.store, c.at, c.err = s, n.clock.Now(), err
	return err
}

// notReady returns why the node is not ready, one reason per failing
// check; none when it is ready.
func (n *Node) notReady() []string {
	p := n.parts()
	var why []string
	if p.stopping {
		why = append(why, "node: stopping (draining its calls)")
	}
	if p.store == nil {
		why = append(why, "database: not connected yet")
	} else if err := n.pingDB(p.store); err != nil {
		why = append(why, "database: "+n.maskDSN(err.Error()))
	}
	offsetKnown := false
	if p.est != nil {
		_, offsetKnown = p.est.Current()
	}
	if !offsetKnown {
		why = append(why, "clock offset: not measured yet")
	}
	switch {
	case p.reg == nil:
		why = append(why, "checked in: not yet")
	case !p.reg.Membership().OK:
		why = append(why, fmt.Sprintf("checked in: no successful registry write within its promise (a heartbeat's TTL, %v; on PostgreSQL a rotation, two slots and the TTL)", n.cfg.Checkin.TTL))
	}
	return why
}

// maskDSN hides the DSN's password should a driver quote the DSN in an
// error.
func (n *Node) maskDSN(msg string) string {
	if dsn := n.cfg.Database.DSN; dsn != "" {
		return strings.ReplaceAll(msg, dsn, config.MaskDSN(dsn))
	}
	return msg
}

// AdminHandler is the admin endpoint's handler: the dashboard at /,
// /healthz, /readyz, /metrics, /status and the HTTP API under /api/v1/. Run serves it on
// admin.listen; it is exported for embedding and tests.
func (n *Node) AdminHandler() http.Handler {
	h, _ := n.adminHandler()
	return h
}

// adminHandler is AdminHandler and its API, whose statements the tests
// count.
func (n *Node) adminHandler() (http.Handler, *api) {
	mux := http.NewServeMux()
	// The dashboard has / (dashboard.go); the list of routes is at /api/.
	mux.HandleFunc("GET /api/{$}", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "slotpoller node "+n.cfg.Node.Name+"\n\n"+
			"/         the dashboard (a browser)\n"+
			"/healthz  200 while the process is up\n"+
			"/readyz   200 when the database answers, the clock offset is known and the node is checked in\n"+
			"/metrics  Prometheus metrics\n"+
			"/status   the farm's status as JSON (slotpoller status -json)\n\n"+
			"HTTP API (JSON; POST takes Content-Type: application/json):\n"+
			"POST /api/v1/jobs               enqueue one job\n"+
			"POST /api/v1/jobs/batch         enqueue {\"jobs\": [...]} in one transaction\n"+
			"GET  /api/v1/jobs               list: ?state=&endpoint=&since=&until=&limit=&cursor=\n"+
			"GET  /api/v1/jobs/counts        jobs by state\n"+
			"GET  /api/v1/jobs/{id}          a job with its history\n"+
			"POST /api/v1/jobs/{id}/cancel   cancel a waiting job\n"+
			"POST /api/v1/jobs/{id}/retry    retry a finished job\n"+
			"POST /api/v1/jobs/retry         retry {\"state\", \"endpoint\", \"since\", \"until\", \"limit\"}\n"+
			"GET  /api/v1/schedules          schedules\n"+
			"GET  /api/v1/tasks              endless tasks (?all=true: deleted too)\n"+
			"GET  /api/v1/farm               the rotation, the nodes and job counts (the dashboard's farm view)\n"+
			"GET  /api/v1/throughput         jobs finished per minute and start delays, last hour\n"+
			"POST /api/v1/schedules/{name}/pause|resume|trigger   pause, resume, or run one extra occurrence now\n"+
			"POST /api/v1/tasks/{name}/delete                     delete an endless task\n")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := n.notReady(); len(why) > 0 {
			text(w, http.StatusServiceUnavailable, "not ready\n"+strings.Join(why, "\n")+"\n")
			return
		}
		text(w, http.StatusOK, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{n.log.With("node", n.cfg.Node.Name)},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		p := n.parts()
		if p.store == nil {
			text(w, http.StatusServiceUnavailable, "database: not connected yet\n")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
		defer cancel()
		rep, err := Status(ctx, p.store, time.Duration(n.cfg.Checkin.TTL))
		if err != nil {
			text(w, http.StatusServiceUnavailable, n.maskDSN(err.Error())+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	})
	a := n.apiRoutes(mux)
	ses := newSessions(n.clock, sessionCookieName(n.cfg.Admin.AdminAddr()))
	n.dashboardRoutes(mux, ses)
	return n.guard(mux, ses), a
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// promLogger passes the metrics handler's errors to the node's log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("metrics: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}

// AdminAddr is the address the admin endpoint listens on while it does
// (its port resolved, so ":0" in admin.listen gives the port the system
// chose); "" when admin.listen is off, before it listens and after the
// node stopped.
func (n *Node) AdminAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.adminAddr
}

// adminServer serves the admin endpoint for one Run.
type adminServer struct {
	n      *Node
	log    *slog.Logger
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startAdmin starts the admin endpoint when admin.listen is set; nil
// otherwise. A failure to listen (the port taken, say, by the previous
// instance still draining during a restart) does not stop the node: its
// work matters more than its being watched. The failure is logged as an
// error and listening is retried, with a growing pause, until it works or
// the node stops.
func (n *Node) startAdmin(log *slog.Logger) *adminServer {
	if n.cfg.Admin.Listen == "" {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &adminServer{n: n, log: log, cancel: cancel, done: make(chan struct{}),
		srv: &http.Server{Handler: n.AdminHandler(), ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(log.With("component", "admin").Handler(), slog.LevelWarn)}}
	go a.run(ctx, n.cfg.Admin.AdminAddr())
	return a
}

func (a *adminServer) run(ctx context.Context, addr string) {
	defer close(a.done)
	pause, failures := time.Second, 0
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			if failures > 0 {
				a.log.Info("admin endpoint listening after all", "addr", ln.Addr().String(), "failed_attempts", failures)
			} else {
				a.log.Info("admin endpoint listening", "addr", ln.Addr().String())
			}
			a.n.mu.Lock()
			a.n.adminAddr = ln.Addr().String()
			a.n.mu.Unlock()
			err := a.srv.Serve(ln) // closes ln
			a.n.mu.Lock()
			a.n.adminAddr = ""
			a.n.mu.Unlock()
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("admin endpoint stopped serving; the node runs on without it", "addr", addr, "err", err)
			}
			return
		}
		failures++
		if failures == 1 {
			a.log.Error("could not listen on admin.listen; the node runs on without its admin endpoint and keeps trying",
				"addr", addr, "err", err, "retry_in", pause)
		} else {
			a.log.Debug("admin endpoint: could not listen; retrying", "addr", addr, "err", err, "retry_in", pause)
		}
		if clock.Sleep(ctx, a.n.clock, pause) != nil {
			return
		}
		pause = min(2*pause, adminRetryMax)
	}
}

// stop ends the admin endpoint, letting requests in progress finish for a
// moment. It may be called more than once; nil does nothing.
func (a *adminServer) stop() {
	if a == nil {
		return
	}
	a.once.Do(func() {
		a.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), adminStopTimeout)
		defer cancel()
		if err := a.srv.Shutdown(ctx); err != nil {
			a.log.Warn("admin endpoint: requests still in progress at stop were cut off", "err", err)
			_ = a.srv.Close()
		}
		<-a.done
	})
}
