package tracing_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/otlptest"
	"github.com/slotpoller/slotpoller/internal/tracing"
	"github.com/stretchr/testify/require"
)

const enqueuer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Off, a call is in its job's trace with a span id of its own, and each
// call's differs.
func TestStartCallWithoutRecorder(t *testing.T) {
	parent, err := jobspec.ParseTraceparent(enqueuer)
	require.NoError(t, err)
	seen := map[string]bool{}
	for range 100 {
		_, c := tracing.StartCall(context.Background(), nil, parent, "slotpoller job")
		got, err := jobspec.ParseTraceparent(c.Traceparent)
		require.NoError(t, err, "the call's traceparent is valid")
		require.Equal(t, parent.ID, got.ID, "the job's trace")
		require.Equal(t, parent.Flags, got.Flags)
		require.NotEqual(t, parent.Parent, got.Parent, "the call's own span")
		require.False(t, seen[c.Traceparent], "a span id of its own per call")
		seen[c.Traceparent] = true
		require.False(t, c.Span.IsRecording())
		c.End(500, "failed") // a no-op
	}
	task := tracing.NewTrace()
	require.NotEqual(t, [16]byte{}, task.ID)
	require.NotEqual(t, task.ID, tracing.NewTrace().ID, "a task's call starts a trace of its own")
}

// With a recorder, the call's span is exported: a child of the
// enqueuer's span, or a root in the job's own trace, and its span id is
// the traceparent's parent id, the span the endpoint's work hangs under.
func TestRecorderExportsCallSpans(t *testing.T) {
	rx := otlptest.Start(t)
	rec, err := tracing.NewRecorder(rx.URL, "node-a")
	require.NoError(t, err)
	tr := rec.Tracer()

	parent, err := jobspec.ParseTraceparent(enqueuer)
	require.NoError(t, err)
	_, child := tracing.StartCall(context.Background(), tr, parent, "slotpoller job")
	child.End(500, "HTTP 500")
	own := jobspec.JobTrace(42, "slotpoller-k")
	_, root := tracing.StartCall(context.Background(), tr, own, "slotpoller job")
	root.End(204, "")
	require.NoError(t, rec.Shutdown(context.Background()))

	require.Eventually(t, func() bool { return len(rx.Spans()) == 2 }, 5*time.Second, 10*time.Millisecond)
	require.Empty(t, rx.Refused())
	byTrace := map[string]otlptest.Span{}
	for _, s := range rx.Spans() {
		byTrace[s.TraceID] = s
		require.Equal(t, "slotpoller", s.Service)
	}
	c, r := byTrace["4bf92f3577b34da6a3ce929d0e0e4736"], byTrace[own.String()[3:35]]
	require.Equal(t, "00f067aa0ba902b7", c.Parent, "a child of the enqueuer's span")
	require.Equal(t, child.Traceparent[36:52], c.SpanID, "the traceparent sent names the exported span")
	require.Equal(t, "500", c.Attributes["http.response.status_code"])
	require.Empty(t, r.Parent, "a root in the job's own trace")
	require.Equal(t, root.Traceparent[36:52], r.SpanID)
	require.Equal(t, root.Traceparent[3:35], own.String()[3:35], "the job's trace id, chosen by the node")
}

func TestCheckEndpoint(t *testing.T) {
	require.NoError(t, tracing.CheckEndpoint("http://127.0.0.1:4318"))
	require.NoError(t, tracing.CheckEndpoint("https://otel.example.com/v1/traces"))
	for _, bad := range []string{"127.0.0.1:4318", "grpc://x:4317", "http://", "http://[::1"} {
		require.Error(t, tracing.CheckEndpoint(bad), bad)
	}
}

// What a call's trace context costs with no recorder: the figure
// docs/tracing.md gives (go test -bench StartCall ./internal/tracing).
func BenchmarkStartCallOff(b *testing.B) {
	parent := jobspec.JobTrace(42, "slotpoller-0123456789abcdef0123456789abcdef")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, c := tracing.StartCall(ctx, nil, parent, "slotpoller job")
		c.End(204, "")
	}
}

// The same with a job's own trace derived first, as a call of a job
// enqueued without one pays.
func BenchmarkStartCallOffDerived(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, c := tracing.StartCall(ctx, nil, jobspec.JobTrace(int64(i), "slotpoller-0123456789abcdef0123456789abcdef"), "slotpoller job")
		c.End(204, "")
	}
}
