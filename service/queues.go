package service

import (
	"context"
	"log/slog"

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
	if err := s.QueueSettingsPut(ctx, settings); err != nil {
		log.Error("could not write queue limits from config", "queues", len(settings), "err", err)
		return
	}
	managed := 0
	for _, q := range settings {
		if q.Managed() {
			managed++
		}
	}
	if managed > 0 {
		log.Info("queue limits from config written", "queues", managed)
	}
}
