package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// On a MariaDB server whose max_allowed_packet is small, an enqueue
// keeps every statement under it, through the node's pool (which reads
// the server's limit) and through an application's (the driver's default
// of 64 MiB): a batch larger than the limit goes in whole, in several
// statements, where one packet of 3 MB made the server drop the
// connection. A payload no statement can carry is refused before anything
// is sent, naming the limit; one an application's pool sends in one
// packet over the limit is explained in the same words; nothing of either
// is written. Rows larger than the limit read back whole: the limit is on
// what a client sends.
func TestMySQLEnqueueKeepsUnderMaxAllowedPacket(t *testing.T) {
	db := storetest.PrivateMariaDB(t, "--max-allowed-packet=2M")
	ctx := context.Background()
	node := storetest.OpenMigrated(t, db)
	app := applicationStore(t, db)

	for name, s := range map[string]*store.Store{"node": node, "application": app} {
		// 100 payloads of 32 KiB: each under the share of the driver's
		// default limit it sends in the statement's packet, 3.2 MiB in all.
		ids, err := s.JobInsertMany(ctx, payloadJobs("/"+name, 100, 32<<10))
		require.NoError(t, err, "%s's batch of 3.2 MiB, on a server at 2 MiB", name)
		require.Len(t, ids, 100)
	}
	big, err := node.JobInsert(ctx, payloadJobs("/big", 1, jobspec.MaxPayload)[0])
	require.NoError(t, err, "a payload of 1 MiB, on a server at 2 MiB")

	// Connections opened from now on take 512 KiB, under a job's largest
	// payload.
	rootExec(t, db, "SET GLOBAL max_allowed_packet = 524288")
	node, app = storetest.OpenMigrated(t, db), applicationStore(t, db)

	t.Run("rows over the limit read back whole", func(t *testing.T) {
		j, err := node.JobGet(ctx, big)
		require.NoError(t, err)
		require.Len(t, j.Payload, jobspec.MaxPayload)
		cs, err := node.JobsClaim(ctx, "inc", "node", 300, store.Lease(time.Minute))
		require.NoError(t, err)
		require.Len(t, cs, 201)
		for _, c := range cs {
			want := 32 << 10
			if c.ID == big {
				want = jobspec.MaxPayload
			}
			require.Len(t, c.Payload, want, "job %d", c.ID)
		}
	})

	t.Run("a payload over the limit is refused before anything is sent", func(t *testing.T) {
		for name, s := range map[string]*store.Store{"node": node, "application": app} {
			aborted := abortedClients(t, db)
			_, err := s.JobInsert(ctx, payloadJobs("/refused", 1, jobspec.MaxPayload)[0])
			require.ErrorIs(t, err, store.ErrPacketTooLarge, name)
			require.EqualError(t, err, "enqueue job for /refused: the payload of 1,048,576 bytes does not fit in the MySQL server's max_allowed_packet of 524,288 bytes: raise max_allowed_packet (2 MiB lets in any job)", name)

			batch := payloadJobs("/refused", 150, 1<<10)
			batch[120].Payload = make([]byte, 600_000)
			_, err = s.JobInsertMany(ctx, batch)
			require.ErrorIs(t, err, store.ErrPacketTooLarge, name)
			require.EqualError(t, err, "enqueue 150 jobs: job 120's payload of 600,000 bytes does not fit in the MySQL server's max_allowed_packet of 524,288 bytes: raise max_allowed_packet (2 MiB lets in any job)", name)

			_, err = s.JobInsertClaimed(ctx, batch[120], "inc", "node", store.Lease(time.Minute))
			require.ErrorIs(t, err, store.ErrPacketTooLarge, name)
			require.Equal(t, aborted, abortedClients(t, db), "%s: no connection was dropped", name)
		}
		require.Zero(t, jobsAt(t, node, "/refused"), "nothing of the refused enqueues is written")
	})

	t.Run("a payload up to the limit gets in through the node's pool", func(t *testing.T) {
		id, err := node.JobInsert(ctx, payloadJobs("/fits", 1, 524288)[0])
		require.NoError(t, err)
		j, err := node.JobGet(ctx, id)
		require.NoError(t, err)
		require.Len(t, j.Payload, 524288)
		ids, err := node.JobInsertMany(ctx, payloadJobs("/fits", 3, 524288))
		require.NoError(t, err)
		require.Len(t, ids, 3)
	})

	t.Run("an application's pool that sends it in one packet is told why", func(t *testing.T) {
		_, err := app.JobInsert(ctx, payloadJobs("/one-packet", 1, 524288)[0])
		require.ErrorIs(t, err, store.ErrPacketTooLarge)
		require.ErrorContains(t, err, "enqueue job for /one-packet: the statement, about ")
		require.ErrorContains(t, err, " bytes with 524,288 bytes of payload, does not fit in the MySQL server's max_allowed_packet of 524,288 bytes")
		require.ErrorContains(t, err, "set maxAllowedPacket=0 in the DSN")

		_, err = app.JobInsertMany(ctx, append(payloadJobs("/one-packet", 2, 1<<10), payloadJobs("/one-packet", 1, 524288)...))
		require.ErrorIs(t, err, store.ErrPacketTooLarge)
		require.ErrorContains(t, err, "enqueue 3 jobs: the statement of job 2, about ")
		require.Zero(t, jobsAt(t, node, "/one-packet"), "the batch is written whole or not at all")
	})
}

// applicationStore is a store on a pool an application opened itself,
// with the driver's settings (its maxAllowedPacket of 64 MiB), as
// client.New wraps it.
func applicationStore(t *testing.T, db storetest.DB) *store.Store {
	t.Helper()
	pool, err := sql.Open("mysql", db.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })
	drv, err := open.Driver("mysql")
	require.NoError(t, err)
	s, err := store.Wrap(pool, drv, "")
	require.NoError(t, err)
	return s
}

// payloadJobs are n jobs for endpoint with payloads of size bytes.
func payloadJobs(endpoint string, n, size int) []store.NewJob {
	out := make([]store.NewJob, n)
	for i := range out {
		out[i] = store.NewJob{Endpoint: endpoint, Method: "POST", Payload: []byte(strings.Repeat("p", size)),
			MaxAttempts: 1, IdempotencyKey: fmt.Sprintf("%s-%d-%d", strings.TrimPrefix(endpoint, "/"), size, i)}
	}
	return out
}

func jobsAt(t *testing.T, s *store.Store, endpoint string) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB().QueryRow("SELECT COUNT(*) FROM slotpoller_jobs WHERE endpoint = ?", endpoint).Scan(&n))
	return n
}

// rootExec runs a statement as the private server's root.
func rootExec(t *testing.T, db storetest.DB, q string) {
	t.Helper()
	pool, err := sql.Open("mysql", db.DSN)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(q)
	require.NoError(t, err, q)
}

// abortedClients is how many connections the server has ended on a
// client's fault, a packet over its limit among them.
func abortedClients(t *testing.T, db storetest.DB) int64 {
	t.Helper()
	pool, err := sql.Open("mysql", db.DSN)
	require.NoError(t, err)
	defer pool.Close()
	var name string
	var n int64
	require.NoError(t, pool.QueryRow("SHOW GLOBAL STATUS LIKE 'Aborted_clients'").Scan(&name, &n))
	return n
}
