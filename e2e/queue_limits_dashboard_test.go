//go:build unix

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The dashboard's Queues page shows a queue's priority, limits, rate and
// its use, and start delays, in a window 1280 px wide with nothing cut
// off; a queue without settings shows none.
func TestDashboardShowsQueueLimits(t *testing.T) {
	b := startBrowser(t)
	s, n, port := dashboardNode(t)
	ctx := context.Background()
	// The node writes its config's settings (none) at start, clearing
	// any others; once it has, these are a config's as another node
	// would write them.
	waitFor(t, 30*time.Second, "the node's own queue settings written", func() bool {
		return strings.Contains(n.output(), "queue limits from config written")
	})
	require.NoError(t, s.QueueSettingsPut(ctx, []store.QueueSettings{
		{Name: "reports", Priority: 10, Limit: 4, NodeLimit: 1, Rate: 50, RatePeriod: time.Hour}}))
	_, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/report", MaxAttempts: 1, Queue: "reports"})
	require.NoError(t, err)
	_, err = jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/other", MaxAttempts: 1, Queue: "other", Delay: time.Hour})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the report done", func() bool {
		n, err := s.JobCountsCapped(ctx, 10)
		require.NoError(t, err)
		return n.Counts[store.StateDone] == 1
	})

	b.resize(1280, 1000)
	defer b.resize(1360, 1000)
	b.open(fmt.Sprintf("http://127.0.0.1:%d/#/queues", port))
	b.waitFor(`#queues tr[data-queue="reports"] td[data-field="delay"]`)
	cell := func(queue, field string) string {
		var got string
		require.NoError(t, b.eval(`return document.querySelector('#queues tr[data-queue="'+arguments[0]+'"] td[data-field="'+arguments[1]+'"]').textContent`, &got, queue, field))
		return got
	}
	require.Equal(t, "10", cell("reports", "priority"))
	require.Equal(t, "0 / 4 running · 1 per node", cell("reports", "limits"))
	require.Regexp(t, `^[01] / 50 per 1 h$`, cell("reports", "rate"), "one start in this hour's window (none if the hour turned since)")
	require.Regexp(t, `^\S+ m?s / \S+ m?s$`, cell("reports", "delay"), "the done job's start delay")
	require.Equal(t, "0", cell("other", "priority"))
	for _, f := range []string{"limits", "rate", "delay"} {
		require.Equal(t, "–", cell("other", f), f)
	}
	require.Empty(t, b.layoutProblems())
	b.requireInCard(`#queues button[data-action]`)
	n.stop(t)
}
