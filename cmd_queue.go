package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// cmdQueue is `queue list`, `queue pause -name N`, `queue resume -name N`
// and `queue cancel -name N [-waiting]`.
func cmdQueue(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"say `queue list`, `queue pause -name NAME`, `queue resume -name NAME` or `queue cancel -name NAME`"}
	}
	sub, args := args[0], args[1:]
	fs, cfgPath := newFlags("queue "+sub, stdout)
	switch sub {
	case "list":
		asJSON := fs.Bool("json", false, "print JSON: an object with a queues array")
		if err := fs.parse(args); err != nil {
			return err
		}
		return jobClient(*cfgPath, dbRead, func(ctx context.Context, c *client.Client) error {
			qs, err := c.Queues(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(stdout, struct {
					Queues []client.QueueInfo `json:"queues"`
				}{append([]client.QueueInfo{}, qs...)})
			}
			return writeQueues(stdout, qs)
		})
	case "pause", "resume":
		name := fs.String("name", "", "name of the queue (required)")
		if err := fs.parse(args); err != nil {
			return err
		}
		if *name == "" {
			return usageError{"-name is required"}
		}
		if err := jobs.ValidateQueueName(*name); err != nil {
			return usageError{fmt.Sprintf("-name %q: %v", *name, err)}
		}
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		return withClientStore(cfg, dbWrite, func(ctx context.Context, c *client.Client, s *store.Store) error {
			if sub == "pause" {
				if err := c.PauseQueue(ctx, *name); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "queue %q paused: its jobs wait until `slotpoller queue resume -name %s`; calls running go on\n", *name, *name)
				return recordAction(ctx, s, "queue.pause", *name, "", fmt.Sprintf("queue %q paused", *name))
			}
			if err := c.ResumeQueue(ctx, *name); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "queue %q resumed: its due jobs start from the next poll\n", *name)
			return recordAction(ctx, s, "queue.resume", *name, "", fmt.Sprintf("queue %q resumed", *name))
		})
	case "cancel":
		name := fs.String("name", "", "name of the queue (required)")
		waiting := fs.Bool("waiting", false, "cancel the queue's waiting jobs too (ready, and backing off after a failure)")
		if err := fs.parse(args); err != nil {
			return err
		}
		if *name == "" {
			return usageError{"-name is required"}
		}
		if err := jobs.ValidateQueueName(*name); err != nil {
			return usageError{fmt.Sprintf("-name %q: %v", *name, err)}
		}
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		return withClientStore(cfg, dbWrite, func(ctx context.Context, c *client.Client, s *store.Store) error {
			r, err := c.CancelQueue(ctx, *name, *waiting)
			if err != nil {
				return err
			}
			// The renewal that reports the requests comes every third of
			// the lease (the farm's, as this configuration gives it).
			fmt.Fprintf(stdout, "queue %q: cancel requested of %s running; the nodes stop the calls within %s (a third of jobs.lease)\n",
				*name, jobCount(r.Requested), config.Duration(time.Duration(cfg.Jobs.Lease)/3))
			if *waiting {
				fmt.Fprintf(stdout, "queue %q: %s waiting cancelled\n", *name, jobCount(r.Cancelled))
			}
			return recordAction(ctx, s, "queue.cancel", *name, fmt.Sprintf("requested %d running, cancelled %d waiting", r.Requested, r.Cancelled),
				fmt.Sprintf("queue %q: cancel requested", *name))
		})
	}
	return usageError{fmt.Sprintf("unknown queue verb %q: say %s", sub, orList(subVerbs("queue")))}
}

// writeQueues is `queue list`'s table: a queue's state and work, its
// settings ("-" where none is set; the rate as the config writes it, and
// its starts in the current window) and how late its recent jobs started.
func writeQueues(w io.Writer, qs []client.QueueInfo) error {
	if len(qs) == 0 {
		fmt.Fprintln(w, "no queues: no job waits or runs, and none was ever paused or given limits")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tWAITING\tRUNNING\tPRIORITY\tLIMIT\tNODE LIMIT\tRATE\tRATE USED\tDELAY P50\tDELAY P99\tPAUSED BY\tPAUSED AT")
	for _, q := range qs {
		state, by, at := "active", "-", "-"
		if q.Paused {
			state = "paused"
			if q.PausedBy != "" {
				by = q.PausedBy
			}
			if q.PausedAt != nil {
				at = q.PausedAt.UTC().Format(jobTime)
			}
		}
		rate, used := "-", "-"
		if q.Rate > 0 {
			rate, used = fmt.Sprintf("%d/%s", q.Rate, config.Duration(q.RatePeriod)), fmt.Sprint(q.RateUsed)
		}
		p50, p99 := "-", "-"
		if q.StartDelay.Jobs > 0 {
			p50, p99 = q.StartDelay.P50.Round(time.Millisecond).String(), q.StartDelay.P99.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Name, state, q.Waiting, q.Running, q.Priority,
			limitText(q.Limit), limitText(q.NodeLimit), rate, used, p50, p99, by, at)
	}
	return tw.Flush()
}

// limitText is a limit for the table, "-" for none.
func limitText(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// jobCount is "1 job" or "N jobs".
func jobCount(n int64) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}
