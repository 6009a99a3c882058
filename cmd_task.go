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

func cmdTask(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"say `task add`, `task list` or `task delete`"}
	}
	sub, args := args[0], args[1:]
	fs, cfgPath := newFlags("task "+sub, stdout)
	switch sub {
	case "add":
		name := fs.String("name", "", "unique name of the task (required)")
		endpoint := fs.String("endpoint", "", "path of the task's endpoint on the node's base URL (required)")
		every := fs.Duration("every", 0, "interval between calls, e.g. 10s (required)")
		method := fs.String("method", "POST", "HTTP method: GET, POST, PUT, PATCH or DELETE")
		payload := fs.String("payload", "", "request body of every call")
		timeout := fs.Duration("timeout", 0, "how long each call may run; the task is held that long (plus 1.5 heartbeats) when its node dies (default: within checkin.ttl)")
		if err := fs.parse(args); err != nil {
			return err
		}
		switch {
		case *name == "":
			return usageError{"-name is required"}
		case *endpoint == "":
			return usageError{"-endpoint is required"}
		case *every <= 0:
			return usageError{"-every is required and must be positive, e.g. -every 10s"}
		}
		if err := checkName("task", *name); err != nil {
			return err
		}
		if err := checkCallFlags(*method, *timeout); err != nil {
			return err
		}
		if err := jobs.ValidateEndpoint(*endpoint); err != nil {
			return usageError{fmt.Sprintf("-endpoint %q: %v", *endpoint, err)}
		}
		return withSchema(*cfgPath, dbWrite, func(ctx context.Context, _ config.Config, s *store.Store) error {
			err := jobs.AddTask(ctx, s, store.NewTask{Name: *name, Endpoint: *endpoint, Method: *method,
				Payload: []byte(*payload), Every: *every, Timeout: *timeout})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "task %q added; a node takes it within a slot or two\n", *name)
			return recordAction(ctx, s, "task.add", *name, fmt.Sprintf("%s %s every %v", *method, *endpoint, *every), fmt.Sprintf("task %q added", *name))
		})
	case "list":
		asJSON := fs.Bool("json", false, "print JSON")
		all := fs.Bool("all", false, "include deleted tasks")
		if err := fs.parse(args); err != nil {
			return err
		}
		return withSchema(*cfgPath, dbRead, func(ctx context.Context, _ config.Config, s *store.Store) error {
			tasks, err := s.Tasks(ctx, *all)
			if err != nil {
				return err
			}
			rep := service.TaskReport(tasks)
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return writeTasks(stdout, rep)
		})
	case "delete":
		name := fs.String("name", "", "name of the task (required)")
		wait := fs.Duration("wait", 0, "wait up to this long for the owner to confirm it stopped")
		if err := fs.parse(args); err != nil {
			return err
		}
		if *name == "" {
			return usageError{"-name is required"}
		}
		return withSchema(*cfgPath, dbWrite, func(ctx context.Context, _ config.Config, s *store.Store) error {
			state, err := s.TaskRequestDelete(ctx, *name)
			if err != nil {
				return err
			}
			deadline := time.Now().Add(*wait)
			for state == store.TaskDeleting && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				t, err := s.TaskGet(ctx, *name)
				if err != nil {
					return err
				}
				state = t.State
			}
			switch state {
			case store.TaskDeleted:
				fmt.Fprintf(stdout, "task %q deleted\n", *name)
			case store.TaskDeleting:
				fmt.Fprintf(stdout, "task %q is deleting: its owner stops within one interval and one heartbeat\n", *name)
			default:
				return fmt.Errorf("task %q is %s", *name, state)
			}
			return recordAction(ctx, s, "task.delete", *name, state, fmt.Sprintf("task %q: delete requested", *name))
		})
	}
	return usageError{fmt.Sprintf("unknown task verb %q: say %s", sub, orList(subVerbs("task")))}
}
