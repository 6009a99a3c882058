//go:build unix

package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/otlptest"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// TestJobCallsJoinTheEnqueuersTrace: two node processes that record
// spans to an OTLP receiver run three jobs whose first attempt fails (500)
// and second succeeds. One was enqueued with a traceparent given, one in
// a context carrying an OpenTelemetry span, one in neither. Every call of
// the first two carries the enqueuer's trace id with a span id of its own,
// and that span id is a span the node exported as a child of the
// enqueuer's span; both calls of the third share one trace the node
// started, whose call spans are roots. Claims are exported too, linked to
// their jobs' traces.
func TestJobCallsJoinTheEnqueuersTrace(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, db := storetest.OpenDB(t, driver)
		ctx := context.Background()
		rx := otlptest.Start(t)

		var mu sync.Mutex
		calls := map[string][]string{} // job id → traceparent of each call, in order
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			job := r.Header.Get(callproto.HeaderJob)
			calls[job] = append(calls[job], r.Header.Get("traceparent"))
			mu.Unlock()
			if r.Header.Get(callproto.HeaderAttempt) == "1" {
				http.Error(w, "first attempts fail", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		defer srv.Close()

		var nodes []*node
		for _, name := range []string{"node-a", "node-b"} {
			environ := append(env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...),
				"SLOTPOLLER_TRACING_OTLP_ENDPOINT="+rx.URL, "SLOTPOLLER_JOBS_BACKOFF=100ms")
			nodes = append(nodes, startNode(t, environ, name))
		}
		waitSettled(t, s, 2)

		c, err := client.New(s.DB(), s.Driver(), client.WithSchema(db.Schema))
		require.NoError(t, err)
		const given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		givenID, err := c.Enqueue(ctx, client.Job{Endpoint: "/jobs/given", MaxAttempts: 3, Traceparent: given})
		require.NoError(t, err)
		span := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
			SpanID:  trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31}, TraceFlags: trace.FlagsSampled,
		})
		fromCtx := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		ctxID, err := c.Enqueue(trace.ContextWithSpanContext(ctx, span), client.Job{Endpoint: "/jobs/from-context", MaxAttempts: 3})
		require.NoError(t, err)
		noneID, err := c.Enqueue(ctx, client.Job{Endpoint: "/jobs/none", MaxAttempts: 3})
		require.NoError(t, err)
		j, err := c.Get(ctx, ctxID)
		require.NoError(t, err)
		require.Equal(t, fromCtx, j.Traceparent, "the context's span is the job's parent")

		key := func(id int64) string { return strconv.FormatInt(id, 10) }
		waitFor(t, 2*time.Minute, "each job called twice", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(calls[key(givenID)]) >= 2 && len(calls[key(ctxID)]) >= 2 && len(calls[key(noneID)]) >= 2
		})
		for _, n := range nodes {
			n.stop(t) // sends the spans not yet sent
		}
		mu.Lock()
		defer mu.Unlock()
		spans := rx.Spans()
		require.Empty(t, rx.Refused())
		byID := map[string]otlptest.Span{}
		for _, sp := range spans {
			byID[sp.SpanID] = sp
		}

		for id, enqueuer := range map[int64]string{givenID: given, ctxID: fromCtx} {
			got := calls[key(id)]
			require.Len(t, got, 2, "job %d: a failed attempt and its retry", id)
			require.NotEqual(t, got[0], got[1], "job %d: each call is a span of its own", id)
			for attempt, tp := range got {
				_, err := jobspec.ParseTraceparent(tp)
				require.NoError(t, err, "job %d attempt %d: %q", id, attempt+1, tp)
				require.Equal(t, enqueuer[3:35], tp[3:35], "job %d attempt %d: in the enqueuer's trace", id, attempt+1)
				sp, ok := byID[tp[36:52]]
				require.True(t, ok, "job %d attempt %d: the call's span %s was exported (%d spans)", id, attempt+1, tp[36:52], len(spans))
				require.Equal(t, "slotpoller job", sp.Name)
				require.Equal(t, enqueuer[36:52], sp.Parent, "job %d attempt %d: a child of the enqueuer's span", id, attempt+1)
				require.Equal(t, key(id), sp.Attributes["slotpoller.job.id"])
				require.Equal(t, strconv.Itoa(attempt+1), sp.Attributes["slotpoller.job.attempt"])
			}
		}

		got := calls[key(noneID)]
		require.Len(t, got, 2)
		require.Equal(t, got[0][3:35], got[1][3:35], "the job's own trace, on every attempt and node")
		require.NotEqual(t, got[0][36:52], got[1][36:52])
		for _, tp := range got {
			sp, ok := byID[tp[36:52]]
			require.True(t, ok, "the call's span %s was exported", tp[36:52])
			require.Empty(t, sp.Parent, "a root span in the job's own trace")
			require.Equal(t, tp[3:35], sp.TraceID)
		}

		// Claims: spans of their own, linked to the traces of the jobs
		// they took.
		linked := map[string]bool{}
		for _, sp := range spans {
			if sp.Name == "slotpoller claim" {
				for _, l := range sp.Links {
					linked[l] = true
				}
			}
		}
		require.True(t, linked[given[3:35]], "a claim span links to the given trace")
		require.True(t, linked[got[0][3:35]], "a claim span links to the job's own trace")
	})
}
