package tracing

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Recorder exports a node's spans to an OTLP/HTTP endpoint (a collector,
// or a backend that takes OTLP), in batches, off the calls' path.
type Recorder struct {
	provider *sdktrace.TracerProvider
}

// CheckEndpoint reports whether endpoint is an OTLP/HTTP endpoint URL a
// recorder can send to: http or https, with a host. Spans go to its path,
// or to /v1/traces when it has none.
func CheckEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("OTLP endpoint %q is not a URL: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("OTLP endpoint %q must be an http:// or https:// URL (OTLP over HTTP, e.g. http://127.0.0.1:4318)", endpoint)
	}
	if u.Host == "" {
		return fmt.Errorf("OTLP endpoint %q has no host", endpoint)
	}
	return nil
}

// NewRecorder returns a recorder that sends the spans of node to the
// OTLP/HTTP endpoint (CheckEndpoint). Nothing is sent until a span ends;
// an endpoint that is down loses spans, never slows a call.
func NewRecorder(endpoint, node string) (*Recorder, error) {
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, err
	}
	u, _ := url.Parse(endpoint)
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", endpoint, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "slotpoller"), attribute.String("service.instance.id", node))
	return &Recorder{provider: sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(ids{}),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	)}, nil
}

// Tracer is the tracer of the node's spans.
func (r *Recorder) Tracer() Tracer { return r.provider.Tracer("github.com/slotpoller/slotpoller") }

// Shutdown sends the spans not yet sent, until ctx ends, and stops.
func (r *Recorder) Shutdown(ctx context.Context) error { return r.provider.Shutdown(ctx) }

// ids gives a root span the trace id StartCall chose (a job's derived
// trace), and random ids otherwise.
type ids struct{}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if id, ok := ctx.Value(traceIDKey{}).(trace.TraceID); ok && id.IsValid() {
		return id, spanID()
	}
	return trace.TraceID(NewTrace().ID), spanID()
}

func (ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return spanID() }

func spanID() trace.SpanID {
	var s trace.SpanID
	binary.BigEndian.PutUint64(s[:], nonZero())
	return s
}

var _ sdktrace.IDGenerator = ids{}
