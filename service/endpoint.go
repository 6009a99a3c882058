package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// adminStopTimeout is how long a stop waits for the admin endpoint's
// requests in progress (StopTimeout counts it).
const adminStopTimeout = 2 * time.Second

// Endpoint is what a node serves beside its work while Run runs: the
// admin endpoint of package admin. The node knows it only as this; the
// endpoint reads the node through the methods below (Config, Store,
// LocalRunner, NotReady, Metrics...), so the dependency points from the
// endpoint to the node and the node knows nothing of HTTP.
type Endpoint interface {
	// Start begins serving and returns at once.
	Start()
	// Stop ends serving; requests in progress may finish until ctx ends.
	Stop(ctx context.Context)
}

// Serve makes Run serve e from its start, while the database may still
// be away, until its drain is over (and before it closes the store, which
// e reads). Call it before Run.
func (n *Node) Serve(e Endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.adminHook = e
}

// startEndpoint starts the endpoint given to Serve, if any, and returns
// what stops it: it may be called more than once.
func (n *Node) startEndpoint() (stop func()) {
	n.mu.Lock()
	e := n.adminHook
	n.mu.Unlock()
	if e == nil {
		return func() {}
	}
	e.Start()
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), adminStopTimeout)
			defer cancel()
			e.Stop(ctx)
		})
	}
}

// Config is the node's configuration, as validated.
func (n *Node) Config() config.Config { return n.cfg }

// Clock is the node's local clock, its clock.skew applied.
func (n *Node) Clock() clock.Clock { return n.clock }

// Logger is the node's logger, naming the node.
func (n *Node) Logger() *slog.Logger { return n.log }

// Store is the node's database; nil until the node has connected.
func (n *Node) Store() *store.Store { return n.parts().store }

// LocalRunner is the runner a job due now may start on at once (the local
// fast path of an enqueue); nil before the node runs and once it stops.
func (n *Node) LocalRunner() *jobs.Runner {
	p := n.parts()
	if p.runner == nil || p.stopping || p.store == nil {
		return nil
	}
	return p.runner
}
