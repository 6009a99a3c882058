package jobs

import (
	"context"
	"fmt"

	"github.com/slotpoller/slotpoller/internal/store"
)

// Enqueue validates and inserts a job. The endpoint must stay on the node's
// base URL; the method must be one the invoker sends.
func Enqueue(ctx context.Context, s *store.Store, j store.NewJob) (int64, error) {
	if err := CheckNewJob(&j); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	return s.JobInsert(ctx, j)
}
