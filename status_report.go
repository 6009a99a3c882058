package main

// The text of `slotpoller status`, `task list` and `schedule list` for a
// person: the read model is service's (service.Status, service.TaskReport,
// service.ScheduleReport), which the admin API serves as JSON.

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/service"
)

// writeStatus prints the farm's status for a person.
func writeStatus(w io.Writer, r service.StatusReport) error {
	fmt.Fprintf(w, "database time %s, schema version %d\n\n", r.DatabaseTime.Format(time.RFC3339Nano), r.SchemaVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLIVE\tSTATE\tFREE/CAP\tOFFSET_MS\tERROR_MS\tLAST_SEEN")
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d/%d\t%.3f\t%.3f\t%s ago\n", n.Name, n.Live, n.State, n.Free, n.Capacity,
			n.OffsetMS, n.OffsetErrorMS, r.DatabaseTime.Sub(n.LastSeen).Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	tally := store.JobTally{Counts: r.Jobs, Cap: r.JobsCountCap}
	if tally.Cap == 0 {
		tally.Cap = math.MaxInt
	}
	fmt.Fprint(w, "\njobs:")
	shown := 0
	for _, st := range store.CountStates {
		if r.Jobs[st] > 0 {
			fmt.Fprintf(w, " %s=%s", st, tally.Show(st))
			shown++
		}
	}
	if shown == 0 {
		fmt.Fprint(w, " none")
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	for _, q := range r.PausedQueues {
		fmt.Fprintf(w, "queue %s paused", q.Name)
		if q.PausedBy != "" {
			fmt.Fprintf(w, " by %s", q.PausedBy)
		}
		if q.PausedAt != nil {
			fmt.Fprintf(w, " at %s", q.PausedAt.UTC().Format(jobTime))
		}
		if _, err := fmt.Fprintln(w, ": its jobs wait (slotpoller queue resume -name "+q.Name+")"); err != nil {
			return err
		}
	}
	for _, q := range r.ManagedQueues {
		work := fmt.Sprintf("%d running, %d waiting", q.Running, q.Waiting)
		if q.StartDelayJobs > 0 {
			work += fmt.Sprintf(", start delay p50 %s p99 %s", msText(q.StartDelayP50MS), msText(q.StartDelayP99MS))
		}
		if _, err := fmt.Fprintf(w, "queue %s: %s; %s\n", q.Name, managedText(q), work); err != nil {
			return err
		}
	}
	return nil
}

// msText is milliseconds for a person: "12ms", "1.5s".
func msText(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Millisecond).String()
}

// managedText is a managed queue's settings in one line: "limit 4, 1 per
// node, rate 50/10s (7 used in this window), priority 10".
func managedText(q service.ManagedQueue) string {
	var parts []string
	if q.Limit > 0 {
		parts = append(parts, fmt.Sprintf("limit %d", q.Limit))
	}
	if q.NodeLimit > 0 {
		parts = append(parts, fmt.Sprintf("%d per node", q.NodeLimit))
	}
	if q.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %d/%s (%d used in this window)", q.Rate,
			config.Duration(time.Duration(q.RatePeriodMS)*time.Millisecond), q.RateUsed))
	}
	if q.Priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", q.Priority))
	}
	return strings.Join(parts, ", ")
}

// writeTasks prints tasks for a person.
func writeTasks(w io.Writer, tasks []service.TaskStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tEVERY\tOWNER\tSINCE\tCALLS\tLAST RESULT")
	for _, t := range tasks {
		owner, since := "-", "-"
		if t.Owner != "" {
			owner = t.Owner
		}
		if t.Since != nil {
			since = t.Since.Format(time.RFC3339)
		}
		last := "-"
		switch {
		case t.LastCallAt == nil:
		case t.LastError == "":
			last = fmt.Sprintf("ok %d", t.LastStatus)
		default:
			last = fmt.Sprintf("failed x%d: %s", t.Failures, t.LastError)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", t.Name, t.State, t.Every, owner, since, t.Calls, last)
	}
	return tw.Flush()
}

// writeSchedules prints schedules for a person.
func writeSchedules(w io.Writer, scs []service.ScheduleStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tWHEN\tENABLED\tNEXT FIRE\tLAST RESULT\tMISSED")
	for _, s := range scs {
		next, last := "-", "-"
		if s.NextFireAt != nil && s.Enabled {
			next = s.NextFireAt.Format(time.RFC3339)
		}
		if s.LastResult != "" {
			last = s.LastResult
			if s.LastStatus != 0 {
				last += fmt.Sprintf(" %d", s.LastStatus)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%d\n", s.Name, s.When, s.Enabled, next, last, s.Missed)
	}
	return tw.Flush()
}
