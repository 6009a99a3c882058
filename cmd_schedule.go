package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/service"
)

func cmdSchedule(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"say `schedule add`, `list`, `remove`, `pause`, `resume` or `trigger`"}
	}
	sub, args := args[0], args[1:]
	fs, cfgPath := newFlags("schedule "+sub, stdout)
	switch sub {
	case "add":
		name := fs.String("name", "", "unique name of the schedule (required)")
		every := fs.Duration("every", 0, "fire every interval, on the grid of its multiples (e.g. 10m fires at :00, :10, ...)")
		cronExpr := fs.String("cron", "", "fire on a cron expression: 5 fields, or 6 with seconds first")
		tz := fs.String("tz", "", "IANA time zone of -cron (default UTC)")
		endpoint := fs.String("endpoint", "", "path of the endpoint on the node's base URL (required)")
		method := fs.String("method", "POST", "HTTP method")
		payload := fs.String("payload", "", "request body of every occurrence")
		tolerance := fs.Duration("tolerance", 5*time.Minute, "how late an occurrence may still start")
		misfire := fs.String("misfire", store.MisfireOnce, "after an outage: once (the latest missed runs once), skip (record missed), all (run each)")
		overlap := fs.String("overlap", store.OverlapForbid, "forbid: an occurrence waits while the previous one runs; allow")
		maxAttempts := fs.Int("max-attempts", 0, "attempts per occurrence (default jobs.max_attempts)")
		timeout := fs.Duration("timeout", 0, "deadline of one call (default jobs.timeout); if the node running it dies, the job waits this long (at least jobs.lease) for another node")
		if err := fs.parse(args); err != nil {
			return err
		}
		switch {
		case *name == "":
			return usageError{"-name is required"}
		case *endpoint == "":
			return usageError{"-endpoint is required"}
		case (*every == 0) == (*cronExpr == ""):
			return usageError{"give -every or -cron, one of them"}
		}
		if err := checkName("schedule", *name); err != nil {
			return err
		}
		if err := checkCallFlags(*method, *timeout); err != nil {
			return err
		}
		if err := checkMaxAttempts(*maxAttempts); err != nil {
			return err
		}
		if err := jobs.ValidateEndpoint(*endpoint); err != nil {
			return usageError{fmt.Sprintf("-endpoint %q: %v", *endpoint, err)}
		}
		return withSchema(*cfgPath, dbWrite, func(ctx context.Context, cfg config.Config, s *store.Store) error {
			attempts := *maxAttempts
			if attempts == 0 {
				attempts = cfg.Jobs.MaxAttempts
			}
			sc := store.Schedule{Name: *name, Every: *every, Cron: *cronExpr, TimeZone: *tz, Endpoint: *endpoint,
				Method: *method, Payload: []byte(*payload), Timeout: *timeout, MaxAttempts: attempts, Tolerance: *tolerance,
				Misfire: *misfire, Overlap: *overlap, Enabled: true, Source: store.SourceCommand}
			if err := jobs.AddSchedule(ctx, s, sc); err != nil {
				return err
			}
			added, err := s.ScheduleGet(ctx, *name)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "schedule %q added; first occurrence %s\n", *name, added.NextFireAt.Format(time.RFC3339))
			return recordAction(ctx, s, "schedule.add", *name, scheduleDetail(sc), fmt.Sprintf("schedule %q added", *name))
		})
	case "list":
		asJSON := fs.Bool("json", false, "print JSON")
		if err := fs.parse(args); err != nil {
			return err
		}
		return withSchema(*cfgPath, dbRead, func(ctx context.Context, _ config.Config, s *store.Store) error {
			rep, err := service.ScheduleReport(ctx, s)
			if err != nil {
				return err
			}
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return writeSchedules(stdout, rep)
		})
	case "remove", "pause", "resume", "trigger":
		name := fs.String("name", "", "name of the schedule (required)")
		if err := fs.parse(args); err != nil {
			return err
		}
		if *name == "" {
			return usageError{"-name is required"}
		}
		return withSchema(*cfgPath, dbWrite, func(ctx context.Context, _ config.Config, s *store.Store) error {
			var ok bool
			var err error
			switch sub {
			case "trigger":
				id, err := jobs.TriggerSchedule(ctx, s, *name)
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "schedule %q triggered: occurrence job %d, due now\n", *name, id)
				return recordAction(ctx, s, "schedule.trigger", *name, fmt.Sprintf("job %d", id), fmt.Sprintf("schedule %q triggered", *name))
			case "remove":
				ok, err = s.ScheduleDelete(ctx, *name)
			case "pause":
				err = jobs.PauseSchedule(ctx, s, *name)
				ok = err == nil
			default:
				err = jobs.ResumeSchedule(ctx, s, *name)
				ok = err == nil
			}
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("schedule %q: %w", *name, store.ErrNotFound)
			}
			done := map[string]string{"remove": "removed", "pause": "paused", "resume": "resumed"}[sub]
			fmt.Fprintf(stdout, "schedule %q %s\n", *name, done)
			return recordAction(ctx, s, "schedule."+sub, *name, "", fmt.Sprintf("schedule %q %s", *name, done))
		})
	}
	return usageError{fmt.Sprintf("unknown schedule verb %q: say %s", sub, orList(subVerbs("schedule")))}
}

// scheduleDetail is what the audit log says of a schedule added.
func scheduleDetail(sc store.Schedule) string {
	when := "every " + sc.Every.String()
	if sc.Cron != "" {
		when = "cron " + sc.Cron
		if sc.TimeZone != "" {
			when += " " + sc.TimeZone
		}
	}
	return when + ": " + sc.Method + " " + sc.Endpoint
}
