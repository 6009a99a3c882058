package service

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/slotpoller/slotpoller/internal/store"
)

// putQueueRoutes writes the config's queue routes (queues:), replacing
// whatever routes the database held: every node does it at start, like
// putSchedules, so the farm's routes are those of the node that started
// last, and every node is meant to carry the same queues section. A
// failure is logged, not fatal: the config was validated, so this is the
// database talking, and jobs still go to the routes already written. The
// queues' settings are written after the routes, either way.
func (n *Node) putQueueRoutes(ctx context.Context, log *slog.Logger, s *store.Store) {
	defer n.putQueueSettings(ctx, log, s)
	routes := n.cfg.QueueRoutes()
	if err := s.QueueRoutesPut(ctx, routes); err != nil {
		log.Error("could not write queue routes from config", "routes", len(routes), "err", err)
		return
	}
	if len(routes) > 0 {
		log.Info("queue routes from config written", "routes", len(routes))
	}
}

// putQueueSettings writes the config's queue priorities, limits and rates,
// replacing the database's as putQueueRoutes does the routes: the last
// node to start sets them for the farm. A failure is logged, not fatal:
// the settings already written stay in force.
func (n *Node) putQueueSettings(ctx context.Context, log *slog.Logger, s *store.Store) {
	settings := n.cfg.QueueSettings()
	// The settings alone (the queues table's few rows), not the queues'
	// work, which Queues would count over the jobs table.
	before, err := s.QueuesHeld(ctx)
	if err != nil {
		log.Warn("could not read the queues' settings before writing the config's; the audit log will not say what changed", "err", err)
	}
	if err := s.QueueSettingsPut(ctx, settings); err != nil {
		log.Error("could not write queue limits from config", "queues", len(settings), "err", err)
		return
	}
	if err == nil {
		n.auditSettings(ctx, log, s, before, settings)
	}
	managed := 0
	for _, q := range settings {
		if q.Managed() {
			managed++
		}
	}
	if managed > 0 {
		log.Info("queue limits from config written", "queues", managed)
	} else {
		// Said all the same, at debug: a farm's test waits for it before
		// it writes settings of its own, which this write would clear.
		log.Debug("queue limits from config written", "queues", 0)
	}
}

// auditSettings records in the audit log each queue whose priority,
// limits or rate this node's config changed: a limit change is an
// operator's action, taken through the config file of the node that
// started last.
func (n *Node) auditSettings(ctx context.Context, log *slog.Logger, s *store.Store, before []store.QueueState, after []store.QueueSettings) {
	was := map[string]string{}
	for _, q := range before {
		was[q.Name] = settingsText(store.QueueSettings{Name: q.Name, Priority: q.Priority, Limit: q.Limit, NodeLimit: q.NodeLimit,
			Rate: q.Rate, RatePeriod: q.RatePeriod})
	}
	now := map[string]string{}
	for _, q := range after {
		if q.Managed() {
			now[q.Name] = settingsText(q)
		}
	}
	names := map[string]bool{}
	for name := range was {
		names[name] = true
	}
	for name := range now {
		names[name] = true
	}
	host, _ := os.Hostname()
	for _, name := range slices.Sorted(maps.Keys(names)) {
		old, cur := orNone(was[name]), orNone(now[name])
		if old == cur {
			continue
		}
		e := store.AuditEntry{Actor: "node " + n.cfg.Node.Name + " (its config)", Origin: "config of " + n.cfg.Node.Name + " on " + host,
			Action: "queue.settings", Target: name, Detail: old + " -> " + cur}
		if _, err := s.AuditAdd(ctx, e); err != nil {
			log.Error("could not record a queue's new settings in the audit log; they are in force", "queue", name, "err", err)
		}
	}
}

// settingsText is a queue's settings as the audit log says them.
func settingsText(q store.QueueSettings) string {
	var parts []string
	if q.Priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", q.Priority))
	}
	if q.Limit > 0 {
		parts = append(parts, fmt.Sprintf("limit %d", q.Limit))
	}
	if q.NodeLimit > 0 {
		parts = append(parts, fmt.Sprintf("node_limit %d", q.NodeLimit))
	}
	if q.Rate > 0 && q.RatePeriod > 0 {
		parts = append(parts, fmt.Sprintf("rate %d/%v", q.Rate, q.RatePeriod))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
