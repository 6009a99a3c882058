package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/slotpoller/slotpoller/internal/tracing"
)

// startTracing starts the recorder of the node's spans when
// tracing.otlp_endpoint is set, and returns its tracer (nil when not) and
// what stops it: the spans not yet sent get up to 5 s.
func (n *Node) startTracing(log *slog.Logger) (tracing.Tracer, func()) {
	endpoint := n.cfg.Tracing.OTLPEndpoint
	if endpoint == "" {
		return nil, func() {}
	}
	rec, err := tracing.NewRecorder(endpoint, n.cfg.Node.Name)
	if err != nil {
		// The config was validated: a recorder that cannot be built costs
		// the spans, never the jobs.
		log.Error("could not start recording spans; calls still carry their traceparent", "otlp_endpoint", endpoint, "err", err)
		return nil, func() {}
	}
	log.Info("recording spans", "otlp_endpoint", endpoint)
	return rec.Tracer(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rec.Shutdown(ctx); err != nil {
			log.Warn("could not send the last spans", "otlp_endpoint", endpoint, "err", err)
		}
	}
}
