package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/install"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/service"
)

// statusJSON is `status -json`: the local service, then the farm.
type statusJSON struct {
	Service install.ServiceState `json:"service"`
	*service.StatusReport
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("status", stdout)
	asJSON := fs.Bool("json", false, "print JSON: an object with the local service, a nodes array and job counts")
	envFile := addEnvFileFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	encode := func(v any) error {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	// The local service first: it is known without the database.
	svc := install.QueryService()
	if !*asJSON {
		fmt.Fprintln(stdout, "service:", svc)
	}
	err := withStoreEnv(*cfgPath, *envFile, dbRead, func(ctx context.Context, cfg config.Config, s *store.Store) error {
		rep, err := service.Status(ctx, s, time.Duration(cfg.Checkin.TTL))
		if err != nil {
			return inDatabase(cfg, err)
		}
		if *asJSON {
			return encode(statusJSON{Service: svc, StatusReport: &rep})
		}
		// Which database it read: a status of the wrong one (a shell
		// without the node's variables) looks like an empty farm.
		fmt.Fprintln(stdout, "database:", cfg.Database.Driver, config.MaskDSN(cfg.Database.DSN))
		return writeStatus(stdout, rep)
	})
	if err != nil && *asJSON {
		_ = encode(statusJSON{Service: svc})
	}
	return err
}
