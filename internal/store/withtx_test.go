package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// A store in the caller's transaction sends every statement there, those
// it would run in a transaction of its own too (MySQL's claim is one): a
// rollback undoes them all.
func TestAStoreInATransactionWritesOnlyThere(t *testing.T) {
	storetest.EachParallel(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		ctx := context.Background()
		id, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/jobs/a", Method: "POST", MaxAttempts: 1})
		require.NoError(t, err)

		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		claims, err := s.WithTx(tx).JobsClaim(ctx, "owner", "node", 1, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, claims, 1)
		require.NoError(t, tx.Rollback())

		j, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateReady, j.State, "the claim was rolled back with the transaction")
	})
}
