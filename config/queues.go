package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// QueueConfig declares a queue, the endpoint prefixes routed to it and
// how its jobs are claimed:
//
//	queues:
//	  - name: reports
//	    endpoints: ["/jobs/reports/"]
//	    priority: 10
//	    limit: 4
//	    node_limit: 1
//	    rate: 50/10s
//
// A job enqueued without a queue goes to the queue of the longest prefix
// its endpoint starts with, else to the default queue. A trailing * is
// accepted and means the same as none ("/jobs/reports/*"). A queue may
// list no endpoints: jobs reach it only by naming it. The limits are the
// store's (store.QueueSettings); zero or empty is none.
type QueueConfig struct {
	Name      string   `yaml:"name"`
	Endpoints []string `yaml:"endpoints"`
	// Priority orders claims, higher first; default 0, the priority of
	// every queue without one.
	Priority int `yaml:"priority"`
	// Limit is the most of the queue's jobs running across the farm.
	Limit int `yaml:"limit"`
	// NodeLimit is the most of the queue's jobs running on one node.
	NodeLimit int `yaml:"node_limit"`
	// Rate is the most of the queue's jobs started per period, written
	// "N/DURATION" ("50/10s", "100/1m").
	Rate string `yaml:"rate"`
}

// Bounds of a queue's settings.
const (
	maxQueuePriority = 1000
	minRatePeriod    = 100 * time.Millisecond
	maxRatePeriod    = 24 * time.Hour
)

// QueueSettings are the settings the config declares of each queue, as
// the node writes them at start (store.QueueSettingsPut). A queue with
// none is listed too: the store keeps only the ones that set something.
func (c Config) QueueSettings() []store.QueueSettings {
	out := make([]store.QueueSettings, 0, len(c.Queues))
	for _, q := range c.Queues {
		n, period, _ := parseRate(q.Rate) // validated at load
		out = append(out, store.QueueSettings{Name: q.Name, Priority: q.Priority, Limit: q.Limit,
			NodeLimit: q.NodeLimit, Rate: n, RatePeriod: period})
	}
	return out
}

// parseRate reads a rate "N/DURATION": at least one start per period of
// 100ms to 24h. "" is no rate (0, 0). The error says why without
// repeating the value.
func parseRate(s string) (int, time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, 0, nil
	}
	count, per, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errors.New(`write starts per period as "N/DURATION", e.g. "50/10s" or "100/1m"`)
	}
	n, err := strconv.Atoi(strings.TrimSpace(count))
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf(`the count %q is not a whole number of at least 1 (write e.g. "50/10s")`, strings.TrimSpace(count))
	}
	d, err := parseDuration(per)
	if err != nil {
		return 0, 0, fmt.Errorf("the period: %w", err)
	}
	if time.Duration(d) < minRatePeriod || time.Duration(d) > maxRatePeriod {
		return 0, 0, fmt.Errorf("the period %s is outside %s..%s", d, Duration(minRatePeriod), Duration(maxRatePeriod))
	}
	return n, time.Duration(d), nil
}

// QueueRoutes are the routes the config declares, a trailing * stripped,
// as the node writes them at start (store.QueueRoutesPut).
func (c Config) QueueRoutes() []store.QueueRoute {
	var out []store.QueueRoute
	for _, q := range c.Queues {
		for _, e := range q.Endpoints {
			out = append(out, store.QueueRoute{Prefix: routePrefix(e), Queue: q.Name})
		}
	}
	return out
}

func routePrefix(endpoint string) string { return strings.TrimSuffix(endpoint, "*") }

// queueProblems checks the queues section: valid, distinct names; valid
// prefixes, each routed to one queue only (two queues claiming one prefix
// would leave its jobs' queue to chance); limits within their bounds.
func (c Config) queueProblems() []problem {
	var ps []problem
	bad := func(key string, value any, why string, args ...any) {
		ps = append(ps, problem{key: key, text: fmt.Sprintf("config: %s = %s: %s", key, showValue(value), fmt.Sprintf(why, args...))})
	}
	names := map[string]int{}
	prefixes := map[string]string{}
	for i, q := range c.Queues {
		key := fmt.Sprintf("queues[%d]", i)
		if err := jobs.ValidateQueueName(q.Name); err != nil {
			bad(key+".name", q.Name, "%v", err)
		} else if prev, dup := names[q.Name]; dup {
			bad(key+".name", q.Name, "the same name as queues[%d]; list all of a queue's endpoints under one entry", prev)
		} else {
			names[q.Name] = i
		}
		for j, e := range q.Endpoints {
			ekey := fmt.Sprintf("%s.endpoints[%d]", key, j)
			p := routePrefix(e)
			if strings.Contains(p, "*") {
				bad(ekey, e, "a * is accepted only at the end (a prefix match)")
				continue
			}
			if err := jobs.ValidateRoutePrefix(p); err != nil {
				bad(ekey, e, "%v", err)
				continue
			}
			if prev, dup := prefixes[p]; dup {
				bad(ekey, e, "the prefix %q is already routed (%s); a prefix goes to one queue", p, prev)
				continue
			}
			prefixes[p] = ekey
		}
		if q.Priority < -maxQueuePriority || q.Priority > maxQueuePriority {
			bad(key+".priority", q.Priority, "outside -%d..%d (higher is claimed first; default 0)", maxQueuePriority, maxQueuePriority)
		}
		if q.Limit < 0 {
			bad(key+".limit", q.Limit, "negative; the most of the queue's jobs running across the farm, 0 for no limit")
		}
		if q.NodeLimit < 0 {
			bad(key+".node_limit", q.NodeLimit, "negative; the most of the queue's jobs running on one node, 0 for no limit")
		}
		if _, _, err := parseRate(q.Rate); err != nil {
			bad(key+".rate", q.Rate, "%v", err)
		}
	}
	return ps
}
