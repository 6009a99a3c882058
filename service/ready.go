package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/clocksync"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// Readiness, as /readyz (package admin) and the slotpoller_ready metric
// report it.
const (
	// pingTimeout bounds the database check of the readiness.
	pingTimeout = 2 * time.Second
	// pingEvery is how long a database check's answer is reused: probes
	// and scrapes never cost the database more than one query a second.
	pingEvery = time.Second
)

// nodeParts are the parts of a running node the admin endpoint and the
// metrics read; each is nil until Run has built it.
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
	at    clock.Instant // when the last check ended; zero: never
	err   error
}

// pingDB reads the database clock with a short timeout, at most once per
// pingEvery; in between it returns the last answer.
func (n *Node) pingDB(s *store.Store) error {
	c := &n.dbCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store == s && !c.at.IsZero() && clock.Mono(n.clock).Sub(c.at) < pingEvery {
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
	c.store, c.at, c.err = s, clock.Mono(n.clock), err
	return err
}

// NotReady returns why the node is not ready, one reason per failing
// check; none when it is ready: the database answers, the clock offset
// is known, the node is checked in and not stopping. The database check
// costs at most one query a second, whoever asks.
func (n *Node) NotReady() []string {
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
