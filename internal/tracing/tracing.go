// Package tracing joins a node's calls to their jobs' W3C traces, and,
// when an OTLP endpoint is configured, records the node's spans there
// through OpenTelemetry.
//
// Invariants:
//   - Every call carries a traceparent. A job's calls are in the trace it
//     was enqueued in, each a child of the enqueuer's span; a job enqueued
//     without one is in a trace of its own whose id is derived from the
//     job (jobspec.JobTrace), the same for every attempt on every node. A
//     task's call starts a trace of its own.
//   - Each call has a span id of its own, sent as the traceparent's parent
//     id: the span the endpoint's work is a child of. With a recorder it
//     is the id of the span exported for the call.
//   - Off (no Recorder), tracing costs a call a random span id and a
//     string, and nothing is exported.
package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is what a node's calls and claims are recorded with: nil records
// nothing.
type Tracer = trace.Tracer

// Call is the trace context of one call: the traceparent to send, and the
// span to end when the call has ended (a no-op one when not recording).
type Call struct {
	Traceparent string
	Span        trace.Span
}

// End ends the call's span with its outcome: an HTTP status (0 when none
// came back) and an error text ("" when the call succeeded).
func (c Call) End(status int, errText string) {
	if !c.Span.IsRecording() {
		return
	}
	if status != 0 {
		c.Span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if errText != "" {
		c.Span.SetStatus(codes.Error, errText)
	}
	c.Span.End()
}

// StartCall starts the trace context of a call whose trace is parent (its
// Parent zero for a trace the node starts): with tr, a client span named
// name; without, a span id of its own only.
func StartCall(ctx context.Context, tr Tracer, parent jobspec.Trace, name string, attrs ...attribute.KeyValue) (context.Context, Call) {
	if tr == nil {
		t := parent
		binary.BigEndian.PutUint64(t.Parent[:], nonZero())
		return ctx, Call{Traceparent: t.String(), Span: trace.SpanFromContext(context.Background())}
	}
	if parent.Parent != ([8]byte{}) {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: parent.ID, SpanID: parent.Parent, TraceFlags: trace.TraceFlags(parent.Flags), Remote: true,
		}))
	} else {
		// A root span in the trace the node chose (IDs reads it).
		ctx = context.WithValue(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), traceIDKey{}, trace.TraceID(parent.ID))
	}
	ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	sc := span.SpanContext()
	t := jobspec.Trace{ID: sc.TraceID(), Parent: sc.SpanID(), Flags: byte(sc.TraceFlags())}
	return ctx, Call{Traceparent: t.String(), Span: span}
}

// NewTrace is a trace of its own for a call that belongs to no job (a
// task's): a random id, sampled.
func NewTrace() jobspec.Trace {
	var t jobspec.Trace
	binary.BigEndian.PutUint64(t.ID[:8], rand.Uint64())
	binary.BigEndian.PutUint64(t.ID[8:], nonZero())
	t.Flags = 1
	return t
}

// nonZero is a random number other than 0 (an id of zeros is invalid).
// Ids need to be unique, not secret: math/rand/v2's ChaCha8 source gives
// the randomness the W3C recommendation asks for without a system call.
func nonZero() uint64 {
	for {
		if n := rand.Uint64(); n != 0 {
			return n
		}
	}
}

type traceIDKey struct{}
