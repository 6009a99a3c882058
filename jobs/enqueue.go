package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/slotpoller/slotpoller/internal/store"
)

// NewIdempotencyKey returns a key for a new job: random, so that it stays
// the same for every attempt of the job and differs from every other job.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "slotpoller-" + hex.EncodeToString(b)
}

// Enqueue validates and inserts a job. The endpoint must stay on the node's
// base URL; the method must be one the invoker sends.
func Enqueue(ctx context.Context, s *store.Store, j store.NewJob) (int64, error) {
	if err := CheckNewJob(&j); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	return s.JobInsert(ctx, j)
}
