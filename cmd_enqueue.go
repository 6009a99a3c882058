package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/schema"
)

func cmdEnqueue(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("enqueue", stdout)
	endpoint := fs.String("endpoint", "", "path of the job's endpoint on the node's base URL, e.g. /jobs/report (required)")
	in := fs.Duration("in", 0, "run after this delay on the database clock, e.g. 30s")
	at := fs.String("at", "", "run at this time, RFC 3339, e.g. 2026-12-01T02:00:00Z")
	payload := fs.String("payload", "", "request body")
	payloadFile := fs.String("payload-file", "", "read the request body from this `file`, or from standard input with - (at most 1 MiB)")
	method := fs.String("method", "POST", "HTTP method: GET, POST, PUT, PATCH or DELETE")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the job is dead (default jobs.max_attempts)")
	timeout := fs.Duration("timeout", 0, "deadline of one call (default jobs.timeout); if the node running it dies, the job waits this long (at least jobs.lease) for another node")
	unique := fs.String("unique-key", "", "refuse the job if one with this key exists")
	queue := fs.String("queue", "", "the job's `queue` (default: the queue its endpoint is routed to by the config's queues, else default)")
	traceparent := fs.String("traceparent", os.Getenv("TRACEPARENT"), "the W3C `traceparent` the job belongs to: its calls join that trace (default $TRACEPARENT)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *queue != "" {
		if err := jobs.ValidateQueueName(*queue); err != nil {
			return usageError{fmt.Sprintf("-queue %q: %v", *queue, err)}
		}
	}
	if *endpoint == "" {
		return usageError{"-endpoint is required"}
	}
	if _, err := jobspec.CheckTraceparent(*traceparent); err != nil {
		return usageError{fmt.Sprintf("-traceparent (or $TRACEPARENT): %v", err)}
	}
	if *in < 0 {
		return usageError{fmt.Sprintf("-in %v: must not be negative", *in)}
	}
	if *in > jobs.MaxLeadTime {
		return usageError{fmt.Sprintf("-in %v: a job may be due at most 366 days (8784h) ahead", *in)}
	}
	var runAt time.Time
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
		if t.Before(jobs.MinRunAt) {
			return usageError{fmt.Sprintf("-at %q: a job's run time must not be before 1970-01-01", *at)}
		}
		runAt = t
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
	body := []byte(*payload)
	if *payloadFile != "" {
		if flagGiven(fs.FlagSet, "payload") {
			return usageError{"give -payload or -payload-file, not both"}
		}
		var err error
		if body, err = readPayload(*payloadFile, stdin); err != nil {
			return err
		}
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *in == 0 && runAt.IsZero() && cfg.Admin.Listen != "" {
		// Due now: through the local node's API, which starts the job at
		// once when the node has room. A node that does not answer leaves
		// the job to the database, as below.
		id, err := enqueueLocal(cfg.Admin, localJob{Endpoint: *endpoint, Method: *method, PayloadBase64: base64.StdEncoding.EncodeToString(body),
			MaxAttempts: *maxAttempts, Timeout: durationText(*timeout), UniqueKey: *unique, Queue: *queue, Traceparent: *traceparent})
		if !errors.Is(err, errNodeAway) {
			if err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			fmt.Fprintln(stdout, id)
			return nil
		}
	}
	return withClient(cfg, dbWrite, func(ctx context.Context, c *client.Client) error {
		id, err := c.Enqueue(ctx, client.Job{Endpoint: *endpoint, Method: *method, Payload: body,
			RunAt: runAt, Delay: *in, MaxAttempts: *maxAttempts, Timeout: *timeout, UniqueKey: *unique, Queue: *queue, Traceparent: *traceparent})
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		fmt.Fprintln(stdout, id)
		return nil
	})
}

// errNodeAway means the local node's API could not be reached.
var errNodeAway = errors.New("the local node's API does not answer")

// localJob is the body of POST /api/v1/jobs.
type localJob struct {
	Endpoint      string `json:"endpoint"`
	Method        string `json:"method,omitempty"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
	MaxAttempts   int    `json:"max_attempts,omitempty"`
	Timeout       string `json:"timeout,omitempty"`
	UniqueKey     string `json:"unique_key,omitempty"`
	Queue         string `json:"queue,omitempty"`
	Traceparent   string `json:"traceparent,omitempty"`
}

func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// enqueueLocal posts a job to the node's admin API on this host. It
// returns errNodeAway when no node answers there (the job was not
// written), and the API's own message when it refused the job.
func enqueueLocal(admin config.AdminConfig, j localJob) (int64, error) {
	body, err := json.Marshal(j)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+admin.AdminAddr()+"/api/v1/jobs", bytes.NewReader(body))
	if err != nil {
		return 0, errNodeAway
	}
	req.Header.Set("Content-Type", "application/json")
	if admin.Token != "" {
		req.Header.Set("Authorization", "Bearer "+admin.Token)
	}
	// Only a refused or unreachable connection means no node: the request
	// was never sent. Anything later may have written the job.
	dial := &net.Dialer{Timeout: time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: dial.DialContext, Proxy: nil}}
	conn, err := dial.DialContext(ctx, "tcp", admin.AdminAddr())
	if err != nil {
		return 0, errNodeAway
	}
	conn.Close()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the local node's API at %s: %w", admin.AdminAddr(), err)
	}
	defer resp.Body.Close()
	var answer struct {
		ID    int64 `json:"id"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&answer); err != nil {
		return 0, fmt.Errorf("the local node's API at %s answered %s", admin.AdminAddr(), resp.Status)
	}
	switch resp.StatusCode {
	case http.StatusServiceUnavailable, http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden:
		// Not connected yet, not a slotpoller API, or not ours to use:
		// nothing was written.
		return 0, errNodeAway
	}
	if resp.StatusCode != http.StatusCreated {
		msg := resp.Status
		if answer.Error != nil {
			msg = answer.Error.Message
		}
		return 0, errors.New(msg)
	}
	return answer.ID, nil
}

// readPayload reads -payload-file: a file, or standard input for "-". A
// body over client.MaxPayload is refused before it is all read.
func readPayload(name string, stdin io.Reader) ([]byte, error) {
	src, what := stdin, "standard input"
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, usageError{fmt.Sprintf("-payload-file: %v", err)}
		}
		defer f.Close()
		src, what = f, name
	}
	b, err := io.ReadAll(io.LimitReader(src, client.MaxPayload+1))
	if err != nil {
		return nil, fmt.Errorf("-payload-file: read %s: %w", what, err)
	}
	if len(b) > client.MaxPayload {
		return nil, usageError{fmt.Sprintf("-payload-file: %s is over %d bytes (1 MiB), the most a job's payload may be", what, client.MaxPayload)}
	}
	return b, nil
}

// flagGiven reports whether the command line set the flag.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// withClient connects a client for a one-shot verb, once the schema is
// in place.
func withClient(cfg config.Config, use dbUse, f func(context.Context, *client.Client) error) error {
	return withClientStore(cfg, use, func(ctx context.Context, c *client.Client, _ *store.Store) error { return f(ctx, c) })
}

// withClientStore is withClient with the client's store too: the CLI's
// operator actions record themselves in the audit log (cmd_audit.go).
func withClientStore(cfg config.Config, use dbUse, f func(context.Context, *client.Client, *store.Store) error) error {
	ctx := context.Background()
	s, err := openStore(ctx, cfg, use)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := schema.Check(ctx, s); err != nil {
		return inDatabase(cfg, err)
	}
	c, err := newClient(s, cfg)
	if err != nil {
		return err
	}
	return f(ctx, c, s)
}

func newClient(s *store.Store, cfg config.Config) (*client.Client, error) {
	return client.New(s.DB(), s.Driver(), client.WithSchema(cfg.Database.Schema),
		client.WithDefaultMaxAttempts(cfg.Jobs.MaxAttempts), client.WithActor("cli"))
}
