package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
)

// jobTime is how job commands write a database time: UTC, to the
// millisecond.
const jobTime = "2006-01-02 15:04:05.000Z"

func cmdJob(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"say `job list`, `job search TEXT`, `job show ID`, `job retry` or `job cancel ID`"}
	}
	sub, args := args[0], args[1:]
	fs, cfgPath := newFlags("job "+sub, stdout)
	switch sub {
	case "list":
		state := fs.String("state", "", "ready, retrying (backing off after a failure), running, done, failed, dead, cancelled or missed")
		endpoint := fs.String("endpoint", "", "only endpoints that start with this prefix")
		since := fs.Duration("since", 0, "only jobs created within this long, e.g. 24h (database clock)")
		until := fs.Duration("until", 0, "only jobs created at least this long ago, e.g. 1h: with -since, a time range")
		limit := fs.Int("limit", client.DefaultListLimit, fmt.Sprintf("at most this many jobs, 1 to %d", client.MaxListLimit))
		cursor := fs.String("cursor", "", "continue where the previous page ended")
		asJSON := fs.Bool("json", false, "print JSON: an object with a jobs array and next_cursor")
		if err := fs.parse(args); err != nil {
			return err
		}
		f := client.Filter{State: *state, EndpointPrefix: *endpoint, Since: *since, Until: *until, Limit: *limit, Cursor: *cursor}
		if err := checkFilter(f, *limit < 1); err != nil {
			return err
		}
		return jobClient(*cfgPath, dbRead, func(ctx context.Context, c *client.Client) error {
			page, err := c.List(ctx, f)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(stdout, struct {
					Jobs       []client.JobInfo `json:"jobs"`
					NextCursor string           `json:"next_cursor,omitempty"`
				}{append([]client.JobInfo{}, page.Jobs...), page.NextCursor})
			}
			return writeJobList(stdout, page)
		})
	case "search":
		limit := fs.Int("limit", client.DefaultSearchLimit, fmt.Sprintf("at most this many jobs, 1 to %d", client.MaxSearchLimit))
		scan := fs.Int("scan", client.DefaultSearchScan, fmt.Sprintf("the text search reads the newest this many jobs, 1 to %d", client.MaxSearchScan))
		asJSON := fs.Bool("json", false, "print JSON: an object with a hits array and from")
		text, err := parseText(fs, args)
		if err != nil {
			return err
		}
		q := client.Search{Text: text, Limit: *limit, Scan: *scan}
		var fe *client.FieldError
		if err := client.CheckSearch(q); errors.As(err, &fe) {
			if fe.Field == "text" {
				return usageError{fe.Problem}
			}
			return usageError{fmt.Sprintf("-%s: %s", fe.Field, fe.Problem)}
		}
		if *limit < 1 || *scan < 1 {
			return usageError{fmt.Sprintf("-limit %d, -scan %d: each must be at least 1", *limit, *scan)}
		}
		return jobClient(*cfgPath, dbRead, func(ctx context.Context, c *client.Client) error {
			res, err := c.Search(ctx, q)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(stdout, res)
			}
			return writeSearch(stdout, res, *scan)
		})
	case "show":
		asJSON := fs.Bool("json", false, "print JSON")
		id, err := parseID(fs, args)
		if err != nil {
			return err
		}
		return jobClient(*cfgPath, dbRead, func(ctx context.Context, c *client.Client) error {
			j, err := c.Get(ctx, id)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(stdout, j)
			}
			return writeJob(stdout, j)
		})
	case "cancel":
		id, err := parseID(fs, args)
		if err != nil {
			return err
		}
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		return withClientStore(cfg, dbWrite, func(ctx context.Context, c *client.Client, s *store.Store) error {
			res, err := c.CancelJob(ctx, id)
			if err != nil {
				return err
			}
			if res == client.CancelRequested {
				// The renewal that reports the request comes every third of
				// the lease (the farm's, as this configuration gives it).
				fmt.Fprintf(stdout, "job %d: cancel requested; the node stops the call within %s (a third of jobs.lease)\n",
					id, config.Duration(time.Duration(cfg.Jobs.Lease)/3))
				return recordAction(ctx, s, "job.cancel", strconv.FormatInt(id, 10), "cancel requested while running", fmt.Sprintf("job %d: cancel requested", id))
			}
			fmt.Fprintf(stdout, "job %d cancelled\n", id)
			return recordAction(ctx, s, "job.cancel", strconv.FormatInt(id, 10), "cancelled", fmt.Sprintf("job %d cancelled", id))
		})
	case "retry":
		state := fs.String("state", "", "retry every job in this state: dead, failed, cancelled or missed")
		since := fs.Duration("since", 0, "with -state: only jobs created within this long, e.g. 24h")
		until := fs.Duration("until", 0, "with -state: only jobs created at least this long ago, e.g. 1h")
		limit := fs.Int("limit", client.MaxListLimit, fmt.Sprintf("with -state: at most this many jobs, newest first, 1 to %d", client.MaxListLimit))
		var id int64
		var err error
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			id, err = parseID(fs, args)
		} else {
			err = fs.parse(args)
		}
		if err != nil {
			return err
		}
		switch {
		case id != 0 && (*state != "" || *since != 0 || *until != 0):
			return usageError{"give a job ID or -state, not both"}
		case id == 0 && *state == "":
			return usageError{"say which jobs: `job retry ID` or `job retry -state dead [-since 24h]`"}
		case id == 0 && *state != client.StateDead && *state != client.StateFailed && *state != client.StateCancelled && *state != client.StateMissed:
			return usageError{fmt.Sprintf("-state %q: only dead, failed, cancelled or missed jobs can be retried", *state)}
		}
		f := client.Filter{State: *state, Since: *since, Until: *until, Limit: *limit}
		if err := checkFilter(f, *limit < 1); err != nil {
			return err
		}
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		return withClientStore(cfg, dbWrite, func(ctx context.Context, c *client.Client, s *store.Store) error {
			if id != 0 {
				if err := c.Retry(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "job %d is ready again with a fresh attempt budget\n", id)
				return recordAction(ctx, s, "job.retry", strconv.FormatInt(id, 10), "", fmt.Sprintf("job %d retried", id))
			}
			n, err := c.RetryMatching(ctx, f)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s %s ready again with a fresh attempt budget\n", count(n, *state+" job"), isAre(n))
			if n == int64(f.Limit) {
				fmt.Fprintf(stdout, "there may be more: run it again (at most %d at a time)\n", f.Limit)
			}
			filter := fmt.Sprintf("state=%s since=%v until=%v limit=%d", *state, *since, *until, *limit)
			return recordAction(ctx, s, "job.retry_matching", filter, fmt.Sprintf("retried %d", n), fmt.Sprintf("%d jobs retried", n))
		})
	}
	return usageError{fmt.Sprintf("unknown job verb %q: say %s", sub, orList(subVerbs("job")))}
}

// parseText parses `TEXT [flags]` or `[flags] TEXT`: one argument.
func parseText(fs *flagSet, args []string) (string, error) {
	var text string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "help" {
		text, args = args[0], args[1:]
	}
	if err := fs.parseFlags(args); err != nil {
		return "", err
	}
	rest := fs.Args()
	if text == "" && len(rest) > 0 {
		text, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return "", usageError{fmt.Sprintf("unexpected argument %q: quote a text with spaces", rest[0])}
	}
	if text == "" {
		return "", usageError{"give what to look for, e.g. `" + fs.Name() + " invoice-42`"}
	}
	return text, nil
}

// parseID parses `ID [flags]` or `[flags] ID`: one job id, positive.
func parseID(fs *flagSet, args []string) (int64, error) {
	var raw string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "help" {
		raw, args = args[0], args[1:]
	}
	if err := fs.parseFlags(args); err != nil {
		return 0, err
	}
	rest := fs.Args()
	if raw == "" && len(rest) > 0 {
		raw, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return 0, usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	if raw == "" {
		return 0, usageError{"give the job's ID, e.g. `" + fs.Name() + " 42`"}
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError{fmt.Sprintf("job ID %q: not a job id (a positive whole number)", raw)}
	}
	return id, nil
}

// checkFilter turns the client's validation of a filter into a usage
// error before any connection is made.
func checkFilter(f client.Filter, badLimit bool) error {
	if badLimit {
		return usageError{fmt.Sprintf("-limit %d: must be between 1 and %d", f.Limit, client.MaxListLimit)}
	}
	var fe *client.FieldError
	if err := client.CheckFilter(f); errors.As(err, &fe) {
		return usageError{fmt.Sprintf("-%s: %s", fe.Field, fe.Problem)}
	}
	return nil
}

func jobClient(cfgPath string, use dbUse, f func(context.Context, *client.Client) error) error {
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		return err
	}
	return withClient(cfg, use, f)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stateText is a job's state as the commands show it: a ready job that
// has failed before is retrying.
func stateText(j client.JobInfo) string {
	if j.Retrying {
		return client.StateRetrying
	}
	return j.State
}

// writeSearch is `job search`'s table, and how far back its text search
// read.
func writeSearch(w io.Writer, res client.SearchResult, scan int) error {
	if len(res.Hits) == 0 {
		fmt.Fprintln(w, "no job found")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tFOUND BY\tSTATE\tCREATED (UTC)\tENDPOINT\tLAST")
		for _, h := range res.Hits {
			j := h.Job
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s %s\t%s\n", j.ID, h.Matched, stateText(j), j.Created.Format(jobTime),
				j.Method, j.Endpoint, lastResult(j.LastStatus, j.LastError, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if res.From != 0 {
		fmt.Fprintf(w, "the text was looked for in the newest %d jobs (from job %d on); -scan reads further back\n", scan, res.From)
	}
	return nil
}

func writeJobList(w io.Writer, p client.Page) error {
	if len(p.Jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tRUN AT (UTC)\tENDPOINT\tLAST")
	for _, j := range p.Jobs {
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%s\t%s %s\t%s\n", j.ID, stateText(j), j.Attempt, j.MaxAttempts,
			j.RunAt.Format(jobTime), j.Method, j.Endpoint, lastResult(j.LastStatus, j.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.NextCursor != "" {
		fmt.Fprintf(w, "more: add -cursor %s\n", p.NextCursor)
	}
	return nil
}

// lastResult is a status and an error on one line, cut to n characters.
func lastResult(status int, errText string, n int) string {
	s := errText
	if status != 0 {
		s = strings.TrimSpace(strconv.Itoa(status) + " " + errText)
	}
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

func optTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(jobTime)
}

func writeJob(w io.Writer, j client.JobInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("job", strconv.FormatInt(j.ID, 10))
	row("state", stateText(j))
	row("endpoint", j.Method+" "+j.Endpoint)
	if j.Queue != "" && j.Queue != client.DefaultQueue {
		row("queue", j.Queue)
	}
	row("attempts", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	if j.Timeout != 0 {
		row("timeout", j.Timeout.String())
	}
	payloadRow, payloadBlock := payloadText(j.Payload)
	row("payload", payloadRow)
	row("idempotency key", j.IdempotencyKey)
	if j.UniqueKey != "" {
		row("unique key", j.UniqueKey)
	}
	if j.Schedule != "" {
		row("schedule", j.Schedule+" at "+optTime(j.ScheduledFor))
	}
	if j.Traceparent != "" {
		row("traceparent", j.Traceparent)
	}
	row("created", j.Created.Format(jobTime))
	row("run at", j.RunAt.Format(jobTime))
	if j.State == client.StateRunning {
		row("running on", j.Node+" since "+optTime(j.Started)+", lease until "+optTime(j.LeaseUntil))
	}
	if j.CancelRequestedBy != "" {
		row("cancel requested", "by "+j.CancelRequestedBy+" at "+optTime(j.CancelRequestedAt))
	}
	if j.Finished != nil {
		row("finished", optTime(j.Finished))
	}
	if j.LastStatus != 0 || j.LastError != "" {
		row("last result", lastResult(j.LastStatus, j.LastError, 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if payloadBlock != "" {
		fmt.Fprint(w, "\n"+payloadBlock)
	}
	if len(j.History) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\ntimeline (database time, UTC):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tNODE\tSTARTED\tENDED\tTOOK\tOUTCOME\tSTATUS / ERROR")
	for _, e := range j.History {
		attempt, took := strconv.Itoa(e.Attempt), "-"
		if e.Started == nil {
			attempt = "-" // an operator's action
		} else {
			took = fmt.Sprintf("%8dms", e.Ended.Sub(*e.Started).Milliseconds())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", attempt, e.Node, optTime(e.Started), e.Ended.Format(jobTime),
			took, e.Outcome, lastResult(e.Status, e.Error, 100))
	}
	return tw.Flush()
}

// count is n and a noun, plural unless n is 1: "1 dead job", "2 dead
// jobs".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// isAre is the verb that agrees with n.
func isAre(n int64) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

const (
	// payloadInline is the longest payload, in characters, that job show
	// prints on its payload row; a longer one goes below the table.
	payloadInline = 100
	// payloadShown is how many bytes of a payload job show prints at
	// most: a job's payload may be 1 MiB.
	payloadShown = 2048
	// base64Line is the width of a base64 payload's lines.
	base64Line = 76
)

// payloadText is a payload as job show prints it: the text of its row
// and, for a payload that does not fit there, a block for below the
// table. Printable UTF-8 is shown as text; anything else as base64, said
// so. A long payload is cut, and the cut says how many bytes are left
// out.
func payloadText(p []byte) (row, block string) {
	if len(p) == 0 {
		return "none", ""
	}
	size := count(int64(len(p)), "byte")
	text, ok := printable(p)
	if ok && !strings.ContainsAny(text, "\n\t") && utf8.RuneCountInString(text) <= payloadInline {
		return size + ": " + text, ""
	}
	var b strings.Builder
	shown := len(p)
	if ok {
		row = size + ", text, below"
		b.WriteString("payload:\n")
		if len(p) > payloadShown {
			// Cut the payload itself, at a character and not inside a
			// CRLF, so that shown counts its bytes.
			shown = payloadShown
			for shown > 0 && (!utf8.RuneStart(p[shown]) || p[shown-1] == '\r') {
				shown--
			}
			text = strings.ReplaceAll(string(p[:shown]), "\r\n", "\n")
		}
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			b.WriteString("  " + line + "\n")
		}
	} else {
		row = size + ", not printable text: base64, below"
		b.WriteString("payload (base64):\n")
		if len(p) > payloadShown/4*3 {
			shown = payloadShown / 4 * 3
		}
		enc := base64.StdEncoding.EncodeToString(p[:shown])
		for len(enc) > 0 {
			n := min(len(enc), base64Line)
			b.WriteString("  " + enc[:n] + "\n")
			enc = enc[n:]
		}
	}
	if shown < len(p) {
		left := count(int64(len(p)-shown), "byte")
		b.WriteString("  … " + strings.Replace(left, " ", " more ", 1) + "\n")
	}
	return row, b.String()
}

// printable is p as text, its CRLF line ends made LF, when it is UTF-8
// of graphic characters (letters, marks, symbols, spaces), tabs and line
// ends: nothing that would move the cursor or colour the terminal.
func printable(p []byte) (string, bool) {
	if !utf8.Valid(p) {
		return "", false
	}
	s := string(p)
	for i, r := range s {
		switch {
		case r == '\n' || r == '\t':
		case r == '\r' && strings.HasPrefix(s[i:], "\r\n"):
		case !unicode.IsGraphic(r):
			return "", false
		}
	}
	return strings.ReplaceAll(s, "\r\n", "\n"), true
}
