package config

import (
	"fmt"
	"strings"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
)

// QueueConfig declares a queue and the endpoint prefixes routed to it:
//
//	queues:
//	  - name: reports
//	    endpoints: ["/jobs/reports/"]
//
// A job enqueued without a queue goes to the queue of the longest prefix
// its endpoint starts with, else to the default queue. A trailing * is
// accepted and means the same as none ("/jobs/reports/*"). A queue may
// list no endpoints: jobs reach it only by naming it.
type QueueConfig struct {
	Name      string   `yaml:"name"`
	Endpoints []string `yaml:"endpoints"`
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
// would leave its jobs' queue to chance).
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
	}
	return ps
}
