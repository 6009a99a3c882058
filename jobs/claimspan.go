package jobs

import (
	"context"

	"github.com/slotpoller/slotpoller/internal/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// maxClaimLinks is how many of a claim's jobs its span links to: a claim
// of a thousand jobs would otherwise make a span of a thousand links.
const maxClaimLinks = 32

// claimSpan starts the span of a claim statement when the runner records
// spans; a claim is in a trace of its own, linked to its jobs' traces.
func (r *Runner) claimSpan(ctx context.Context) (context.Context, trace.Span) {
	if r.opts.Tracer == nil {
		return ctx, nil
	}
	return r.opts.Tracer.Start(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), "slotpoller claim",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("slotpoller.node", r.opts.Node)))
}

// endClaimSpan ends a claim's span (nil: not recording) with what it took.
func endClaimSpan(span trace.Span, claims []store.Claim, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("slotpoller.claimed", len(claims)))
	for i, c := range claims {
		if i == maxClaimLinks {
			break
		}
		t := traceOf(c)
		span.AddLink(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: t.ID, SpanID: t.Parent, TraceFlags: trace.TraceFlags(t.Flags)}),
			Attributes: []attribute.KeyValue{attribute.Int64("slotpoller.job.id", c.ID)}})
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
