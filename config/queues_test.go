package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

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

func TestQueueLimitsInConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`
queues:
  - name: reports
    endpoints: ["/jobs/reports/"]
    priority: 10
    limit: 4
    node_limit: 1
    rate: 50/10s
  - name: mail
    rate: " 100 / 1m "
  - name: low
    priority: -1000
  - name: plain
    endpoints: [/jobs/plain/]
`), 0o600))
	cfg, err := Load(p, true, nil)
	require.NoError(t, err)
	require.Equal(t, []store.QueueSettings{
		{Name: "reports", Priority: 10, Limit: 4, NodeLimit: 1, Rate: 50, RatePeriod: 10 * time.Second},
		{Name: "mail", Rate: 100, RatePeriod: time.Minute}, // a queue with limits and no endpoints
		{Name: "low", Priority: -1000},
		{Name: "plain"},
	}, cfg.QueueSettings())
	require.Len(t, cfg.QueueRoutes(), 2)

	for body, want := range map[string]string{
		"queues:\n  - {name: a, priority: 1001}\n":    `queues[0].priority = 1001: outside -1000..1000`,
		"queues:\n  - {name: a, priority: -1001}\n":   `queues[0].priority = -1001: outside -1000..1000`,
		"queues:\n  - {name: a, priority: high}\n":    `queues[0].priority = "high"`,
		"queues:\n  - {name: a, limit: -1}\n":         `queues[0].limit = -1: negative`,
		"queues:\n  - {name: a, node_limit: -2}\n":    `queues[0].node_limit = -2: negative`,
		"queues:\n  - {name: a, nodelimit: 2}\n":      `unknown key "queues[0].nodelimit"`,
		"queues:\n  - {name: a, rate: 50}\n":          `queues[0].rate = "50": write starts per period as "N/DURATION"`,
		"queues:\n  - {name: a, rate: 0/1s}\n":        `queues[0].rate = "0/1s": the count "0" is not a whole number of at least 1`,
		"queues:\n  - {name: a, rate: x/1s}\n":        `queues[0].rate = "x/1s": the count "x"`,
		"queues:\n  - {name: a, rate: 5/}\n":          `queues[0].rate = "5/": the period: empty`,
		"queues:\n  - {name: a, rate: 5/10}\n":        `queues[0].rate = "5/10": the period: missing unit`,
		"queues:\n  - {name: a, rate: 5/99ms}\n":      `queues[0].rate = "5/99ms": the period 99ms is outside 100ms..24h`,
		"queues:\n  - {name: a, rate: 5/25h}\n":       `queues[0].rate = "5/25h": the period 25h is outside 100ms..24h`,
		"queues:\n  - {name: a, rate: 5/-1s}\n":       `the period -1s is outside`,
		"queues:\n  - {name: a, rate: [5, 1s]}\n":     `queues[0].rate must be a single value`,
		"queues:\n  - {name: a, limit: 1, rate: x}\n": `queues[0].rate = "x"`,
	} {
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := Load(p, true, nil)
		require.ErrorContains(t, err, want, body)
	}
	// The bounds themselves are accepted.
	require.NoError(t, os.WriteFile(p, []byte("queues:\n  - {name: a, priority: 1000, rate: 1/100ms}\n  - {name: b, rate: 1/24h}\n"), 0o600))
	cfg, err = Load(p, true, nil)
	require.NoError(t, err)
	require.Equal(t, []store.QueueSettings{{Name: "a", Priority: 1000, Rate: 1, RatePeriod: 100 * time.Millisecond},
		{Name: "b", Rate: 1, RatePeriod: 24 * time.Hour}}, cfg.QueueSettings())
}

// TestQueuesHaveNoEnvironment: the queues are a list, set in the file only.
func TestQueuesHaveNoEnvironment(t *testing.T) {
	_, err := Load("", false, []string{"SLOTPOLLER_QUEUES_LIMIT=3"})
	require.ErrorContains(t, err, "the queues list is set in the config file only")
}
