//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// produced is the line every example's producer prints when it succeeds.
type produced struct {
	Outcome string `json:"outcome"`
	Order   int64  `json:"order"`
	Job     int64  `json:"job"`
	Payload string `json:"payload"`
}

// exampleProducer is an example's producer: the application that writes
// an order (example_orders, item "book") and enqueues the job that
// invoices it, POST /jobs/send-invoice with {"order":N}, in one
// transaction; its arguments are commit or rollback, and the endpoint.
type exampleProducer struct {
	// env is the producer's environment for the test's database.
	env func(t *testing.T, db storetest.DB) []string
	// run runs it and requires its exit status (0, or 2 for a refusal).
	run func(t *testing.T, appEnv []string, status int, args ...string) (produced, string)
	// refusal is what its standard error must hold, beside the entry
	// point's "endpoint: ... must start with /", when the entry point
	// refuses the job: the error the language's driver shows.
	refusal []string
	// maxAttempts, if not 0, is the max attempts the producer gives.
	maxAttempts int
}

// producerContract runs an example's producer against a real node, as an
// application runs it: the job it enqueues in a transaction that rolls
// back never exists nor runs, nor does its order; the entry point's
// refusal reaches the language with nothing written; the job whose
// transaction commits is called once, with the payload the producer sent,
// beside the application's own row.
func producerContract(t *testing.T, driver, name string, p exampleProducer) {
	start := time.Now()
	s, db := storetest.OpenDB(t, driver)
	ctx := context.Background()
	rec, seen := &recorder{}, &requestsSeen{}
	srv := httptest.NewServer(seen.wrap(rec.handler))
	defer srv.Close()
	n := startNode(t, env(driver, db.DSN, name, srv.URL, db.ExtraEnv()...), name)
	waitSettled(t, s, 1)
	appEnv := p.env(t, db)
	orders := exampleTable(db, "example_orders")

	countOrders := func() int {
		t.Helper()
		var count int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM "+orders).Scan(&count))
		return count
	}
	noJobs := func(when string) {
		t.Helper()
		counts, err := s.JobCounts(ctx)
		require.NoError(t, err)
		require.Empty(t, counts, "jobs %s", when)
	}

	// Rolled back: neither the order nor the job exists, and the node,
	// polling its slots meanwhile, calls nothing.
	out, _ := p.run(t, appEnv, 0, "rollback")
	require.Equal(t, "rolled back", out.Outcome)
	require.Positive(t, out.Job, "the entry point gave the job an id inside the transaction")
	_, err := s.JobGet(ctx, out.Job)
	require.ErrorIs(t, err, store.ErrNotFound, "job %d of the rolled back transaction", out.Job)
	noJobs("after a rollback")
	require.Zero(t, countOrders(), "orders after a rollback")

	// Refused: the entry point's check reaches the language with the field
	// at fault, and the order written before it is rolled back.
	_, stderr := p.run(t, appEnv, 2, "commit", "jobs/no-leading-slash")
	for _, want := range append([]string{"endpoint: endpoint", "must start with /"}, p.refusal...) {
		require.Contains(t, stderr, want, "the refusal")
	}
	noJobs("after a refused enqueue")
	require.Zero(t, countOrders(), "orders after a refused enqueue")

	// A job the rollback or the refusal had let through would have been
	// called within the node's next slots.
	heardFor(t, s, 1500*time.Millisecond)
	require.Empty(t, rec.snapshot(), "calls after a rollback and a refused enqueue")

	// Committed: the order is there and its job is called once, with the
	// payload the producer sent.
	out, _ = p.run(t, appEnv, 0, "commit")
	require.Equal(t, "committed", out.Outcome)
	require.Equal(t, 1, countOrders(), "orders after the commit")
	var item string
	require.NoError(t, s.DB().QueryRowContext(ctx, store.Expand(s.Dialect(), "SELECT item FROM "+orders+" WHERE id = ?"), out.Order).Scan(&item),
		"the committed order %d", out.Order)
	require.Equal(t, "book", item)
	waitFor(t, exampleWait(driver), "the committed job to be done", func() bool {
		j, err := s.JobGet(ctx, out.Job)
		require.NoError(t, err)
		return j.State == store.StateDone
	})
	// A second call would come at one of the node's next slots.
	heardFor(t, s, time.Second)
	calls := rec.snapshot()
	require.Len(t, calls, 1, "calls after the commit: %+v", calls)
	job := strconv.FormatInt(out.Job, 10)
	require.Equal(t, job, calls[0].job, "X-Slotpoller-Job")
	request, _ := seen.byJob.Load(job)
	require.Equal(t, "POST /jobs/send-invoice "+out.Payload, request, "the call's method, path and body: the payload the producer sent")
	var sent struct{ Order int64 }
	require.NoError(t, json.Unmarshal([]byte(out.Payload), &sent))
	require.Equal(t, out.Order, sent.Order, "the payload names the committed order")
	if p.maxAttempts != 0 {
		j, err := s.JobGet(ctx, out.Job)
		require.NoError(t, err)
		require.Equal(t, p.maxAttempts, j.MaxAttempts, "the producer's max attempts reached the entry point")
	}
	counts, err := s.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{store.StateDone: 1}, counts, "jobs after the commit")
	n.stop(t)
	t.Logf("%s: %v", driver, time.Since(start).Round(time.Millisecond))
}

// runExampleProducer runs an example's producer, argv, with appEnv added
// to the test's environment, requires its exit status, and returns what
// it printed: the parsed line when it succeeded, and its standard error.
func runExampleProducer(t *testing.T, appEnv []string, status int, argv ...string) (produced, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), appEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	what := strings.Join(argv, " ")
	t.Logf("%s: %v, %s%s", what, time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	var out produced
	if status == 0 {
		require.NoError(t, err, "%s: %s", what, stderr.String())
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "the producer's line %q", stdout.String())
		return out, stderr.String()
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s should have failed: %s", what, stdout.String())
	require.Equal(t, status, exit.ExitCode(), "exit status of %s: %s", what, stderr.String())
	require.Empty(t, stdout.String(), "a failed producer prints no outcome")
	return out, stderr.String()
}
