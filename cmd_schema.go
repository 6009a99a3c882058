package main

import (
	"context"
	"fmt"
	"io"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/schema"
)

func cmdSchema(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "migrate" && args[0] != "status") {
		return usageError{"say `schema migrate` or `schema status`"}
	}
	sub := args[0]
	fs, cfgPath := newFlags("schema "+sub, stdout)
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	use := dbRead
	if sub == "migrate" {
		use = dbCreate
	}
	return withStore(*cfgPath, use, func(ctx context.Context, cfg config.Config, s *store.Store) error {
		if sub == "status" {
			cur, latest, err := schema.Status(ctx, s)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "schema version %d; this binary's latest is %d\n", cur, latest)
			if err := schema.Check(ctx, s); err != nil {
				return inDatabase(cfg, err)
			}
			return nil
		}
		applied, err := schema.Migrate(ctx, s)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintln(stdout, "schema is up to date")
			return nil
		}
		fmt.Fprintf(stdout, "applied schema versions %v\n", applied)
		return nil
	})
}
