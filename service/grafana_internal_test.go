package service

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Every query of the Grafana dashboard in docs/ names metrics a node
// exports: a renamed metric fails here, not on a farm's empty panel.
func TestGrafanaDashboardNamesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &dash), "the dashboard is JSON")

	exported := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range newMetrics(nil).collectors {
		ch := make(chan *prometheus.Desc, 256)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			require.NotNil(t, m, "a descriptor with a name: %s", d)
			exported[m[1]] = true
		}
	}
	require.True(t, exported["slotpoller_calls_total"], "the node's own families are described")

	metric := regexp.MustCompile(`\b(?:slotpoller|go|process)_[a-z0-9_]+`)
	named := func(where, expr string) int {
		names := metric.FindAllString(expr, -1)
		for _, name := range names {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && exported[trimmed] && !exported[name] {
					base = trimmed
				}
			}
			require.True(t, exported[base], "%s: %q names %s, which no node exports", where, expr, name)
		}
		return len(names)
	}
	queries := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		for _, q := range p.Targets {
			require.Positive(t, named("panel "+p.Title, q.Expr), "panel %q: every query names a metric", p.Title)
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		named("variable", v.Definition)
	}
	require.Greater(t, queries, 20)
	// The dashboard shows each family a farm's operator watches.
	for _, family := range []string{"slotpoller_claims_total", "slotpoller_calls_total", "slotpoller_job_start_delay_seconds",
		"slotpoller_jobs", "slotpoller_live_nodes", "slotpoller_queue_waiting", "slotpoller_leases_lost_total"} {
		require.True(t, slices.ContainsFunc(dash.Panels, func(p grafanaPanel) bool {
			return slices.ContainsFunc(p.Targets, func(q grafanaTarget) bool { return strings.Contains(q.Expr, family) })
		}), "a panel shows %s", family)
	}
}

type grafanaPanel struct {
	Title   string          `json:"title"`
	Targets []grafanaTarget `json:"targets"`
}

type grafanaTarget struct {
	Expr string `json:"expr"`
}
