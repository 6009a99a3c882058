package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

func cmdEnqueue(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("enqueue", stderr)
	endpoint := fs.String("endpoint", "", "path of the job's endpoint on the node's base URL, e.g. /jobs/report (required)")
	in := fs.Duration("in", 0, "run after this delay on the database clock, e.g. 30s")
	at := fs.String("at", "", "run at this time, RFC 3339, e.g. 2026-12-01T02:00:00Z")
	payload := fs.String("payload", "", "request body")
	method := fs.String("method", "POST", "HTTP method: GET, POST, PUT, PATCH or DELETE")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the job is dead (default jobs.max_attempts)")
	timeout := fs.Duration("timeout", 0, "deadline of one call (default jobs.timeout)")
	unique := fs.String("unique-key", "", "refuse the job if one with this key exists")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *endpoint == "" {
		return usageError{"-endpoint is required"}
	}
	if *in < 0 {
		return usageError{fmt.Sprintf("-in %v: must not be negative", *in)}
	}
	if *in > jobs.MaxLeadTime {
		return usageError{fmt.Sprintf("-in %v: a job may be due at most 366 days (8784h) ahead", *in)}
	}
	var runAt *time.Time
	if *at != "" {
		if *in != 0 {
			return usageError{"give -in or -at, not both"}
		}
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return usageError{fmt.Sprintf("-at %q: not an RFC 3339 time such as 2026-12-01T02:00:00Z", *at)}
		}
		if t.After(time.Now().Add(jobs.MaxLeadTime)) {
			return usageError{fmt.Sprintf("-at %q: a job may be due at most 366 days ahead", *at)}
		}
		runAt = &t
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
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *maxAttempts == 0 {
		*maxAttempts = cfg.Jobs.MaxAttempts
	}
	ctx := context.Background()
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := install.Check(ctx, s); err != nil {
		return err
	}
	id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: *endpoint, Method: *method, Payload: []byte(*payload),
		RunAt: runAt, Delay: *in, MaxAttempts: *maxAttempts, Timeout: *timeout, UniqueKey: *unique})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, id)
	return nil
}
