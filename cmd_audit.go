package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"text/tabwriter"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
)

// The audit log's CLI door: each operator action a command takes is
// recorded once it took effect, with the OS user who ran it and the host
// (the database's clock says when); `slotpoller audit` lists the log.

// cliActor is the OS user running the command.
func cliActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, v := range []string{"USER", "USERNAME", "LOGNAME"} {
		if name := os.Getenv(v); name != "" {
			return name
		}
	}
	return "unknown user"
}

// cliOrigin is where the command ran.
func cliOrigin() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown host"
	}
	return "cli on " + host
}

// recordAction writes an action the command took (said: what the command
// printed of it) to the audit log. The action stands either way: an entry
// that cannot be written is an error that says so, and what was done.
func recordAction(ctx context.Context, s *store.Store, action, target, detail, said string) error {
	if _, err := s.AuditAdd(ctx, store.AuditEntry{Actor: cliActor(), Origin: cliOrigin(), Action: action, Target: target, Detail: detail}); err != nil {
		return fmt.Errorf("%s, but the audit log could not record it: %w", said, err)
	}
	return nil
}

func cmdAudit(args []string, stdout io.Writer) error {
	fs, cfgPath := newFlags("audit", stdout)
	since := fs.Duration("since", 0, "only actions within this long, e.g. 24h (database clock)")
	actor := fs.String("actor", "", "only this actor, e.g. alice or \"api (admin token)\"")
	action := fs.String("action", "", "only this action, or a family of them: queue matches queue.pause, queue.resume, queue.cancel")
	limit := fs.Int("limit", client.DefaultListLimit, fmt.Sprintf("at most this many entries, 1 to %d", client.MaxListLimit))
	cursor := fs.String("cursor", "", "continue where the previous page ended")
	asJSON := fs.Bool("json", false, "print JSON: an object with an entries array and next_cursor")
	if err := fs.parse(args); err != nil {
		return err
	}
	f := store.AuditFilter{Since: *since, Actor: *actor, Action: *action, Limit: *limit}
	switch {
	case *limit < 1 || *limit > client.MaxListLimit:
		return usageError{fmt.Sprintf("-limit %d: must be between 1 and %d", *limit, client.MaxListLimit)}
	case *since < 0:
		return usageError{fmt.Sprintf("-since %v: must not be negative", *since)}
	}
	if *cursor != "" {
		n, err := strconv.ParseInt(*cursor, 10, 64)
		if err != nil || n < 1 {
			return usageError{fmt.Sprintf("-cursor %q: not a cursor a page of the audit log gave", *cursor)}
		}
		f.Before = n
	}
	return withSchema(*cfgPath, dbRead, func(ctx context.Context, _ config.Config, s *store.Store) error {
		entries, err := s.AuditList(ctx, f)
		if err != nil {
			return err
		}
		next := ""
		if len(entries) == f.Limit {
			next = strconv.FormatInt(entries[len(entries)-1].ID, 10)
		}
		if *asJSON {
			type entry struct {
				ID     int64  `json:"id"`
				At     string `json:"at"`
				Actor  string `json:"actor"`
				Origin string `json:"origin"`
				Action string `json:"action"`
				Target string `json:"target,omitempty"`
				Detail string `json:"detail,omitempty"`
			}
			out := struct {
				Entries    []entry `json:"entries"`
				NextCursor string  `json:"next_cursor,omitempty"`
			}{Entries: []entry{}, NextCursor: next}
			for _, e := range entries {
				out.Entries = append(out.Entries, entry{e.ID, e.At.UTC().Format(jobTime), e.Actor, e.Origin, e.Action, e.Target, e.Detail})
			}
			return writeJSON(stdout, out)
		}
		if len(entries) == 0 {
			fmt.Fprintln(stdout, "no actions recorded that match")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tACTOR\tORIGIN\tACTION\tTARGET\tDETAIL")
		for _, e := range entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format(jobTime), e.Actor, e.Origin, e.Action, orDash(e.Target), orDash(e.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if next != "" {
			fmt.Fprintf(stdout, "more: slotpoller audit -cursor %s\n", next)
		}
		return nil
	})
}

// orDash is s, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
