package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/stretchr/testify/require"
)

func TestQueuesInConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`
queues:
  - name: reports
    endpoints: ["/jobs/reports/", "/jobs/exports/*"]
  - name: mail
    endpoints:
      - /jobs/mail
  - name: manual
`), 0o600))
	cfg, err := Load(p, true, nil)
	require.NoError(t, err)
	require.Equal(t, []store.QueueRoute{
		{Prefix: "/jobs/reports/", Queue: "reports"},
		{Prefix: "/jobs/exports/", Queue: "reports"}, // the trailing * stripped
		{Prefix: "/jobs/mail", Queue: "mail"},
	}, cfg.QueueRoutes())

	for body, want := range map[string]string{
		"queues:\n  - name: ' a'\n    endpoints: [/x]\n":                                 `queues[0].name = " a": queue name " a" has a leading or trailing space`,
		"queues:\n  - name: a/b\n":                                                       `queues[0].name = "a/b"`,
		"queues:\n  - name: ''\n":                                                        `queues[0].name = "": queue name is empty`,
		"queues:\n  - {name: a, endpoints: [/x]}\n  - {name: a, endpoints: [/y]}\n":      `queues[1].name = "a": the same name as queues[0]`,
		"queues:\n  - {name: a, endpoints: [/x/]}\n  - {name: b, endpoints: ['/x/*']}\n": `queues[1].endpoints[0] = "/x/*": the prefix "/x/" is already routed (queues[0].endpoints[0])`,
		"queues:\n  - {name: a, endpoints: [x/]}\n":                                      `queues[0].endpoints[0] = "x/": endpoint prefix "x/" must start with /`,
		"queues:\n  - {name: a, endpoints: ['/a*b']}\n":                                  `a * is accepted only at the end`,
		"queues:\n  - {name: a, endpoints: ['/a b']}\n":                                  `has a space`,
		"queues:\n  - {name: a, endpoints: [{x: 1}]}\n":                                  `queues[0].endpoints must be a list of single values`,
		"queues:\n  - {name: a, endpont: [/x]}\n":                                        `unknown key "queues[0].endpont"`,
	} {
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := Load(p, true, nil)
		require.ErrorContains(t, err, want, body)
	}
	// One endpoint may be written as a single value.
	require.NoError(t, os.WriteFile(p, []byte("queues:\n  - {name: a, endpoints: /x/}\n"), 0o600))
	cfg, err = Load(p, true, nil)
	require.NoError(t, err)
	require.Equal(t, []store.QueueRoute{{Prefix: "/x/", Queue: "a"}}, cfg.QueueRoutes())
}
